"""MLP code shape (Keras2C, Pearce et al., Algorithm 1): one function, static bounded loops.

Each Dense layer is a neuron loop around a sequential walk of that neuron's weight row, so weights
are read in storage order (one pointer increment per MAC, cheap on an 8-bit MCU). Every loop bound
is a literal and is repeated in NN_LOOPBOUND(n) for WCET tools; the same bounds go to the flow
facts file. Weights live in `<name>_weights.c` so a weight edit leaves `<name>.c` byte-identical.
On hosts (storage const-simd) float layers compute 16 neurons per pass with GCC/Clang vectors, one
neuron per lane, from weights interleaved for them: the same sums in the same order. With the
scalar storages, up to BLOCK neurons per pass in `register` accumulators: with const (the MCU
targets') their rows read through one pointer at constant offsets; with const-host (a host's plain
C99) their weights interleaved [block][input][neuron] and the activation in a pass of its own, the
form gcc -O3 computes in vector registers (AVR flash keeps one neuron at a time).
"""

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import common, templating
from nnbuild.codegen.common import bias_array, index_type, weight_chunks, weights_digest
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir.graph import Activation, Dense
from nnbuild.numerics import float_facts

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "q8", "fix16", "fixedW.F")


#: neurons computed together: each input value is loaded once for BLOCK weight rows (each neuron
#: still sums its products in input order, so the results are bit for bit those of one neuron at a
#: time). 12 accumulators, the input and a product fit x86-64's 16 SSE registers; the accumulators
#: and pointers are `register` locals, which gcc keeps in registers even at -O0. Not on AVR:
#: soft-float dominates there and 12 float accumulators do not fit its registers.
BLOCK = 12

#: the blocked scalar loop over the inputs is unrolled UNROLL times by gcc on x86-64 hosts
#: (NN_UNROLL: loop test, pointer increments and branch paid once per UNROLL inputs)
UNROLL = 8


def block_for(storage):
    return 1 if storage in common.FLASH_STORAGES else BLOCK


#: storage const-simd: bytes of one vector (SSE2, the x86-64 baseline; NEON) and vectors per pass
#: over the inputs (4 x 4 float32 lanes = 16 neurons: 4 accumulators, the broadcast input and a
#: product fit x86-64's 16 vector registers). Each lane is one neuron summing its products in input
#: order, as the scalar code does, so the results are bit for bit the same.
VECTOR_BYTES = 16
VECTORS = 4


def vector_lanes(storage, real):
    """Neurons per vector with storage const-simd (0: scalar code)."""
    if storage != common.SIMD_STORAGE:
        return 0
    return VECTOR_BYTES // (4 if real == "float" else 8)


#: the fixed-point layers have DSP-extension kernels (common.DSP_CAPABILITIES, mlp_fixed.dsp_layer)
DSP_KERNELS = True
#: the flush + sign-split accumulation is generated for soft-float boards (board key soft_float)
SOFT_FLOAT_SPLIT = True


def render(model, *, precision, storage, passes_log, input_range=None, dsp=None, soft_float=False):
    """All output files of `model` as {file name: text or JSON-able object}; `dsp`: the board's DSP
    capability (fixed-point precisions only); `soft_float`: the board has no FPU (common.split_accumulation)."""
    from nnbuild.numerics import formats as quantize
    if quantize.is_fixed(precision):
        from nnbuild.codegen import mlp_fixed
        return mlp_fixed.render(model, precision=precision, storage=storage, passes_log=passes_log,
                                input_range=input_range, dsp=dsp)
    if precision == "float64" and storage in common.FLASH_STORAGES:
        raise NNBuildError("precision float64 needs a 64-bit double; avr-gcc's double is 32 bits")
    real = common.REALS[precision][0]
    name = model.name
    layers = plan_layers(model, storage, real, soft_float)
    context = {
        "name": name,
        "guard": name.upper(),
        "version": __version__,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
        "precision": precision,
        **common.storage_context(storage),
        "n_in": model.input_size,
        "n_out": model.output_size,
        "layers": layers,
        "buffer": max([l["units"] for l in layers[:-1]], default=0),
        # split float32 layers reading the input flush it into a copy (the API's `in` is const)
        "xin": any(l.get("facts") and l["src"] == "in" for l in layers),
        "mul_tags": float_facts.MUL_TAGS,
        "add_tags": float_facts.ADD_TAGS,
        "one_normal_tags": float_facts.ONE_NORMAL_TAGS,
        "no_subnormal_tags": float_facts.NO_SUBNORMAL_TAGS,
        "normal_product_tags": float_facts.NO_SUBNORMAL_TAGS + float_facts.NORMAL_PRODUCT_TAGS,
        "flushed_source": flushed_source,
        # relu is written at its store (no call); the others are functions
        "activations": sorted({l["activation"] for l in layers} - {"linear", "relu"}),
        "block": 1 if common.split_accumulation(storage, real, soft_float) else block_for(storage),
        # the host's blocked loops only (not AVR flash, not the vector code)
        "unroll": UNROLL if any(c.get("block") for l in layers for c in l.get("chunks") or ()) else 0,
        "simd": any(c.get("lanes") for l in layers for c in l.get("chunks") or ()),
        "vector_bytes": VECTOR_BYTES,
        "vec": f"{name}_vec",
        "weights_sha256": weights_digest(model),
        "index_type": index_type,
        **common.reals(precision),
        "tanh_form": common.tanh_form(storage, precision),
    }
    code, facts, _ = common.render("mlp.c.j2", context, common.FlowFacts(name))
    files = {
        f"{name}.h": templating.render("mlp.h.j2", context),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("mlp_weights.h.j2", context),
        f"{name}_weights.c": templating.render("mlp_weights.c.j2", context),
    }
    files[f"{name}.flowfacts.json"] = facts
    files[f"{name}.trace.json"] = common.trace(model, layers, facts, passes_log)
    if storage == common.NEAR_STORAGE:
        files[f"{name}.trace.json"]["near_flash_symbols"] = common.weight_symbols(layers)
    return files


def flushed_source(layer):
    """The buffer a split layer reads its flushed inputs from (`in` is const: copied to xin)."""
    return "xin" if layer["src"] == "in" else layer["src"]


def layer_chunks(prefix, layer, storage, real, split=False):
    """The weight arrays of a Dense layer: row chunks; with const-simd first the rows that fill
    whole vectors, interleaved for them, then the rows left (scalar code)."""
    lanes = vector_lanes(storage, real)
    vector_rows = layer.units // lanes * lanes if lanes else 0
    if not vector_rows:
        return scalar_chunks(prefix, layer, storage, real, split=split)
    rows = np.asarray(layer.kernel, dtype=np.float32).T
    count = vector_rows // lanes
    chunk = {"symbol": f"{prefix}_{c_identifier(layer.name)}_wv", "start": 0, "rows": vector_rows,
             "ctype": f"{prefix}_vec", "size": count * rows.shape[1], "lanes": lanes,
             "blocks": count // VECTORS, "vectors": VECTORS, "tail": count % VECTORS,
             "groups": interleaved(rows[:vector_rows], lanes, layer)}
    rest = []
    if vector_rows < layer.units:
        rest = scalar_chunks(prefix, layer, storage, real, first=vector_rows)
    return [chunk] + rest


def scalar_chunks(prefix, layer, storage, real, first=0, split=False):
    """Scalar code's weight arrays (from row `first`): on AVR flash and in a split layer rows in
    order (one neuron at a time); elsewhere BLOCK neurons per pass over the inputs, with const-host
    their weights interleaved for it (`groups`), else rows in order (read at constant row offsets)."""
    chunks = weight_chunks(prefix, layer, storage, real, first=first)
    if storage not in common.FLASH_STORAGES and not split:
        rows = np.asarray(layer.kernel, dtype=np.float32).T
        for chunk in chunks:
            passes = -(-chunk["rows"] // BLOCK)
            chunk["block"] = -(-chunk["rows"] // passes)   # balanced: 50 rows as 5 x 10, not 4 x 12 + 2
            if storage == common.HOST_STORAGE:
                start = chunk["start"]
                chunk["groups"] = blocked(rows[start:start + chunk["rows"]], chunk["block"], start, layer)
                del chunk["values"]
    return chunks


def blocked(rows, per_block, first, layer):
    """Rows [out][in] as [block][in][neuron], blocks of `per_block` neurons (the last may be
    smaller): a pass over one block's inputs reads its weights in storage order, the block's
    weights of one input side by side. One group of lines per block, a line per input."""
    common.check_finite(rows, layer)
    groups = []
    for start in range(0, rows.shape[0], per_block):
        block = rows[start:start + per_block]
        lines = [", ".join(common.float_literal(v) for v in block[:, k].tolist()) for k in range(rows.shape[1])]
        groups.append({"first": first + start, "last": first + start + block.shape[0] - 1, "lines": lines})
    return groups


def interleaved(rows, lanes, layer):
    """Rows [out][in] as vectors [block][in][vector], lane l of vector v of block j being neuron
    lanes * (VECTORS * j + v) + l: one group of lines per block, a line per input."""
    common.check_finite(rows, layer)
    groups = []
    per_block = lanes * VECTORS
    for start in range(0, rows.shape[0], per_block):
        block = rows[start:start + per_block]
        lines = [", ".join("{" + ", ".join(common.float_literal(v) for v in block[l:l + lanes, k].tolist()) + "}"
                           for l in range(0, block.shape[0], lanes))
                 for k in range(rows.shape[1])]
        groups.append({"first": start, "last": start + block.shape[0] - 1, "lines": lines})
    return groups


def deferred_activation(entry, real):
    """With const-host, blocked layers apply relu, tanh or sigmoid in a pass after their sums: a
    block that ends in plain stores is what gcc's SLP vectoriser turns into vector code at -O3 (a
    relu's conditional or a call at the store stops it). float64 keeps it at the store into the
    float `out` (the activation is computed in double before the conversion). Not with const: on
    the MCU targets the pass would only cost cycles."""
    blocked = any(c.get("groups") and c.get("block") for c in entry["chunks"])
    return (blocked and entry["activation"] not in ("linear", "softmax")
            and not (real != "float" and entry["dst"] == "out"))


def plan_layers(model, storage, real="float", soft_float=False):
    """Per layer: source/destination buffers, weight arrays (split in chunks) and loop bounds."""
    shapes = model.shapes()
    if any(len(s) != 1 for s in shapes):
        raise NNBuildError("the MLP shape handles rank-1 tensors only "
                           f"(shapes {shapes})", path=model.source_files[0] if model.source_files else None)
    planned, src, previous = [], "in", None
    for index, layer in enumerate(model.layers):
        last = index == len(model.layers) - 1
        dst = "out" if last else ("buf0" if src != "buf0" else "buf1")
        entry = {"index": index, "name": layer.name, "source_type": layer.source_type,
                 "c_name": c_identifier(layer.name), "src": src, "dst": dst,
                 "inputs": shapes[index][0], "units": shapes[index + 1][0], "facts": None}
        if isinstance(layer, Dense):
            split = common.split_accumulation(storage, real, soft_float)
            entry.update(kind="dense", activation=layer.activation,
                         chunks=layer_chunks(model.name, layer, storage, real, split),
                         bias=bias_array(model.name, layer, real),
                         split=split,
                         weights_normal=real == "float" and float_facts.zero_or_normal(layer.kernel),
                         input_not_subnormal=float_facts.not_subnormal_output(previous) if real == "float" else None,
                         normal_products=real == "float" and float_facts.normal_products(layer.kernel))
            entry["deferred"] = deferred_activation(entry, real)
            if entry["split"]:
                entry.update(common.split_plan(layer.kernel, storage, f"{model.name}_{entry['c_name']}_keep_exp",
                                               layer.bias))
        elif isinstance(layer, Activation):
            entry.update(kind="activation", activation=layer.activation)
        else:
            raise NNBuildError(f"{layer.source_type} layer '{layer.name}' has no MLP code shape")
        planned.append(entry)
        previous = entry.get("activation") if entry["kind"] in ("dense", "activation") else None
        src = dst
    return planned
