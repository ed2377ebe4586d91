"""Liveness-based buffer planning: the pass marks the model so the CNN code shapes (v1, v2, v3)
place activation tensors in one arena by lifetime (`plan_memory`, here), reusing memory of dead
tensors and computing element-wise layers in place. The generator reports the resulting peak
activation bytes (and what one buffer per tensor would take) in the trace. Without this pass every
tensor gets its own buffer. The MLP shape keeps its own two ping-pong buffers either way."""

import dataclasses
from dataclasses import dataclass, field
from typing import List

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.ir.graph import ALIASES

#: bytes of one float32 activation value
FLOAT_BYTES = 4
#: layers that may write their output over an input that dies with them
IN_PLACE = ("activation", "batchnorm", "add", "unary", "elementwise")


def plan_buffers(model):
    return dataclasses.replace(model, meta=dict(model.meta, plan_buffers=True)), []


@dataclass
class Storage:
    """One memory region holding one or more tensors over its lifetime [birth, death] (op steps)."""

    ident: int
    size: int
    base: str                  # "in", "out" or "arena"
    birth: int
    death: int
    offset: int = 0
    tensors: List[str] = field(default_factory=list)


def api_bases(model):
    """({input tensor: base}, {output tensor: base}): "in" and "out" for a model of one input and
    one output, else each argument's C name (Model.arguments)."""
    if not getattr(model, "several_io", False):
        return {model.input_name: "in"}, {model.layers[-1].name: "out"}
    args = model.arguments()
    return ({a["tensor"]: a["name"] for a in args if a["role"] == "in"},
            {a["tensor"]: a["name"] for a in args if a["role"] == "out"})


def plan_memory(model, liveness=True):
    """(tensor name -> (base, offset in floats), storages, stats).

    With `liveness`, element-wise layers write over an input that dies there, and arena storages
    whose lifetimes do not overlap share addresses (greedy, largest first, lowest fitting offset);
    without it every tensor has its own region. Stats are in bytes: arena (what is allocated),
    peak_live (the most bytes live at one step: no plan can use less) and one_per_tensor.
    Inputs and outputs live in the caller's buffers (api_bases), never in the arena.
    """
    shapes = model.tensor_shapes()
    layers = model.layers
    in_bases, out_bases = api_bases(model)
    root = {name: name for name in in_bases}
    for i, layer in enumerate(layers):
        root[layer.name] = root[model.sources(i)[0]] if layer.kind in ALIASES else layer.name
    out_base = {}
    for tensor, base in out_bases.items():
        r = root[tensor]
        if r in in_bases:
            if len(out_bases) == 1:
                raise NNBuildError("the model output is its input reshaped: there is nothing to compute",
                                   item=f"model '{model.name}'")
            raise NNBuildError(f"output {base} is input {in_bases[r]} reshaped: there is nothing to compute",
                               item=f"model '{model.name}'")
        if r in out_base:
            raise NNBuildError(f"outputs {out_base[r]} and {base} hold the same values (one is the other "
                               "reshaped); keep one of them", item=f"model '{model.name}'")
        out_base[r] = base
    last_read = {}
    for i in range(len(layers)):
        for s in model.sources(i):
            last_read[root[s]] = i
    storages = {name: Storage(-1 - k, int(np.prod(shapes[name])), base, -1, len(layers), tensors=[name])
                for k, (name, base) in enumerate(in_bases.items())}
    where = dict(storages)
    count = 0
    for i, layer in enumerate(layers):
        if layer.kind in ALIASES:
            where[layer.name] = where[root[layer.name]]
            continue
        size = int(np.prod(shapes[layer.name]))
        death = len(layers) if layer.name in out_base else last_read.get(layer.name, i)
        chosen = None
        if liveness and layer.kind in IN_PLACE and layer.name not in out_base:
            for s in model.sources(i):
                st = where[s]
                if st.base == "arena" and st.size == size and st.death == i:
                    chosen = st
                    break
        if chosen is not None:
            chosen.death = max(chosen.death, death)
            chosen.tensors.append(layer.name)
        else:
            chosen = Storage(count, size, out_base.get(layer.name, "arena"), i, death,
                             tensors=[layer.name])
            storages[layer.name] = chosen
            count += 1
        where[layer.name] = chosen
    arena = [s for s in storages.values() if s.base == "arena"]
    if liveness:
        placed = []
        for st in sorted(arena, key=lambda s: (-s.size, s.birth)):
            offset = 0
            for other in sorted((o for o in placed if o.birth <= st.death and st.birth <= o.death),
                                key=lambda o: o.offset):
                if offset + st.size <= other.offset:
                    break
                offset = max(offset, other.offset + other.size)
            st.offset = offset
            placed.append(st)
    else:
        offset = 0
        for st in sorted(arena, key=lambda s: s.birth):
            st.offset, offset = offset, offset + st.size
    steps = range(len(layers))
    peak = max([sum(s.size for s in arena if s.birth <= k <= s.death) for k in steps], default=0)
    one_each = sum(int(np.prod(shapes[l.name])) for l in layers if l.kind not in ALIASES and l.name not in out_base)
    stats = {"arena_bytes": FLOAT_BYTES * max([s.offset + s.size for s in arena], default=0),
             "peak_live_bytes": FLOAT_BYTES * peak,
             "one_buffer_per_tensor_bytes": FLOAT_BYTES * one_each,
             "planned": bool(liveness)}
    places = {name: (st.base, st.offset) for name, st in where.items()}
    return places, storages, stats
