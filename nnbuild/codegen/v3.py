"""v3 code shape (ACETONE V3): fully unrolled, weights as literals (see templates/v3.c.j2).

The code grows with the number of multiply-accumulates, so v3 refuses a model whose unrolled
code would exceed MAX_TERMS terms (override with NNBUILD_V3_MAX_TERMS) with a message giving the
count; use v2 (same results, loops) for those. Below the limit, a model whose code is expected to
take more than WARN_SECONDS per compile (COMPILE_SECONDS_PER_TERM, measured) gets a one-line
warning on stderr at generation, before any compile; the estimate goes to the trace
("compile_estimate"). No loops: the flow facts list none, and the WCET
of each part function is a single path.
"""

import os
import sys

import numpy as np

from nnbuild.codegen import cnn, common, templating
from nnbuild.errors import NNBuildError

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32",)


#: the most multiply-accumulate/element terms v3 writes (LeNet-5 has 281,640 MACs: ~7 MB of C)
MAX_TERMS = 300_000
#: terms per generated function
PART_TERMS = 512


#: Compile seconds per unrolled term, measured (one core, board flags, `-c` of <name>.c) on v3 code
#: of LeNet-5 and synthetic conv+dense CNNs of 8k..289k terms: gcc -O2 (host board) 0.14..0.26 ms,
#: avr-gcc -Os (ATmega boards) 0.17..0.32 ms, growing with the size (LeNet-5, 288,574 terms: 74 s
#: and 91 s; 99,610 terms: 18 s and 27 s; 8,010 terms: 1.2 s and 1.4 s). The estimate takes the
#: largest rate, so it errs long.
COMPILE_SECONDS_PER_TERM = 0.32e-3
COMPILE_BASIS = ("measured 0.14-0.32 ms per term for gcc -O2 and avr-gcc -Os on LeNet-5 and conv+dense "
                 "CNNs of 8k-289k terms, largest rate taken")
#: above this estimate (seconds per compile) generation warns on stderr before any compile starts
WARN_SECONDS = 10.0


def compile_estimate(terms):
    """What compiling the unrolled code is expected to take: seconds per compiler run, and why."""
    return {"terms": int(terms), "seconds_per_compile": round(terms * COMPILE_SECONDS_PER_TERM, 1),
            "seconds_per_term": COMPILE_SECONDS_PER_TERM, "basis": COMPILE_BASIS,
            "warned": terms * COMPILE_SECONDS_PER_TERM > WARN_SECONDS}


def duration(seconds):
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def max_terms():
    return int(os.environ.get("NNBUILD_V3_MAX_TERMS", MAX_TERMS))


def lit(value):
    return common.float_literal(float(np.float32(value)))


class Writer:
    """Statements of one layer, cut into functions of at most PART_TERMS terms."""

    def __init__(self, op, arena):
        self.op, self.arena, self.parts, self.terms = op, arena, [], 0
        self.count = 0

    def at(self, ref, index):
        """C lvalue of element `index` of the tensor at `ref` ('in', 'out' or 'arena + k')."""
        if ref in ("in", "out"):
            return f"{ref}[{index}]"
        off = int(ref.split(" + ")[1]) if " + " in ref else 0
        return f"{self.arena}[{off + index}]"

    def emit(self, line, terms=1):
        if not self.parts or self.terms + terms > PART_TERMS:
            self.parts.append({"fn": f"nn_{self.op['c_name']}_{len(self.parts)}", "lines": []})
            self.terms = 0
        self.parts[-1]["lines"].append(line)
        self.terms += terms
        self.count += terms


def act(a, expr):
    return expr if a in ("linear", "softmax") else f"nn_{a}({expr})"


def layer_lines(op, w):
    """Emit the unrolled statements of one op into Writer w."""
    k, a = op["kind"], op["activation"]
    src, dst = op["src"], op["dst"]
    if k == "conv2d":
        rows = op["weights"]
        bias = op["bias_values"]
        H, W, C = op["H"], op["W"], op["C"]
        for oy in range(op["OH"]):
            for ox in range(op["OW"]):
                for o in range(op["OC"]):
                    terms = [lit(bias[o])] if bias is not None else []
                    for ky in range(op["KH"]):
                        iy = oy * op["SH"] + ky * op["DH"] - op["PT"]
                        if not 0 <= iy < H:
                            continue
                        for kx in range(op["KW"]):
                            ix = ox * op["SW"] + kx * op["DW"] - op["PL"]
                            if not 0 <= ix < W:
                                continue
                            for c in range(C):
                                wv = rows[o][(ky * op["KW"] + kx) * C + c]
                                terms.append(f"{lit(wv)} * {w.at(src[0], (iy * W + ix) * C + c)}")
                    expr = " + ".join(terms) if terms else "0.0f"
                    w.emit(f"{w.at(dst, (oy * op['OW'] + ox) * op['OC'] + o)} = {act(a, expr)};", len(terms))
    elif k == "dense":
        rows, bias, K, OC = op["weights"], op["bias_values"], op["k"], op["OC"]
        for p in range(op["outer"]):
            for j in range(OC):
                terms = [lit(bias[j])] if bias is not None else []
                terms += [f"{lit(rows[j][i])} * {w.at(src[0], p * K + i)}" for i in range(K)]
                w.emit(f"{w.at(dst, p * OC + j)} = {act(a, ' + '.join(terms) or '0.0f')};", len(terms))
    elif k == "pool2d":
        H, W, C = op["H"], op["W"], op["C"]
        for oy in range(op["OH"]):
            for ox in range(op["OW"]):
                for c in range(C):
                    cells = []
                    for ky in range(op["KH"]):
                        iy = oy * op["SH"] + ky - op["PT"]
                        for kx in range(op["KW"]):
                            ix = ox * op["SW"] + kx - op["PL"]
                            if 0 <= iy < H and 0 <= ix < W:
                                cells.append(w.at(src[0], (iy * W + ix) * C + c))
                    if op["mode"] == "max":
                        expr = cells[0]
                        for cell in cells[1:]:
                            expr = f"nn_max({expr}, {cell})"
                    else:
                        expr = f"({' + '.join(cells)}) / {len(cells)}.0f"
                    w.emit(f"{w.at(dst, (oy * op['OW'] + ox) * C + c)} = {act(a, expr)};", len(cells))
    elif k == "zeropad2d":
        H, W, C = op["H"], op["W"], op["C"]
        for oy in range(op["OH"]):
            for ox in range(op["OW"]):
                iy, ix = oy - op["PT"], ox - op["PL"]
                for c in range(C):
                    val = w.at(src[0], (iy * W + ix) * C + c) if 0 <= iy < H and 0 <= ix < W else "0.0f"
                    w.emit(f"{w.at(dst, (oy * op['OW'] + ox) * C + c)} = {val};")
    elif k == "batchnorm":
        C = op["C"]
        for i in range(op["n"]):
            expr = f"{w.at(src[0], i)} * {lit(op['alpha'][i % C])} + {lit(op['beta_eff'][i % C])}"
            w.emit(f"{w.at(dst, i)} = {act(a, expr)};", 2)
    elif k == "activation":
        if not (op["in_place"] and a in ("linear", "softmax")):
            for i in range(op["n"]):
                w.emit(f"{w.at(dst, i)} = {act(a, w.at(src[0], i))};")
    elif k == "add":
        for i in range(op["n"]):
            w.emit(f"{w.at(dst, i)} = {act(a, ' + '.join(w.at(s, i) for s in src))};", len(src))
    elif k == "concat":
        for p in range(op["outer"]):
            for part in op["parts"]:
                for i in range(part["chunk"]):
                    w.emit(f"{w.at(dst, p * op['total'] + part['offset'] + i)} = "
                           f"{w.at(part['src'], p * part['chunk'] + i)};")
    if op["softmax"]:
        n = op["softmax"]["n"]
        for g in range(op["softmax"]["groups"]):
            cells = [w.at(dst, g * n + i) for i in range(n)]
            lines = [f"float m = {cells[0]};", "float s;"]
            lines += [f"if ({c} > m) {{ m = {c}; }}" for c in cells[1:]]
            lines += [f"{c} = expf({c} - m);" for c in cells]
            lines += [f"s = {' + '.join(cells)};"]
            lines += [f"{c} /= s;" for c in cells]
            w.emit("{ /* softmax: subtract the max so expf never overflows */ " + " ".join(lines) + " }", 3 * n)


def count_terms(ops):
    """Terms v3 would write (MACs plus one per element of the other layers), without writing them."""
    total = 0
    for op in ops:
        if op["kind"] in ("conv2d", "dense"):
            total += op["n"] * (op["k"] + 1)
        else:
            total += op["n"] * 2
    return total


def render(model, *, precision, storage, passes_log, **_options):
    cnn.check_precision(precision, "v3")
    lowered = cnn.lower(model, storage)
    estimate, limit = count_terms(lowered["ops"]), max_terms()
    timing = compile_estimate(estimate)
    if estimate > limit:
        raise NNBuildError(f"shape v3 would unroll about {estimate:,} terms (limit {limit:,}, about "
                           f"{estimate * 24 / 1e6:.0f} MB of C, about {duration(timing['seconds_per_compile'])} "
                           "per compile): use shape v2 (the same arithmetic in loops), "
                           "or raise NNBUILD_V3_MAX_TERMS", item=f"model '{model.name}'")
    if timing["warned"]:
        print(f"nnbuild: warning: shape v3 unrolls {estimate:,} terms of model '{model.name}': expect about "
              f"{duration(timing['seconds_per_compile'])} per compile of {model.name}.c "
              f"({COMPILE_BASIS}); shape v2 computes the same in loops and compiles in seconds",
              file=sys.stderr, flush=True)
    layers, parts = [], []
    for op in lowered["ops"]:
        if op["kind"] in ("conv2d", "dense"):
            op["bias_values"] = None if not op["bias"] else [float(v.rstrip("f")) for line in op["bias"]["values"]
                                                               for v in line.split(", ")]
        w = Writer(op, lowered["arena_symbol"])
        layer_lines(op, w)
        for p in w.parts:
            text = "\n".join(p["lines"])
            p["uses_in"] = "in[" in text
            p["uses_out"] = "out[" in text
        op["parts"] = w.parts
        layers.append(op)
        parts.extend(w.parts)
    code_ctx = cnn.context(model, lowered, "v3", precision, storage)
    code_ctx.update(layers=layers, parts=parts, part_terms=PART_TERMS,
                    uses_max=any(o["kind"] == "pool2d" and o["mode"] == "max" for o in layers))
    files_ctx = dict(code_ctx, arrays=[])
    name = model.name
    code, facts, _ = cnn.render_code("v3.c.j2", code_ctx)
    for op in lowered["ops"]:  # the weights are literals: no arrays to trace
        op["chunks"], op["bias"], op["arrays"] = [], None, []
    return {
        f"{name}.h": templating.render("cnn.h.j2", files_ctx),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("cnn_weights.h.j2", files_ctx),
        f"{name}_weights.c": templating.render("cnn_weights.c.j2", files_ctx),
        f"{name}.flowfacts.json": facts,
        f"{name}.trace.json": dict(cnn.trace(model, lowered, facts, passes_log, "v3",
                                             [cnn.memory_log(lowered["memory"])]), compile_estimate=timing),
    }
