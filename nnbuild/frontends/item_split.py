"""A split of any single-graph model (Keras, ONNX, NNEF, ...: the IR any front-end gives) into a
multi-item NNEF system (seed 002, issue 15), written out as a `.nnef` folder the multi-item kind
builds like a hand-written one:

* by hand: a JSON map {"layer": "ITEM", ...} naming every layer of the loaded model (after
  nnbuild's passes, e.g. a BatchNorm folded into its Conv2D is gone);
* automatic, items=N: the assignment of layers to N items whose end-to-end time with each item on
  its own core is smallest (nnef_items.auto_assignment: exhaustive, parallel branches on different
  items where that shortens the path), each layer weighted by the cost given (the board's per-layer
  WCET bound, from the caller) or else by its multiply-accumulate count.

The model is written as one NNEF graph (nnef_ir), cut by nnef_items.split, and saved as text
(nnef_items.write: parse(write(d)) == d) with one `.dat` per weight.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import numpy as np

from nnbuild import files, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_ir, nnef_items
from nnbuild.frontends import nnef_text as nnef

#: where the costs of an automatic split came from when no analyzer gave any
MAC_COSTS = "multiply-accumulate counts"


@dataclass
class Split:
    document: nnef_items.Document
    #: every weight of the model (label -> array); the folder keeps those the items read
    weights: Dict[str, np.ndarray]
    #: layer -> item
    layers: Dict[str, str]
    #: how the split was chosen and what it costs (report.json's "split")
    record: dict


def read_map(path) -> Dict[str, str]:
    """A JSON map file {"layer": "ITEM", ...}."""
    mapping = files.read_json_object(path, "item map")
    if not all(isinstance(v, str) for v in mapping.values()):
        raise NNBuildError('item map must be a JSON object {"layer": "ITEM", ...}', path=path)
    return mapping


def layer_macs(model) -> Dict[str, int]:
    """Multiply-accumulates per layer (one per output element for the others): the costs of an
    automatic split when the board has no WCET analyzer."""
    shapes = model.tensor_shapes()
    costs = {}
    for layer in model.layers:
        out = int(np.prod(shapes[layer.name]))
        if layer.kind == "conv2d":
            kh, kw, ci, _ = layer.kernel.shape
            costs[layer.name] = out * int(kh * kw * ci)
        elif layer.kind == "dense":
            costs[layer.name] = out * layer.inputs
        else:
            costs[layer.name] = out
    return costs


def _statement_costs(written, layer_costs):
    """Per statement: a layer's cost on its last statement (a layer's statements share one item)."""
    last = {layer: name for name, layer in written.units.items()}
    return {name: layer_costs[layer] if last[layer] == name else 0
            for name, layer in written.units.items()}


def _checked_map(model, layer_items, path):
    layers = [layer.name for layer in model.layers]
    unknown = [k for k in layer_items if k not in layers]
    if unknown:
        raise NNBuildError(f"the item map names '{unknown[0]}', which is no layer of the model after its passes "
                           f"(layers: {', '.join(layers)})", path=path)
    missing = [k for k in layers if k not in layer_items]
    if missing:
        raise NNBuildError(f"layer '{missing[0]}' is assigned to no item by the map", path=path)
    for layer, item in layer_items.items():
        if names.too_long(item, "item name"):
            raise NNBuildError(f"layer '{layer}': " + names.too_long(item, "item name"), path=path)
        if not names.is_c_identifier(item) or item == nnef_items.PACKED:
            raise NNBuildError(f"layer '{layer}': item name {item!r} is not a C identifier", path=path)
    return {k: layer_items[k] for k in layers}


def split(model, folder, *, items: Optional[int] = None, layer_items: Optional[Dict[str, str]] = None,
          layer_costs: Optional[Dict[str, int]] = None, cost_source: str = MAC_COSTS, map_path=None) -> Split:
    """`folder` (a `.nnef` folder, replaced whole: a failure leaves no partial folder) holding the
    multi-item split of an IR model, by `layer_items` (layer -> item) or, with `items`, automatic
    over `layer_costs` (layer -> cycles; MAC counts when None); its document, weights and record
    (also written as split.json)."""
    if (items is None) == (layer_items is None):
        raise NNBuildError("a split takes either items=N or a map layer -> item")
    where = map_path or (model.source_files or ("<model>",))[0]
    if layer_items is not None:
        layer_items = _checked_map(model, layer_items, where)
    folder = Path(folder)
    staging = folder.with_name(f".{folder.name}.tmp")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        written = nnef_ir.save(model, staging)   # the single graph: the split reads its shapes from it
        result = _split(model, written, staging / nnef.GRAPH_FILE, where, items, layer_items, layer_costs,
                        cost_source)
        if map_path is not None:
            result.record["map"] = str(map_path)
        labels = {st.kwargs.get("label") for b in result.document.items for st in b.statements if st.op == "variable"}
        for label in set(written.weights) - labels:
            nnef._dat_path(staging, label).unlink()
        files.write_text(staging / nnef.GRAPH_FILE, nnef_items.write(result.document))
        files.write_text(staging / "split.json", json.dumps(result.record, indent=1, sort_keys=True) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        staging.rename(folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return result


def _split(model, written, graph_path, where, items, layer_items, layer_costs, cost_source) -> Split:
    given = layer_macs(model) if layer_costs is None else layer_costs
    per_layer = {layer.name: int(given.get(layer.name, 0)) for layer in model.layers}
    costs = _statement_costs(written, per_layer)
    if items is not None:
        assignment, search = nnef_items.auto_assignment(written.graph, int(items), costs, path=where,
                                                        units=written.units)
        layer_map = {written.units[n]: item for n, item in assignment.items()}
    else:
        layer_map, search = layer_items, "map"
        assignment = {n: layer_map[layer] for n, layer in written.units.items()}
    document = nnef_items.split(written.graph, assignment, graph_path)
    per_item = {}
    for layer, item in layer_map.items():
        per_item[item] = per_item.get(item, 0) + per_layer[layer]
    record = {"by": f"items={items}" if items is not None else "map", "search": search, "layers": layer_map,
              "cost_source": cost_source, "layer_costs": per_layer, "item_costs": per_item,
              "items_on_own_cores": nnef_items.split_makespan(written.graph, assignment, costs),
              "sequential": sum(per_layer.values()),
              "variables": [st.outputs[0] for b in document.items for st in b.statements if st.op == "send_var"]}
    return Split(document, written.weights, layer_map, record)
