"""v1 code shape (ACETONE V1): generic kernels, a table of layer structs with function pointers and
a generic loop (see templates/v1.c.j2). Same API, weights files, arena and flow-facts format as v2;
each kernel's loop bounds in the flow facts are the largest any table entry uses, and the one
indirect call site gets an `indirect` flow fact listing the kernels it may reach. The flow facts'
"layers" are the kernels (a V1 call cannot be told apart from another by a static analyzer);
the trace maps each model layer to its table entries."""

import re

from nnbuild.codegen import cnn, templating
from nnbuild.errors import NNBuildError

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32",)


KERNELS = ("conv2d", "dense", "pool2d", "zeropad2d", "batchnorm", "activation", "add", "copy", "softmax")
FIELDS = ("oh", "ow", "rows", "kh", "kw", "c", "outer", "k", "n", "n_src", "chunk", "n1")


def entries_of(op, index_of):
    """Table entries (kernel, fields) of one op: one per weight chunk / concat input, + softmax."""
    base = {"act": f"nn_{op['activation']}" if op["activation"] not in ("linear", "softmax") else "0"}
    out = []
    k = op["kind"]

    def ref(expr):
        if expr in ("in", "out"):
            return (0 if expr == "in" else 1, 0)
        parts = expr.split(" + ")
        return (2, int(parts[1]) if len(parts) > 1 else 0)

    srcs = [ref(s) for s in op["src"]]
    dst = ref(op["dst"])
    if k == "conv2d":
        for ch in op["chunks"]:
            out.append(dict(base, kernel="conv2d", src=srcs, dst=dst, h=op["H"], w=op["W"], c=op["C"],
                            oh=op["OH"], ow=op["OW"], oc=op["OC"], kh=op["KH"], kw=op["KW"], sh=op["SH"],
                            sw=op["SW"], dh=op["DH"], dw=op["DW"], pt=op["PT"], pl=op["PL"], k=op["k"],
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
    elif k == "add":
        out.append(dict(base, kernel="add", src=srcs, dst=dst, n=op["n"], n_src=len(srcs)))
    elif k == "concat":
        for part, s in zip(op["parts"], srcs):
            out.append(dict(kernel="copy", act="0", src=[s], dst=dst, outer=op["outer"], chunk=part["chunk"],
                            total=op["total"], at=part["offset"]))
    if op["softmax"]:
        out.append(dict(kernel="softmax", act="0", src=[dst], dst=dst, outer=op["softmax"]["groups"],
                        n=op["softmax"]["n"]))
    for e in out:
        e["n1"] = max(e.get("n", 1) - 1, 0) if e["kernel"] == "softmax" else 0
        e["comment"] = f"layer {op['c_name']}: {op['source_type']} '{op['name']}' ({e['kernel']})"
        e["mark"] = ("layer", op["c_name"])  # the trace's line range of the layer's table entries
    return out


#: fields of struct nn_layer that are 8 bits wide (the others are 16 bits)
BYTE_FIELDS = ("kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode")


def initializer(e, max_src):
    for key, value in list(e.items()) + [("offset", o) for _, o in e["src"] + [e["dst"]]]:
        limit = 127 if key in ("wi", "bi") else 255 if key in BYTE_FIELDS else 65535
        if isinstance(value, int) and not -1 <= value <= limit:
            raise NNBuildError(f"shape v1 stores '{key}' = {value} in a {16 if limit > 255 else 8}-bit table "
                               "field: the model is too large for v1 (use v2)", item=e["comment"])
    src = e["src"] + [(0, 0)] * (max_src - len(e["src"]))
    refs = ", ".join(f"{{{b}u, {o}u}}" for b, o in src)
    fields = [f".kernel = nn_{e['kernel']}", f".act = {e['act']}", f".src = {{{refs}}}",
              f".dst = {{{e['dst'][0]}u, {e['dst'][1]}u}}", f".n_src = {len(e['src'])}u"]
    for key in ("h", "w", "c", "oh", "ow", "oc", "kh", "kw", "sh", "sw", "dh", "dw", "pt", "pl", "mode", "k",
                "o0", "rows", "n", "outer", "chunk", "total", "at"):
        if e.get(key):
            fields.append(f".{key} = {e[key]}u")
    fields.append(f".wi = {e.get('wi', -1)}")
    fields.append(f".bi = {e.get('bi', -1)}")
    return ", ".join(fields)


def render(model, *, precision, storage, passes_log, **_options):
    cnn.check_precision(precision, "v1")
    lowered = cnn.lower(model, storage)
    index_of = {a["symbol"]: i for i, a in enumerate(lowered["arrays"])}
    entries = [e for op in lowered["ops"] for e in entries_of(op, index_of)]
    max_src = max(len(e["src"]) for e in entries)
    for e in entries:
        e["init"] = initializer(e, max_src)
    bounds = {k: {f: max([int(e.get(f, 0)) for e in entries if e["kernel"] == k], default=0) for f in FIELDS}
              for k in KERNELS}
    for k in bounds:  # loops of kernels no entry uses keep a bound of 0 (never entered)
        bounds[k]["n_src"] = max(bounds[k]["n_src"] - 1, 0)
    used = sorted({e["act"][3:] for e in entries if e["act"] != "0"})
    ctx = cnn.context(model, lowered, "v1", precision, storage)
    ctx.update(entries=entries, max_src=max_src, bounds=bounds, activations=used)
    name = model.name
    # drop the kernels no entry calls (keeps -Wunused-function quiet and the code small)
    kinds = {e["kernel"] for e in entries}
    code, facts, marks = cnn.render_code("v1.c.j2", ctx, lambda text: strip_unused(text, kinds))
    facts["indirect"] = [{"file": f"{name}.c", "line": marks["call"][0], "targets": [f"nn_{k}" for k in sorted(kinds)]}]
    acts = [f"nn_{a}" for a in used]
    if acts:
        facts["indirect"].append({"file": f"{name}.c", "line": marks["apply"][0], "targets": acts})
    trace = cnn.trace(model, lowered, facts, passes_log, "v1", [cnn.memory_log(lowered["memory"])],
                      storage=storage)
    for layer in trace["layers"]:
        rows = marks.get(("layer", cnn.c_identifier(layer["name"])), [])
        layer["lines"] = [rows[0], rows[-1] + 1] if rows else [None, None]
    return {
        f"{name}.h": templating.render("cnn.h.j2", ctx),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("cnn_weights.h.j2", ctx),
        f"{name}_weights.c": templating.render("cnn_weights.c.j2", ctx),
        f"{name}.flowfacts.json": facts,
        f"{name}.trace.json": trace,
    }


def strip_unused(code, kinds):
    """Remove the kernel functions (mark comment to closing brace) no table entry uses."""
    out, skip = [], False
    for line in code.splitlines(keepends=True):
        m = re.match(r"/\* nnbuild-layer kernel_(\w+) \*/", line)
        if m:
            skip = m.group(1) not in kinds
        if not skip:
            out.append(line)
        elif line.startswith("}"):
            skip = False
    return "".join(out)
