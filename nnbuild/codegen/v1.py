"""v1 code shape (ACETONE V1): generic kernels, a table of layer structs with function pointers and
a generic loop (see templates/v1.c.j2). Same API, weights files, arena and flow-facts format as v2;
each kernel's loop bounds in the flow facts are the largest any table entry uses, and the one
indirect call site gets an `indirect` flow fact listing the kernels it may reach. The flow facts'
"layers" are the kernels (a V1 call cannot be told apart from another by a static analyzer);
the trace maps each model layer to its table entries. Each kernel loop also gets
`total_iterations`, its body executions over one inference (the sum over the table entries of that
kernel of the product of the trip counts of the loop and the loops around it): the per-entry
`max_iterations` alone lets an analyzer charge every call the largest entry.

The IR's N-d operations run through generic table-driven kernels too: unary functions through the
activation pointer, grouped conv2d (group fields in the conv2d entry), and `move` (gather with a
per-axis step or index table), `broadcast` (per-operand stride descriptors), `reduce`,
`softmax_axis`, `lrn` and `resample`, each up to rank RANK after merging axes (larger is refused).
Any op kind without a kernel is refused with an NNBuildError naming the layer, never dropped.
float64 computes in double (the API's float input and output are converted once)."""

import math
import re

import numpy as np

from nnbuild.codegen import cnn, common, v1_fixed
from nnbuild.codegen.common import float_literal
from nnbuild.errors import NNBuildError
from nnbuild.numerics import float_facts

#: number formats this shape generates (codegen.shape_refusal); the fixed ones by nnbuild.codegen.v1_fixed
PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")
#: takes one C argument per input and output of a model of several (float precisions)
SEVERAL_IO = True
#: the precisions that take them (the fixed-point ones convert each argument: v1_fixed)
SEVERAL_IO_PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8")
FIXED = ("q16", "q16-acc32", "q8")


KERNELS = ("conv2d", "dense", "pool2d", "zeropad2d", "batchnorm", "activation", "add", "copy", "softmax",
           "move", "broadcast", "reduce", "softmax_axis", "lrn", "resample")
#: rank of the generic N-d kernels (after merging axes); larger is refused
RANK = 4
FIELDS = ("oh", "ow", "rows", "kh", "kw", "c", "cg", "outer", "k", "n", "n_src", "chunk", "n1", "inner",
          "n_opd") + tuple(f"d{i}" for i in range(RANK)) + tuple(f"r{i}" for i in range(RANK)) + \
    tuple(f"tp{i}" for i in range(RANK))
#: kernels that call nn_apply (the activation pointer)
APPLY = {"conv2d", "dense", "pool2d", "batchnorm", "activation", "add", "broadcast", "reduce", "resample"}
#: broadcast folds (field `mode`)
FOLDS = ("add", "sub", "mul", "div", "max", "min", "mean")
#: reductions (field `mode`)
REDUCTIONS = ("sum", "mean", "prod", "max", "min")


#: a kernel loop as v1.c.j2 writes it: `for (T v = START; v < L->FIELD; ++v)`
_KERNEL_FOR_RE = re.compile(r"\bfor \(\w+ \w+ = (\d+); \w+ < L->(\w+); \+\+\w+\)")


def add_loop_totals(code, facts, entries):
    """Set `total_iterations` on each loop of a kernel function `nn_<kind>`: the dispatch loop calls
    each table entry's kernel once per inference, so the loop body runs, summed over the entries of
    that kernel, the product of (field - start) over the loop and its enclosing loops. A loop whose
    nest is not all of that form gets no total (its `max_iterations` still bounds it)."""
    lines = code.splitlines()
    for loop in facts["loops"]:
        kind = loop["function"][3:] if loop["function"].startswith("nn_") else None
        rows = [e for e in entries if e["kernel"] == kind]
        nest = [l for l in facts["loops"] if l["function"] == loop["function"]
                and l["line"] <= loop["line"] <= l.get("last_line", l["line"])]
        trips = [_KERNEL_FOR_RE.search(lines[l["line"] - 1]) for l in nest]
        if kind in KERNELS and rows and all(trips):
            loop["total_iterations"] = sum(math.prod(max(int(e.get(m.group(2), 0)) - int(m.group(1)), 0)
                                                     for m in trips) for e in rows)


#: t[] index of the first input and output, the arena, constant operands; further arguments follow
API_BASES = {"in": 0, "out": 1}
ARENA_BASE, CONSTANT_BASE = 2, 3


def api_bases(api_args):
    """C argument name -> t[] index: the first input 0 and output 1 (as "in" and "out" of a model
    of one input and one output), the other arguments from 4 on, in order."""
    if not api_args:
        return dict(API_BASES)
    bases, k = {}, CONSTANT_BASE + 1
    for role in ("in", "out"):
        for n, a in enumerate(a for a in api_args if a["role"] == role):
            bases[a["name"]] = API_BASES[role] if n == 0 else k
            k += n > 0
    return bases


def _ref(expr, bases=API_BASES):
    if expr in bases:
        return (bases[expr], 0)
    parts = expr.split(" + ")
    return (2, int(parts[1]) if len(parts) > 1 else 0)


def _pad(values, fill, what, op):
    values = [int(v) for v in values]
    if len(values) > RANK:
        raise NNBuildError(f"shape v1 runs N-d operations up to rank {RANK} after merging axes; {what} needs "
                           f"rank {len(values)} (use v2)", item=f"layer '{op['name']}'")
    return [fill] * (RANK - len(values)) + values


def _dims(e, values, prefix="d"):
    for i, v in enumerate(values):
        e[f"{prefix}{i}"] = v


def entries_of(op, index_of, int_index_of=None, bases=API_BASES):
    """Table entries (kernel, fields) of one op: one per weight chunk / concat input, + softmax.
    A kind no kernel handles is refused (NNBuildError naming the layer), never dropped. `bases`:
    the t[] index of each API buffer (api_bases)."""
    int_index_of = int_index_of or {}
    act = op["activation"]
    base = {"act": f"nn_{act}" if act not in ("linear", "softmax") else "0"}
    out = []
    k = op["kind"]

    def ref(expr):
        return _ref(expr, bases)
    srcs = [ref(s) for s in op["src"]]
    dst = ref(op["dst"])

    def table(array):
        if array["ctype"] != "int16_t":
            raise NNBuildError(f"shape v1 reads 16-bit index tables; {array['symbol']} needs {array['ctype']} "
                               "(use v2)", item=f"layer '{op['name']}'")
        return int_index_of[array["symbol"]]

    if k == "conv2d":
        for ch in op["chunks"]:
            out.append(dict(base, kernel="conv2d", src=srcs, dst=dst, h=op["H"], w=op["W"], c=op["C"],
                            oh=op["OH"], ow=op["OW"], oc=op["OC"], kh=op["KH"], kw=op["KW"], sh=op["SH"],
                            sw=op["SW"], dh=op["DH"], dw=op["DW"], pt=op["PT"], pl=op["PL"], k=op["k"],
                            cg=op["CG"], og=op["OG"], cb=ch["start"] // op["OG"] * op["CG"],
                            gi=ch["start"] % op["OG"],
                            o0=ch["start"], rows=ch["rows"], wi=index_of[ch["symbol"]],
                            bi=index_of[op["bias"]["symbol"]] if op["bias"] else -1))
    elif k == "dense":
        for ch in op["chunks"]:
            out.append(dict(base, kernel="dense", src=srcs, dst=dst, outer=op["outer"], k=op["k"], oc=op["OC"],
                            o0=ch["start"], rows=ch["rows"], wi=index_of[ch["symbol"]],
                            bi=index_of[op["bias"]["symbol"]] if op["bias"] else -1))
    elif k == "pool2d":
        out.append(dict(base, kernel="pool2d", src=srcs, dst=dst, h=op["H"], w=op["W"], c=op["C"], oh=op["OH"],
                        ow=op["OW"], kh=op["KH"], kw=op["KW"], sh=op["SH"], sw=op["SW"], pt=op["PT"],
                        pl=op["PL"], mode=int(op["mode"] == "avg")))
    elif k == "zeropad2d":
        out.append(dict(base, kernel="zeropad2d", src=srcs, dst=dst, h=op["H"], w=op["W"], c=op["C"],
                        oh=op["OH"], ow=op["OW"], pt=op["PT"], pl=op["PL"]))
    elif k == "batchnorm":
        out.append(dict(base, kernel="batchnorm", src=srcs, dst=dst, c=op["C"], outer=op["pixels"],
                        wi=index_of[op["scale"]["symbol"]], bi=index_of[op["offset"]["symbol"]]))
    elif k == "activation":
        if not (op["in_place"] and base["act"] == "0"):
            out.append(dict(base, kernel="activation", src=srcs, dst=dst, n=op["n"]))
    elif k == "unary":
        out.append(dict(base, kernel="activation", act=op["fn"], src=srcs, dst=dst, n=op["n"]))
    elif k == "add":
        out.append(dict(base, kernel="add", src=srcs, dst=dst, n=op["n"], n_src=len(srcs)))
    elif k == "concat":
        for part, s in zip(op["parts"], srcs):
            out.append(dict(kernel="copy", act="0", src=[s], dst=dst, outer=op["outer"], chunk=part["chunk"],
                            total=op["total"], at=part["offset"]))
    elif k == "move":
        plan = op["plan"]
        if plan["table"] is not None:
            axes = [{"n": plan["dims"][0], "array": plan["table_array"]}]
            start = 0
        else:
            axes, start = plan["axes"], plan["base"]
        dims = _pad([a["n"] for a in axes], 1, "this data movement", op)
        steps = _pad([a.get("step", 0) for a in axes], 0, "", op)
        tables = _pad([table(a["array"]) if "array" in a else -1 for a in axes], -1, "", op)
        e = dict(base, kernel="move", src=srcs, dst=dst, at=start, st=steps, ti=tables,
                 mode=int(bool(plan["fills"])), fill=float(plan["fill"] or 0.0))
        _dims(e, dims)
        out.append(e)
    elif k == "broadcast":
        plan = op["plan"]
        if len(plan["operands"]) > 255:
            raise NNBuildError("too many operands for shape v1", item=f"layer '{op['name']}'")
        dims = _pad(plan["dims"], 1, "this broadcast", op)
        opds = []
        for o in plan["operands"]:
            b, off = ref(o["src"]) if "src" in o else (3, index_of[o["array"]["symbol"]])
            opds.append((b, off, _pad(o["strides"], 0, "", op)))
        e = dict(base, kernel="broadcast", src=srcs, dst=dst, opd=opds, n_opd=len(opds),
                 mode=FOLDS.index(op["op"]))
        _dims(e, dims)
        out.append(e)
    elif k == "reduce":
        plan = op["plan"]
        e = dict(base, kernel="reduce", src=srcs, dst=dst, mode=REDUCTIONS.index(op["op"]), n=plan["count"],
                 st=_pad(plan["strides"], 0, "this reduction", op), rs=_pad(plan["red_strides"], 0, "", op))
        _dims(e, _pad(plan["dims"], 1, "this reduction", op))
        _dims(e, _pad(plan["red_dims"], 1, "this reduction", op), "r")
        out.append(e)
    elif k == "softmax_axis":
        p = op["plan"]
        out.append(dict(base, kernel="softmax_axis", src=srcs, dst=dst, outer=p["outer"], n=p["n"],
                        inner=p["inner"]))
    elif k == "lrn":
        p = op["plan"]
        out.append(dict(base, kernel="lrn", src=srcs, dst=dst, outer=p["pixels"], c=p["C"], kh=p["size"],
                        pt=p["low"], fa=p["bias"], fb=p["alpha_over_size"], fc=p["beta"]))
    elif k == "resample":
        axes = op["plan"]["axes"]
        dims = _pad([a["n"] for a in axes], 1, "this resize", op)
        e = dict(base, kernel="resample", src=srcs, dst=dst,
                 st=_pad([a["stride"] for a in axes], 0, "", op),
                 ti=_pad([table(a["index_array"]) if "taps" in a else -1 for a in axes], -1, "", op),
                 tw=_pad([index_of[a["weight_array"]["symbol"]] if "taps" in a else -1 for a in axes], -1, "", op))
        _dims(e, dims)
        _dims(e, _pad([a.get("taps", 1) for a in axes], 1, "", op), "tp")
        out.append(e)
    else:
        raise NNBuildError(f"shape v1 has no kernel for '{k}' operations (use v2)",
                           item=f"layer '{op['name']}' ({op['source_type']})")
    if op["softmax"]:
        out.append(dict(kernel="softmax", act="0", src=[dst], dst=dst, outer=op["softmax"]["groups"],
                        n=op["softmax"]["n"]))
    for e in out:
        e["n1"] = max(e.get("n", 1) - 1, 0) if e["kernel"] in ("softmax", "softmax_axis") else 0
        e["comment"] = f"layer {op['c_name']}: {op['source_type']} '{op['name']}' ({e['kernel']})"
        e["mark"] = ("layer", op["c_name"])  # the trace's line range of the layer's table entries
    return out


#: fields of struct nn_layer that are 8 bits wide (the others are 16 bits)
BYTE_FIELDS = ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode", "n_opd", "ke")
#: scalar fields written in the initializer (unsigned, 16 bits unless in BYTE_FIELDS)
SCALARS = ("h", "w", "c", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode", "k",
           "cg", "og", "cb", "gi", "o0", "rows", "n", "outer", "chunk", "total", "at", "inner", "n_opd", "ke") + \
    tuple(f"d{i}" for i in range(RANK)) + tuple(f"r{i}" for i in range(RANK)) + tuple(f"tp{i}" for i in range(RANK))
#: signed array fields: (low, high)
SIGNED = {"st": (-32768, 32767), "rs": (0, 65535), "ti": (-1, 127), "tw": (-1, 127)}
FLOATS = ("fill", "fa", "fb", "fc")


#: members of struct nn_layer after `kernel`: (C type, declarators, comment); a member is declared only
#: when a kernel of the model reads it (`L->name` in the kernel's part of the template)
MEMBERS = (
    ("{real} (*act)({real})", ["act"], "activation applied to each result; NULL = linear"),
    ("struct nn_ref", ["src[{max_src}]", "dst"], "tensors read and written"),
    ("uint8_t", ["n_src"], "tensors read"),
    ("uint16_t", ["h", "w", "c"], "input height, width, channels"),
    ("uint16_t", ["oh", "ow", "oc"], "output height, width, channels"),
    ("uint8_t", ["kh", "kw", "sh", "sw", "dh", "dw"], "window, stride, dilation"),
    ("uint8_t", ["pt", "pl"], "padding top, left"),
    ("uint8_t", ["mode"], "pooling: 0 max, 1 average; broadcast fold; reduction; move: fills"),
    ("uint16_t", ["k"], "weights per output value"),
    ("uint16_t", ["o0", "rows"], "first output channel and count (one weight array)"),
    ("uint16_t", ["n", "outer", "chunk", "total", "at"], "element counts, concatenation blocks, move base"),
    ("uint16_t", ["cg", "og", "cb", "gi"], "conv2d groups: channels and filters per group, o0's group's first "
     "channel and place"),
    ("uint16_t", ["inner"], "axis softmax: distance between the values of a group"),
    ("uint16_t", ["d0", "d1", "d2", "d3"], "N-d operations: output dims (leading 1s)"),
    ("uint16_t", ["r0", "r1", "r2", "r3"], "reduce: reduced dims"),
    ("uint16_t", ["rs[{rank}]"], "reduce: strides of the reduced dims"),
    ("uint16_t", ["tp0", "tp1", "tp2", "tp3"], "resample: taps per output axis (1: copied axis)"),
    ("int16_t", ["st[{rank}]"], "N-d: stride / step per output axis"),
    ("int8_t", ["ti[{rank}]"], "index table per axis (-1: affine)"),
    ("int8_t", ["tw[{rank}]"], "resample: weight table per axis (-1: copied axis)"),
    ("{real}", ["fill"], "move: value of the elements a table marks -1"),
    ("{real}", ["fa", "fb", "fc"], "lrn: bias, alpha / size, beta"),
    ("uint8_t", ["n_opd"], "broadcast: operand count"),
    ("struct nn_operand", ["opd[{max_opd}]"], "broadcast: operands"),
    ("int8_t", ["wi", "bi"], "weight table indices (kernel/scale, bias/offset); -1: none"),
    ("uint8_t", ["ke"], "float32 on AVR: inputs with a smaller biased exponent are flushed to zero"),
)
#: members only the split sums read (common.split_accumulation)
SPLIT_MEMBERS = {"ke"}


def _kernel_reads():
    """{kernel: member names its part of v1.c.j2 reads}; "apply" for nn_apply."""
    from pathlib import Path
    text = (Path(__file__).parent / "templates" / "v1.c.j2").read_text()
    parts = re.split(r'\{\{ ff\.layer\("kernel_(\w+)"\) \}\}', text)
    out = {k: set(re.findall(r"L->(\w+)", body)) for k, body in zip(parts[1::2], parts[2::2])}
    out["apply"] = {"act"}
    return out


def members(kinds, apply, real, max_src, max_opd, split=False):
    """(declarations, member names) of struct nn_layer for the kernels `kinds` (`split`: the
    float32 sums split by sign, which read the flush threshold `ke`)."""
    reads = _kernel_reads()
    used = set().union(*(reads.get(k, set()) for k in kinds)) | ({"act"} if apply else set()) | {"dst"}
    # the split sums' macros (read by nn_conv2d and nn_dense) sit above the kernels' parts
    used = (used | SPLIT_MEMBERS) if split and kinds & {"conv2d", "dense"} else used - SPLIT_MEMBERS
    decls = []
    for ctype, names, comment in MEMBERS:
        keep = [n for n in names if re.match(r"\w+", n).group(0) in used]
        if keep:
            decl = (f"{ctype};" if "(*" in ctype else f"{ctype} {', '.join(keep)};").format(real=real, rank=RANK, max_src=max_src, max_opd=max_opd)
            decls.append(f"{decl:<33} /* {comment} */")
    return decls, used


def _check(e, key, value, low, high, bits):
    if not low <= value <= high:
        raise NNBuildError(f"shape v1 stores '{key}' = {value} in a {bits}-bit table field: the model is too "
                           "large for v1 (use v2)", item=e["comment"])


def initializer(e, max_src, max_opd=1, sfx="f", used=None):
    for key, value in list(e.items()) + [("offset", o) for _, o in e["src"] + [e["dst"]]]:
        if key in SIGNED or key in FLOATS or key == "opd":
            continue
        limit = 127 if key in ("wi", "bi") else 255 if key in BYTE_FIELDS else 65535
        if isinstance(value, int) and not isinstance(value, bool):
            _check(e, key, value, -1 if key in ("wi", "bi") else 0, limit, 16 if limit > 255 else 8)
    for key, (low, high) in SIGNED.items():
        for value in e.get(key, ()):
            _check(e, key, value, low, high, 8 if high == 127 else 16)
    for b, off, strides in e.get("opd", ()):
        _check(e, "operand offset", off, 0, 65535, 16)
        for value in strides:
            _check(e, "operand stride", value, 0, 65535, 16)
    src = e["src"] + [(0, 0)] * (max_src - len(e["src"]))
    refs = ", ".join(f"{{{b}u, {o}u}}" for b, o in src)
    fields = [f".kernel = nn_{e['kernel']}", f".act = {e['act']}", f".src = {{{refs}}}",
              f".dst = {{{e['dst'][0]}u, {e['dst'][1]}u}}", f".n_src = {len(e['src'])}u"]
    for key in SCALARS:
        if e.get(key):
            fields.append(f".{key} = {e[key]}u")
    for key in SIGNED:
        if key in e:
            fields.append(f".{key} = {{{', '.join(str(v) for v in e[key])}}}")
    for key in FLOATS:
        if e.get(key):
            fields.append(f".{key} = {float_literal(e[key], 'f' if sfx else '')}")
    if e.get("opd"):
        opds = [f"{{{b}u, {off}u, {{{', '.join(f'{s}u' for s in st)}}}}}" for b, off, st in e["opd"]]
        fields.append(f".opd = {{{', '.join(opds)}}}")
    fields.append(f".wi = {e.get('wi', -1)}")
    fields.append(f".bi = {e.get('bi', -1)}")
    if used is not None:
        fields = [f for f in fields if re.match(r"\.(\w+)", f).group(1) in used | {"kernel"}]
    return ", ".join(fields)


def render(model, *, precision, storage, passes_log, **options):
    if precision in FIXED:
        return v1_fixed.render(model, precision=precision, storage=storage, passes_log=passes_log, **options)
    lowered = cnn.lower(model, storage)
    floats = [a for a in lowered["arrays"] if not a.get("ctype", "").startswith("int")]
    ints = [a for a in lowered["arrays"] if a.get("ctype", "").startswith("int")]
    index_of = {a["symbol"]: i for i, a in enumerate(floats)}
    int_index_of = {a["symbol"]: i for i, a in enumerate(ints)}
    api_args = cnn.api_context(model)["api_args"]
    bases = api_bases(api_args)
    for a in api_args:
        a["base"] = bases[a["name"]]
    per_op = [entries_of(op, index_of, int_index_of, bases) for op in lowered["ops"]]
    split = common.split_accumulation(storage, common.REALS[precision][0])
    join = split and add_flush_thresholds(lowered["ops"], per_op, storage, common.REALS[precision][0])
    entries = [e for es in per_op for e in es]
    max_src = max(len(e["src"]) for e in entries)
    max_opd = max([e.get("n_opd", 1) for e in entries] + [1])
    kinds = {e["kernel"] for e in entries}
    apply = bool(kinds & APPLY)
    decls, used_members = members(kinds, apply, common.REALS[precision][0], max_src, max_opd, split)
    for e in entries:
        e["init"] = initializer(e, max_src, max_opd, common.REALS[precision][1], used_members)
    bounds = {k: {f: max([int(e.get(f, 0)) for e in entries if e["kernel"] == k], default=0) for f in FIELDS}
              for k in KERNELS}
    for k in bounds:  # loops of kernels no entry uses keep a bound of 0 (never entered)
        bounds[k]["n_src"] = max(bounds[k]["n_src"] - 1, 0)
        bounds[k]["n_opd"] = max(bounds[k]["n_opd"] - 1, 0)
    pointers = sorted({e["act"] for e in entries if e["act"] != "0"})
    helpers = {op["fn"] for op in lowered["ops"] if op["kind"] == "unary"}  # emitted by cnn_common.c.j2
    used = sorted(p[3:] for p in pointers if p not in helpers)
    ctx = cnn.context(model, lowered, "v1", precision, storage)
    ctx.update(entries=entries, max_src=max_src, max_opd=max_opd, bounds=bounds, activations=used,
               wt_arrays=floats, it_arrays=ints, rank=RANK, api_args=api_args,
               t_count=max(bases.values()) + 1 if api_args else 3)
    name = model.name
    # drop the kernels no entry calls (keeps -Wunused-function quiet and the code small)
    ctx.update(apply=apply, members=decls, mul_facts=kernel_weight_tags(lowered["ops"], per_op), split=split,
               split_join=join,
               split_facts=split_line_facts(lowered["ops"], per_op) if split else {},
               add_tags=float_facts.ADD_TAGS, mul_tags=float_facts.MUL_TAGS)
    if split:
        ctx["split_ops"] = [op for op in lowered["ops"] if op.get("facts")]
    ctx.update(kinds=kinds, nd=bool(kinds & {"move", "broadcast", "reduce", "resample"}),
               strided=bool(kinds & {"move", "reduce", "resample"}), tabled=bool(kinds & {"move", "resample"}))
    if kinds & {"move", "resample"}:
        ctx["int_reads"] = sorted(set(ctx["int_reads"]) | {16})
    code, facts, marks = cnn.render_code("v1.c.j2", ctx, lambda text: strip_unused(text, kinds))
    add_loop_totals(code, facts, entries)
    facts["indirect"] = [{"file": f"{name}.c", "line": marks["call"][0], "targets": [f"nn_{k}" for k in sorted(kinds)],
                          "calls": v1_fixed.entry_calls(entries, facts["loops"])}]
    if storage in common.FLASH_STORAGES:  # builtin-avr is the one analyser that reads `calls` (AVR flash)
        add_conv_call_totals(facts["indirect"][0]["calls"], entries, facts["loops"])
    acts = pointers
    if acts:
        facts["indirect"].append({"file": f"{name}.c", "line": marks["apply"][0], "targets": acts})
        add_activation_targets(facts["indirect"][0]["calls"], entries, f"{name}.c", marks["apply"][0])
    add_entry_weight_facts(facts["indirect"][0]["calls"], lowered["ops"], per_op, f"{name}.c", marks,
                           split, ctx["split_facts"])
    trace = cnn.trace(model, lowered, facts, passes_log, "v1", [cnn.memory_log(lowered["memory"])],
                      storage=storage)
    for layer in trace["layers"]:
        rows = marks.get(("layer", cnn.c_identifier(layer["name"])), [])
        layer["lines"] = [rows[0], rows[-1] + 1] if rows else [None, None]
    return cnn.output_files(name, ctx, code, facts, trace)


def kernel_weight_tags(ops, per_op):
    """{kernel: (__mulsf3 tags, why)} of nn_conv2d's and nn_dense's multiply-accumulate line: one
    line serves every table entry of the kernel, so the facts hold for all their weights."""
    out = {}
    for kernel in ("conv2d", "dense"):
        users = [op for op, es in zip(ops, per_op) if any(e["kernel"] == kernel for e in es)]
        if users and all("weights" in op for op in users):
            out[kernel] = float_facts.weight_tags(np.concatenate([np.ravel(op["weights"]) for op in users]))
    return out


def inside_taps(n_out, stride, dilation, pad, size, taps):
    """Taps of one axis inside the input, summed over the outputs: nn_conv2d skips the others."""
    return sum(1 for o in range(n_out) for k in range(taps) if 0 <= o * stride + k * dilation - pad < size)


def add_conv_call_totals(calls, entries, loops):
    """Give each nn_conv2d call of the network loop the total_iterations of its kw and channel
    loops in that call: nn_conv2d enters the kw loop only for rows inside the input and the channel
    loop only for taps inside it, so a padded or dilated layer runs fewer bodies than its loop
    bounds multiply to (the `calls` bounds alone charge every tap)."""
    field = {(f["file"], f["line"]): m.group(1) for f in loops
             for m in [re.fullmatch(r"v1 largest (\w+) of nn_conv2d", str(f.get("why")))] if m}
    for call, e in zip(calls, entries):
        if e["kernel"] != "conv2d":
            continue
        rows_y = inside_taps(e["oh"], e["sh"], e.get("dh", 1), e.get("pt", 0), e["h"], e["kh"])
        cols_x = inside_taps(e["ow"], e["sw"], e.get("dw", 1), e.get("pl", 0), e["w"], e["kw"])
        totals = {"kw": e["rows"] * e["ow"] * e["kw"] * rows_y, "cg": e["rows"] * e["cg"] * rows_y * cols_x}
        for loop in call["loops"]:
            what = field.get((loop["file"], loop["line"]))
            if what in totals:
                loop["total_iterations"] = totals[what]
    return calls


def add_flush_thresholds(ops, per_op, storage, real):
    """float32 on AVR (common.split_accumulation): each conv2d and dense op's MacFacts (`facts`,
    nnbuild.numerics.float_facts) and its table entries' flush threshold `ke`; returns whether
    nn_join ends the sums (common.split_facts)."""
    join = common.split_facts(ops, storage, real)
    for op, es in zip(ops, per_op):
        if op["kind"] in ("conv2d", "dense"):
            for e in es:
                e["ke"] = op["facts"].keep_exp
    return join


def split_line_facts(ops, per_op):
    """{kernel: why} of nn_conv2d's and nn_dense's split multiply line when every table entry of
    the kernel has zero-or-normal weights (each flushes its inputs with its own threshold, so the
    __mulsf3 value facts hold for all of them); a kernel with another entry gets its facts per
    call (add_entry_weight_facts)."""
    out = {}
    for kernel in ("conv2d", "dense"):
        users = [op for op, es in zip(ops, per_op) if any(e["kernel"] == kernel for e in es)]
        if users and all(op["facts"].weights_normal for op in users):
            out[kernel] = ("every table entry of nn_" + kernel + " flushes its inputs with its own layer's threshold "
                           "L->ke: " + "; ".join(f"'{op['name']}': {op['facts'].why()}" for op in users))
    return out


def add_entry_weight_facts(calls, ops, per_op, file, marks, split=False, split_facts=None):
    """Each network call of nn_conv2d or nn_dense: the __mulsf3 tags its own layer's weights prove,
    as `values` of that call on the kernel's multiply-accumulate line (the line's own facts hold
    for every entry's weights at once, so they are at most these)."""
    calls = iter(calls)
    for op, es in zip(ops, per_op):
        for e in es:
            call = next(calls)
            line = marks.get(f"mac_{e['kernel']}")
            if not line or "weights" not in op:
                continue
            tags, why = float_facts.weight_tags(op["weights"])
            if split:  # split sums: the line's facts, per call only when the line cannot hold them for all
                normal = op["facts"].weights_normal and e["kernel"] not in (split_facts or {})
                tags, why = (float_facts.MUL_TAGS, op["facts"].why()) if normal else ((), None)
            if tags:
                call["values"] = [{"file": file, "line": line[0], "op": "mul", "tags": list(tags),
                                   "why": f"this table entry's layer: {why}"}]


def add_activation_targets(calls, entries, file, line):
    """Each network call's activation: inside call i, nn_apply's pointer call reaches only entry
    i's `act` (none for a NULL one), so a WCET tool charges each entry its own activation, not the
    slowest of the model's."""
    for call, e in zip(calls, entries):
        call["indirect"] = [{"file": file, "line": line, "targets": [e["act"]] if e["act"] != "0" else []}]


def strip_unused(code, kinds):
    """Remove the kernel functions (mark comment to the closing brace of `nn_<kernel>`, helpers
    between them included) no table entry uses."""
    out, skip, kernel = [], None, False
    for line in code.splitlines(keepends=True):
        m = re.match(r"/\* nnbuild-layer kernel_(\w+) \*/", line)
        if m:
            skip, kernel = (m.group(1) if m.group(1) not in kinds else None), False
        if skip is None:
            out.append(line)
            continue
        if re.match(rf"static void nn_{skip}\b", line):
            kernel = True
        elif kernel and line.startswith("}"):
            skip = None
    return "".join(out)
