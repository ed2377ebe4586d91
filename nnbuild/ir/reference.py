"""The reference executor: runs an IR model with numpy, layer by layer, in one chosen dtype.

It is the oracle generated firmware is compared with, so it only composes the formulas of
nnbuild.ir.semantics and adds nothing of its own. float64 gives the mathematical reference;
float32 approximates what a float32 C implementation computes.

A model of several inputs takes one array per input (a list, in the model's order) or one flat
array per case holding all the inputs' values one after the other; a model of several outputs
gives one array per output (a list) from `run`, and `run_flat` gives every model the flat
[N, output_size] rows the check program writes (inputs then outputs, each in the model's order).
"""

from __future__ import annotations

from typing import List, Tuple

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir.semantics import apply_layer

#: The precisions the reference supports (what the C back-ends can be compared with).
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _check_dtype(dtype) -> np.dtype:
    """Only float32/float64: other dtypes would silently change the semantics."""
    dt = np.dtype(dtype)
    if dt not in DTYPES:
        raise ValueError(f"reference dtype must be float32 or float64, not {dt}")
    return dt


def _as_batch(model, inputs, dtype: np.dtype) -> Tuple[np.ndarray, bool]:
    """Return (inputs as [N, *input_shape] in dtype, whether a single sample was given)."""
    x = np.asarray(inputs, dtype=dtype)
    shape = tuple(model.input_shape)
    if x.shape == shape:
        return x.reshape((1,) + shape), True
    if x.ndim == len(shape) + 1 and x.shape[1:] == shape:
        return x, False
    raise NNBuildError(
        f"input shape {tuple(x.shape)} does not match the model input {shape} "
        f"(give [N, {', '.join(map(str, shape))}] or one sample)",
        item=f"model '{model.name}'",
    )


def _several_inputs(model) -> bool:
    return len(getattr(model, "inputs", ())) > 1


def _as_batches(model, inputs, dtype: np.dtype) -> Tuple[dict, bool]:
    """({input name: [N, *shape]}, single) of a model of several inputs: a list of one array per
    input (each a batch or one sample), or flat rows [N, input_size] (one row: [input_size])."""
    specs = model.inputs
    if isinstance(inputs, (list, tuple)):
        if len(inputs) != len(specs):
            raise NNBuildError(f"{len(inputs)} input arrays for the model's {len(specs)} inputs",
                               item=f"model '{model.name}'")
        out, single = {}, None
        for (name, shape), x in zip(specs, inputs):
            x = np.asarray(x, dtype=dtype)
            one = x.shape == tuple(shape)
            if not one and not (x.ndim == len(shape) + 1 and x.shape[1:] == tuple(shape)):
                raise NNBuildError(f"input '{name}' of shape {tuple(x.shape)} does not match {tuple(shape)}",
                                   item=f"model '{model.name}'")
            if single is not None and one != single or (not one and out and len(x) != len(next(iter(out.values())))):
                raise NNBuildError("the input arrays mix batches of different sizes", item=f"model '{model.name}'")
            single = one
            out[name] = x.reshape((1,) + tuple(shape)) if one else x
        return out, bool(single)
    x = np.asarray(inputs, dtype=dtype)
    single = x.ndim == 1
    rows = x.reshape(1, -1) if single else x.reshape(len(x), -1) if x.ndim == 2 else None
    if rows is None or rows.shape[1] != model.input_size:
        raise NNBuildError(f"input shape {tuple(x.shape)} does not hold the model's {model.input_size} input "
                           f"values per case (give [N, {model.input_size}] or one array per input)",
                           item=f"model '{model.name}'")
    out, at = {}, 0
    for name, shape in specs:
        n = int(np.prod(shape))
        out[name] = rows[:, at:at + n].reshape((len(rows),) + tuple(shape))
        at += n
    return out, single


def run_layers(model, x, dtype=np.float64) -> List[Tuple[str, np.ndarray]]:
    """Every intermediate tensor, for debugging and traceability.

    Returns [("input", x), (layer.name, output of that layer), ...] with all arrays in `dtype`
    (a model of several inputs: one ("input", ...) entry per input, named by its tensor).
    A batch [N, *input_shape] gives batched arrays; a single sample gives unbatched ones.
    """
    dt = _check_dtype(dtype)
    if _several_inputs(model):
        values, single = _as_batches(model, x, dt)
        trace = list(values.items())
    else:
        batch, single = _as_batch(model, x, dt)
        trace = [("input", batch)]
        values = {getattr(model, "input_name", "input"): batch}
    for index, layer in enumerate(model.layers):
        inputs = [values[s] for s in model.sources(index)] if hasattr(model, "sources") else [trace[-1][1]]
        out = np.asarray(apply_layer(layer, *inputs), dtype=dt)
        values[layer.name] = out
        trace.append((layer.name, out))
    if single:
        trace = [(name, value[0]) for name, value in trace]
    return trace


def run(model, inputs, dtype=np.float64):
    """Model output for `inputs` ([N, *input_shape] -> [N, *output_shape]; one sample -> one output).

    Every layer is computed in `dtype` (float64 or float32), weights cast to it. A model of several
    outputs gives a list of them, in the model's order.
    """
    trace = run_layers(model, inputs, dtype)
    outputs = getattr(model, "output_names", None)
    if not outputs:
        return trace[-1][1]
    values = dict(trace)
    return [values[name] for name in outputs]


def run_flat(model, rows, dtype=np.float64) -> np.ndarray:
    """Flat rows in, flat rows out: [N, input_size] (every input's values, in the model's order)
    -> [N, output_size] (every output's values, in the model's order): the check program's vectors."""
    rows = np.asarray(rows)
    rows = rows.reshape(len(rows), -1)
    if _several_inputs(model):
        out = run(model, rows, dtype)
    else:
        out = run(model, rows.reshape((len(rows),) + tuple(model.input_shape)), dtype)
    parts = out if isinstance(out, list) else [out]
    return np.concatenate([np.asarray(p).reshape(len(rows), -1) for p in parts], axis=1)
