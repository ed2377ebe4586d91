"""ACETONE Property 3: relu(max(window)) == max(relu(window)), so a ReLU applied by the layer
feeding a max pooling (its only reader) moves after the pooling: it then runs once per pooled
value instead of once per input value (a factor pool_h * pool_w / (stride_h * stride_w) fewer).
Exact in floating point: relu and max are both exact operations."""

import dataclasses

import numpy as np

from nnbuild.ir.graph import Activation, Pool2D
from nnbuild.ir import rewrite


def relu_after_maxpool(model):
    layers, log, renamed, removed = list(model.layers), [], {}, set()
    shapes = model.tensor_shapes()
    index_of = rewrite.Index(model)
    for index, layer in enumerate(model.layers):
        if not (isinstance(layer, Pool2D) and layer.mode == "max" and layer.activation == "linear"):
            continue
        src = index_of.source(index)
        if src is None or src in removed:
            continue
        producer = layers[src]
        if getattr(producer, "activation", None) != "relu" or not index_of.only_reader(src, index):
            continue
        before = int(np.prod(shapes[producer.name]))
        after = int(np.prod(shapes[layer.name]))
        if isinstance(producer, Activation):
            removed.add(src)
            renamed[producer.name] = model.sources(src)[0]
            what = f"Activation '{producer.name}' removed"
        else:
            layers[src] = dataclasses.replace(producer, activation="linear")
            what = f"{producer.source_type} '{producer.name}' made linear"
        layers[index] = dataclasses.replace(layer, activation="relu")
        log.append(f"relu_after_maxpool: {what}, relu applied after {layer.source_type} "
                   f"'{layer.name}' ({after} relu evaluations instead of {before}, Property 3)")
    kept = [l for i, l in enumerate(layers) if i not in removed]
    if model.edges is None and removed:
        return dataclasses.replace(model, layers=kept), log
    return rewrite.rebuild(model, kept, renamed), log
