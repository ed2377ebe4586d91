"""ACETONE Property 4: a BatchNormalization right after a linear Conv2D or Dense (its only reader)
becomes part of that layer: kernel[..., o] *= alpha[o], bias[o] = bias[o] * alpha[o] + B[o] with
alpha = gamma / sqrt(var + eps) and B = beta - mean * alpha, computed in float64 and rounded once
to float32. One pass over the tensor fewer and no intermediate buffer."""

import dataclasses

import numpy as np

from nnbuild.ir.graph import BatchNorm
from nnbuild.ir import rewrite

FLOAT32_MAX = float(np.finfo(np.float32).max)


def fold_batchnorm(model):
    return rewrite.merge_into_producer(model, BatchNorm, _folded)


def _folded(conv, layer):
    """(conv with the BatchNorm `layer` folded in, log line); (None, ...) when it cannot be."""
    if getattr(conv, "kind", None) not in ("conv2d", "dense") or conv.activation != "linear":
        return None, None
    alpha, offset = layer.scale_offset(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        kernel64 = np.asarray(conv.kernel, np.float64) * alpha
        bias64 = (np.zeros(alpha.shape) if conv.bias is None else np.asarray(conv.bias, np.float64)) * alpha + offset
    if not all(np.all(np.isfinite(a)) and np.all(np.abs(a) <= FLOAT32_MAX) for a in (kernel64, bias64)):
        return None, (f"fold_batchnorm: BatchNormalization '{layer.name}' not folded into {conv.source_type} "
                      f"'{conv.name}': the rescaled weights would exceed float32")
    kernel, bias = kernel64.astype(np.float32), bias64.astype(np.float32)
    kernel.flags.writeable = bias.flags.writeable = False
    return (dataclasses.replace(conv, kernel=kernel, bias=bias, activation=layer.activation),
            f"fold_batchnorm: BatchNormalization '{layer.name}' folded into "
            f"{conv.source_type} '{conv.name}' (kernel and bias rescaled, Property 4)")
