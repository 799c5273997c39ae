"""Refit: new weights for a compiled, deployed network from an ONNX file, a ModelProto or a dict
of initializers, without calibration or re-lowering (issue 29, point 5;
docs/memory-and-weights.md, "Refit from ONNX").

- `provenance`: the json expressions, recorded at import and kept by the passes, that say which
  ONNX initializers make each layer's float parameters;
- `record`: what the quantize stage freezes per layer (activation scales, bits, attributes),
  kept in the network's tags down to the lowered network;
- `plan`: a source -> the re-quantized layers and the report (`plan_refit`), which
  `Session.refitWeights` gets through the `xrt_refit_plan` hook and hands to its backends.
"""
