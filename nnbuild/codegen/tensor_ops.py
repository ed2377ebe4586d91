"""Lowering of the IR's N-d tensor operations into loop plans the CNN shapes (v1, v2, v3) render.

Every plan is derived from nnbuild.ir.semantics, never re-derived from the operator's definition:

* data movement (Transpose, Pad, Slice, Gather, GatherElements, Tile, nearest Resize) runs the
  layer's semantics on the input's element numbers, so the plan is the exact source index of every
  output element (or "fill" for constant padding). When that map is separable (source offset =
  base + sum over output axes of a per-axis term) each axis becomes an affine step or a small table,
  else one table of source indices (GatherElements);
* broadcasting operations (Elementwise), reductions, axis softmax, LRN and linear/cubic Resize
  become output loops with per-operand strides; adjacent axes merge when every operand steps
  through them contiguously, so code depth follows the data, not the model's rank.

The C for unary functions is written here once (`unary_functions`), for every shape.
"""

import dataclasses
import math

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir import semantics

#: layer kinds that only move elements (their plan is a gather)
MOVEMENT = ("transpose", "pad", "slice", "gather", "gather_elements", "tile")
#: every kind this module lowers
KINDS = MOVEMENT + ("resize", "unary", "elementwise", "reduce", "softmax", "lrn")


def is_movement(layer):
    return layer.kind in MOVEMENT or (layer.kind == "resize" and layer.mode == "nearest")


def row_strides(shape):
    """Row-major element strides of `shape`."""
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= int(n)
    return list(reversed(out))


def collapse(dims, stride_lists):
    """(dims, strides per operand) with size-1 axes dropped and adjacent axes merged where every
    operand's strides continue across them (stride[k-1] == dims[k] * stride[k])."""
    keep = [k for k, n in enumerate(dims) if n != 1]
    if not keep:
        return [1], [[0] for _ in stride_lists]
    out_dims = [int(dims[keep[0]])]
    out_strides = [[int(s[keep[0]])] for s in stride_lists]
    for k in keep[1:]:
        if all(s[-1] == int(dims[k]) * int(src[k]) for s, src in zip(out_strides, stride_lists)):
            out_dims[-1] *= int(dims[k])
            for s, src in zip(out_strides, stride_lists):
                s[-1] = int(src[k])
        else:
            out_dims.append(int(dims[k]))
            for s, src in zip(out_strides, stride_lists):
                s.append(int(src[k]))
    return out_dims, out_strides


def broadcast_strides(shape, out_shape):
    """Strides that read a tensor of `shape` broadcast to `out_shape` (0 along broadcast axes)."""
    shape = (1,) * (len(out_shape) - len(shape)) + tuple(int(n) for n in shape)
    strides = row_strides(shape)
    return [0 if n == 1 and m != 1 else s for n, m, s in zip(shape, out_shape, strides)]


# --------------------------------------------------------------------------- data movement


def source_map(layer, in_shape):
    """Source element index of every output element (row-major), -1 where a constant fills."""
    size = int(np.prod(in_shape))
    probe = layer
    if layer.kind == "pad" and layer.mode == "constant":
        probe = dataclasses.replace(layer, value=0.0)
    numbers = (np.arange(size, dtype=np.float64) + 1.0).reshape((1,) + tuple(in_shape))
    return semantics.apply_layer(probe, numbers)[0].astype(np.int64) - 1


def movement_plan(layer, in_shape, out_shape):
    """How to copy: {"dims", "axes": [{"n", "step"} | {"n", "table"}], "base", "fill", "table"}.

    `table` (not None) is the whole source map (non-separable ops); else the source offset of
    output element (i0, i1, ...) is base + sum_k term_k(i_k), term = step * i or table[i], and a
    table entry -1 means the element is `fill`.
    """
    src = source_map(layer, in_shape)
    fill = float(layer.value) if layer.kind == "pad" and layer.mode == "constant" else None
    plan = _separable(src)
    if plan is None:
        return {"dims": [int(src.size)], "axes": [], "base": 0, "fill": fill, "table": src.ravel()}
    plan["fill"] = fill
    plan["table"] = None
    return plan


def _separable(src):
    valid = src >= 0
    if not valid.any():
        return None
    ref = tuple(int(i) for i in np.argwhere(valid)[0])
    terms, masks = [], []
    for k in range(src.ndim):
        index = list(ref)
        index[k] = slice(None)
        line = src[tuple(index)]
        terms.append(np.where(line >= 0, line - src[ref], 0))
        masks.append(line >= 0)
    total = np.full(src.shape, int(src[ref]), dtype=np.int64)
    ok = np.ones(src.shape, dtype=bool)
    for k, (term, mask) in enumerate(zip(terms, masks)):
        shape = [1] * src.ndim
        shape[k] = -1
        total = total + term.reshape(shape)
        ok = ok & mask.reshape(shape)
    if not np.array_equal(np.where(ok, total, -1), src):
        return None
    base = int(src[ref])
    axes = []
    for term, mask in zip(terms, masks):
        n = int(term.size)
        low = int(term[mask].min())
        term = term - low
        base += low
        if mask.all() and (n == 1 or np.array_equal(term, term[0] + (term[1] - term[0]) * np.arange(n))):
            step = int(term[1] - term[0]) if n > 1 else 0
            base += int(term[0])
            axes.append({"n": n, "step": step})
        else:
            axes.append({"n": n, "table": np.where(mask, term, -1)})
    return _merge_affine(axes, base)


def _merge_affine(axes, base):
    """Drop size-1 axes and merge neighbouring affine axes that continue each other."""
    out = []
    for axis in axes:
        if axis["n"] == 1:
            continue
        prev = out[-1] if out else None
        if prev is not None and "step" in prev and "step" in axis and prev["step"] == axis["n"] * axis["step"]:
            prev["n"] *= axis["n"]
            prev["step"] = axis["step"]
        else:
            out.append(dict(axis))
    if not out:
        out = [{"n": 1, "step": 0}]
    return {"dims": [a["n"] for a in out], "axes": out, "base": base}


# --------------------------------------------------------------------------- computing operations


def elementwise_plan(layer, in_shapes, out_shape):
    """{"dims", "operands": [{"tensor": k} | {"constant": array}] with "strides"} over the output."""
    operands = layer.operands([{"tensor": k, "shape": tuple(s)} for k, s in enumerate(in_shapes)])
    entries = []
    for o in operands:
        if isinstance(o, dict):
            entries.append({"tensor": o["tensor"], "shape": o["shape"]})
        else:
            entries.append({"constant": np.asarray(o, np.float32), "shape": tuple(np.shape(o))})
    strides = [broadcast_strides(e["shape"], out_shape) for e in entries] + [row_strides(out_shape)]
    dims, collapsed = collapse(list(out_shape), strides)
    for e, s in zip(entries, collapsed[:-1]):
        e["strides"] = s
        del e["shape"]
    return {"dims": dims, "operands": entries, "out_strides": collapsed[-1]}


def reduce_plan(layer, in_shape):
    """{"dims", "strides"} of the kept axes (output order) and {"red_dims", "red_strides"} of the
    reduced ones, in the input; "count" the number of elements reduced into each output."""
    from nnbuild.ir.graph import normal_axes
    axes = normal_axes(layer.axes, len(in_shape), "reduce")
    strides = row_strides(in_shape)
    kept = [k for k in range(len(in_shape)) if k not in axes]
    dims, (kept_strides,) = collapse([in_shape[k] for k in kept], [[strides[k] for k in kept]]) if kept \
        else ([1], [[0]])
    red_dims, (red_strides,) = collapse([in_shape[k] for k in axes], [[strides[k] for k in axes]])
    return {"dims": dims, "strides": kept_strides, "red_dims": red_dims, "red_strides": red_strides,
            "count": int(np.prod([in_shape[k] for k in axes]))}


def softmax_plan(layer, shape):
    """(outer, n, inner): softmax over n values `inner` apart, for outer x inner groups."""
    axis = int(layer.axis) % len(shape)
    return {"outer": int(np.prod(shape[:axis])), "n": int(shape[axis]), "inner": int(np.prod(shape[axis + 1:]))}


def lrn_plan(layer, shape):
    size = int(layer.size)
    return {"pixels": int(np.prod(shape[:-1])), "C": int(shape[-1]), "size": size,
            "low": (size - 1) // 2, "high": -(-(size - 1) // 2),
            "alpha_over_size": float(np.float32(layer.alpha) / np.float32(size)),
            "beta": float(layer.beta), "bias": float(layer.bias)}


def resize_plan(layer, in_shape):
    """Per output axis {"n", "stride"} (copied) or {"n", "stride", "taps", "index", "weight"}:
    output cell i reads input cells index[i][t] (along that axis, times stride) with weight[i][t]."""
    strides = row_strides(in_shape)
    axes = []
    for k, tap in enumerate(semantics.resize_taps(layer, in_shape)):
        n = int(layer.sizes[k])
        if tap is None:
            axes.append({"n": n, "stride": strides[k]})
        else:
            index, weight = tap
            axes.append({"n": n, "stride": strides[k], "taps": int(index.shape[1]),
                         "index": index.astype(np.int64), "weight": weight.astype(np.float32)})
    return {"axes": axes}


# --------------------------------------------------------------------------- unary C functions


def unary_functions(ops, real="float", sfx="f"):
    """C helper functions for the distinct (op, params) pairs of `ops`: [{"key", "name", "lines"}]
    where key = (op, params); the body follows nnbuild.ir.semantics.UNARY_FUNCTIONS."""
    math = {"exp": "exp" + sfx, "log": "log" + sfx, "sqrt": "sqrt" + sfx, "fabs": "fabs" + sfx, "erf": "erf" + sfx,
            "tanh": "tanh" + sfx}
    out, seen = [], {}
    for op, params in ops:
        key = (op, tuple(params))
        if key in seen:
            continue
        name = f"nn_{op}" if not params else f"nn_{op}_{len([k for k in seen if k[0] == op])}"
        seen[key] = name
        out.append({"key": key, "name": name, "params": params,
                    "lines": _unary_body(op, [_lit(p, sfx) for p in params], real, sfx, math)})
    return out


def _lit(value, sfx):
    if value in (float("inf"), float("-inf")):
        text = "INFINITY" if value > 0 else "-INFINITY"
        # cast: INFINITY is a float (a double in avr-libc), so no implicit promotion either way
        return f"({'float' if sfx == 'f' else 'double'}){text}"
    text = "%.9g" % value if sfx == "f" else "%.17g" % value
    if not any(c in text for c in ".eEn"):
        text += ".0"
    return text + sfx


def _unary_body(op, p, real, sfx, m):
    one, zero = f"1.0{sfx}", f"0.0{sfx}"
    if op == "relu":
        return [f"return x > {zero} ? x : {zero};"]
    if op == "leaky_relu":
        return [f"return x < {zero} ? {p[0]} * x : x;"]
    if op in ("elu", "selu"):
        scale = f"{p[1]} * " if op == "selu" else ""
        return [f"return {scale}(x > {zero} ? x : {p[0]} * ({m['exp']}(x < {zero} ? x : {zero}) - {one}));"]
    if op == "sigmoid":
        return [f"if (x >= {zero}) {{", f"    return {one} / ({one} + ({real}){m['exp']}(-x));", "}",
                f"return ({real}){m['exp']}(x) / ({one} + ({real}){m['exp']}(x));"]
    if op == "hard_sigmoid":
        return [f"{real} t = {p[0]} * x + {p[1]};", f"return t < {zero} ? {zero} : (t > {one} ? {one} : t);"]
    if op == "tanh":
        return [f"return ({real})tanh{sfx}(x);"]
    if op == "softplus":
        return [f"return (x > {zero} ? x : {zero}) + ({real}){m['log']}({one} + ({real}){m['exp']}(-{m['fabs']}(x)));"]
    if op == "softsign":
        return [f"return x / ({one} + {m['fabs']}(x));"]
    if op in ("exp", "log", "sqrt"):
        return [f"return ({real}){m[op]}(x);"]
    if op == "abs":
        return [f"return {m['fabs']}(x);"]
    if op == "neg":
        return ["return -x;"]
    if op == "reciprocal":
        return [f"return {one} / x;"]
    if op == "clip":
        return [f"return x < {p[0]} ? {p[0]} : (x > {p[1]} ? {p[1]} : x);"]
    if op == "hard_swish":
        return [f"{real} t = {_lit(1.0 / 6.0, sfx)} * x + {_lit(0.5, sfx)};",
                f"return x * (t < {zero} ? {zero} : (t > {one} ? {one} : t));"]
    if op == "erf":
        return _erf_lines("x", real, sfx, m) + ["return e;"]
    if op == "gelu" and float(p[0].rstrip("f")) != 0.0:
        return [f"{real} u = {_lit(math.sqrt(2.0 / math.pi), sfx)} * (x + {_lit(0.044715, sfx)} * x * x * x);",
                f"return {_lit(0.5, sfx)} * x * ({one} + ({real}){m['tanh']}(u));"]
    if op == "sign":
        return [f"return x > {zero} ? {one} : (x < {zero} ? -{one} : x * {zero});"]
    if op == "shrink":
        return [f"return x < -{p[0]} ? x + {p[1]} : (x > {p[0]} ? x - {p[1]} : {zero});"]
    if op == "gelu":
        return (_erf_lines(f"x * {_lit(1.0 / math.sqrt(2.0), sfx)}", real, sfx, m)
                + [f"return {_lit(0.5, sfx)} * x * ({one} + e);"])
    raise NNBuildError(f"internal error: no C for unary op '{op}'")


#: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z >= 0: the Chebyshev fit of Numerical Recipes
#: (erfcc), fractional error below 1.2e-7 everywhere (the float32 floor), for C libraries without erf
ERFC_COEFFICIENTS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                     1.48851587, -0.82215223, 0.17087277)


def _erf_lines(arg, real, sfx, m):
    """C lines that set `e` = erf(arg): the C library's erf, or on AVR (avr-libc has none) the
    erfc fit of ERFC_COEFFICIENTS (absolute error below 1.2e-7)."""
    poly = _lit(ERFC_COEFFICIENTS[-1], sfx)
    for c in reversed(ERFC_COEFFICIENTS[:-1]):
        poly = f"{_lit(c, sfx)} + t * ({poly})"
    return ["#if defined(__AVR__)",
            f"{real} a = {arg};",
            f"{real} z = {m['fabs']}(a);",
            f"{real} t = 1.0{sfx} / (1.0{sfx} + 0.5{sfx} * z);",
            f"{real} r = t * ({real}){m['exp']}(-z * z + {poly});",
            f"{real} e = a >= 0.0{sfx} ? 1.0{sfx} - r : r - 1.0{sfx};",
            "#else",
            f"{real} e = ({real}){m['erf']}({arg});",
            "#endif"]


def int_table(values):
    """(C type, values) of an index table: int16_t when every entry fits, else int32_t."""
    values = np.asarray(values, dtype=np.int64).ravel()
    ctype = "int16_t" if values.min() >= -32768 and values.max() <= 32767 else "int32_t"
    return ctype, values
