"""A channel shuffle's COPY layers run as one pass over the map.

The lowering writes a channel shuffle of ``C = K * n`` channels as `K` COPY STRIDED_OUT layers
(`npu_model.lowering.layers.lower_channel_shuffle`, docs/zg330-isa.md, COPY): layer k moves
input channels ``[k n, (k + 1) n)`` of every pixel to output channels ``k, k + K, k + 2K, ...``.
Run one after another (`vector.copy`), each walks the whole map and writes one byte in `K`:
a 56 x 56 x 112 int8 shuffle took ~360 us in four calls. `Recording.replay_steps`
(`npu_model.program.join_shuffles`) replays such a group, once its layers have been decoded
and executed one by one, as one call (`for_groups`): per pixel, the `K` input runs read side
by side and the output written once, in order (~40 us). It writes the very elements the `K`
copies write, with the same values: the group is joined only where no output element is
written twice and the output does not overlap the input, so the order of the writes cannot
be seen.
"""

from __future__ import annotations

from .jit import kernel

# Each group count has its own kernel: one kernel branching on the count ran the 4-group
# loop 7x slower than alone (LLVM no longer vectorised it), and a network compiles only
# the one it uses.


@kernel
def interleave(x, xrs, xpitch, xoff, y, yrs, ypitch, yoff, h_n, w_n, n, k_n):
    """``y[yb + c * k_n + k] = x[xb + k * n + c]`` for every pixel (``xb = h * xrs + w *
    xpitch + xoff``, ``yb`` likewise), ``k < k_n``, ``c < n``: the `k_n` COPY STRIDED_OUT
    layers of a channel shuffle at once, one input run after another."""
    span = k_n * n
    for h in range(h_n):
        for w in range(w_n):
            xb = h * xrs + w * xpitch + xoff
            yb = h * yrs + w * ypitch + yoff
            ys = y[yb:yb + span]
            for k in range(k_n):
                xs = x[xb + k * n:xb + (k + 1) * n]
                for c in range(n):
                    ys[c * k_n + k] = xs[c]
    return y


@kernel
def interleave2(x, xrs, xpitch, xoff, y, yrs, ypitch, yoff, h_n, w_n, n):
    """`interleave` for 2 groups: the 2 input runs of a pixel read side by side."""
    for h in range(h_n):
        for w in range(w_n):
            xb = h * xrs + w * xpitch + xoff
            yb = h * yrs + w * ypitch + yoff
            ys = y[yb:yb + 2 * n]
            x0 = x[xb:xb + n]
            x1 = x[xb + n:xb + 2 * n]
            for c in range(n):
                ys[2 * c] = x0[c]
                ys[2 * c + 1] = x1[c]
    return y


@kernel
def interleave3(x, xrs, xpitch, xoff, y, yrs, ypitch, yoff, h_n, w_n, n):
    """`interleave` for 3 groups: the 3 input runs of a pixel read side by side."""
    for h in range(h_n):
        for w in range(w_n):
            xb = h * xrs + w * xpitch + xoff
            yb = h * yrs + w * ypitch + yoff
            ys = y[yb:yb + 3 * n]
            x0 = x[xb:xb + n]
            x1 = x[xb + n:xb + 2 * n]
            x2 = x[xb + 2 * n:xb + 3 * n]
            for c in range(n):
                ys[3 * c] = x0[c]
                ys[3 * c + 1] = x1[c]
                ys[3 * c + 2] = x2[c]
    return y


@kernel
def interleave4(x, xrs, xpitch, xoff, y, yrs, ypitch, yoff, h_n, w_n, n):
    """`interleave` for 4 groups: the 4 input runs of a pixel read side by side."""
    for h in range(h_n):
        for w in range(w_n):
            xb = h * xrs + w * xpitch + xoff
            yb = h * yrs + w * ypitch + yoff
            ys = y[yb:yb + 4 * n]
            x0 = x[xb:xb + n]
            x1 = x[xb + n:xb + 2 * n]
            x2 = x[xb + 2 * n:xb + 3 * n]
            x3 = x[xb + 3 * n:xb + 4 * n]
            for c in range(n):
                ys[4 * c] = x0[c]
                ys[4 * c + 1] = x1[c]
                ys[4 * c + 2] = x2[c]
                ys[4 * c + 3] = x3[c]
    return y


def for_groups(k_n: int):
    """The kernel for `k_n` groups and whether it takes `k_n` as its last argument."""
    return {2: (interleave2, False), 3: (interleave3, False),
            4: (interleave4, False)}.get(k_n, (interleave, True))
