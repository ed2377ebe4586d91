"""v3 code shape, fixed-point precisions (q16, q16-acc32, q8): the plan of nnbuild.numerics.graph_plan
fully unrolled, every weight an integer literal in the code.

Each output element is one exact integer sum (bias + the products of its in-bounds taps, zero
weights left out: the same integers as v2's loops, so nnbuild.numerics.graph_bitexact models both),
passed to its layer's output function (requantisation and activation, as in v2). The code is cut
into part functions like the float v3; the softmax's division (nn_udiv32) and the input rounding
are the only loops.
"""

from nnbuild import __version__
from nnbuild.codegen import cnn, common, mlp_fixed, v2_fixed
from nnbuild.errors import NNBuildError
from nnbuild.numerics import graph_bitexact as gb, graph_plan


class Writer(common.UnrolledParts):
    """Statements of one layer over the int16 tensors xq, yq and the arena, cut into functions of at
    most `part_terms` terms (named like the float v3's parts: nn_<layer>_p<k>)."""

    API_BUFFERS = ("xq", "yq")
    get = common.UnrolledParts.at


def literal(value, bits):
    """An integer literal of the accumulator's type (int32 or int64), C99 on every board."""
    return f"INT{bits}_C({int(value)})"


def product(weight, cell, bits):
    return f"(int{bits}_t){int(weight)} * {cell}"


def out(op):
    return f"nn_{op['c_name']}_out"


def layer_lines(op, w):
    """The unrolled statements of one fixed-point op into Writer w."""
    k, src, dst, qop = op["kind"], op["src"], op["dst"], op["q"]
    bits = qop.acc_bits
    store = (lambda i, expr: f"z_{op['c_name']}[{i}] = {out(op)}({expr});") if op["softmax"] else \
        (lambda i, expr: f"{w.at(dst, i)} = {out(op)}({expr});")
    if k == "conv2d":
        kq = qop.kernel_q
        H, W, C, CG, OG = op["H"], op["W"], op["C"], op["CG"], op["OG"]
        for oy in range(op["OH"]):
            for ox in range(op["OW"]):
                for o in range(op["OC"]):
                    c0 = (o // OG) * CG
                    terms = [literal(qop.bias_q[o], bits)]
                    for ky in range(op["KH"]):
                        iy = oy * op["SH"] + ky * op["DH"] - op["PT"]
                        for kx in range(op["KW"]):
                            ix = ox * op["SW"] + kx * op["DW"] - op["PL"]
                            if 0 <= iy < H and 0 <= ix < W:
                                terms += [product(kq[ky, kx, c, o], w.get(src[0], (iy * W + ix) * C + c0 + c), bits)
                                          for c in range(CG) if kq[ky, kx, c, o]]
                    expr = " + ".join(terms)
                    w.emit(store((oy * op["OW"] + ox) * op["OC"] + o, expr), len(terms), expr)
    elif k == "dense":
        kq, K, OC = qop.kernel_q, op["k"], op["OC"]
        for p in range(op["outer"]):
            for j in range(OC):
                terms = [literal(qop.bias_q[j], bits)]
                terms += [product(kq[i, j], w.get(src[0], p * K + i), bits) for i in range(K) if kq[i, j]]
                expr = " + ".join(terms)
                w.emit(store(p * OC + j, expr), len(terms), expr)
    elif k == "pool2d":
        for i, window in cnn.pool_windows(op):
            cells = [w.get(src[0], j) for j in window]
            if op["mode"] == "max":
                expr = cnn.fold("nn_max16", cells)
            elif qop.pool_shift is None:
                recip = int(gb.reciprocals(len(cells))[len(cells)])
                expr = (f"((int32_t)({' + '.join(f'(int32_t){x}' for x in cells)}) * {recip} + "
                        f"((int32_t)1 << {gb.RECIP_FRAC - 1})) >> {gb.RECIP_FRAC}")
            else:
                s = qop.pool_shift
                total = " + ".join(f"(int32_t){x}" for x in cells)
                expr = f"(({total}) + ((int32_t)1 << {s - 1})) >> {s}" if s else f"({total})"
            w.emit(store(i, expr), len(cells))
    elif k == "zeropad2d":
        for i, j in cnn.padded_cells(op):
            w.emit(f"{w.at(dst, i)} = {w.get(src[0], j) if j is not None else 0};")
    elif k == "batchnorm":
        C = op["C"]
        for i in range(op["n"]):
            w.emit(store(i, f"(int32_t){int(qop.kernel_q[i % C])} * {w.get(src[0], i)} + "
                            f"{literal(qop.bias_q[i % C], 32)}"), 2)
    elif k == "activation":
        for i in range(op["n"]):
            w.emit(store(i, f"(int32_t){w.get(src[0], i)}"))
    elif k == "add":
        for i in range(op["n"]):
            parts = [f"(int32_t){w.get(s, i)}" + (f" * {2 ** left}" if left else "")
                     for s, left in zip(src, op["lefts"])]
            w.emit(store(i, " + ".join(parts)), len(src))
    elif k == "concat":
        for p in range(op["outer"]):
            for part in op["parts"]:
                for i in range(part["chunk"]):
                    cell, s = w.get(part["src"], p * part["chunk"] + i), part["shift"]
                    value = f"(int16_t)(({cell} + ((int32_t)1 << {s - 1})) >> {s})" if s > 0 else cell
                    w.emit(f"{w.at(dst, p * op['total'] + part['offset'] + i)} = {value};")
    else:
        raise NNBuildError("this layer has no fixed-point form in shape v3", item=f"{op['source_type']} '{op['name']}'")
    if op["softmax"]:
        n, frac = op["softmax"]["n"], qop.output.frac
        for g in range(op["softmax"]["groups"]):
            z = [f"z_{op['c_name']}[{g * n + i}]" for i in range(n)]
            lines = ["int32_t m = " + z[0] + ";"] + [f"if ({c} > m) {{ m = {c}; }}" for c in z[1:]]
            lines += [f"uint32_t e{i} = (uint32_t)nn_exp_neg_q15(m - {c});" for i, c in enumerate(z)]
            lines += [f"uint32_t s = {' + '.join(f'e{i}' for i in range(n))};"]
            lines += [f"{w.at(dst, g * n + i)} = (int16_t)nn_udiv32((e{i} << {frac}) + (s >> 1), s);" for i in range(n)]
            w.emit("{ /* softmax: exp of (z - max) from the table, one rounded division per output */ "
                   + " ".join(lines) + " }", 3 * n)


def render(model, *, precision, storage, passes_log, input_range, lowered, part_terms):
    """The files of `model` (lowered by nnbuild.codegen.cnn, its size checked by the v3 shape)."""
    if input_range is None:
        raise NNBuildError(f"precision {precision} needs the model's input range to prove its formats")
    plan = graph_plan.quantize_graph(model, precision, input_range)
    io = v2_fixed.several_io_context(model, plan, False, False)
    ops = v2_fixed.fixed_ops(model.name, lowered["ops"], plan, "const", buffers=io.get("buffers"))
    parts, written, distinct = [], 0, 0
    for op in ops:
        w = Writer(op, lowered["arena_symbol"], part_terms)
        if io["several_io"]:   # the int16 tensors of the arguments (xq_<argument>, yq_<argument>)
            w.API_BUFFERS = tuple(sorted(io["buffers"].values()))
        layer_lines(op, w)
        written += w.count
        distinct += w.distinct
        op["parts"] = w.parts
        parts.extend(w.parts)
    memory = v2_fixed.int16_memory(lowered["memory"])
    uses = "\n".join(line for p in parts for line in p["lines"])
    ctx = {
        "name": model.name, "guard": model.name.upper(), "version": __version__, "shape": "v3",
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files], "precision": precision,
        **common.storage_context(storage), "near": storage == common.NEAR_STORAGE,
        "tanh_asm": storage == common.NEAR_STORAGE, "flash_bytes": 0,
        "n_in": model.input_size, "n_out": model.output_size, "plan": plan, "ops": ops, "parts": parts, "arrays": [],
        "int_reads": [], "memory": memory, "arena_symbol": lowered["arena_symbol"],
        "arena_elements": memory["arena_bytes"] // v2_fixed.ELEMENT_BYTES, "part_terms": part_terms,
        "index_type": cnn.index_type, "readers": mlp_fixed.READERS, "weights_sha256": common.weights_digest(model),
        "mac16": False, "dot16": False, "read64": False, "uses_max": "nn_max16(" in uses,
        **v2_fixed.helper_context(plan, ops),
        **{k: v for k, v in io.items() if k != "buffers"},
    }
    name = model.name
    code, facts, _ = cnn.render_code("v3_fixed.c.j2", ctx)
    for op in ops:  # the weights are literals: no arrays to trace
        op["chunks"], op["bias"], op["arrays"] = [], None, []
    record = cnn.trace(model, dict(lowered, ops=ops, memory=memory), facts, passes_log, "v3",
                       [cnn.memory_log(memory)])
    record["fixed_point"] = plan.summary()
    record["unrolled_terms"], record["distinct_terms"] = written, distinct
    return cnn.output_files(name, ctx, code, facts, record)
