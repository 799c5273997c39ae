"""Concat, Split, Slice, Reshape, Transpose, Squeeze, Unsqueeze, Pad.

Pure data movement: these keep the input dtype (float32 in, float32 out), so the integer
kernels can share them. Outputs are fresh C-contiguous arrays, never views of an input.
"""

from __future__ import annotations

import numpy as np

from xir.numba_target import njit

from ._common import fresh, require


def _axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for rank {ndim}")
    return axis % ndim


def concat(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    arrays = [np.asarray(x) for x in inputs]
    axis = _axis(int(attrs.get("axis", -1)), arrays[0].ndim, "Concat")
    return [np.concatenate(arrays, axis=axis)]


def split(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axis = _axis(int(attrs.get("axis", -1)), x.ndim, "Split")
    sections = [int(s) for s in require(attrs, "sections", "Split")]
    if sum(sections) != x.shape[axis] or min(sections, default=0) < 0:
        raise ValueError(
            f"Split: sections {sections} do not sum to the axis length {x.shape[axis]}"
        )
    cuts = np.cumsum(sections)[:-1]
    return [fresh(part) for part in np.split(x, cuts, axis=axis)]


def slice_(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """x[begin:end:step] per axis, with Python (= ONNX) clamping; missing axes are whole."""
    x = np.asarray(inputs[0])
    begin = list(require(attrs, "begin", "Slice"))
    end = list(require(attrs, "end", "Slice"))
    step = list(attrs.get("step") or [1] * len(begin))
    if not len(begin) == len(end) == len(step) or len(begin) > x.ndim:
        raise ValueError(
            f"Slice: begin {begin}, end {end}, step {step} must have one entry per axis "
            f"(rank {x.ndim})"
        )
    if 0 in step:
        raise ValueError("Slice: step must not be 0")
    index = tuple(slice(int(b), int(e), int(s)) for b, e, s in zip(begin, end, step))
    return [fresh(x[index])]


def reshape(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """shape may hold one -1 (inferred) and zeros (copy the input dim at that position)."""
    x = np.asarray(inputs[0])
    shape = [int(s) for s in require(attrs, "shape", "Reshape")]
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [fresh(x.reshape(shape))]


def transpose(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """np.transpose(x, perm); no perm (or an empty one) reverses the axes."""
    x = np.asarray(inputs[0])
    perm = attrs.get("perm") or None
    if perm is not None and tuple(perm) == (0, 2, 3, 1) and x.ndim == 4 and x.size:
        # NCHW -> NHWC (an image network's input): numpy's strided copy takes ~1.3 ns per
        # element over three planes; channel by channel it is a tenth of that
        n, c, h, w = x.shape
        out = np.empty((n, h, w, c), dtype=x.dtype)
        # moved as same-size unsigned words: one kernel per element size, and dtypes Numba
        # has no type for (float16) are copied bit for bit too
        word = np.dtype(f"u{x.dtype.itemsize}")
        flat = np.ascontiguousarray(x).view(word).reshape(n, -1)
        dst = out.view(word).reshape(n, -1)
        for i in range(n):
            if c == 3:
                _planes_to_pixels3(flat[i], h * w, dst[i])
            else:
                _planes_to_pixels(flat[i], c, h * w, dst[i])
        return [out]
    return [fresh(np.transpose(x, perm))]


@njit(cache=True)
def _planes_to_pixels(x, c_n, hw, out):
    """``out[p * c_n + c] = x[c * hw + p]``: channel planes to interleaved pixels."""
    for c in range(c_n):
        for p in range(hw):
            out[np.uint64(p * c_n + c)] = x[np.uint64(c * hw + p)]


@njit(cache=True)
def _planes_to_pixels3(x, hw, out):
    """`_planes_to_pixels` for three channels (RGB), unrolled: it vectorises as shuffles."""
    for p in range(hw):
        out[np.uint64(3 * p)] = x[np.uint64(p)]
        out[np.uint64(3 * p + 1)] = x[np.uint64(hw + p)]
        out[np.uint64(3 * p + 2)] = x[np.uint64(2 * hw + p)]


def channel_shuffle(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """Output channel j*g + i is input channel i*(C/g) + j (last axis)."""
    x = np.asarray(inputs[0])
    g = int(attrs["groups"])
    c = x.shape[-1]
    return [fresh(x.reshape(x.shape[:-1] + (g, c // g)).swapaxes(-1, -2).reshape(x.shape))]


def squeeze(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    x = np.asarray(inputs[0])
    axes = attrs.get("axes") or None
    return [fresh(np.squeeze(x, axis=None if axes is None else tuple(int(a) for a in axes)))]


def unsqueeze(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """axes index the output (ONNX meaning; negative counts from the output's end)."""
    x = np.asarray(inputs[0])
    axes = tuple(int(a) for a in require(attrs, "axes", "Unsqueeze"))
    return [fresh(np.expand_dims(x, axes))]


_PAD_MODES = {"constant", "reflect", "edge", "wrap"}


def pad(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]:
    """np.pad per axis; missing trailing entries mean no padding, negative entries crop."""
    x = np.asarray(inputs[0])
    before = [int(p) for p in require(attrs, "pad_before", "Pad")]
    after = [int(p) for p in require(attrs, "pad_after", "Pad")]
    mode = str(attrs.get("mode", "constant"))
    if mode not in _PAD_MODES:
        raise ValueError(f"Pad: mode {mode!r} is not one of {sorted(_PAD_MODES)}")
    if len(before) != len(after) or len(before) > x.ndim:
        raise ValueError(f"Pad: pad_before {before} and pad_after {after} need one entry per axis")
    before += [0] * (x.ndim - len(before))
    after += [0] * (x.ndim - len(after))
    # Negative pads crop first (as in ONNX), then the remaining pads grow the array.
    crop = tuple(
        slice(-min(b, 0), x.shape[i] + min(a, 0)) for i, (b, a) in enumerate(zip(before, after))
    )
    x = x[crop]
    widths = [(max(b, 0), max(a, 0)) for b, a in zip(before, after)]
    if mode == "constant":
        y = np.pad(x, widths, mode="constant", constant_values=attrs.get("value", 0.0))
    else:
        y = np.pad(x, widths, mode=mode)
    return [fresh(y) if y is x else np.ascontiguousarray(y)]


# --------------------------------------------------------------------------------------------
# Integer kernels: the same data movement on codes; the scale passes through (docs/quantization.md)
# --------------------------------------------------------------------------------------------


def _passthrough(float_kernel, name):
    def kernel(inputs, attrs, in_types, out_types, *, fake=False):
        from ._common import rescale, scale1

        outs = float_kernel(inputs, attrs)
        s_in = scale1(in_types[0])
        return [rescale(y, s_in, scale1(t), t.numpy_dtype, fake) for y, t in zip(outs, out_types)]

    kernel.__name__ = f"{name}_int"
    kernel.__doc__ = (f"{name} on integer codes; an output whose scale differs from the input's "
                      f"is rescaled (requant_multiplier(s_in, 1.0, s_out)).")
    return kernel


split_int = _passthrough(split, "split")
slice_int = _passthrough(slice_, "slice")
reshape_int = _passthrough(reshape, "reshape")
transpose_int = _passthrough(transpose, "transpose")
channel_shuffle_int = _passthrough(channel_shuffle, "channel_shuffle")
squeeze_int = _passthrough(squeeze, "squeeze")
unsqueeze_int = _passthrough(unsqueeze, "unsqueeze")


def concat_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Concat of codes; an input whose scale differs from the output's is rescaled first."""
    from ._common import rescale, scale1

    s_out, out_dt = scale1(out_types[0]), out_types[0].numpy_dtype
    parts = [rescale(np.asarray(x), scale1(t), s_out, out_dt, fake)
             for x, t in zip(inputs, in_types)]
    return concat(parts, attrs)


def pad_int(inputs, attrs, in_types, out_types, *, fake=False):
    """Pad of codes; the constant is quantize(value, s_in) (round half away, saturated)."""
    from xir.quant.fixed_point import quantize

    from ._common import rescale, scale1

    s_in = scale1(in_types[0])
    value = float(attrs.get("value", 0.0))
    a = dict(attrs)
    if fake:
        a["value"] = value / s_in
    else:
        a["value"] = int(quantize(np.float64(value), s_in, in_types[0].numpy_dtype))
    y = pad(inputs, a)[0]
    return [rescale(y, s_in, scale1(out_types[0]), out_types[0].numpy_dtype, fake)]
