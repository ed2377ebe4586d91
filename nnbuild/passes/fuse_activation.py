"""Fuse a standalone Activation into the linear layer that produces its input (one loop fewer,
same math): Dense, Conv2D, BatchNormalization, pooling and Add carry an activation field. Only
when the Activation is the producer's one reader, so no other layer loses the pre-activation."""

import dataclasses

from nnbuild.ir.graph import Activation
from nnbuild.ir import rewrite

FUSABLE = rewrite.FUSABLE


def fuse_activation(model):
    return rewrite.merge_into_producer(model, Activation, _fused)


def _fused(previous, layer):
    """(previous with the Activation `layer` applied, log line); (None, None) when it has one of its own."""
    if getattr(previous, "kind", None) not in FUSABLE or previous.activation != "linear":
        return None, None
    return (dataclasses.replace(previous, activation=layer.activation),
            f"fuse_activation: Activation '{layer.name}' ({layer.activation}) "
            f"fused into {previous.source_type} '{previous.name}'")
