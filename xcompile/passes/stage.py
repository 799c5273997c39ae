"""The optimize stage: every pass of this package, in order, over a copy of the network
(see the package docstring for what each does)."""

from __future__ import annotations

import logging

from xcompile.slice_passes import fold_slices
from xir.network import Network

from .activations import fold_gelu, fold_gelu_tanh, fold_hardswish
from .affine import affine_of, as_depthwise, fold_bn, set_affine
from .fusion import ACT_HOSTS, fold_matmul_bias, fold_relu, fold_transpose_into_matmul
from .graph import bypass, copy_network, fuse_tag, only_reader
from .layout import fold_channel_shuffle, is_noop
from .log_power import fold_log_power
from .normalization import fold_layernorm, is_mean, lrn_as_chip_ops
from .pooled_layernorm import fold_pooled_layernorm
from .sqrt import fold_sqrt_of_square, sqrt_as_table

log = logging.getLogger(__name__)


def optimize(net: Network) -> Network:
    """The optimize stage: affine merging, BN folding (into a convolution, else as a depthwise
    convolution), Relu folding, no-op Reshape/Transpose removal (a new network)."""
    out = copy_network(net)
    n_moves = fold_slices(out)
    outputs = {v.v_id for v in out.outputs()}
    changed = True
    n_bn = n_relu = n_noop = 0
    n_affine = n_dw = n_act = 0
    for op in list(out.ops):  # 0. decomposed activations
        if op in out.ops and op.op_type == "Add" and fold_hardswish(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Erf" and fold_gelu(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Tanh" and fold_gelu_tanh(out, op, outputs):
            n_act += 1
        elif op in out.ops and is_mean(op) and fold_layernorm(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Reshape" and \
                fold_pooled_layernorm(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "LRN" and lrn_as_chip_ops(out, op):
            n_act += 1
        elif op in out.ops and op.op_type == "Sqrt" and fold_sqrt_of_square(out, op, outputs):
            n_act += 1
        elif op in out.ops and op.op_type == "Unary" and fold_log_power(out, op, outputs):
            n_act += 1
    for op in list(out.ops):  # the Sqrts no pattern took: tables once quantized
        if op.op_type == "Sqrt" and sqrt_as_table(out, op):
            n_act += 1
    for op in list(out.ops):  # channel shuffles written as Reshape -> Transpose -> Reshape
        if op in out.ops and op.op_type == "Reshape" and fold_channel_shuffle(out, op, outputs):
            n_act += 1
    for op in list(out.ops):  # 1. constant per-channel Multiply / Add as BatchNorm2d
        if op.op_type in ("Multiply", "Add") and (ab := affine_of(op)) is not None:
            set_affine(out, op, *ab)
            n_affine += 1
    while changed:
        changed = False
        for op in list(out.ops):
            if op not in out.ops:
                continue
            if op.op_type == "BatchNorm2d":  # 1. compose consecutive affines
                reader = only_reader(op.outputs[0], outputs, "BatchNorm2d")
                first = affine_of(op)
                second = affine_of(reader) if reader is not None else None
                if first is not None and second is not None:
                    (a1, b1), (a2, b2) = first, second
                    bn = set_affine(out, op, a1 * a2, b1 * a2 + b2)
                    fuse_tag(bn, reader)
                    bypass(out, bn, reader)
                    n_affine += 1
                    changed = True
                    continue
            if op.op_type in ("Conv2d", "ConvTranspose2d") \
                    and op.attrs.get("act", "none") == "none":
                reader = only_reader(op.outputs[0], outputs, "BatchNorm2d")
                if reader is not None and reader.inputs[0] is op.outputs[0] \
                        and fold_bn(out, op, reader):
                    n_bn += 1
                    changed = True
                    continue
            if op.op_type == "Matmul":
                reader = only_reader(op.outputs[0], outputs, "Add")
                if reader is not None and fold_matmul_bias(out, op, reader):
                    n_affine += 1
                    changed = True
                    continue
            if op.op_type == "Transpose" and fold_transpose_into_matmul(out, op, outputs):
                n_noop += 1
                changed = True
                continue
            if op.op_type in ACT_HOSTS:
                reader = only_reader(op.outputs[0], outputs, "Relu")
                if reader is not None and fold_relu(out, op, reader):
                    n_relu += 1
                    changed = True
                    continue
            if is_noop(op) and not op.inputs[0].is_params:
                src, dst = op.inputs[0], op.outputs[0]
                if dst.v_id in outputs:
                    if src.v_id in outputs or src.producer is None \
                            or src.producer.op_type == "Input":
                        continue
                    # keep the output's v_id: the producer writes it directly
                    prod = src.producer
                    if len(src.consumers) != 1:
                        continue
                    prod.outputs = [dst if v is src else v for v in prod.outputs]
                    out.ops.remove(op)
                    out.relink()
                else:
                    out.ops.remove(op)
                    out.replaceValue(dst, src)
                n_noop += 1
                changed = True
    for op in list(out.ops):  # 3. what did not fold into a convolution runs as one
        if op.op_type == "BatchNorm2d" and affine_of(op) is not None:
            as_depthwise(out, op)
            n_dw += 1
    for op in list(out.ops):  # 4. ... and takes the Relu after it
        if op.op_type == "Conv2d" and op.tags.get("affine") and op in out.ops:
            reader = only_reader(op.outputs[0], outputs, "Relu")
            if reader is not None and fold_relu(out, op, reader):
                n_relu += 1
    out.validate()
    log.debug("optimize %s: %d index picks as slices, %d activations recomposed, %d affine "
              "ops merged, %d BatchNorm2d folded, %d as depthwise convolutions, %d Relu folded, "
              "%d no-op ops removed", net.name, n_moves, n_act, n_affine, n_bn, n_dw, n_relu,
              n_noop)
    return out
