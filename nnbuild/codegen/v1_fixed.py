"""v1 code shape, fixed-point precisions (q16, q16-acc32, q8): the plan of nnbuild.numerics.graph_plan run
by ACETONE V1's generic kernels (templates/v1_fixed.c.j2).

Each table entry carries what v2_fixed writes as literals: its requantisation shift and rounding
constant, accumulator width (the kernel: nn_conv2d / nn_conv2d64, nn_dense / nn_dense64), the
pre-activation clamp, its activation function (one per table activation and output format) and the
indices of its int8 (q8 kernels) / int16 / int32 / int64 weight arrays. The kernels do v2's integer operations in v2's
order, so nnbuild.numerics.graph_bitexact models v1 bit for bit too. Shifts by a count read from
the table are five constant shifts selected by the count's bits (no loop for a WCET tool to bound).
"""

import re

from nnbuild import __version__
from nnbuild.codegen import cnn, common, mlp_fixed, v2_fixed
from nnbuild.errors import NNBuildError
from nnbuild import numerics as q
from nnbuild.numerics import graph_plan
from nnbuild.numerics.formats import Z_LIMIT

#: kernels of the fixed-point table, in the template's order
KERNELS = ("conv2d", "conv2d64", "dense", "dense64", "pool2d", "zeropad2d", "batchnorm", "activation", "add",
           "copy", "softmax")
#: fields whose largest value over a kernel's entries bounds that kernel's loops
FIELDS = ("oh", "ow", "rows", "kh", "kw", "cg", "c", "outer", "k", "n", "n_src", "chunk", "n1")
#: unsigned 16-bit fields written when non-zero (the others: see initializer)
SCALARS = ("h", "w", "c", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode", "k", "cg", "og",
           "cb", "gi", "o0", "rows", "n", "outer", "chunk", "total", "at", "ps", "frac")
#: fields stored in 8 bits
BYTE_FIELDS = ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode", "ps", "frac", "n_src")


#: the tensor bases of a one-input one-output model (the arena is the next one)
BASES = {"xq": 0, "yq": 1}


def ref(buffer, bases=None):
    """(base, offset) of a fixed-point tensor: 0 = xq, 1 = yq, 2 = the arena (a model of several
    inputs or outputs: one base per argument's int16 tensor, in the arguments' order, then the arena)."""
    bases = bases or BASES
    if buffer in bases:
        return (bases[buffer], 0)
    parts = buffer.split(" + ")
    return (len(bases), int(parts[1]) if len(parts) > 1 else 0)


def activation_function(qop):
    """The C function the entry's store applies to its requantised value (0: linear, or softmax's
    pre-activation kept in nn_z)."""
    act = qop.activation
    if act in ("tanh", "sigmoid"):
        return f"nn_act_{act}_q{qop.output.frac}"
    return "nn_act_relu" if act == "relu" else "0"


def requantisation(qop):
    """The entry fields of v2's requantisation of this op's accumulator."""
    s = qop.shift
    fields = {"shift": s, "rnd": (1 << (s - 1)) if s > 0 else 0, "sat": int(qop.saturate_z),
              "act": activation_function(qop), "zs": int(qop.activation == "softmax")}
    if qop.acc_bits == 64 and qop.saturate_z:
        fields["zlim"] = Z_LIMIT << s  # v2 clamps a 64-bit accumulator before its shift
    return fields


def entries_of(op, index, bases=None):
    """Table entries of one fixed-point op (fixed_ops' form): one per weight chunk / concat input,
    then the softmax's. `index[symbol]` is an array's place in its width's pointer table."""
    qop, k = op["q"], op["kind"]
    srcs, dst = [ref(s, bases) for s in op["src"]], ref(op["dst"], bases)
    base = dict(requantisation(qop), src=srcs, dst=dst)
    wide = "64" if qop.acc_bits == 64 else ""
    out = []
    if k == "conv2d":
        for ch in op["chunks"]:
            out.append(dict(base, kernel=f"conv2d{wide}", h=op["H"], w=op["W"], c=op["C"], oh=op["OH"], ow=op["OW"],
                            oc=op["OC"], kh=op["KH"], kw=op["KW"], sh=op["SH"], sw=op["SW"], dh=op["DH"], dw=op["DW"],
                            pt=op["PT"], pl=op["PL"], k=op["k"], cg=op["CG"], og=op["OG"],
                            cb=ch["start"] // op["OG"] * op["CG"], gi=ch["start"] % op["OG"], o0=ch["start"],
                            rows=ch["rows"], wi=index[ch["symbol"]], bi=index[op["bias"]["symbol"]],
                            b64=int(op["bias"]["bits"] == 64)))
    elif k == "dense":
        for ch in op["chunks"]:
            out.append(dict(base, kernel=f"dense{wide}", outer=op["outer"], k=op["k"], oc=op["OC"], o0=ch["start"],
                            rows=ch["rows"], wi=index[ch["symbol"]], bi=index[op["bias"]["symbol"]],
                            b64=int(op["bias"]["bits"] == 64)))
    elif k == "pool2d":
        ps = qop.pool_shift or 0
        mode = 0 if op["mode"] == "max" else (2 if qop.pool_shift is None else 1)
        e = dict(base, kernel="pool2d", h=op["H"], w=op["W"], c=op["C"], oh=op["OH"], ow=op["OW"], kh=op["KH"],
                 kw=op["KW"], sh=op["SH"], sw=op["SW"], pt=op["PT"], pl=op["PL"], mode=mode, ps=ps,
                 pr=(1 << (ps - 1)) if mode == 1 and ps else 0)
        if mode == 2:
            e["ri"] = index[op["recip"]["symbol"]]
        out.append(e)
    elif k == "zeropad2d":
        out.append(dict(base, kernel="zeropad2d", h=op["H"], w=op["W"], c=op["C"], oh=op["OH"], ow=op["OW"],
                        pt=op["PT"], pl=op["PL"]))
    elif k == "batchnorm":
        out.append(dict(base, kernel="batchnorm", c=op["C"], outer=op["pixels"], wi=index[op["scale"]["symbol"]],
                        bi=index[op["offset"]["symbol"]]))
    elif k == "activation":
        out.append(dict(base, kernel="activation", n=op["n"]))
    elif k == "add":
        out.append(dict(base, kernel="add", n=op["n"], n_src=len(srcs), ls=list(op["lefts"])))
    elif k == "concat":
        for part in op["parts"]:
            s = max(part["shift"], 0)
            if part["shift"] < 0:
                raise NNBuildError("a Concatenate input finer than its output has no code in shape v1",
                                   item=f"{op['source_type']} '{op['name']}'")
            out.append(dict(kernel="copy", act="0", src=[ref(part["src"], bases)], dst=dst, outer=op["outer"],
                            chunk=part["chunk"], total=op["total"], at=part["offset"], ps=s,
                            pr=(1 << (s - 1)) if s else 0))
    else:
        raise NNBuildError("this layer has no fixed-point form in shape v1", item=f"{op['source_type']} '{op['name']}'")
    if op["softmax"]:
        out.append(dict(kernel="softmax", act="0", src=[dst], dst=dst, outer=op["softmax"]["groups"],
                        n=op["softmax"]["n"], frac=qop.output.frac))
    for e in out:
        e["n1"] = e["n"] - 1 if e["kernel"] == "softmax" else 0
        e["comment"] = f"layer {op['c_name']}: {op['source_type']} '{op['name']}' ({e['kernel']})"
        e["mark"] = ("layer", op["c_name"])
    return out


def entry_bound(e, field):
    """The iterations of the kernel loop bounded by `field` in the call of table entry e."""
    value = int(e.get(field, 0))
    return max(value - 1, 0) if field in ("n_src", "n_opd") else value


def entry_calls(entries, loops):
    """The network loop's calls in order, each with its entry's own loop bounds (the `calls` of
    the indirect flow fact, nnbuild.wcet.avr_indirect): a WCET tool need not charge every call
    the largest sizes of every entry."""
    fields = {}
    for fact in loops:
        why = re.fullmatch(r"v1 largest (\w+) of nn_(\w+)", str(fact.get("why")))
        if why:
            fields.setdefault(why.group(2), []).append((fact, why.group(1)))
    return [{"target": f"nn_{e['kernel']}",
             "loops": [{"file": fact["file"], "line": fact["line"], "max_iterations": entry_bound(e, field)}
                       for fact, field in fields[e["kernel"]]]} for e in entries]


def check_field(e, key, value, low, high):
    if not low <= value <= high:
        raise NNBuildError(f"shape v1 stores '{key}' = {value} in a table field of range {low}..{high}: the model "
                           "is too large for v1 (use v2)", item=e["comment"])


def initializer(e, max_src):
    """The C designated initializer of one entry, every field checked against its C type."""
    for key in SCALARS:
        check_field(e, key, e.get(key, 0), 0, 255 if key in BYTE_FIELDS else 65535)
    for _, offset in e["src"] + [e["dst"]]:
        check_field(e, "tensor offset", offset, 0, 65535)
    for key in ("wi", "bi", "ri"):
        check_field(e, key, e.get(key, -1), -1, 127)
    check_field(e, "shift", e.get("shift", 0), -31, 31)
    for value in e.get("ls", ()):
        check_field(e, "left shift", value, 0, 31)
    src = e["src"] + [(0, 0)] * (max_src - len(e["src"]))
    fields = [f".kernel = nn_{e['kernel']}", f".act = {e['act']}",
              f".src = {{{', '.join(f'{{{b}u, {o}u}}' for b, o in src)}}}",
              f".dst = {{{e['dst'][0]}u, {e['dst'][1]}u}}",
              f".n_src = {len(e['src'])}u"]
    fields += [f".{key} = {e[key]}u" for key in SCALARS if e.get(key)]
    for key in ("shift", "sat", "zs", "b64"):
        if e.get(key):
            fields.append(f".{key} = {e[key]}")
    for key in ("rnd", "pr"):
        if e.get(key):
            fields.append(f".{key} = INT32_C({e[key]})")
    if e.get("zlim"):
        fields.append(f".zlim = INT64_C({e['zlim']})")
    if e.get("ls"):
        fields.append(f".ls = {{{', '.join(f'{v}u' for v in e['ls'])}}}")
    fields += [f".{key} = {e.get(key, -1)}" for key in ("wi", "bi", "ri")]
    return ", ".join(fields)


def weight_tables(ops):
    """The int8, int16, int32 and int64 arrays of the ops, in order: {bits: [array]}, and every array."""
    arrays = [a for op in ops for a in op["chunks"] + ([op["bias"]] if op["bias"] else []) + op["arrays"]
              + ([op["recip"]] if op.get("recip") and op["recip"] not in op["arrays"] else [])]
    tables = {bits: [a for a in arrays if a["bits"] == bits] for bits in (8, 16, 32, 64)}
    return tables, arrays


def kernel_weight_bits(ops):
    """The width of the Conv2D/Dense kernels' weights (one per plan: 8 in q8, else 16)."""
    widths = {op["wbits"] for op in ops if op["kind"] in ("conv2d", "dense")}
    if len(widths) > 1:
        raise NNBuildError(f"shape v1 has one weight width per network (the plan mixes {sorted(widths)} bits)")
    return widths.pop() if widths else 16


def render(model, *, precision, storage, passes_log, input_range=None, **_options):
    if input_range is None:
        raise NNBuildError(f"precision {precision} needs the model's input range to prove its formats")
    plan = graph_plan.quantize_graph(model, precision, input_range)
    lowered = cnn.lower(model, storage)
    io = v2_fixed.several_io_context(model, plan, False, False)
    ops = v2_fixed.fixed_ops(model.name, lowered["ops"], plan, storage, buffers=io.get("buffers"))
    bases = {a["buffer"]: k for k, a in enumerate(io["io_args"])} if io["several_io"] else BASES
    tables, arrays = weight_tables(ops)
    wbits = kernel_weight_bits(ops)
    index = {a["symbol"]: i for bits in tables for i, a in enumerate(tables[bits])}
    entries = [e for op in ops for e in entries_of(op, index, bases)]
    max_src = max(len(e["src"]) for e in entries)
    for e in entries:
        e["init"] = initializer(e, max_src)
    kinds = {e["kernel"] for e in entries}
    bounds = {k: {f: max([int(e.get(f, 0)) for e in entries if e["kernel"] == k], default=0) for f in FIELDS}
              for k in KERNELS}
    for k in bounds:  # the add loop starts at the second source
        bounds[k]["n_src"] = max(bounds[k]["n_src"] - 1, 0)
    flash = sum(a["size"] * a["bits"] // 8 for a in arrays) + len(v2_fixed.tanh_tables(plan)) * q.TANH_POINTS * 4 \
        + (q.EXP_POINTS * 4 if any(o.activation == "softmax" for o in plan.ops) else 0)
    near = storage == common.NEAR_STORAGE or (storage == "avr-progmem-far" and flash <= mlp_fixed.NEAR_LIMIT)
    memory = v2_fixed.int16_memory(lowered["memory"])
    softmax_values = max([e["outer"] * e["n"] for e in entries if e["kernel"] == "softmax"], default=0)
    acts = sorted({e["act"] for e in entries if e["act"] != "0"})
    ctx = {
        "name": model.name, "guard": model.name.upper(), "version": __version__, "shape": "v1",
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files], "precision": precision,
        **common.storage_context(storage), "near": near, "tanh_asm": near, "flash_bytes": flash,
        "n_in": model.input_size, "n_out": model.output_size, "plan": plan, "ops": ops, "arrays": arrays,
        "tables": tables, "entries": entries, "kinds": kinds, "bounds": bounds, "max_src": max_src,
        "acts": acts, "memory": memory, "arena_symbol": lowered["arena_symbol"],
        "arena_elements": memory["arena_bytes"] // v2_fixed.ELEMENT_BYTES, "softmax_values": softmax_values,
        "zlim": any("zlim" in e for e in entries), "wbits": wbits, "wtype": f"int{wbits}_t",
        "int_reads": ([8] if tables[8] else []) + [16, 32] + ([64] if tables[64] else []),
        "read64": bool(tables[64]), "index_type": cnn.index_type, "readers": mlp_fixed.READERS,
        "weights_sha256": common.weights_digest(model), "z_limit": Z_LIMIT,
        "mac16": bool(kinds & {"conv2d", "dense"}) and wbits == 16, "mac8": bool(kinds & {"conv2d", "dense"}) and wbits == 8,
        "dot16": False, "dot16far": False,
        **v2_fixed.helper_context(plan, []),
        **{k: v for k, v in io.items() if k != "buffers"}, "n_bases": len(bases) + 1,
    }
    ctx["softmax_ops"] = "softmax" in kinds
    name = model.name
    code, facts, marks = cnn.render_code("v1_fixed.c.j2", ctx)
    facts["indirect"] = [{"file": f"{name}.c", "line": marks["call"][0], "targets": [f"nn_{k}" for k in sorted(kinds)],
                          "calls": entry_calls(entries, facts["loops"])}]
    if acts:
        facts["indirect"].append({"file": f"{name}.c", "line": marks["apply"][0], "targets": acts})
    record = cnn.trace(model, dict(lowered, ops=ops, memory=memory, arrays=arrays), facts, passes_log, "v1",
                       [cnn.memory_log(memory)], storage=storage)
    record["fixed_point"] = plan.summary()
    for layer in record["layers"]:
        rows = marks.get(("layer", cnn.c_identifier(layer["name"])), [])
        layer["lines"] = [rows[0], rows[-1] + 1] if rows else [None, None]
    if near:
        record["near_flash_symbols"] = sorted([a["symbol"] for a in arrays] + v2_fixed.table_symbols(ctx))
    return cnn.output_files(name, ctx, code, facts, record)
