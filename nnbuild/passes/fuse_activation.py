"""Fuse a standalone Activation into the linear Dense before it (one loop fewer, same math)."""

import dataclasses

from nnbuild.ir.graph import Activation, Dense, Model


def fuse_activation(model):
    layers, log = [], []
    for layer in model.layers:
        previous = layers[-1] if layers else None
        if (isinstance(layer, Activation) and isinstance(previous, Dense)
                and previous.activation == "linear"):
            layers[-1] = dataclasses.replace(previous, activation=layer.activation)
            log.append(f"fuse_activation: Activation '{layer.name}' ({layer.activation}) "
                       f"fused into Dense '{previous.name}'")
        else:
            layers.append(layer)
    return dataclasses.replace(model, layers=layers), log
