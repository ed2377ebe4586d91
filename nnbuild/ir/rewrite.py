"""Graph surgery shared by the passes and the NNEF front-end's layer recognition: who reads a
tensor, and replacing/removing layers in a chain or a DAG Model while keeping it a valid Model (edges stay None for a chain)."""

import dataclasses

#: layer kinds that apply an activation to their result (a following activation may fuse into them)
FUSABLE = ("dense", "conv2d", "batchnorm", "pool2d", "add")


def readers(model):
    """Tensor name -> indices of the layers reading it."""
    return model.consumers()


def only_reader(model, producer_index, reader_index):
    """True when layer `reader_index` is the one and only reader of layer `producer_index`'s output."""
    name = model.layers[producer_index].name
    return readers(model).get(name, []) == [reader_index]


def source_index(model, index):
    """Index of the layer producing the single input of layer `index` (None: the model input or
    several inputs)."""
    srcs = model.sources(index)
    if len(srcs) != 1:
        return None
    names = {layer.name: i for i, layer in enumerate(model.layers)}
    return names.get(srcs[0])


def rebuild(model, layers, renamed):
    """A copy of `model` with `layers` (in order); reads of a tensor in `renamed` (old -> new name)
    go to its replacement. Removing a layer whose only input replaces it keeps a chain a chain."""
    if model.edges is None:
        return dataclasses.replace(model, layers=list(layers))

    def resolve(name):
        while name in renamed:
            name = renamed[name]
        return name

    old_edges = model.edges
    edges = {}
    for layer in layers:
        edges[layer.name] = tuple(resolve(s) for s in old_edges[layer.name])
    return dataclasses.replace(model, layers=list(layers), edges=edges)


def set_sources(model, layer_name, sources):
    """Edges with `layer_name` reading `sources` (turns a chain into explicit edges if needed)."""
    edges = dict(model.edges) if model.edges is not None else {
        l.name: model.sources(i) for i, l in enumerate(model.layers)}
    edges[layer_name] = tuple(sources)
    return edges
