"""v2 code shape, fixed-point precisions (q16, q16-acc32, q8): the plan of nnbuild.numerics.graph_plan
as the v2 shape's inlined loops over int16 tensors (q8: int8 Conv2D/Dense weights).

Same layout as the float v2 (channels-last tensors, one static arena placed by liveness, literal
loop bounds in NN_LOOPBOUND and the flow facts, weights in `<name>_weights.c`, AVR flash) with the
MLP fixed shape's arithmetic: exact integer multiply-accumulates (AVR201's 16x16 MAC on AVR, NN_DOT8's 8x16 for q8),
proven accumulator widths, round_shift requantisation and loop-free table activations.
nnbuild.numerics.graph_bitexact is its bit-exact model.
"""

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import cnn, common, mlp_fixed
from nnbuild.codegen.common import float_literal
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild import numerics as q
from nnbuild.numerics import graph_bitexact as gb, graph_plan

#: the int16 element the arena holds instead of a float
ELEMENT_BYTES = 2


def render(model, *, precision, storage, passes_log, input_range, shape="v2", template="v2_fixed.c.j2",
           plan=None, int_input=False, int_output=False, move_code=None, dsp=None):
    """The files of `model`; `plan` given (a segment of a split model: graph_plan.segment_plan) is
    used instead of a proof over `input_range`, and `int_input`/`int_output` make the API read or
    write the int16 integers of the plan's formats instead of floats (segments hand tensors on).
    `move_code(op, ff)` writes a Transpose or Slice over int16 tensors (the v2 shape's movement
    loops); without it a model with one is refused. `dsp`: the board's DSP capability (Conv2D and Dense
    on SMLAD, dsp_op)."""
    if plan is None:
        if input_range is None:
            raise NNBuildError(f"precision {precision} needs the model's input range to prove its formats")
        plan = graph_plan.quantize_graph(model, precision, input_range)
    lowered = cnn.lower(model, storage)
    io = several_io_context(model, plan, int_input, int_output)
    ops = fixed_ops(model.name, lowered["ops"], plan, storage, moves=move_code is not None,
                    buffers=io.get("buffers"))
    for op in ops:
        op["dsp"] = dsp_op(model.name, op, storage, dsp)
    arrays = [a for op in ops for a in op["chunks"] + ([op["bias"]] if op["bias"] else []) + op["arrays"]]
    flash = sum(a["size"] * a["bits"] // 8 for a in arrays) + len(tanh_tables(plan)) * q.TANH_POINTS * 4 \
        + (q.EXP_POINTS * 4 if any(o.activation == "softmax" for o in plan.ops) else 0)
    near = storage == common.NEAR_STORAGE or (storage == "avr-progmem-far" and flash <= mlp_fixed.NEAR_LIMIT)
    for op in ops:  # the AVR dot-product loops (4 MACs a turn, 1..255 turns) on flash weights: op["dot"] names it
        run = op.get("k") if op["kind"] == "dense" else op.get("run")
        fits = (storage in common.FLASH_STORAGES and op["acc_type"] == "int32_t" and op["kind"] in ("conv2d", "dense")
                and 4 <= run <= 4 * 255 + 3 and (op["kind"] == "dense" or not op["generic"]))
        op["dot"] = dot_macro(op.get("wbits"), near) if fits else None
    memory = int16_memory(lowered["memory"])
    readers = [o for o in ops if "xq" in o["src"] or any(p.get("src") == "xq" for p in o.get("parts", []))]
    first = readers[0] if len(readers) == 1 and readers[0].get("pad_copy") and readers[0]["src"] == ["xq"] else None
    if first:  # the only reader of the input pads it: the input is rounded straight into a padded xq
        first["pad_copy"], first["pad_in_xq"] = False, True
    padded = max([o["HP"] * o["XW"] * o["C"] for o in ops if o.get("pad_copy")], default=0)
    ctx = {
        "name": model.name, "guard": model.name.upper(), "version": __version__, "shape": shape,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files], "precision": precision,
        **common.storage_context(storage), "near": near, "tanh_asm": near, "flash_bytes": flash,
        "n_in": model.input_size, "n_out": model.output_size, "plan": plan, "ops": ops, "arrays": arrays,
        "memory": memory, "arena_symbol": lowered["arena_symbol"], "arena_elements": memory["arena_bytes"] // ELEMENT_BYTES,
        "int_reads": [16, 32] + ([64] if any(a["bits"] == 64 for a in arrays) else []),
        "padded_symbol": f"{model.name}_padded", "padded_elements": padded, "input_pad": first,
        "index_type": cnn.index_type, "readers": mlp_fixed.READERS, "weights_sha256": common.weights_digest(model),
        "mac16": any(o["mac16"] and not o["dsp"] for o in ops),
        "dsp": any(o["dsp"] for o in ops), "dsp8": any(o["dsp"] and o["wbits"] == 8 for o in ops), "dot16": any(o["dot"] == "NN_DOT16" for o in ops),
        "dot16far": any(o["dot"] == "NN_DOT16F" for o in ops), "dot8": any(o["dot"] == "NN_DOT8" for o in ops),
        "dot8far": any(o["dot"] == "NN_DOT8F" for o in ops),
        "read64": any(a["bits"] == 64 for a in arrays),
        "weight_reads": sorted({8 if o.get("wbits") == 8 else 16 for o in ops} | {16, 32}),
        **helper_context(plan, ops),
        **integer_api(plan, int_input, int_output), "move_code": move_code,
        **{k: v for k, v in io.items() if k != "buffers"},
    }
    name = model.name
    code, facts, _ = cnn.render_code(template, ctx)
    record = cnn.trace(model, dict(lowered, ops=ops, memory=memory, arrays=arrays), facts, passes_log, shape,
                       [cnn.memory_log(memory)], storage=storage)
    record["fixed_point"] = plan.summary()
    if near:
        record["near_flash_symbols"] = sorted([a["symbol"] for a in arrays] + table_symbols(ctx))
    return cnn.output_files(name, ctx, code, facts, record)


def dsp_op(prefix, op, storage, dsp):
    """Lay a Conv2D or Dense out for the DSP kernels (mlp_fixed.dsp_layer says why they are exact) when
    the board has the capability and the op's arithmetic is theirs; returns whether it did.

    The kernels read input pairs as aligned words. A Dense reads its inputs where they are when they
    start on an even element of a word-aligned buffer, else from a copy in an aligned local; a
    Conv2D (no bounds tests, one group, no column dilation) reads each kernel row of each output
    pixel in place when the channels are even (every row then starts on an even element), else it
    first copies the pixel's window into an aligned local (`im2col`). Each kernel row is a segment
    with turns and tail of its own; the weights follow that order."""
    qop = op["q"]
    if dsp not in common.DSP_CAPABILITIES or storage != "const" or op["kind"] not in ("conv2d", "dense"):
        return False
    if qop.acc_bits != 32 or qop.acc_bound > graph_plan.INT32_MAX or op["bias"]["bits"] != 32 or op["wbits"] not in (8, 16):
        return False
    if op["kind"] == "conv2d" and (op["generic"] or op["G"] != 1 or not op["contiguous"]):
        return False
    kq = np.asarray(qop.kernel_q, dtype=np.int64)
    rows = np.transpose(kq, (3, 0, 1, 2)).reshape(kq.shape[3], -1) if op["kind"] == "conv2d" else kq.T
    source = "padded" if op.get("pad_copy") else op["src"][0]
    offset = int(source.rsplit(" + ", 1)[1]) if " + " in source else 0
    if op["kind"] == "dense":
        direct = offset % 2 == 0 and (op["k"] % 2 == 0 or op["outer"] == 1)
        segments, run = 1, op["k"]
    else:
        direct = offset % 2 == 0 and op["C"] % 2 == 0
        segments, run = op["KH"], op["run"]
    if not direct:
        segments, run = 1, rows.shape[1]
    packed = mlp_fixed.dsp_pack(f"{prefix}_{op['c_name']}_w0", rows, op["wbits"], segments=segments)
    packed["chunks"][0]["comment"] = (f"{op['source_type']} '{op['name']}': {rows.shape[0]} outputs x {rows.shape[1]} "
                                      f"weights as the DSP kernels read them (mlp_fixed.dsp_pack)")
    op.update(packed, direct=direct, segments=segments, seg_run=run)
    return True


def several_io_context(model, plan, int_input, int_output):
    """Template context of a model of several inputs or outputs: the C API's arguments (float, one
    per input and output, cnn.api_context), each with the static int16 tensor the code reads or
    writes in its place (xq_<argument>, yq_<argument>: arguments all begin with in_ or out_), and
    one output conversion per output format (`dequantizers`, the first output's named nn_dequantize);
    `buffers` maps the float lowering's argument names to those tensors. {"several_io": False} for
    one input and one output."""
    if not getattr(model, "several_io", False):
        return {"several_io": False}
    if int_input or int_output:
        raise NNBuildError("internal error: a segment of several inputs or outputs")
    api = cnn.api_context(model)
    formats = dict(zip(plan.output_names, plan.output_formats))
    functions, dequantizers = {}, []
    for frac in [f.frac for f in plan.output_formats]:
        if frac not in functions:
            functions[frac] = "nn_dequantize" if not functions else f"nn_dequantize_q{frac}".replace("-", "m")
            dequantizers.append({"fn": functions[frac], "frac": frac, "scale": float_literal(2.0 ** -frac),
                                 "assembled": -112 <= frac <= 126})
    args = []
    for a in api["api_args"]:
        fmt = plan.input if a["role"] == "in" else formats[a["tensor"]]
        args.append(dict(a, buffer=("xq_" if a["role"] == "in" else "yq_") + a["name"], frac=fmt.frac,
                         dequantize=functions.get(fmt.frac) if a["role"] == "out" else None))
    return {**api, "io_args": args, "dequantizers": dequantizers, "buffers": {a["name"]: a["buffer"] for a in args}}


def integer_api(plan, int_input, int_output):
    """Template context of the API's element types, and the data movements' code."""
    formats = ([f"in[] holds the integers of the plan's input formats ({plan.input_name})"] if int_input else []) + \
        ([f"out[] the integers of Q{plan.output.frac}"] if int_output else [])
    return {"int_input": int_input, "int_output": int_output, "in_type": "int16_t" if int_input else "float",
            "out_type": "int16_t" if int_output else "float", "io_note": "; ".join(formats)}


def table_symbols(ctx):
    """The flash lookup tables the fixed helpers emit (tanh per output format, exp for softmax)."""
    return [f"nn_tanh_table_q{f}" for f in ctx["tanh_tables"]] + (["nn_exp_table"] if ctx["exp_table"] else [])


def helper_context(plan, ops):
    """Template context of fixed_helpers.c.j2 and the CNN requantisation (shared by v2 and v3): which
    helpers the ops need, the tables and their constants, the input rounding and output scale."""
    return {
        "sar8": any(o["q"].acc_bits == 32 and o["q"].shift >= 8 for o in ops),
        "shr64": False, "shr64_shifts": sorted({o["q"].shift for o in ops if o["q"].acc_bits == 64}),
        "tanh_tables": tanh_tables(plan), "softmax_ops": any(o["softmax"] for o in ops),
        "exp_table": mlp_fixed.literal_rows(q.exp_table()) if any(o.activation == "softmax" for o in plan.ops) else None,
        "recip_frac": gb.RECIP_FRAC, "z_frac": q.Z_FRAC, "z_limit": q.Z_LIMIT,
        "tanh_points": q.TANH_POINTS, "tanh_step_size": 2 ** q.TANH_STEP_BITS,
        "tanh_step": q.Z_FRAC - q.TANH_STEP_BITS, "exp_step": q.Z_FRAC - q.EXP_STEP_BITS,
        "tanh_mask": (1 << (q.Z_FRAC - q.TANH_STEP_BITS)) - 1, "tanh_half": 1 << (q.Z_FRAC - q.TANH_STEP_BITS - 1),
        "exp_mask": (1 << (q.Z_FRAC - q.EXP_STEP_BITS)) - 1, "exp_half": 1 << (q.Z_FRAC - q.EXP_STEP_BITS - 1),
        "output_scale": float_literal(2.0 ** -plan.output.frac), "input_scale": float_literal(2.0 ** plan.input.frac),
        "input_lo": float_literal(plan.input_range[0]), "input_hi": float_literal(plan.input_range[1]),
        **mlp_fixed.input_bounds(plan),
    }


def int16_memory(memory):
    """The float plan's figures (bytes of 4-byte elements) for int16 elements."""
    scaled = dict(memory)
    for key in ("arena_bytes", "peak_live_bytes", "one_buffer_per_tensor_bytes"):
        if key in scaled:
            scaled[key] = scaled[key] // common.FLOAT_BYTES * ELEMENT_BYTES
    return scaled


def tanh_tables(plan):
    """One tanh table per output format used by tanh/sigmoid layers: {frac: (ctype, bits, rows)}."""
    fracs = sorted({o.output.frac for o in plan.ops if o.activation in ("tanh", "sigmoid")})
    return {f: ("int16_t", 16, mlp_fixed.literal_rows(q.tanh_table(f))) for f in fracs}


def buffer(ref, buffers=None):
    """The int16 tensors: the float API's `in`/`out` become the quantised xq/yq (`buffers`: those of
    a model of several inputs or outputs, several_io_context)."""
    return (buffers or {"in": "xq", "out": "yq"}).get(ref, ref)


def dot_macro(wbits, near):
    """The AVR dot-product loop of a row of `wbits`-bit weights: LPM Z+ in near flash, ELPM Z+ (the
    F variants) anywhere."""
    return {16: "NN_DOT16", 8: "NN_DOT8"}[wbits] + ("" if near else "F")


def int_array(symbol, values, bits, comment):
    return {"symbol": symbol, "size": int(np.size(values)), "ctype": f"int{bits}_t", "bits": bits, "comment": comment,
            "values": mlp_fixed.literal_rows(np.ravel(values), 8)}


def weight_chunks(prefix, op, rows, storage, bits):
    """Kernel rows [out][k] as int16 (q8: int8) arrays, split under avr-gcc's object limit on AVR."""
    what = f"{op['source_type']} '{op['name']}'"
    return [dict(int_array(f"{prefix}_{op['c_name']}_w{c}", rows[a:b], bits,
                           f"{what}: outputs {a}..{b - 1}, {rows.shape[1]} weights each"), start=a, rows=b - a)
            for c, (a, b) in enumerate(common.row_chunks(rows.shape[0], rows.shape[1] * bits // 8, storage, what))]


def fixed_ops(prefix, float_ops, plan, storage, moves=False, buffers=None):
    """The float lowering's operations with integer weights, formats and requantisation facts;
    data movements (Transpose, Slice) only with `moves` (a shape that writes them); `buffers`: the
    int16 tensors of the arguments of a model of several inputs or outputs."""
    by_name = {o.name: o for o in plan.ops}
    out = []
    for op in float_ops:
        qop = by_name[op["name"]]
        op = dict(op, q=qop, src=[buffer(s, buffers) for s in op["src"]], dst=buffer(op["dst"], buffers), arrays=[], chunks=[],
                  bias=None, recip=None, pad_copy=False, pad_in_xq=False, acc_type=f"int{qop.acc_bits}_t", mac16=False, activation=qop.activation)
        if qop.acc_bits == 64 and not 0 < qop.shift < 32:
            raise NNBuildError(f"a 64-bit accumulator shifted by {qop.shift} bits has no code in shape v2",
                               item=f"{op['source_type']} '{op['name']}'")
        if op["kind"] == "conv2d":
            # a padded convolution (one group) reads a zero-padded copy of its input: no bounds tests
            op["pad_copy"] = op["padded"] and op["G"] == 1
            pads = qop.layer.padding
            op["HP"], op["XW"] = op["H"] + pads[0] + pads[1], op["W"] + pads[2] + pads[3]
            if op["pad_copy"]:
                op["generic"] = False
            else:
                op["XW"] = op["W"]
        if op["kind"] in ("conv2d", "dense"):
            kq = np.asarray(qop.kernel_q)
            rows = np.transpose(kq, (3, 0, 1, 2)).reshape(kq.shape[3], -1) if op["kind"] == "conv2d" else kq.T
            op["wbits"], op["wtype"] = qop.weight.bits, qop.weight.ctype
            op["chunks"] = weight_chunks(prefix, op, rows, storage, qop.weight.bits)
            bias_bits = 32 if np.abs(qop.bias_q).max(initial=0) < 2 ** 31 else 64
            op["bias"] = int_array(f"{prefix}_{op['c_name']}_b", qop.bias_q, bias_bits,
                                   f"{op['source_type']} '{op['name']}': bias at 2^-{qop.acc_frac}")
            op["mac16"] = qop.acc_bits == 32 and qop.weight.bits == 16
        elif op["kind"] == "batchnorm":
            sym = f"{prefix}_{c_identifier(op['name'])}"
            op["scale"] = int_array(f"{sym}_scale", qop.kernel_q, 16, f"BatchNormalization '{op['name']}': scale "
                                    f"at 2^-{qop.weight.frac}")
            op["offset"] = int_array(f"{sym}_offset", qop.bias_q, 32, f"BatchNormalization '{op['name']}': offset "
                                     f"at 2^-{qop.acc_frac}")
            op["arrays"] = [op["scale"], op["offset"]]
        elif op["kind"] == "pool2d" and op["mode"] == "avg" and qop.pool_shift is None:
            count = op["KH"] * op["KW"]
            op["recip"] = int_array(f"{prefix}_{op['c_name']}_recip", gb.reciprocals(count), 32,
                                    f"{op['source_type']} '{op['name']}': round(2^{gb.RECIP_FRAC} / cells), cells = 0..{count}")
            op["recip_value"] = int(gb.reciprocals(count)[count])
            if op["padded"]:
                op["arrays"] = [op["recip"]]
        elif op["kind"] == "move" and (not moves or op["layer_kind"] not in gb.MOVES or op["plan"]["fills"]):
            raise NNBuildError("this data movement has no fixed-point form in shape v2",
                               item=f"{op['source_type']} '{op['name']}'")
        elif op["kind"] not in ("pool2d", "add", "concat", "zeropad2d", "activation", "move"):
            raise NNBuildError("this layer has no fixed-point form in shape v2", item=f"{op['source_type']} '{op['name']}'")
        if op["kind"] == "concat":
            for part, fmt in zip(op["parts"], qop.inputs):
                part["src"], part["shift"] = buffer(part["src"], buffers), fmt.frac - qop.output.frac
        if op["kind"] == "add":
            op["lefts"] = [qop.acc_frac - t.frac for t in qop.inputs]
        if qop.activation == "softmax":
            n = op["out_shape"][-1] if op["out_shape"] else 1
            # e <= 2^15 (Q15 exp), sum s <= n * 2^15: (e << frac) + s / 2 must fit nn_udiv32's uint32
            if (1 << (15 + qop.output.frac)) + (n << 14) > graph_plan.INT32_MAX:
                raise NNBuildError(f"softmax over {n} values: the rounded division does not fit 32 bits",
                                   item=f"{op['source_type']} '{op['name']}'")
            op["softmax"] = {"groups": op["n"] // n, "n": n}
        out.append(op)
    return out
