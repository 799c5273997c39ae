"""Calibration data and observers over a whole network.

`load_calibration(source, net)` turns a calibration source into a list of samples, each a list
with one array per network input (in `net.inputs()` order), checked against the inputs' shapes
and dtypes. Sources:

- **a Python iterable or generator** of samples; a sample is an array (single-input networks),
  a list/tuple of arrays (one per input, in order) or a dict keyed by input name;
- **a folder of `.npy` files**:
  - single-input network: every `*.npy` directly in the folder is one sample (sorted by name);
  - several inputs: files named `<sample>_<input>.npy`, where `<input>` is the input value's
    name (`net.inputs()[k].name`); files sharing a `<sample>` prefix form one sample;
  - or one sub-folder per sample (sorted by name), holding `<input>.npy` per input (for a
    single-input network any one `.npy` file);
- **a folder of images** (`.png`, `.jpg`, `.jpeg`, `.bmp`; single NHWC input with C = 3 or 1):
  read with Pillow (`PIL.Image`, converted to RGB or L: alpha dropped, grey repeated as needed),
  converted to float32 in [0, 1] (8-bit pixels divided by 255), resized to the input's H x W
  (bilinear, half-pixel centres) and given the batch axis. No mean/std normalisation: feed a
  generator for networks that want it.
- a single `.npy` file is a one-sample set.

Every sample must match exactly: shape and dtype equal to the input's (no implicit casts). A
mismatch, an unreadable file or an empty set raises `xir.CalibrationError` naming the file (or
the sample number), the input, and the expected and actual shape/dtype.

`calibrate(net, samples, method, **kw)` runs the float network on the HostBackend and feeds one
observer (`xir.quant.make_observer(method, **kw)`) per float value, through the session's
post-callback, so every op's outputs are seen; it returns `{v_id: amax}`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from xcompile.quant.observers import AbsHistogram, KLObserver, MinMaxObserver, make_observer
from xcompile.runner import Runner, default_runner
from xir.errors import CalibrationError

log = logging.getLogger(__name__)

__all__ = ["load_calibration", "list_samples", "calibrate", "run_float"]

_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".bmp")


def _spec(v) -> tuple[tuple[int, ...], np.dtype]:
    return tuple(v.shape), np.dtype(v.dtype.numpy_dtype)


def _check(arr: Any, v, where: str) -> np.ndarray:
    shape, dtype = _spec(v)
    a = np.asarray(arr)
    if a.dtype != dtype or tuple(a.shape) != shape:
        what = "dtype" if tuple(a.shape) == shape else "shape"
        raise CalibrationError(
            f"{where}: input '{v.name}' (v_id {v.v_id}) expects shape {list(shape)} {dtype}, "
            f"got shape {list(a.shape)} {a.dtype} (wrong {what})", field=v.name)
    return np.ascontiguousarray(a)


def _sample(item: Any, inputs: list, where: str) -> list[np.ndarray]:
    if isinstance(item, dict):
        missing = [v.name for v in inputs if v.name not in item]
        if missing:
            raise CalibrationError(f"{where}: no array for input(s) {missing}")
        arrays = [item[v.name] for v in inputs]
    elif isinstance(item, (list, tuple)):
        arrays = list(item)
    else:
        arrays = [item]
    if len(arrays) != len(inputs):
        raise CalibrationError(
            f"{where}: {len(arrays)} arrays for {len(inputs)} network inputs "
            f"{[v.name for v in inputs]}")
    return [_check(a, v, where) for a, v in zip(arrays, inputs)]


def _load_npy(path: Path, v) -> np.ndarray:
    try:
        arr = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a calibration error
        raise CalibrationError(f"cannot read as .npy for input '{v.name}': {exc}",
                               file=str(path)) from exc
    return _check(arr, v, str(path))


def _load_image(path: Path, v) -> np.ndarray:
    shape, dtype = _spec(v)
    if len(shape) != 4 or shape[0] != 1 or shape[3] not in (1, 3):
        raise CalibrationError(
            f"{path}: images feed a (1, H, W, 3|1) NHWC input, but input '{v.name}' has shape "
            f"{list(shape)}", file=str(path))
    from PIL import Image

    c = shape[3]
    try:
        with Image.open(path) as im:
            im = im.convert("RGB" if c == 3 else "L")
            if im.size != (shape[2], shape[1]):
                im = im.resize((shape[2], shape[1]), Image.Resampling.BILINEAR)
            img = np.asarray(im, np.float32) / np.float32(255.0)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a calibration error
        raise CalibrationError(f"cannot read image for input '{v.name}': {exc}",
                               file=str(path)) from exc
    x = img.reshape(1, shape[1], shape[2], c)
    return _check(x.astype(dtype), v, str(path))


#: a sample that loads when called: (name, loader)
NamedSample = tuple[str, Callable[[], list[np.ndarray]]]


def _folder_samples(folder: Path, inputs: list) -> list[NamedSample]:
    entries = sorted(folder.iterdir())
    subdirs = [p for p in entries if p.is_dir()]
    npys = [p for p in entries if p.is_file() and p.suffix.lower() == ".npy"]
    images = [p for p in entries if p.is_file() and p.suffix.lower() in _IMAGE_EXT]
    if subdirs and not npys and not images:
        return [(d.name, functools.partial(_load_subdir, d, inputs)) for d in subdirs]
    if images and not npys:
        if len(inputs) != 1:
            raise CalibrationError("images can only feed a single-input network",
                                   file=str(folder))
        return [(p.name, functools.partial(_load_one, _load_image, p, inputs[0]))
                for p in images]
    if len(inputs) == 1:
        return [(p.name, functools.partial(_load_one, _load_npy, p, inputs[0])) for p in npys]
    groups: dict[str, dict[str, Path]] = {}
    for p in npys:
        for v in inputs:
            suffix = f"_{v.name}"
            if p.stem.endswith(suffix) and len(p.stem) > len(suffix):
                groups.setdefault(p.stem[: -len(suffix)], {})[v.name] = p
                break
        else:
            raise CalibrationError(
                f"name fits no input; expected <sample>_<input>.npy with <input> one of "
                f"{[v.name for v in inputs]}", file=str(p))
    out = []
    for key in sorted(groups):
        files = groups[key]
        missing = [v.name for v in inputs if v.name not in files]
        if missing:
            raise CalibrationError(f"sample '{key}' lacks input(s) {missing}",
                                   file=str(folder / key))
        out.append((key, functools.partial(_load_group, files, inputs)))
    return out


def _load_one(load: Callable, path: Path, v) -> list[np.ndarray]:
    return [load(path, v)]


def _load_group(files: dict[str, Path], inputs: list) -> list[np.ndarray]:
    return [_load_npy(files[v.name], v) for v in inputs]


def _load_subdir(d: Path, inputs: list) -> list[np.ndarray]:
    files = sorted(p for p in d.iterdir() if p.suffix.lower() == ".npy")
    if len(inputs) == 1 and len(files) == 1:
        return [_load_npy(files[0], inputs[0])]
    sample = []
    for v in inputs:
        f = d / f"{v.name}.npy"
        if not f.exists():
            raise CalibrationError(f"no {v.name}.npy for input '{v.name}' "
                                   f"(v_id {v.v_id})", file=str(d), field=v.name)
        sample.append(_load_npy(f, v))
    return sample


def list_samples(source: str | os.PathLike, net: Any) -> list[NamedSample]:
    """The samples of a folder or file (the conventions above), named and loaded on demand:
    an evaluation over thousands of files reads each one only when its batch is sent."""
    inputs = list(net.inputs())
    if not inputs:
        raise CalibrationError("the network has no inputs")
    path = Path(source)
    if path.is_dir():
        return _folder_samples(path, inputs)
    if path.is_file() and path.suffix.lower() == ".npy":
        if len(inputs) != 1:
            raise CalibrationError("one .npy file feeds a single-input network",
                                   file=str(path))
        return [(path.name, functools.partial(_load_one, _load_npy, path, inputs[0]))]
    if path.is_file() and path.suffix.lower() in _IMAGE_EXT:
        return [(path.name, functools.partial(_load_one, _load_image, path, inputs[0]))]
    raise CalibrationError("no such sample folder or file", file=str(path))


def load_calibration(source: Any, net: Any) -> list[list[np.ndarray]]:
    """Calibration samples from `source` (folder, .npy file, or iterable), checked against
    `net.inputs()`; see the module docstring for the conventions."""
    inputs = list(net.inputs())
    if not inputs:
        raise CalibrationError("the network has no inputs to calibrate")
    if isinstance(source, (str, os.PathLike)):
        samples = [load() for _name, load in list_samples(source, net)]
        where = str(source)
    elif isinstance(source, np.ndarray):
        samples = [_sample(source, inputs, "sample 0")]
        where = "the array"
    elif isinstance(source, Iterable):
        samples = [_sample(item, inputs, f"sample {k}") for k, item in enumerate(source)]
        where = "the iterable"
    else:
        raise CalibrationError(f"calibration source must be a folder, a .npy file or an "
                               f"iterable of samples, not {type(source).__name__}")
    if not samples:
        raise CalibrationError(f"calibration set from {where} is empty: give at least one "
                               f"sample")
    return samples


def run_float(net: Any, samples: Iterable[list[np.ndarray]], on_value: Any,
              runner: Runner | None = None, what: str = "float run") -> list[list[np.ndarray]]:
    """Run `net` with `runner` (default: the HostBackend) for every sample, calling
    `on_value(value, array)` for every op output; returns the network outputs per sample.
    Shows progress per sample (`what` names the pass)."""
    from xrt.console import progress_bar

    samples = list(samples)
    with progress_bar(len(samples), f"{what}: {net.name}") as advance:
        def counted() -> Iterable[list[np.ndarray]]:
            for sample in samples:
                yield sample
                advance()

        return (runner or default_runner()).run(net, counted(), on_value)


def calibrate(net: Any, samples: Any, method: str = "minmax", *,
              skip_zeros: bool | None = None, per_value: dict[int, dict] | None = None,
              runner: Runner | None = None, means: dict[int, np.ndarray] | None = None,
              reuse: dict[int, tuple] | None = None, **kw: Any) -> dict[int, float]:
    """`{v_id: amax}` of every float value of `net` over `samples` (anything
    `load_calibration` accepts), with one `make_observer(method, **kw)` per value
    (`per_value[v_id]`, when given, replaces `kw` for that value -- mixed-precision networks
    calibrate their 16-bit values with 16-bit observers -- and may name another "method").

    `skip_zeros` (default: on for "kl", off otherwise) leaves exact zeros out of the
    histograms, as pytorch-quantization's `HistogramCalibrator(skip_zeros=True)` does: after a
    ReLU half of a map is 0, and that spike in bin 0 drives the entropy search to thresholds far
    below the real range (measured on the zoo: amax 1.2 instead of 8 on tiny_cnn's first conv).
    A value whose batches are all zero keeps amax 0 (its scale becomes MIN_SCALE).

    `means`, when given, maps v_ids to fill with their value's mean per channel (its last
    axis) over the samples, taken in the same pass (bias correction's input means).

    `reuse`: a dict kept between calls on the same network and samples
    (`xcompile.quant.quantize.reuse_float_statistics`). Empty, it is filled with every value's
    `|x|` histogram and signed range, and the per-channel means of every convolution's or
    matmul's input; filled, the observers (and `means`) are answered from it without running
    the network again, where all of them can be (histogram observers of the same bin count
    and minmax; not with `skip_zeros`): a mixed-precision search's quantizations differ in
    their observers' settings, not in what the float network computes.
    """
    if reuse and not (method == "kl" if skip_zeros is None else skip_zeros) and \
            (means is None or set(means) <= set(reuse["means"])):
        served = _from_reuse(reuse["values"], method, per_value or {}, kw)
        if served is not None:
            if means is not None:
                means.update({vid: reuse["means"][vid] for vid in means})
            return served
    # with `reuse`, bias correction's candidates too, for a later call that wants them
    extra = {op.inputs[0].v_id for op in net.ops if op.op_type in ("Conv2d", "Matmul")
             and op.inputs} - set(means or {}) if reuse is not None else set()
    data = load_calibration(samples, net)
    sums: dict[int, list] = {}
    observers: dict[int, Any] = {}
    skip = (method == "kl") if skip_zeros is None else bool(skip_zeros)
    per_value = per_value or {}

    def feed(v, arr):
        if arr.dtype.kind != "f":
            return
        if ((means is not None and v.v_id in means) or v.v_id in extra) and arr.size:
            acc = sums.setdefault(v.v_id, [0.0, 0])
            acc[0] = acc[0] + arr.reshape(-1, arr.shape[-1]).sum(axis=0, dtype=np.float64)
            acc[1] += arr.size // arr.shape[-1]
        obs = observers.get(v.v_id)
        if obs is None:
            own = dict(per_value.get(v.v_id, kw))
            obs = observers[v.v_id] = make_observer(own.pop("method", method), **own)
        if reuse is not None and arr.size:
            lo, hi = float(arr.min()), float(arr.max())
            old = ranges.get(v.v_id)
            ranges[v.v_id] = (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
        if skip and not isinstance(obs, MinMaxObserver):
            arr = arr[arr != 0]
            if arr.size == 0:
                return
        obs.update(arr)

    ranges: dict[int, tuple[float, float]] = {}
    run_float(net, data, feed, runner, what="calibration")
    got = {vid: s / max(n, 1) for vid, (s, n) in sums.items()}
    if reuse is not None and not skip:
        reuse.clear()
        reuse["values"] = {vid: (getattr(obs, "hist", None), ranges.get(vid))
                           for vid, obs in observers.items()}
        reuse["means"] = got
    if means is not None:
        means.update({vid: m for vid, m in got.items() if vid in means})
    return {vid: float(obs.amax()) for vid, obs in observers.items()}


def _from_reuse(reuse: dict[int, tuple], method: str, per_value: dict[int, dict],
                kw: dict) -> dict[int, float] | None:
    """`calibrate`'s answer from kept histograms and ranges, or None where an observer cannot
    be answered from them (another bin count, another kind)."""
    out = {}
    for vid, (hist, rng) in reuse.items():
        own = dict(per_value.get(vid, kw))
        obs = make_observer(own.pop("method", method), **own)
        if isinstance(obs, MinMaxObserver):
            if rng is not None:
                obs.min, obs.max = rng
        elif isinstance(getattr(obs, "hist", None), AbsHistogram) and hist is not None and \
                obs.hist.bins == hist.bins and not isinstance(obs, KLObserver):
            obs.hist = hist  # read only: amax() does not change it
        else:
            return None
        out[vid] = float(obs.amax())
    return out
