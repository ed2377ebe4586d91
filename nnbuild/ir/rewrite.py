"""Graph surgery shared by the passes and the NNEF front-end's layer recognition: who reads a
tensor, and replacing/removing layers in a chain or a DAG Model while keeping it a valid Model (edges stay None for a chain)."""

import dataclasses

#: layer kinds that apply an activation to their result (a following activation may fuse into them)
FUSABLE = ("dense", "conv2d", "batchnorm", "pool2d", "add")


def readers(model):
    """Tensor name -> indices of the layers reading it."""
    return model.consumers()


def _is_output(model, name):
    """A model output is read by the caller as well (several outputs: any layer may be one)."""
    return name in (getattr(model, "output_names", None) or ())


def only_reader(model, producer_index, reader_index):
    """True when layer `reader_index` is the one and only reader of layer `producer_index`'s output
    (a model output is read by the caller too)."""
    name = model.layers[producer_index].name
    return readers(model).get(name, []) == [reader_index] and not _is_output(model, name)


def source_index(model, index):
    """Index of the layer producing the single input of layer `index` (None: the model input or
    several inputs). The producer is looked for backwards from `index` (in a chain it is the layer
    just before): a pass over every layer should build an Index once instead."""
    srcs = model.sources(index)
    if len(srcs) != 1 or srcs[0] == model.input_name:
        return None
    for i in range(index - 1, -1, -1):
        if model.layers[i].name == srcs[0]:
            return i
    return None


class Index:
    """Who produces and who reads each tensor of `model`, built once (linear) so a pass that asks
    per layer stays linear in the layer count. Indices are those of `model.layers`; a pass that
    builds a new layer list keeps asking about the model it read."""

    def __init__(self, model):
        self.model = model
        self.position = {layer.name: i for i, layer in enumerate(model.layers)}
        self.readers = model.consumers()

    def source(self, index):
        """As source_index(model, index)."""
        srcs = self.model.sources(index)
        if len(srcs) != 1:
            return None
        return self.position.get(srcs[0])

    def only_reader(self, producer_index, reader_index):
        """As only_reader(model, producer_index, reader_index)."""
        name = self.model.layers[producer_index].name
        return self.readers.get(name, []) == [reader_index] and not _is_output(self.model, name)


def merge_into_producer(model, layer_type, merge):
    """Each layer of `layer_type` whose one input comes from a layer it is the only reader of,
    merged into that producer: merge(producer, layer) -> (the merged producer, or None to keep both;
    a log line or None). The merged layer keeps the producer's name and its readers read it.
    Returns (the rebuilt model, the log)."""
    layers, log, renamed, removed = list(model.layers), [], {}, set()
    index_of = Index(model)
    for index, layer in enumerate(model.layers):
        if not isinstance(layer, layer_type):
            continue
        src = index_of.source(index)
        if src is None or src in removed or not index_of.only_reader(src, index):
            continue
        merged, line = merge(layers[src], layer)
        if line:
            log.append(line)
        if merged is not None:
            layers[src] = merged
            removed.add(index)
            renamed[layer.name] = merged.name
    kept = [l for i, l in enumerate(layers) if i not in removed]
    return rebuild(model, kept, renamed), log


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
    outputs = getattr(model, "output_names", None)
    if outputs:
        labels = {resolve(n): model.io_labels.get(n, n) for n in outputs}
        labels.update({n: l for n, l in model.io_labels.items() if n not in outputs})
        return dataclasses.replace(model, layers=list(layers), edges=edges,
                                   output_names=tuple(resolve(n) for n in outputs), io_labels=labels)
    return dataclasses.replace(model, layers=list(layers), edges=edges)


def set_sources(model, layer_name, sources):
    """Edges with `layer_name` reading `sources` (turns a chain into explicit edges if needed)."""
    edges = dict(model.edges) if model.edges is not None else {
        l.name: model.sources(i) for i, l in enumerate(model.layers)}
    edges[layer_name] = tuple(sources)
    return edges
