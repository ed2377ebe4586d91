"""Lowering shared by the CNN code shapes v1, v2 and v3: operations with every bound resolved,
weight arrays, and the activation memory plan.

A model (chain or DAG) becomes a list of operations in execution order. Flatten and Reshape make no
operation: their tensor is their input's memory seen with another shape. Every other tensor lives
in `in` (the model input), `out` (the tensor the output is a view of) or the static arena
`<name>_arena`, at an offset chosen by `plan_memory`. Weights use nnbuild.codegen.common's helpers
(exact %.9g literals, arrays split below avr-gcc's 32 KB object limit for AVR far flash).
"""

import types

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import common, recurrent, templating, tensor_ops
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier  # noqa: F401 (v1 uses cnn.c_identifier)
from nnbuild.ir.graph import ALIASES
from nnbuild.numerics import float_facts
from nnbuild.passes.plan_buffers import api_bases, plan_memory  # noqa: F401 (the shapes plan through cnn)

FLOAT_BYTES = common.FLOAT_BYTES
#: element-wise kinds that may write over a dying input of the same size


def index_type(bound):
    """Narrowest fast unsigned type for an index below `bound` (MLP rule, plus 32 bits past 65535)."""
    return "uint_fast32_t" if bound > 65535 else common.index_type(bound)


def check_precision(precision, shape):
    if precision != "float32":
        raise NNBuildError(f"shape {shape} generates float32 only (precision '{precision}' is not supported "
                           "by it; use shape=mlp for fixed point)")


# --------------------------------------------------------------------------- memory plan
# The activation arena is planned by the plan_buffers pass (nnbuild.passes.plan_buffers.plan_memory).


# --------------------------------------------------------------------------- weights


def _array(symbol, values, layer, comment):
    values = np.asarray(values, dtype=np.float32).ravel()
    return {"symbol": symbol, "size": int(values.size), "values": common.format_values(values, layer),
            "comment": comment}


def kernel_chunks(prefix, layer, rows, storage):
    """Weight rows [out][k] split like the MLP shape's (below 32 KB per array on AVR far flash)."""
    proxy = types.SimpleNamespace(name=layer.name, kernel=np.asarray(rows, np.float32).T)
    return common.weight_chunks(prefix, proxy, storage)


# --------------------------------------------------------------------------- operations


def lower(model, storage, *, liveness=None):
    """Everything a CNN shape renders: ops (one per computing layer), weight arrays, memory plan."""
    if liveness is None:
        liveness = bool(model.meta.get("plan_buffers"))
    shapes = model.tensor_shapes()
    places, _, stats = plan_memory(model, liveness)
    prefix = model.name
    arena_symbol = f"{prefix}_arena"

    def ref(tensor):
        base, offset = places[tensor]
        if base == "arena":
            return f"{arena_symbol} + {offset}" if offset else arena_symbol
        return base

    ops, arrays = [], []
    for index, layer in enumerate(model.layers):
        if layer.kind in ALIASES:
            continue
        srcs = model.sources(index)
        in_shapes = [shapes[s] for s in srcs]
        out_shape = shapes[layer.name]
        op = {"index": index, "name": layer.name, "c_name": c_identifier(layer.name),
              "source_type": layer.source_type, "kind": layer.kind,
              "activation": getattr(layer, "activation", "linear"),
              "src": [ref(s) for s in srcs], "dst": ref(layer.name),
              "in_shapes": [list(s) for s in in_shapes], "out_shape": list(out_shape),
              "inputs": int(np.prod(in_shapes[0])), "units": int(np.prod(out_shape)),
              "n": int(np.prod(out_shape)), "chunks": [], "bias": None}
        op["in_place"] = op["dst"] in op["src"]
        lower_layer(op, layer, in_shapes, out_shape, prefix, storage)
        for c in op["chunks"]:
            c["block"] = block_of(c["rows"], storage)
            c["comment"] = (f"{layer.source_type} '{layer.name}': outputs {c['start']}..{c['start'] + c['rows'] - 1}, "
                            f"{op['k']} weights each")
            arrays.append(c)
        if op["bias"]:
            op["bias"]["comment"] = f"{layer.source_type} '{layer.name}': bias"
            arrays.append(op["bias"])
        for extra in op.get("arrays", []):
            arrays.append(extra)
        last = out_shape[-1] if out_shape else 1
        op["softmax"] = {"groups": op["n"] // last, "n": last} if op["activation"] == "softmax" else None
        ops.append(op)
    unary = [(o["unary"]["op"], o["unary"]["params"]) for o in ops if o.get("unary")]
    names = {f["key"]: f["name"] for f in tensor_ops.unary_functions(unary)}
    for o in ops:
        if o.get("unary"):
            o["fn"] = names[(o["unary"]["op"], tuple(o["unary"]["params"]))]
    ins, outs = api_bases(model)
    api = frozenset(ins.values()) | frozenset(outs.values())
    for o in ops:
        o["api"] = api
    return {"ops": ops, "arrays": arrays, "memory": stats, "arena_symbol": arena_symbol, "unary_ops": unary,
            "api_buffers": api,
            "int_reads": sorted({int(a["ctype"][3:5]) for a in arrays if a.get("ctype", "").startswith("int")}),
            "arena_floats": stats["arena_bytes"] // FLOAT_BYTES,
            "activations": sorted(({o["activation"] for o in ops} | {a for o in ops for a in o.get("cell_activations", ())})
                                  - {"linear", "softmax"}),
            "has_softmax": any(o["softmax"] for o in ops)}


#: outputs computed together by v2's multiply-accumulate loops (each input value loaded once):
#: up to 4 in AVR flash (soft-float, few registers), up to 12 elsewhere (12 accumulators, the
#: input and a product fit x86-64's 16 SSE registers; on hosts they are `register` locals)
MAX_BLOCK = 4
HOST_MAX_BLOCK = 12


def int_array(symbol, values, comment):
    """A static index table (int16_t when every entry fits, else int32_t)."""
    ctype, values = tensor_ops.int_table(values)
    literals = [str(int(v)) for v in values.tolist()]
    return {"symbol": symbol, "size": int(values.size), "ctype": ctype, "comment": comment,
            "values": [", ".join(literals[i:i + 16]) for i in range(0, len(literals), 16)]}


#: Unary ops the prelude's activation helpers already compute (nn_relu, nn_tanh, nn_sigmoid)
PRELUDE_UNARY = ("relu", "tanh", "sigmoid")


def lower_tensor_op(op, layer, in_shapes, out_shape, prefix):
    """Fill `op` for an N-d tensor operation: op["kind"] becomes the render kind (move, broadcast,
    reduce, softmax_axis, lrn, resample, unary or activation), with its plan and arrays."""
    sym = f"{prefix}_{c_identifier(layer.name)}"
    what = f"{layer.source_type} '{layer.name}'"
    arrays = op.setdefault("arrays", [])
    op["layer_kind"] = layer.kind
    if tensor_ops.is_movement(layer):
        plan = tensor_ops.movement_plan(layer, in_shapes[0], out_shape)
        if plan["table"] is not None:
            plan["table_array"] = int_array(f"{sym}_src", plan["table"], f"{what}: source element of each "
                                            "output element (-1: fill)")
            arrays.append(plan["table_array"])
        for k, axis in enumerate(plan["axes"]):
            if "table" in axis:
                axis["array"] = int_array(f"{sym}_t{k}", axis["table"], f"{what}: source offset along "
                                          f"output axis {k} (-1: fill)")
                arrays.append(axis["array"])
        plan["fills"] = plan["fill"] is not None and (
            any(-1 in a.get("table", ()) for a in plan["axes"]) or (plan["table"] is not None and -1 in plan["table"]))
        op.update(kind="move", plan=plan)
    elif layer.kind == "unary":
        if layer.op in PRELUDE_UNARY:
            op.update(kind="activation", activation=layer.op)
        else:
            op.update(kind="unary", unary={"op": layer.op, "params": tuple(layer.params)})
    elif layer.kind == "elementwise":
        plan = tensor_ops.elementwise_plan(layer, in_shapes, out_shape)
        for k, operand in enumerate(plan["operands"]):
            if "constant" in operand:
                operand["array"] = _array(f"{sym}_c{k}", operand["constant"], layer,
                                          f"{what}: constant operand {k}")
                arrays.append(operand["array"])
            else:
                operand["src"] = op["src"][operand["tensor"]]
        op.update(kind="broadcast", op=layer.op, plan=plan, count=len(plan["operands"]))
    elif layer.kind == "reduce":
        op.update(kind="reduce", op=layer.op, plan=tensor_ops.reduce_plan(layer, in_shapes[0]))
    elif layer.kind == "softmax":
        op.update(kind="softmax_axis", plan=tensor_ops.softmax_plan(layer, out_shape))
    elif layer.kind == "lrn":
        op.update(kind="lrn", plan=tensor_ops.lrn_plan(layer, out_shape))
    elif layer.kind == "resize":
        plan = tensor_ops.resize_plan(layer, in_shapes[0])
        for k, axis in enumerate(plan["axes"]):
            if "taps" in axis:
                axis["index_array"] = int_array(f"{sym}_i{k}", axis["index"] * axis["stride"],
                                                f"{what}: input offsets of the {axis['taps']} taps along axis {k}")
                axis["weight_array"] = _array(f"{sym}_w{k}", axis["weight"], layer,
                                              f"{what}: weights of the {axis['taps']} taps along axis {k}")
                arrays += [axis["index_array"], axis["weight_array"]]
        op.update(kind="resample", plan=plan)


def block_of(rows, storage):
    """The largest block size <= MAX_BLOCK (HOST_MAX_BLOCK off AVR flash) dividing `rows` (literal
    trip counts, no remainder loop)."""
    largest = MAX_BLOCK if storage in common.FLASH_STORAGES else HOST_MAX_BLOCK
    return next(b for b in range(largest, 0, -1) if rows % b == 0)


def fold(fn, values):
    """Left-to-right fold with a two-argument C function: fn(fn(v0, v1), v2)..."""
    expr = values[0]
    for v in values[1:]:
        expr = f"{fn}({expr}, {v})"
    return expr


def pool_windows(op):
    """(output index, input indices of the window's cells inside the input) of a Pool2D op, in
    output order (HWC, row-major windows)."""
    H, W, C = op["H"], op["W"], op["C"]
    for oy in range(op["OH"]):
        for ox in range(op["OW"]):
            rows = range(oy * op["SH"] - op["PT"], oy * op["SH"] - op["PT"] + op["KH"])
            columns = range(ox * op["SW"] - op["PL"], ox * op["SW"] - op["PL"] + op["KW"])
            for c in range(C):
                yield ((oy * op["OW"] + ox) * C + c,
                       [(iy * W + ix) * C + c for iy in rows for ix in columns if 0 <= iy < H and 0 <= ix < W])


def padded_cells(op):
    """(output index, input index, or None in the padding) of a ZeroPadding2D op, in output order."""
    H, W, C = op["H"], op["W"], op["C"]
    for oy in range(op["OH"]):
        for ox in range(op["OW"]):
            iy, ix = oy - op["PT"], ox - op["PL"]
            inside = 0 <= iy < H and 0 <= ix < W
            for c in range(C):
                yield (oy * op["OW"] + ox) * C + c, (iy * W + ix) * C + c if inside else None


def valid_taps(out, k, stride, dilation, pad, size):
    """Kernel taps inside the input along one axis, summed over the output positions: a padded
    conv's tap loops run this many times, not out * k (flow facts' total_iterations)."""
    return sum(1 for o in range(out) for j in range(k) if 0 <= o * stride + j * dilation - pad < size)


def lower_layer(op, layer, in_shapes, out_shape, prefix, storage):
    """Fill the kind-specific fields of `op` (sizes, strides, pads, weights)."""
    kind = layer.kind
    if kind == "conv2d":
        (h, w, c), (oh, ow, oc) = in_shapes[0], out_shape
        kh, kw = int(layer.kernel.shape[0]), int(layer.kernel.shape[1])
        t, b, l, r = layer.padding
        rows = np.transpose(np.asarray(layer.kernel, np.float32), (3, 0, 1, 2)).reshape(oc, -1)
        g = int(layer.groups)
        op.update(H=h, W=w, C=c, OH=oh, OW=ow, OC=oc, KH=kh, KW=kw, SH=layer.strides[0], SW=layer.strides[1],
                  DH=layer.dilation[0], DW=layer.dilation[1], PT=t, PL=l, padded=bool(t or b or l or r),
                  G=g, CG=c // g, OG=oc // g, generic=bool(t or b or l or r) or g > 1,
                  k=kh * kw * (c // g), run=kw * c if layer.dilation[1] == 1 else c,
                  contiguous=layer.dilation[1] == 1, weights=rows,
                  chunks=kernel_chunks(prefix, layer, rows, storage),
                  bias=common.bias_array(prefix, layer),
                  taps_y=valid_taps(oh, kh, layer.strides[0], layer.dilation[0], t, h),
                  taps_x=valid_taps(ow, kw, layer.strides[1], layer.dilation[1], l, w))
        op["mul_tags"], op["mul_why"] = float_facts.weight_tags(rows)
    elif kind == "dense":
        op.update(k=int(layer.kernel.shape[0]), OC=int(layer.kernel.shape[1]),
                  outer=int(np.prod(in_shapes[0][:-1])), weights=np.asarray(layer.kernel, np.float32).T,
                  chunks=common.weight_chunks(prefix, layer, storage), bias=common.bias_array(prefix, layer))
        op["mul_tags"], op["mul_why"] = float_facts.weight_tags(layer.kernel)
    elif kind == "pool2d":
        (h, w, c), (oh, ow, _) = in_shapes[0], out_shape
        t, b, l, r = layer.padding
        op.update(H=h, W=w, C=c, OH=oh, OW=ow, KH=layer.pool[0], KW=layer.pool[1], SH=layer.strides[0],
                  SW=layer.strides[1], PT=t, PL=l, padded=bool(t or b or l or r), mode=layer.mode)
    elif kind == "zeropad2d":
        (h, w, c), (oh, ow, _) = in_shapes[0], out_shape
        op.update(H=h, W=w, C=c, OH=oh, OW=ow, PT=layer.padding[0], PL=layer.padding[2])
    elif kind == "batchnorm":
        alpha, offset = layer.scale_offset(np.float32)
        sym = f"{prefix}_{c_identifier(layer.name)}"
        op.update(C=int(alpha.size), pixels=op["n"] // int(alpha.size),
                  scale=_array(f"{sym}_scale", alpha, layer, f"BatchNormalization '{layer.name}': "
                               "gamma over sqrt(variance + epsilon)"),
                  offset=_array(f"{sym}_offset", offset, layer, f"BatchNormalization '{layer.name}': "
                                "beta - mean times scale"), alpha=alpha, beta_eff=offset)
        op["arrays"] = [op["scale"], op["offset"]]
    elif kind == "add":
        op.update(terms=len(in_shapes))
    elif kind == "concat":
        a = layer.axis
        outer = int(np.prod(out_shape[:a]))
        parts, offset = [], 0
        for src, s in zip(op["src"], in_shapes):
            chunk = int(np.prod(s[a:]))
            parts.append({"src": src, "chunk": chunk, "offset": offset})
            offset += chunk
        op.update(outer=outer, total=offset, parts=parts)
    elif kind == "activation":
        pass
    elif kind in tensor_ops.KINDS:
        lower_tensor_op(op, layer, in_shapes, out_shape, prefix)
    elif kind == "recurrent":
        recurrent.lower(op, layer, prefix, storage, _array)
    else:
        raise NNBuildError(f"{layer.source_type} layer '{layer.name}' has no CNN code shape")


# --------------------------------------------------------------------------- files


def api_context(model, in_type="float", out_type="float"):
    """The C API of the templates: `infer_params` (the parameter list of <name>_infer), and for a
    model of several inputs or outputs `several_io` and `api_args` (Model.arguments, each with its
    C declaration `decl`, its size macro `macro` and its shape text `dims`)."""
    if not model.several_io:
        return {"several_io": False, "api_args": [],
                "infer_params": f"const {in_type} in[{model.input_size}], {out_type} out[{model.output_size}]"}
    args = model.arguments()
    for a in args:
        const = "const " if a["role"] == "in" else ""
        a["decl"] = f"{const}float {a['name']}[{a['size']}]"
        a["macro"] = f"{model.name.upper()}_{a['name'].upper()}"
        a["dims"] = "x".join(str(d) for d in a["shape"])
    clash = next((a["name"] for a in args if a["name"].startswith(f"{model.name}_")), None)
    if clash:
        raise NNBuildError(f"argument {clash} would begin like the model's own C symbols ('{model.name}_'): "
                           "rename the model", item=f"model '{model.name}'")
    return {"several_io": True, "api_args": args, "infer_params": ", ".join(a["decl"] for a in args),
            "n_inputs": sum(a["role"] == "in" for a in args), "n_outputs": sum(a["role"] == "out" for a in args)}


def context(model, lowered, shape, precision, storage):
    """Template context shared by the shapes."""
    return {
        **api_context(model),
        "name": model.name, "guard": model.name.upper(), "version": __version__, "shape": shape,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files], "precision": precision,
        **common.storage_context(storage), "n_in": model.input_size, "n_out": model.output_size,
        # hosts: accumulators, pointers and counters of the MAC loops as `register` locals (gcc
        # keeps them in registers even at -O0); AVR code stays as the WCET analyser knows it
        "reg": "" if storage in common.FLASH_STORAGES else "register ",
        "index_type": index_type, "weights_sha256": common.weights_digest(model), **lowered,
        **common.reals(precision),
        "unary_functions": tensor_ops.unary_functions(lowered["unary_ops"], *common.REALS[precision][:2]),
        "no_cancel_tags": float_facts.NO_CANCEL_TAGS,
    }


def render_code(template, ctx, post=None):
    """(code, flow facts, marks) of a CNN template: each loop and layer belongs to the C function
    whose name the template wrote last before it."""
    return common.render(template, ctx, common.FlowFacts(ctx["name"], functions=True), post)


def trace(model, lowered, facts, passes_log, shape, extra_log=(), storage="const"):
    """The MLP trace (layer -> lines and weight arrays, passes) plus shapes and the memory plan;
    with storage avr-progmem-near, the arrays the near-flash check must find below 64 KB."""
    record = common.trace(model, lowered["ops"], facts, list(passes_log) + list(extra_log))
    by_name = {o["name"]: o for o in lowered["ops"]}
    for entry in record["layers"]:
        op = by_name[entry["name"]]
        entry["input_shapes"], entry["output_shape"] = op["in_shapes"], op["out_shape"]
        entry["buffer"] = op["dst"]
        entry["weights"] += [a["symbol"] for a in op.get("arrays", [])]
    record["shape"] = shape
    record["memory"] = lowered["memory"]
    if model.several_io:
        record["arguments"] = [{"name": a["name"], "role": a["role"], "label": a["label"], "shape": list(a["shape"])}
                               for a in model.arguments()]
    if storage == common.NEAR_STORAGE and lowered["arrays"]:
        record["near_flash_symbols"] = sorted(a["symbol"] for a in lowered["arrays"])
    return record


def memory_log(memory):
    if memory["planned"]:
        return (f"plan_buffers: peak activation {memory['arena_bytes']:,} bytes in one arena "
                f"(lower bound {memory['peak_live_bytes']:,} bytes live at once; "
                f"{memory['one_buffer_per_tensor_bytes']:,} bytes with one buffer per tensor)")
    return (f"plan_buffers: off, one buffer per tensor: {memory['arena_bytes']:,} bytes "
            f"(liveness planning would need at least {memory['peak_live_bytes']:,})")


def output_files(name, ctx, code, facts, record):
    """The files of every CNN shape: header, code, weights (declared and defined), flow facts, trace."""
    return {
        f"{name}.h": templating.render("cnn.h.j2", ctx),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("cnn_weights.h.j2", ctx),
        f"{name}_weights.c": templating.render("cnn_weights.c.j2", ctx),
        f"{name}.flowfacts.json": facts,
        f"{name}.trace.json": record,
    }
