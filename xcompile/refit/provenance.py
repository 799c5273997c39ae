"""Where a layer's float parameters come from: small json expressions over ONNX initializer
names, recorded in `Params.tags["src"]` by the ONNX importer and kept up to date by the passes
that fold parameters (BatchNorm into a convolution, Gemm's transB / alpha / beta).

    {"init": "conv1.weight", "perm": [2, 3, 1, 0]}          # the initializer, transposed
    {"op": "bn_w", "w": <expr>, "gamma": <expr>, "var": <expr>, "eps": 1e-5,
     "kind": "Conv2d", "groups": 1}                          # W * gamma / sqrt(var + eps)
    {"op": "bn_b", "b": <expr> | None, "gamma": ..., "beta": ..., "mean": ..., "var": ...,
     "eps": 1e-5}                                            # (b - mean) * a + beta

`evaluate` recomputes a parameter from initializer arrays with the numerics of the pass that
made it (float64 folding, cast to float32), so a refit gives the parameters a fresh import and
optimize of the same ONNX file would give, bit for bit. A Params whose data was transformed by
anything that does not record its expression has no "src": its layer cannot be refitted (the
refit says so, naming the layer), it is never guessed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["SRC", "INITIALIZERS_TAG", "GRAPH_TAG", "graph_digest", "initializer_digest", "leaf",
           "bn_weight", "bn_bias", "fold_bn_src", "src_of", "names", "evaluate"]

#: the Params tag holding the expression
SRC = "src"
#: the network tag {initializer name: [digest, shape, numpy dtype str]} of what the network was
#: imported or last refitted from: a refit tells changed, unknown and misshapen initializers
INITIALIZERS_TAG = "onnx_initializers"
#: the network tag holding `graph_digest` of the imported ONNX graph
GRAPH_TAG = "onnx_graph"


def initializer_digest(arr: Any) -> str:
    """A short digest of an initializer's dtype, shape and bytes."""
    a = np.ascontiguousarray(arr)
    h = hashlib.blake2b(digest_size=12)
    h.update(f"{a.dtype.str}{list(a.shape)}".encode())
    if a.dtype.kind == "O":
        h.update(repr(a.tolist()).encode())
    elif a.size:  # the array's own bytes as uint8, not a copy (vgg19: 575 MB); any dtype
        h.update(a.reshape(-1).view(np.uint8))  # (bfloat16 has no buffer format of its own)
    return h.hexdigest()


def graph_digest(graph: Any) -> str:
    """A digest of an ONNX graph's structure (nodes' types, domains, inputs, outputs and
    attribute names, in order), not of its weights: equal for two exports of one model."""
    h = hashlib.blake2b(digest_size=12)
    for n in graph.node:
        h.update(repr((n.op_type, n.domain, list(n.input), list(n.output),
                       sorted(a.name for a in n.attribute))).encode())
    return h.hexdigest()


def leaf(name: str, perm: Any = None, mul: float | None = None, flat: bool = False,
         rank: int | None = None) -> dict[str, Any]:
    """Initializer `name`, padded with leading unit axes to `rank`, transposed by `perm`,
    times `mul`, flattened when `flat`."""
    e: dict[str, Any] = {"init": str(name)}
    if rank is not None:
        e["rank"] = int(rank)
    if perm is not None and list(perm) != list(range(len(perm))):
        e["perm"] = [int(p) for p in perm]
    if mul is not None and float(mul) != 1.0:
        e["mul"] = float(mul)
    if flat:
        e["flat"] = True
    return e


def src_of(p: Any) -> dict[str, Any] | None:
    """The expression of Params `p`, None when it has none (or is no Params)."""
    if p is None or not getattr(p, "is_params", False):
        return None
    e = p.tags.get(SRC) if isinstance(getattr(p, "tags", None), dict) else None
    return e if isinstance(e, dict) else None


def bn_weight(w: Any, gamma: Any, var: Any, eps: float, kind: str, groups: int
              ) -> dict[str, Any] | None:
    """The expression of a convolution weight with a BatchNorm folded in (None if a part has
    none)."""
    if w is None or gamma is None or var is None:
        return None
    return {"op": "bn_w", "w": w, "gamma": gamma, "var": var, "eps": float(eps),
            "kind": str(kind), "groups": int(groups)}


def bn_bias(b: Any, gamma: Any, beta: Any, mean: Any, var: Any, eps: float, had_bias: bool
            ) -> dict[str, Any] | None:
    """The expression of a convolution bias with a BatchNorm folded in; `b` None with
    `had_bias` False: the convolution had no bias (zeros)."""
    if (had_bias and b is None) or None in (gamma, beta, mean, var):
        return None
    return {"op": "bn_b", "b": b, "gamma": gamma, "beta": beta, "mean": mean, "var": var,
            "eps": float(eps)}


def fold_bn_src(conv: Any, bn: Any, wp: Any, bp: Any) -> None:
    """Set the provenance of a folded pair's new weight `wp` and bias `bp`: the expressions over
    the convolution's and the BatchNorm's initializers, or none where a part has none (the
    import's clean-up and the optimize stage both fold)."""
    eps = float(bn.attrs.get("epsilon", 1e-5))
    gamma, beta, mean, var = (src_of(v) for v in bn.inputs[1:5])
    had_bias = len(conv.inputs) > 2
    w = bn_weight(src_of(conv.inputs[1]), gamma, var, eps, conv.op_type,
                  int(conv.attrs.get("groups", 1)))
    b = bn_bias(src_of(conv.inputs[2]) if had_bias else None, gamma, beta, mean, var, eps,
                had_bias)
    for p, e in ((wp, w), (bp, b)):
        p.tags.pop(SRC, None)
        if e is not None:
            p.tags[SRC] = e


_ORDER = ("w", "b", "gamma", "beta", "mean", "var")


def names(e: Any) -> list[str]:
    """Every initializer name expression `e` reads, in first-use order."""
    out: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            if "init" in x:
                if x["init"] not in out:
                    out.append(x["init"])
                return
            for k in sorted(x, key=lambda k: (_ORDER.index(k) if k in _ORDER else 9, k)):
                walk(x[k])

    walk(e)
    return out


def _f64(e: Any, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(evaluate(e, arrays), np.float64)


def evaluate(e: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """The array expression `e` stands for, from `arrays` (initializer name -> array)."""
    if "init" in e:
        a = np.asarray(arrays[e["init"]])
        if "rank" in e:
            a = a.reshape((1,) * (int(e["rank"]) - a.ndim) + a.shape)
        if "perm" in e:
            a = np.transpose(a, e["perm"])
        if "mul" in e:
            a = (a * np.asarray(e["mul"], a.dtype)).astype(a.dtype)
        if e.get("flat"):
            a = a.reshape(-1)
        return np.ascontiguousarray(a)
    op = e.get("op")
    if op == "bn_w":
        w = _f64(e["w"], arrays)
        a = _f64(e["gamma"], arrays).reshape(-1) / np.sqrt(
            _f64(e["var"], arrays).reshape(-1) + float(e["eps"]))
        if e["kind"] == "Conv2d":
            w = w * a  # HWIO: O is the last axis
        else:  # ConvTranspose2d (kh, kw, cin, cout / g)
            kh, kw, cin, og = w.shape
            g = int(e["groups"])
            w = (w.reshape(kh, kw, g, cin // g, og) * a.reshape(g, 1, og)).reshape(w.shape)
        return w.astype(np.float32)
    if op == "bn_b":
        gamma, beta, mean, var = (_f64(e[k], arrays).reshape(-1)
                                  for k in ("gamma", "beta", "mean", "var"))
        a = gamma / np.sqrt(var + float(e["eps"]))
        b = _f64(e["b"], arrays).reshape(-1) if e.get("b") is not None else np.zeros(a.size)
        return ((b - mean) * a + beta).astype(np.float32)
    raise ValueError(f"unknown parameter expression {e!r}")
