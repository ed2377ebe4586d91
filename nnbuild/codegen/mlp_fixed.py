"""MLP code shape, fixed-point precisions: the plan of nnbuild.numerics.plan as static C.

Same structure as the float shape (neuron loops walking weight rows in storage order, literal
bounds, weights in `<name>_weights.c`), with integer tensors, proven accumulator widths and
table activations free of data-dependent loops. nnbuild.numerics.bitexact is its bit-exact model.
"""

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import common, templating
from nnbuild.codegen.common import float_literal, index_type, weights_digest
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild import numerics as q

READERS = {8: "NN_READ8", 16: "NN_READ16", 32: "NN_READ32", 64: "NN_READ64"}
#: weights and tables up to this many bytes are read with 16-bit LPM pointers on AVR: the linker
#: puts .progmem first in flash, so they end below 64 KB (the size step verifies it)
NEAR_LIMIT = 60 * 1024


#: neurons sharing each input load in a DSP layer (four accumulators, the rest of the registers for
#: weights, inputs and pointers)
DSP_ROWS = 4


def render(model, *, precision, storage, passes_log, input_range, dsp=None):
    if input_range is None:
        raise NNBuildError(f"precision {precision} needs the model's input range to prove its formats")
    plan = q.quantize(model, precision, input_range)
    name = model.name
    layers = plan_layers(model.name, plan, storage)
    for layer in layers:
        layer["dsp"] = dsp_layer(model.name, plan.layers[layer["index"]], layer, storage, dsp)
    flash = flash_bytes(layers, plan)
    near = storage == common.NEAR_STORAGE or (storage == "avr-progmem-far" and flash <= NEAR_LIMIT)
    for layer in layers:  # the AVR dot-product loops read rows with LPM Z+ (near flash), 4 inputs a turn
        fits_loop = near and 4 <= layer["inputs"] <= 4 * 255 + 3
        fits_pair = near and 8 <= layer["inputs"] <= 8 * 255 + 7  # the group kernels (NN_DOT16P, ...): 8 inputs a turn
        layer["pair"] = not layer["dsp"] and fits_pair and (layer["mac16"] or layer["mac8"]) and layer["units"] % 2 == 0
        layer["dot16"] = fits_loop and layer["mac16"] and not layer["pair"]
        layer["dot8"] = fits_loop and layer["mac8"] and not layer["pair"]
        layer["dot"] = "NN_DOT16" if layer["dot16"] else ("NN_DOT8" if layer["dot8"] else None)
        if layer["pair"]:
            pair_layer(model.name, plan.layers[layer["index"]], layer, storage)
    for layer, after in zip(layers, layers[1:] + [None]):  # a paired layer reads its inputs offset
        layer["offset_out"] = after is not None and after["pair"]
    context = {
        "name": name, "guard": name.upper(), "version": __version__,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
        "precision": precision, **common.storage_context(storage), "near": near, "flash_bytes": flash,
        "mac16": any(l["mac16"] and not l["pair"] and not l["dsp"] for l in layers), "dot16": any(l["dot16"] for l in layers),
        "dot8": any(l["dot8"] for l in layers), "pair16": any(l["pair"] and l["mac16"] for l in layers),
        "pair8": any(l["pair"] and l["mac8"] for l in layers), "offset_xq": bool(layers) and layers[0]["pair"],
        "read64": any(l["bias"]["bits"] == 64 for l in layers),
        "dsp": any(l["dsp"] for l in layers),
        "dsp8": any(l["dsp"] and l["wbits"] == 8 for l in layers),
        "sar8": any(l["q"].acc_bits == 32 and l["q"].shift >= 8 for l in layers),
        "asr_shifts": sorted({asr_shift(l["q"]) for l in layers} - {0}),
        "tanh_asm": near,  # nn_tanh_q in AVR assembly (16-bit tables in near flash), as in the CNN shapes
        "shr64": any(l["q"].acc_bits == 64 and 0 < l["q"].shift < 32 and not l["q"].saturate_z for l in layers)
                 or any(l["q"].per_mac_shift for l in layers),
        "n_in": model.input_size, "n_out": model.output_size, "plan": plan, "layers": layers,
        "buffer": max([l["units"] for l in layers[:-1]], default=0),
        "buffer_type": max((l["output"] for l in layers[:-1]), key=lambda t: t.bits, default=plan.input).ctype,
        "tanh_tables": tables_for(plan), "exp_table": literal_rows(q.exp_table()) if needs(plan, "softmax") else None,
        "weights_sha256": weights_digest(model), "index_type": index_type, "readers": READERS,
        "z_frac": q.Z_FRAC, "tanh_points": q.TANH_POINTS, "tanh_step_size": 2 ** q.TANH_STEP_BITS, "z_limit": q.Z_LIMIT, "tanh_step": q.Z_FRAC - q.TANH_STEP_BITS,
        "exp_step": q.Z_FRAC - q.EXP_STEP_BITS,
        "tanh_mask": (1 << (q.Z_FRAC - q.TANH_STEP_BITS)) - 1, "tanh_half": 1 << (q.Z_FRAC - q.TANH_STEP_BITS - 1),
        "exp_mask": (1 << (q.Z_FRAC - q.EXP_STEP_BITS)) - 1, "exp_half": 1 << (q.Z_FRAC - q.EXP_STEP_BITS - 1), "input_scale": float_literal(2.0 ** plan.input.frac),
        "output_scale": float_literal(2.0 ** -plan.output.frac),
        "input_lo": float_literal(plan.input_range[0]), "input_hi": float_literal(plan.input_range[1]),
        **input_bounds(plan),
    }
    code, facts, _ = common.render("mlp_fixed.c.j2", context, common.FlowFacts(name))
    trace_layers = [dict(l, source_type="Dense") for l in layers]
    files = {
        f"{name}.h": templating.render("mlp.h.j2", context),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("mlp_weights.h.j2", context),
        f"{name}_weights.c": templating.render("mlp_weights.c.j2", context),
        f"{name}.flowfacts.json": facts,
    }
    record = common.trace(model, trace_layers, facts, passes_log)
    record["fixed_point"] = plan.summary()
    if near:
        record["near_flash_symbols"] = sorted(near_symbols(layers, context))
    files[f"{name}.trace.json"] = record
    return files


def float_key(value):
    """The float32's bits as an unsigned integer that orders like the float (negatives reversed)."""
    bits = int(np.float32(value).view(np.uint32))
    return (~bits & 0xFFFFFFFF) if bits & 0x80000000 else bits | 0x80000000


def input_bounds(plan):
    """nn_quantize's clamp constants, and the largest left shift the clamped range can need:
    |x| * 2^frac = m * 2^-k (m a 24-bit significand, k = 23 - frac - exponent at the range's
    largest magnitude), so k >= 0 unless frac + exponent > 23; k = 0 needs no shift at all."""
    lo, hi = (np.float32(v) for v in plan.input_range)
    top = max(abs(float(lo)), abs(float(hi)))
    exponent = int(np.frexp(np.float32(top))[1]) - 1 if top > 0 else -127   # top in [2^e, 2^(e+1))
    left = max(0, exponent + plan.input.frac - 23)
    if left > 7:
        raise NNBuildError(f"input range [{lo}, {hi}] at Q{plan.input.frac} does not fit a 32-bit input")
    if not 0 < 126 - plan.input.frac < 256:  # nn_quantize's byte compare of the exponent with 126 - frac
        raise NNBuildError(f"input format Q{plan.input.frac} is outside nn_quantize's Q-130..Q125")
    return {"input_lo_bits": int(lo.view(np.uint32)), "input_hi_bits": int(hi.view(np.uint32)),
            "input_lo_key": float_key(lo), "input_hi_key": float_key(hi), "max_left_shift": left}


def needs(plan, activation):
    return any(l.activation == activation for l in plan.layers)


def tables_for(plan):
    """One tanh table per output format used by tanh/sigmoid layers: {frac: (ctype, rows)}."""
    fracs = sorted({l.output.frac for l in plan.layers if l.activation in ("tanh", "sigmoid")})
    return {f: ("int16_t" if f <= 14 else "int32_t", 16 if f <= 14 else 32, literal_rows(q.tanh_table(f)))
            for f in fracs}


def literal_rows(values, per_line=12):
    text = [str(int(v)) for v in values]
    return [", ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]


def plan_layers(prefix, plan, storage):
    """Template view of each quantised layer: buffers, typed weight chunks, accumulator, shifts."""
    out, src = [], "xq"
    for index, layer in enumerate(plan.layers):
        last = index == len(plan.layers) - 1
        dst = "yq" if last else ("buf0" if src != "buf0" else "buf1")
        bias_bits = 32 if np.abs(layer.bias_q).max(initial=0) < 2 ** 31 else 64
        cname = c_identifier(layer.name)
        out.append({
            "index": index, "name": layer.name, "c_name": cname, "source_type": "Dense",
            "activation": layer.activation, "inputs": layer.inputs, "units": layer.units,
            "src": src, "dst": dst, "q": layer, "kind": "dense", "output": layer.output,
            "acc_type": f"int{layer.acc_bits}_t",
            "product": product_expression(layer), "product_bits": product_bits(layer),
            "chunks": chunks(prefix, cname, layer, storage),
            "bias": {"symbol": f"{prefix}_{cname}_b", "size": layer.units, "ctype": f"int{bias_bits}_t",
                     "bits": bias_bits, "values": literal_rows(layer.bias_q, 8)},
            "wbits": layer.weight.bits, "wtype": layer.weight.ctype,
            "mac16": (layer.weight.bits == 16 and layer.input.bits == 16 and layer.acc_bits == 32
                      and not layer.per_mac_shift),
            "asr": True,
            "mac8": (layer.weight.bits == 8 and layer.input.bits == 16 and layer.acc_bits == 32
                     and not layer.per_mac_shift),
        })
        src = dst
    return out


def product_expression(layer):
    """C for one MAC term from `W` (weight read) and `X` (input element), exact by construction."""
    if layer.per_mac_shift:
        s = layer.per_mac_shift
        return f"nn_shr64((int64_t)W * X + ((int64_t)1 << {s - 1}), {s})"
    wide = "int64_t" if max(layer.weight.bits, layer.input.bits) > 16 else "int32_t"
    return f"({wide})W * X"


def product_bits(layer):
    """Width of the C type of product_expression (nn_shr64 returns int32_t)."""
    if layer.per_mac_shift:
        return 32
    return 64 if max(layer.weight.bits, layer.input.bits) > 16 else 32


def chunks(prefix, cname, layer, storage):
    """Kernel rows [out][in] as typed arrays, split under avr-gcc's object limit on AVR."""
    rows = layer.kernel_q
    bounds = common.row_chunks(rows.shape[0], rows.shape[1] * layer.weight.bits // 8, storage, f"Dense '{layer.name}'")
    return [{"symbol": f"{prefix}_{cname}_w{c}", "start": a, "rows": b - a, "size": (b - a) * rows.shape[1],
             "ctype": layer.weight.ctype, "values": literal_rows(rows[a:b].ravel(), 8)}
            for c, (a, b) in enumerate(bounds)]


def asr_shift(qlayer):
    """The bits the requantisation shifts by with an unrolled nn_asr<k> (fixed_macros.requantize):
    the whole shift below 8, what is left after nn_sar8 between 8 and 16, else 0 (none)."""
    if qlayer.acc_bits != 32:
        return 0
    s = qlayer.shift
    return s if 0 < s < 8 else (s - 8 if 8 < s < 16 else 0)


#: the group kernels by weight bits and neurons per pass (four 32-bit accumulators are as many as
#: the AVR's registers hold beside a kernel's own)
GROUP_KERNELS = {(16, 2): "NN_DOT16P", (16, 4): "NN_DOT16Q", (8, 2): "NN_DOT8P", (8, 4): "NN_DOT8Q"}


def group_runs(units):
    """An even `units` as runs [(neurons per pass, passes)]: fours, then a pair for the 2 left over."""
    return [(4, units // 4)] * (units >= 4) + [(2, 1)] * (units % 4 == 2)


def pair_layer(prefix, qlayer, layer, storage):
    """Turn `layer` into a grouped layer (NN_DOT16Q / NN_DOT8Q, four neurons per pass, and
    NN_DOT16P / NN_DOT8P for a pair left over): the neurons of a pass share each input load, and
    offset-unsigned operands make every partial product one unsigned MUL.

    The weights of the neurons of one pass are interleaved ([pass][input][g]) and stored offset,
    wu = w + 2^(b-1) for b-bit weights (w's bits with the top bit flipped); the layer before
    stores the inputs offset too, xu = x + 2^15 (nn_offset16). Since, over n inputs,
        sum wu*xu = sum w*x + 2^15 * sum wu + 2^(b-1) * sum xu - n * 2^(b-1) * 2^15,
    the stored bias is bias' = bias - 2^15 * sum wu + n * 2^(b+14) (a constant, wrapped to
    int32) and the code subtracts 2^(b-1) * sum xu, computed once per layer. Every step is exact
    modulo 2^32 and the true accumulator is proven to fit int32, so the result is
    nnbuild.numerics.bitexact's accumulator to the bit.
    """
    bits = qlayer.weight.bits
    kernel = np.asarray(qlayer.kernel_q, dtype=np.int64)
    units, inputs = kernel.shape
    offset = kernel + (1 << (bits - 1))
    layer["chunks"] = []
    start = 0
    for g, passes in group_runs(units):
        for a, b in common.row_chunks(passes, g * inputs * bits // 8, storage, f"Dense '{qlayer.name}'"):
            first = start + g * a
            rows = offset[first:start + g * b].reshape(b - a, g, inputs).transpose(0, 2, 1)
            layer["chunks"].append({"symbol": f"{prefix}_{layer['c_name']}_w{len(layer['chunks'])}", "start": first,
                                    "rows": g * (b - a), "size": g * (b - a) * inputs, "ctype": f"uint{bits}_t",
                                    "group": g, "dot": GROUP_KERNELS[(bits, g)],
                                    "values": literal_rows(rows.ravel(), 8)})
        start += g * passes
    bias = np.asarray(qlayer.bias_q, dtype=np.int64) - (offset.sum(axis=1) << 15) + (inputs << (bits + 14))
    wrapped = ((bias + (1 << 31)) % (1 << 32)) - (1 << 31)
    layer["bias"].update(ctype="int32_t", bits=32, values=int32_rows(wrapped, 8))
    layer["dot"] = GROUP_KERNELS[(bits, 2)]
    layer["sum_shift"] = bits - 1
    layer["utype"] = f"uint{bits}_t"


def dsp_layer(prefix, qlayer, layer, storage, dsp):
    """Lay out `layer` for the DSP kernels (SMLAD: two 16x16 multiply-accumulates into 32 bits per
    instruction) when the board has the capability `dsp` and the layer's arithmetic is one of theirs;
    returns whether it did.

    Neurons go in groups of DSP_ROWS (the last group holds the rest), every input pair loaded once for
    the group. The weights become one uint32_t stream walked in the order the code reads it: per group
    and per turn of 4 inputs, each neuron's words in turn; int16 weights two per word (input 2k low,
    2k+1 high, as the inputs' own pairs in memory); int8 weights four per word with bytes w0 w2 w1 w3,
    so SXTB16 gives the pair (w0, w1) and SXTB16 of the word rotated by 8 the pair (w2, w3). The
    inputs left after the last turn of 4 get one word per neuron, zero where no input is.

    SMLAD sums modulo 2^32 and sets the Q flag on signed overflow; nothing reads Q, and the plan
    bounds |bias| + sum |w| * max|x| by int32 (acc_bound, checked here again), which bounds every
    partial sum in any order: no sum the kernel forms overflows, so it is the exact accumulator of
    nnbuild.numerics.bitexact whatever the order of the terms.
    """
    if dsp not in common.DSP_CAPABILITIES or storage != "const" or not (layer["mac16"] or layer["mac8"]):
        return False
    if layer["bias"]["bits"] != 32 or qlayer.acc_bound > 2 ** 31 - 1:
        return False
    layer.update(dsp_pack(f"{prefix}_{layer['c_name']}_w0", qlayer.kernel_q, qlayer.weight.bits))
    layer["wtype"] = "uint32_t"
    return True


def dsp_pack(symbol, kernel, bits, segments=1):
    """The template view of a DSP layer of `kernel` ([neuron][input] integers of `bits` bits): its one
    weight array `symbol` (the word stream), the group loops, turns of 4 inputs and the tail of each
    of its `segments` equal runs of inputs (a convolution's kernel rows; the stream holds, per group,
    each segment's words in turn)."""
    kernel = np.asarray(kernel, dtype=np.int64)
    units, inputs = kernel.shape
    run = inputs // segments
    if run * segments != inputs:
        raise NNBuildError(f"internal error: {inputs} inputs in {segments} equal segments")
    stream = np.concatenate([dsp_group_words(kernel[start:start + rows, s * run:(s + 1) * run], bits)
                             for start, rows in dsp_groups(units) for s in range(segments)])
    inputs = run
    return {"chunks": [{"symbol": symbol, "start": 0, "rows": units, "size": int(stream.size), "ctype": "uint32_t",
                        "bits": 32, "values": hex_rows(stream, 6)}],
            "groups": [{"start": start, "rows": rows, "count": count} for start, rows, count in dsp_group_loops(units)],
            "turns": inputs // 4, "tail": inputs % 4, "wtype": "uint32_t"}


def dsp_groups(units):
    """(first neuron, neurons) of each DSP group: full groups of DSP_ROWS, then the rest."""
    full = units // DSP_ROWS
    groups = [(g * DSP_ROWS, DSP_ROWS) for g in range(full)]
    return groups + ([(full * DSP_ROWS, units % DSP_ROWS)] if units % DSP_ROWS else [])


def dsp_group_loops(units):
    """(first neuron, neurons per group, groups) of the code's group loops: the full groups in one
    loop, the rest in a group of its own."""
    full = units // DSP_ROWS
    loops = [(0, DSP_ROWS, full)] if full else []
    return loops + ([(full * DSP_ROWS, units % DSP_ROWS, 1)] if units % DSP_ROWS else [])


def dsp_group_words(rows, bits):
    """The uint32 words of one group of neurons (`rows`: [neuron][input] integers), in read order."""
    units, inputs = rows.shape
    padded = np.zeros((units, -(-inputs // 4) * 4), dtype=np.int64)
    padded[:, :inputs] = rows
    mask = (1 << bits) - 1
    quads = (padded & mask).reshape(units, -1, 4)           # [neuron][turn][4 inputs], two's complement
    if bits == 16:
        lo = quads[:, :, 0::2] | (quads[:, :, 1::2] << 16)  # [neuron][turn][2 words]
        main = lo[:, :inputs // 4].transpose(1, 0, 2).ravel()
        tail = lo[:, inputs // 4, :(inputs % 4 + 1) // 2].T.ravel() if inputs % 4 else np.zeros(0, np.int64)
    else:
        word = quads[:, :, 0] | (quads[:, :, 2] << 8) | (quads[:, :, 1] << 16) | (quads[:, :, 3] << 24)
        main = word[:, :inputs // 4].T.ravel()
        tail = word[:, inputs // 4] if inputs % 4 else np.zeros(0, np.int64)
    return np.concatenate([main, tail]).astype(np.uint64)


def hex_rows(values, per_line=6):
    text = [f"0x{int(v):08x}u" for v in values]
    return [", ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]


def int32_rows(values, per_line=8):
    """literal_rows for int32 values, INT32_MIN spelled as a C constant expression of type int."""
    text = ["(-2147483647 - 1)" if int(v) == -(1 << 31) else str(int(v)) for v in values]
    return [", ".join(text[i:i + per_line]) for i in range(0, len(text), per_line)]


def flash_bytes(layers, plan):
    """Bytes of every constant array the code reads from flash (weights, biases, tables)."""
    total = 0
    for layer in layers:
        total += sum(c["size"] for c in layer["chunks"]) * (4 if layer["dsp"] else layer["wbits"] // 8)
        total += layer["bias"]["size"] * layer["bias"]["bits"] // 8
    total += len(tables_for(plan)) * q.TANH_POINTS * 4 + (q.EXP_POINTS * 4 if needs(plan, "softmax") else 0)
    return total


def near_symbols(layers, context):
    names = [c["symbol"] for l in layers for c in l["chunks"]] + [l["bias"]["symbol"] for l in layers]
    names += [f"nn_tanh_table_q{f}" for f in context["tanh_tables"]]
    return names + (["nn_exp_table"] if context["exp_table"] else [])
