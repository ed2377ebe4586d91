"""The IR's own layers back from the generic operations a model read through NNEF or ONNX spells
them with, so that a model written as NNEF (nnbuild.frontends.nnef_ir, e.g. a multi-item split)
reads back as the IR it was written from, the one the fixed-point shapes have a form for:

* `add` of tensors of one shape (no constant)               -> Add
* zero `pad` of an image's rows and columns                  -> ZeroPadding2D
* reshape of an image to a vector                            -> Flatten
* an activation (or a softmax over the last axis after a Dense or Conv2D) that is its producer's
  one reader                                                 -> the producer's activation

Same function, same floating-point operations in the same order. A fused layer takes the
activation's name: the writer names a layer's last statement after it, so the fused layer keeps
the name the model was written from and the one the layers after it read."""

import dataclasses

import numpy as np

from nnbuild.ir import graph as g
from nnbuild.ir import rewrite

#: layer kinds a softmax over the last axis fuses into (the activation of a Keras Dense or Conv2D)
SOFTMAX_FUSABLE = ("dense", "conv2d")


def native_layers(model, keep=()):
    """(model, log); no layer whose output is in `keep` (tensors other code reads by name: a
    multi-item system's segment boundaries) is fused away."""
    shapes = model.tensor_shapes()
    log = []
    layers = [_native(model, i, layer, shapes, log) for i, layer in enumerate(model.layers)]
    model = rewrite.rebuild(model, layers, {})
    return _fuse_activations(model, shapes, log, set(keep))


def _native(model, index, layer, shapes, log):
    """The IR layer `layer` spells, or `layer` itself."""
    ins = [tuple(shapes[s]) for s in model.sources(index)]
    native = None
    if (layer.kind == "elementwise" and layer.op == "add" and not layer.constants and len(ins) >= 2
            and all(s == ins[0] for s in ins)):
        native = g.Add(layer.name, layer.activation, source_type=layer.source_type)
    elif (layer.kind == "pad" and layer.mode == "constant" and float(layer.value) == 0.0 and len(ins[0]) == 3
          and tuple(layer.pads[2]) == (0, 0) and min(min(p) for p in layer.pads) >= 0):
        native = g.ZeroPadding2D(layer.name, tuple(layer.pads[0]) + tuple(layer.pads[1]), source_type=layer.source_type)
    elif layer.kind == "reshape" and len(ins[0]) == 3 and tuple(layer.target_shape) == (int(np.prod(ins[0])),):
        native = g.Flatten(layer.name, source_type=layer.source_type)
    if native is None:
        return layer
    log.append(f"native_layers: {layer.source_type} '{layer.name}' read as {type(native).__name__}")
    return native


def _activation_of(layer, shapes, model, index):
    """The activation `layer` applies to its one input, or None."""
    if isinstance(layer, g.Activation) and layer.activation not in ("linear", "softmax"):
        return layer.activation
    if isinstance(layer, g.Softmax):
        rank = len(shapes[model.sources(index)[0]])
        if layer.axis % rank == rank - 1:
            return "softmax"
    return None


def _fuse_activations(model, shapes, log, keep):
    layers, removed, renamed = list(model.layers), set(), {}
    for index, layer in enumerate(model.layers):
        activation = _activation_of(layer, shapes, model, index)
        src = rewrite.source_index(model, index)
        if activation is None or src is None or src in removed or model.layers[src].name in keep:
            continue
        previous = layers[src]
        fusable = SOFTMAX_FUSABLE if activation == "softmax" else rewrite.FUSABLE
        if (previous.kind in fusable and previous.activation == "linear"
                and rewrite.only_reader(model, src, index)):
            layers[src] = dataclasses.replace(previous, name=layer.name, activation=activation)
            removed.add(index)
            renamed[previous.name] = layer.name
            log.append(f"native_layers: {layer.source_type} '{layer.name}' ({activation}) fused into "
                       f"{previous.source_type} '{previous.name}', which takes its name")
    if not removed:
        return model, log
    kept = [l for i, l in enumerate(layers) if i not in removed]
    return _renamed(model, kept, renamed), log


def _renamed(model, layers, renamed):
    """`model` with `layers`; a fused layer reads what its producer read, under its new name."""
    if model.edges is None:
        return dataclasses.replace(model, layers=layers)
    old_name = {new: old for old, new in renamed.items()}
    edges = {}
    for layer in layers:
        edges[layer.name] = tuple(model.edges[old_name.get(layer.name, layer.name)])
    return dataclasses.replace(model, layers=layers, edges=edges)
