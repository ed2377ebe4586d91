"""MLP code shape (Keras2C, Pearce et al., Algorithm 1): one function, static bounded loops.

Each Dense layer is a neuron loop around a sequential walk of that neuron's weight row, so weights
are read in storage order (one pointer increment per MAC, cheap on an 8-bit MCU). Every loop bound
is a literal and is repeated in NN_LOOPBOUND(n) for WCET tools; the same bounds go to the flow
facts file. Weights live in `<name>_weights.c` so a weight edit leaves `<name>.c` byte-identical.
"""

import hashlib
import re

import numpy as np

from nnbuild import __version__
from nnbuild.codegen import templating
from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir.graph import Activation, Dense

#: avr-gcc rejects any object over PTRDIFF_MAX (32,767 bytes): weight arrays are split below it.
MAX_ARRAY_BYTES = 32767
FLOAT_BYTES = 4

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64", "q16", "q16-acc32", "fix16", "fixedW.F")


#: C spelling of each float precision: type, literal suffix, exp, tanh saturation point (where
#: tanh is within half an ulp of 1) and that gap
REALS = {"float32": ("float", "f", "expf", 9, "3e-8"), "float64": ("double", "", "exp", 19, "6e-17")}


def render(model, *, precision, storage, passes_log, input_range=None):
    """All output files of `model` as {file name: text or JSON-able object}."""
    from nnbuild.numerics import formats as quantize
    if quantize.is_fixed(precision):
        from nnbuild.codegen import mlp_fixed
        return mlp_fixed.render(model, precision=precision, storage=storage, passes_log=passes_log,
                                input_range=input_range)
    if precision == "float64" and storage == "avr-progmem-far":
        raise NNBuildError("precision float64 needs a 64-bit double; avr-gcc's double is 32 bits")
    real, sfx, exp, tanh_limit, tanh_gap = REALS[precision]
    name = model.name
    layers = plan_layers(model, storage, real)
    context = {
        "name": name,
        "guard": name.upper(),
        "version": __version__,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
        "precision": precision,
        "far": storage == "avr-progmem-far",
        "n_in": model.input_size,
        "n_out": model.output_size,
        "layers": layers,
        "buffer": max([l["units"] for l in layers[:-1]], default=0),
        "activations": sorted({l["activation"] for l in layers} - {"linear"}),
        "weights_sha256": weights_digest(model),
        "index_type": index_type,
        "real": real, "sfx": sfx, "exp": exp, "tanh_limit": tanh_limit, "tanh_gap": tanh_gap,
    }
    code = templating.render("mlp.c.j2", context)
    files = {
        f"{name}.h": templating.render("mlp.h.j2", context),
        f"{name}.c": code,
        f"{name}_weights.h": templating.render("mlp_weights.h.j2", context),
        f"{name}_weights.c": templating.render("mlp_weights.c.j2", context),
    }
    files[f"{name}.flowfacts.json"] = flow_facts(name, code)
    files[f"{name}.trace.json"] = trace(model, layers, code, passes_log)
    return files


def plan_layers(model, storage, real="float"):
    """Per layer: source/destination buffers, weight arrays (split in chunks) and loop bounds."""
    shapes = model.shapes()
    if any(len(s) != 1 for s in shapes):
        raise NNBuildError("the MLP shape handles rank-1 tensors only "
                           f"(shapes {shapes})", path=model.source_files[0] if model.source_files else None)
    planned, src = [], "in"
    for index, layer in enumerate(model.layers):
        last = index == len(model.layers) - 1
        dst = "out" if last else ("buf0" if src != "buf0" else "buf1")
        entry = {"index": index, "name": layer.name, "source_type": layer.source_type,
                 "c_name": c_identifier(layer.name), "src": src, "dst": dst,
                 "inputs": shapes[index][0], "units": shapes[index + 1][0]}
        if isinstance(layer, Dense):
            entry.update(kind="dense", activation=layer.activation,
                         chunks=weight_chunks(model.name, layer, storage, real),
                         bias=bias_array(model.name, layer, real))
        elif isinstance(layer, Activation):
            entry.update(kind="activation", activation=layer.activation)
        else:
            raise NNBuildError(f"{layer.source_type} layer '{layer.name}' has no MLP code shape")
        planned.append(entry)
        src = dst
    return planned


def weight_chunks(prefix, layer, storage, real="float"):
    """The kernel as [out][in] rows, split into balanced chunks each under MAX_ARRAY_BYTES on AVR."""
    rows = np.asarray(layer.kernel, dtype=np.float32).T
    row_bytes = rows.shape[1] * FLOAT_BYTES
    if storage == "avr-progmem-far":
        if row_bytes > MAX_ARRAY_BYTES:
            raise NNBuildError(f"a weight row of {row_bytes} bytes exceeds avr-gcc's 32,767-byte object limit",
                               item=f"Dense '{layer.name}'")
        per_chunk = MAX_ARRAY_BYTES // row_bytes
        count = -(-rows.shape[0] // per_chunk)
    else:
        count = 1
    bounds = np.linspace(0, rows.shape[0], count + 1).round().astype(int)
    chunks = []
    for c, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        chunks.append({"symbol": f"{prefix}_{c_identifier(layer.name)}_w{c}", "start": int(start), "ctype": real,
                       "rows": int(stop - start), "size": int((stop - start) * rows.shape[1]),
                       "values": format_values(rows[start:stop].ravel(), layer)})
    return chunks


def bias_array(prefix, layer, real="float"):
    if layer.bias is None:
        return None
    return {"symbol": f"{prefix}_{c_identifier(layer.name)}_b", "size": int(layer.bias.size), "ctype": real,
            "values": format_values(np.asarray(layer.bias, dtype=np.float32), layer)}


def format_values(values, layer):
    """Float32 literals that round-trip exactly (%.9g), 8 per line."""
    if not np.all(np.isfinite(values)):
        raise NNBuildError("weights contain NaN or infinity", item=f"Dense '{layer.name}'")
    literals = [float_literal(v) for v in values.tolist()]
    return [", ".join(literals[i:i + 8]) for i in range(0, len(literals), 8)]


def float_literal(value):
    """%.9g round-trips float32 (the weights are float32 whatever precision computes with them)."""
    text = "%.9g" % value
    if not re.search(r"[.eE]", text):
        text += ".0"
    return text + "f"


def index_type(bound):
    """The narrowest fast unsigned type for a loop index below `bound` (8-bit on AVR when it fits)."""
    return "uint_fast8_t" if bound <= 255 else "uint_fast16_t"


def weights_digest(model):
    """sha256 over every weight array, named in the weights file for traceability."""
    digest = hashlib.sha256()
    for layer in model.layers:
        for array in (getattr(layer, "kernel", None), getattr(layer, "bias", None)):
            if array is not None:
                digest.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return digest.hexdigest()


LAYER_MARK = re.compile(r"/\* nnbuild-layer (\S+) \*/")
LOOP_MARK = re.compile(r"NN_LOOPBOUND\((\d+)\)")


def flow_facts(name, code):
    """Loop bounds and layer line ranges, read back from the rendered C (so lines are exact)."""
    lines = code.splitlines()
    entry = f"{name}_infer"
    loops, layers, current, pending, open_loops = [], [], None, None, []
    for number, text in enumerate(lines, start=1):
        mark = LAYER_MARK.search(text)
        if mark:
            if layers:
                layers[-1]["last_line"] = number - 1
            current = mark.group(1)
            layers.append({"name": current, "function": entry, "file": f"{name}.c",
                           "first_line": number, "last_line": None})
        if "nnbuild-end" in text and layers:
            layers[-1]["last_line"] = number
        bound = LOOP_MARK.search(text)
        if bound and "#define" not in text:
            pending = int(bound.group(1))
        elif pending is not None and text.strip().startswith("for ("):
            loops.append({"function": entry, "file": f"{name}.c", "line": number,
                          "last_line": None, "max_iterations": pending, "layer": current})
            open_loops.append((len(text) - len(text.lstrip()), loops[-1]))
            pending = None
        elif open_loops and text.strip() == "}" and len(text) - len(text.lstrip()) == open_loops[-1][0]:
            open_loops.pop()[1]["last_line"] = number
    return {"entry": entry, "loops": loops, "layers": layers}


def trace(model, layers, code, passes_log):
    """Model layer -> generated code and weight arrays, for the traceability report."""
    facts = flow_facts(model.name, code)
    ranges = {l["name"]: (l["first_line"], l["last_line"]) for l in facts["layers"]}
    return {
        "model": model.name,
        "sources": [s.rsplit("/", 1)[-1] for s in model.source_files],
        "meta": {k: v for k, v in sorted(model.meta.items()) if isinstance(v, (str, int, float, list))},
        "passes": passes_log,
        "layers": [{
            "index": l["index"], "name": l["name"], "type": l["source_type"], "activation": l["activation"],
            "inputs": l["inputs"], "units": l["units"], "code": f"{model.name}.c",
            "lines": list(ranges.get(l["c_name"], (None, None))),
            "weights": [c["symbol"] for c in l.get("chunks", [])] + ([l["bias"]["symbol"]] if l.get("bias") else []),
        } for l in layers],
    }
