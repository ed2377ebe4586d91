"""The reference executor: runs an IR model with numpy, layer by layer, in one chosen dtype.

It is the oracle generated firmware is compared with, so it only composes the formulas of
nnbuild.ir.semantics and adds nothing of its own. float64 gives the mathematical reference;
float32 approximates what a float32 C implementation computes.
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


def run_layers(model, x, dtype=np.float64) -> List[Tuple[str, np.ndarray]]:
    """Every intermediate tensor, for debugging and traceability.

    Returns [("input", x), (layer.name, output of that layer), ...] with all arrays in `dtype`.
    A batch [N, *input_shape] gives batched arrays; a single sample gives unbatched ones.
    """
    dt = _check_dtype(dtype)
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


def run(model, inputs, dtype=np.float64) -> np.ndarray:
    """Model output for `inputs` ([N, *input_shape] -> [N, *output_shape]; one sample -> one output).

    Every layer is computed in `dtype` (float64 or float32), weights cast to it.
    """
    return run_layers(model, inputs, dtype)[-1][1]
