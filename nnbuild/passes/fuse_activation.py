"""Fuse a standalone Activation into the linear layer that produces its input (one loop fewer,
same math): Dense, Conv2D, BatchNormalization, pooling and Add carry an activation field. Only
when the Activation is the producer's one reader, so no other layer loses the pre-activation."""

import dataclasses

from nnbuild.ir.graph import Activation
from nnbuild.ir import rewrite

FUSABLE = rewrite.FUSABLE


def fuse_activation(model):
    layers, log, renamed = list(model.layers), [], {}
    removed = set()
    index_of = rewrite.Index(model)
    for index, layer in enumerate(model.layers):
        if not isinstance(layer, Activation):
            continue
        src = index_of.source(index)
        if src is None or src in removed:
            continue
        previous = layers[src]
        if (getattr(previous, "kind", None) in FUSABLE and previous.activation == "linear"
                and index_of.only_reader(src, index)):
            layers[src] = dataclasses.replace(previous, activation=layer.activation)
            removed.add(index)
            renamed[layer.name] = previous.name
            log.append(f"fuse_activation: Activation '{layer.name}' ({layer.activation}) "
                       f"fused into {previous.source_type} '{previous.name}'")
    kept = [l for i, l in enumerate(layers) if i not in removed]
    return rewrite.rebuild(model, kept, renamed), log
