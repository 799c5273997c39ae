"""Memory a compiled network needs on an NPU, asked without a device: `QuerySize`.

The analogue of Ascend's `aclmdlQuerySize(fileName, &workSize, &weightSize)`: before loading a
model into memory the application manages (`aclmdlLoadFromMemWithMem`), it learns how much work
and weight memory to allocate. Here the application allocates ETM chunks and hands them to
`userReuseSegment(chunk, WEIGHT | INSTR | FTMP)`; `QuerySize(view)` says how large and how
aligned they must be. The sizes are those `init` puts in `logic_segment_map`: the same `Layout`
is built (`layout.build_layout` over the view's HardOps, then the FTMP estimate of
`Layout.ftmp_estimate`), only without a backend, a device or the parameters' data (the json
alone is enough: sizes come from the HardOps' placements and the Params' types).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xrt.errors import InvalidArgumentError, UnsupportedOpError

from .chip import Chip
from .layout import SEGMENT_ALIGN, build_layout
from .structs import SegmentType

__all__ = ["SegmentSizes", "query_size"]


@dataclass(frozen=True)
class SegmentSizes:
    """Bytes of the three segments a user may deploy into its own chunks, and the alignment of
    such a chunk's start (ETM address)."""

    #: WEIGHT segment: every HardOp's weights (read-only at run time: shareable by threads)
    weight: int
    #: INSTR segment: every HardOp's instruction words (read-only as well)
    instr: int
    #: FTMP segment: the feature maps between HardOps (work memory: networks that run one
    #: after another may share one chunk sized to the largest)
    ftmp: int
    #: a user chunk must start at a multiple of this (`Device.malloc(size, True, align)`)
    align: int = SEGMENT_ALIGN
    #: the FTMP figure assumes feature-map reuse on (True) or off
    etm_reuse: bool = True

    def __getitem__(self, segment: SegmentType) -> int:
        """Bytes of `segment` (WEIGHT, INSTR or FTMP), as `logic_segment_map[seg].byte_size`."""
        key = {SegmentType.WEIGHT: "weight", SegmentType.INSTR: "instr",
               SegmentType.FTMP: "ftmp"}.get(SegmentType(segment))
        if key is None:
            raise InvalidArgumentError(f"QuerySize gives WEIGHT, INSTR and FTMP only, not "
                                       f"{SegmentType(segment).name} (one chunk per value)")
        return int(getattr(self, key))

    @property
    def workSize(self) -> int:
        """Ascend's name for the work memory (`aclmdlQuerySize`'s workSize): FTMP."""
        return self.ftmp

    @property
    def weightSize(self) -> int:
        """Ascend's name for the weight memory (`aclmdlQuerySize`'s weightSize): WEIGHT (the
        instructions, which Ascend keeps inside the model, are `instr`)."""
        return self.weight

    def chunk_bytes(self, segment: SegmentType) -> int:
        """What to allocate for `segment`: its size rounded up to whole `align` units."""
        n = self[segment]
        return -(-n // self.align) * self.align


def query_size(network_view: Any, chip: Chip, etm_reuse: bool | None = None, *,
               name: str = "NpuBackend") -> SegmentSizes:
    """WEIGHT, INSTR and FTMP bytes of `network_view`'s HardOps deployed on `chip`, as `init`
    lays them out; `etm_reuse` is the feature-map reuse setting (None: the chip's default, as
    after `init`; pass what `disableEtmOptimize` / `compressFtmp` will set). `network_view` is
    a Network or a NetworkView; ops other than HardOps are left aside, as the backend's `init`
    leaves them to the HostBackend. `name` ("ZG330Backend") goes into messages."""
    ops = getattr(network_view, "ops", None)
    if ops is None or not hasattr(network_view, "view"):
        raise InvalidArgumentError(f"{name}.QuerySize takes a network or a network view "
                                   f"(network.view(0)), not {type(network_view).__name__}")
    hard = [op for op in ops if op.op_type == "HardOp"]
    if not hard:
        raise UnsupportedOpError(f"{name}.QuerySize: the network view holds no HardOp; compile "
                                 f"it for {chip.kind} first (xrt compile --target {chip.kind})")
    for op in hard:
        if op.compile_target != chip.compile_target:
            raise UnsupportedOpError(
                f"{name}.QuerySize: op {op.op_id} (HardOp '{op.name}') was compiled for "
                f"{op.compile_target}; {name} runs HardOps compiled for {chip.compile_target}")
    view = network_view.view([op.op_id for op in hard]) if len(hard) != len(ops) \
        else network_view
    reuse = chip.etm_reuse if etm_reuse is None else bool(etm_reuse)
    layout = build_layout(view, chip.tag, -1)
    layout.ftmp_estimate(reuse)
    seg = layout.segments
    return SegmentSizes(weight=int(seg[SegmentType.WEIGHT].byte_size),
                        instr=int(seg[SegmentType.INSTR].byte_size),
                        ftmp=int(seg[SegmentType.FTMP].byte_size), etm_reuse=reuse)
