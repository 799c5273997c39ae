"""Graph passes of the compile pipeline; here the "optimize" stage (parse -> *optimize* ->
quantize -> adapt -> generate).

`optimize(net)` returns a new network and leaves its input untouched. The weights it did not
change are read-only views of the input's (`graph.copy_network`: vgg19's 575 MB are not
copied); no pass writes a weight in place, a pass that changes one builds new data:

0. decomposed activations: HardSwish as exporters write it (``x * relu6(x + 3) / 6``, in
   either association) becomes one Hardswish op and GELU (``x * (1 + erf(x / sqrt 2)) / 2``,
   or its tanh form ``x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x**3))) / 2``) one Gelu op:
   a lookup table each once quantized; LayerNorm written out (ReduceMean, Sub, Pow 2,
   ReduceMean, Add eps, Sqrt, Div, then Mul gamma and Add beta) becomes one LayerNorm, also
   over the tokens of a (N, C, L) map whose means the importer made global pools (paddle2onnx's
   SVTR: a LayerNorm over the last axis between Transposes, `pooled_layernorm`);
   an LRN becomes ops the NPUs run (`x * x`, the channel window's sum as a 1x1 Conv2d with a
   band of ones, the denominator's power as a Power table, `x * d`); the square root of a
   square, ``sqrt(x * x)`` or ``sqrt(max(x * x, c))`` (keras' magnitude with a floor), becomes
   ``|x|`` or ``max(|x|, sqrt c)``: the same values, without the square that int8 cannot hold
   (it rounds every |x| below 1/16 of the largest to 0); a log-power spectrum,
   ``log(max(re * re + im * im, c))`` (through ``sqrt(.) ** 2`` too: keras2onnx's DNSMOS),
   becomes ``max(2 log hi + softplus(2 (log lo - log hi)), log c)`` of the parts' magnitudes
   ``hi`` / ``lo`` (`log_power`): the same values without the linear power, whose ten decades
   no integer width holds;
1. per-channel affines: a Multiply or Add of a 4-D map by a constant that varies along C only
   (exporters write BatchNorm so, and Caffe2's scale layers) becomes a BatchNorm2d, and a
   BatchNorm2d read only by another composes with it into one (`y = x * a + b`, in float64);
2. a standalone BatchNorm2d whose input is a Conv2d / ConvTranspose2d output read by nothing
   else is folded into the convolution's weights and bias (`w' = w * a`, `b' = (b - mean) * a +
   beta`, `a = gamma / sqrt(var + eps)`, computed in float64, stored float32);
3. a BatchNorm2d that follows no convolution (after a Concat, an input, a pool) becomes a
   depthwise 1x1 Conv2d with weight `a` and bias `b`, which the NPUs run;
4. a Relu (threshold 0) that is the only reader of a Conv2d / ConvTranspose2d / Matmul / Add
   without a folded activation becomes that op's `act` / `act_alpha` / `act_max`;
5. Reshapes that keep the shape and Transposes with the identity permutation are removed.

Before all of them, `xcompile.slice_passes.fold_slices` turns index picks into code moves the
chips run: a Gather of evenly stepping constant indices becomes a Slice, a Slice of a
Reshape-split axis slices the unsplit one, and Slices that tile an axis become one Split.

Ids are stable: a fused op keeps the producer's `op_id` and outputs the *last* value of the
chain (the BatchNorm2d's or the Relu's output, with its `v_id`), so a value of the optimized
network has the same `v_id` as the value it equals in the original one. Removed ops leave
`tags["fused_op_ids"]` on the op that absorbed them.

The modules: `graph` (copy, single reader, op replacement), `activations` (HardSwish, GELU),
`sqrt`, `log_power`, `normalization` (LayerNorm, LRN), `pooled_layernorm` (SVTR's LayerNorm),
`affine` (per-channel affines, BatchNorm folding), `fusion` (Relu, Matmul bias, Transpose into
Matmul), `layout` (channel shuffles, no-ops) and `stage` (`optimize`, which runs them in order).
"""

from __future__ import annotations

from .graph import copy_network
from .stage import optimize

__all__ = ["optimize", "copy_network"]
