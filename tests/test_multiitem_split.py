"""A split of any single-graph model into a multi-item system (issue 15): the IR -> NNEF writer,
the split by a map layer -> item and by items=N, and the builds of cifarnet split in two items."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nnbuild import options, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.frontends import item_split, nnef_items, nnef_ir, nnef_text
from nnbuild.ir import graph as g
from nnbuild.ir import reference
from nnbuild.kinds import multiitem as multiitem_kind
from nnbuild.kinds import nn
from nnbuild.frontends.nnef_layers import native_layers

ROOT = Path(__file__).resolve().parents[1]
CIFARNET = ROOT / "firmware_examples" / "cifarnet" / "cifarnet.h5"
EXAMPLE = ROOT / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def cifarnet():
    return nn.load(CIFARNET)[0]


def same_function(a, b, seed=3):
    """Both models give the same float64 outputs on the same input bytes."""
    x = np.random.default_rng(seed).uniform(-1, 1, (3,) + tuple(a.input_shape))
    assert tuple(a.input_shape) == tuple(b.input_shape)
    return np.max(np.abs(np.asarray(reference.run(a, x, dtype=np.float64))
                         - np.asarray(reference.run(b, x, dtype=np.float64))))


# ------------------------------------------------------------------------------ IR -> NNEF

def test_keras_model_written_as_nnef_reads_back_as_the_same_function(cifarnet, tmp_path):
    written = nnef_ir.save(cifarnet, tmp_path / "c.nnef")
    text = (tmp_path / "c.nnef" / "graph.nnef").read_text()
    assert nnef_items.write_graph(nnef_text.parse(text)) == text == nnef_items.write_graph(written.graph)
    assert same_function(cifarnet, nnef_text.load(tmp_path / "c.nnef")) == 0.0
    assert set(written.units.values()) == {layer.name for layer in cifarnet.layers}
    assert sorted(p.stem for p in (tmp_path / "c.nnef").glob("*.dat")) == sorted(written.weights)


def test_keras_model_read_back_from_nnef_is_the_same_ir(cifarnet, tmp_path):
    """The residual Add, the zero padding, the Flatten and every activation (the Softmax of fc2
    too) come back as the IR's own layers under the Keras names: the fixed-point plan has them."""
    nnef_ir.save(cifarnet, tmp_path / "c.nnef")
    read_back, log = native_layers(nnef_text.load(tmp_path / "c.nnef"))
    assert [(l.name, l.kind, getattr(l, "activation", None)) for l in read_back.layers] == \
        [(l.name, l.kind, getattr(l, "activation", None)) for l in cifarnet.layers]
    assert [read_back.sources(i) for i in range(len(read_back.layers))] == \
        [cifarnet.sources(i) for i in range(len(cifarnet.layers))]
    assert same_function(cifarnet, read_back) == 0.0
    assert "native_layers: Softmax 'fc2' (softmax) fused into Gemm 'fc2_linear', which takes its name" in log


def test_native_layers_leaves_what_is_no_ir_layer_alone():
    rng = np.random.default_rng(4)
    dense = g.Dense("d", rng.normal(size=(4, 3)).astype(np.float32), None)
    model = g.Model("m", (4,), [dense, g.Softmax("s0", 0), g.Activation("r", "relu"),
                                g.Elementwise("plus", "add", ((1, np.float32(1.0)),)),
                                g.Elementwise("twice", "add"), g.Unary("e", "exp")],
                    edges={"d": ("input",), "s0": ("d",), "r": ("d",), "plus": ("r",), "twice": ("r", "plus"),
                           "e": ("twice",)})
    same, log = native_layers(model)
    # d has two readers: neither the softmax nor the relu fuses; an add with a constant stays
    assert [(l.name, l.kind) for l in same.layers] == [("d", "dense"), ("s0", "softmax"), ("r", "activation"),
                                                       ("plus", "elementwise"), ("twice", "add"), ("e", "unary")]
    assert log == ["native_layers: Elementwise 'twice' read as Add"]
    image = g.Model("i", (2, 2, 3), [g.Conv2D("c", rng.normal(size=(1, 1, 3, 3)).astype(np.float32), None),
                                     g.Softmax("s", 0)])
    assert [l.kind for l in native_layers(image)[0].layers] == ["conv2d", "softmax"]   # not over the last axis
    chain = g.Model("c", (4,), [dense, g.Activation("r", "relu")])
    assert [l.name for l in native_layers(chain)[0].layers] == ["r"]
    # a tensor another item reads by name (a segment boundary) stays
    assert [l.name for l in native_layers(chain, keep={"d"})[0].layers] == ["d", "r"]


def test_constants_of_elementwise_layers_broadcast_in_the_ir_layout(tmp_path):
    rng = np.random.default_rng(2)
    scale = rng.normal(size=(3,)).astype(np.float32)          # per channel of a (2, 4, 3) image
    model = g.Model("m", (2, 4, 3), [g.Elementwise("scaled", "mul", ((1, scale),)),
                                     g.Elementwise("shifted", "sub", ((0, np.float32(0.5)),), "tanh"),
                                     g.Flatten("flat"), g.Dense("d", rng.normal(size=(24, 2)).astype(np.float32), None)],
                    edges={"scaled": ("input",), "shifted": ("scaled",), "flat": ("shifted",), "d": ("flat",)})
    nnef_ir.save(model, tmp_path / "m.nnef")
    assert same_function(model, nnef_text.load(tmp_path / "m.nnef")) == 0.0


def test_a_layer_without_nnef_form_fails_in_one_line_naming_it():
    model = g.Model("m", (4,), [g.Unary("act", "leaky_relu", (0.1,)), g.Dense("d", np.ones((4, 2), np.float32), None)])
    with pytest.raises(NNBuildError) as exc:
        nnef_ir.to_nnef(model)
    assert "cannot write as NNEF: layer 'act' (Unary): unary op 'leaky_relu'" in one_line(exc)


# ------------------------------------------------------------------------------ split

def items_of(result):
    out = {}
    for layer, item in result.layers.items():
        out.setdefault(item, []).append(layer)
    return out


def test_items_2_puts_the_parallel_branches_of_cifarnet_on_different_items(cifarnet, tmp_path):
    result = item_split.split(cifarnet, tmp_path / "cifarnet.nnef", items=2)
    assert result.layers["dilated"] != result.layers["conv2x2"]
    record = result.record
    assert record["cost_source"] == item_split.MAC_COSTS and record["by"] == "items=2"
    costs = record["layer_costs"]   # the shorter branch (pad, conv2x2) runs while dilated does
    assert record["items_on_own_cores"] == record["sequential"] - costs["pad"] - costs["conv2x2"]
    assert costs["pad"] + costs["conv2x2"] < costs["dilated"]
    assert nnef_items.parse(nnef_items.write(result.document)) == result.document
    folder = tmp_path / "cifarnet.nnef"
    assert nnef_items.read_document(folder) == result.document
    assert json.loads((folder / "split.json").read_text()) == record
    system = nnef_items.load(folder)
    assert system.meta["petri"]["equivalence"] and system.meta["petri"]["states"] == 37
    assert same_function(cifarnet, system.whole) == 0.0


def test_a_map_splits_by_layer_and_costs_given_steer_items_n(cifarnet, tmp_path):
    mapping = {layer.name: "FRONT" if i < 5 else "BACK" for i, layer in enumerate(cifarnet.layers)}
    (tmp_path / "map.json").write_text(json.dumps(mapping))
    assert options.items(str(tmp_path / "map.json")) == ("map", str(tmp_path / "map.json"))
    result = item_split.split(cifarnet, tmp_path / "m.nnef", layer_items=item_split.read_map(tmp_path / "map.json"),
                              map_path=tmp_path / "map.json")
    assert [b.item for b in result.document.items] == ["FRONT", "BACK"] and result.record["by"] == "map"
    system = nnef_items.load(tmp_path / "m.nnef")
    assert sorted(system.syncs) == ["sync_residual"]
    # costs that make fc1 dominate: the best split of 2 items can only run the branches apart
    costs = {layer.name: 1 for layer in cifarnet.layers}
    costs.update(fc1=100, dilated=10, conv2x2=10)
    steered = item_split.split(cifarnet, tmp_path / "s.nnef", items=2, layer_costs=costs, cost_source="given")
    assert steered.record["items_on_own_cores"] == sum(costs.values()) - 10
    assert steered.record["cost_source"] == "given"


@pytest.mark.parametrize("mapping, expected", [
    ({"bn1": "A"}, "the item map names 'bn1', which is no layer of the model after its passes"),
    ({"conv1": "A"}, "layer 'pool1' is assigned to no item by the map"),
])
def test_bad_maps_fail_in_one_line(cifarnet, tmp_path, mapping, expected):
    full = {layer.name: "A" for layer in cifarnet.layers} if "bn1" in mapping else {}
    with pytest.raises(NNBuildError) as exc:
        item_split.split(cifarnet, tmp_path / "x.nnef", layer_items={**full, **mapping})
    assert expected in one_line(exc)
    assert not (tmp_path / "x.nnef").exists()


def test_bad_item_name_and_items_option(tmp_path):
    with pytest.raises(NNBuildError) as exc:
        item_split._checked_map(g.Model("m", (2,), [g.Activation("a", "relu")]), {"a": "1st"}, "map.json")
    assert "item name '1st' is not a C identifier" in one_line(exc)
    assert options.items("2") == ("items", 2) and options.items("") is None
    with pytest.raises(NNBuildError):
        options.items("0")
    with pytest.raises(NNBuildError) as exc:
        options.items("nowhere.json")
    assert "items map 'nowhere.json' not found" in one_line(exc)


def unsplit_example(tmp_path):
    """The paper's example 5 as one NNEF graph (a single-graph NNEF model)."""
    folder = tmp_path / "cnn.nnef"
    shutil.copytree(EXAMPLE, folder)
    (folder / "graph.nnef").write_text(nnef_items.write_graph(nnef_items.unsplit(nnef_items.read_document(EXAMPLE),
                                                                                 EXAMPLE)))
    return folder


def test_an_nnef_model_splits_through_the_ir_too(tmp_path):
    folder = unsplit_example(tmp_path)
    model, _ = nn.load(folder)
    result = item_split.split(model, tmp_path / "cnn2.nnef", items=2)
    assert result.layers["o4"] != result.layers["o2"]   # the paper's two branches apart
    assert same_function(model, nnef_items.load(tmp_path / "cnn2.nnef").whole) == 0.0


def two_branch_onnx(tmp_path):
    """An ONNX CNN: conv -> relu, then two conv branches added, flattened into a Gemm."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(4)
    inits = {"w0": rng.normal(size=(4, 2, 3, 3)), "wa": rng.normal(size=(4, 4, 3, 3)),
             "wb": rng.normal(size=(4, 4, 1, 1)), "wd": rng.normal(size=(6, 4 * 6 * 6)), "bd": rng.normal(size=(6,))}
    conv = dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="c0", **conv),
             helper.make_node("Relu", ["c0"], ["r0"], name="r0"),
             helper.make_node("Conv", ["r0", "wa"], ["ca"], name="ca", **conv),
             helper.make_node("Conv", ["r0", "wb"], ["cb"], name="cb", kernel_shape=[1, 1]),
             helper.make_node("Add", ["ca", "cb"], ["s"], name="s"),
             helper.make_node("Flatten", ["s"], ["f"], name="f"),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], name="y", transB=1)]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    path = tmp_path / "branches.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_an_onnx_model_splits_with_its_branches_apart(tmp_path):
    model, _ = nn.load(two_branch_onnx(tmp_path))
    result = item_split.split(model, tmp_path / "b.nnef", items=2)
    conv_a, conv_b = (next(layer.name for layer in model.layers if layer.name.startswith(n)) for n in ("ca", "cb"))
    assert result.layers[conv_a] != result.layers[conv_b]
    system = nnef_items.load(tmp_path / "b.nnef")
    assert system.meta["petri"]["equivalence"] and same_function(model, system.whole) == 0.0


def test_a_multiitem_model_is_not_split_again(tmp_path):
    with pytest.raises(NNBuildError) as exc:
        multiitem_kind.split(EXAMPLE, tmp_path / "x.nnef", items=2)
    assert "already a multi-item system" in one_line(exc)


def test_schedule_pool_shares_memory_only_between_buffers_never_alive_together():
    from nnbuild.codegen import multiitem_pool
    spans = [("a", 10, 0, 1), ("b", 5, 1, 2), ("c", 10, 2, 3), ("d", 3, 3, 3)]
    pool = multiitem_pool.plan("p", spans)
    assert pool.offsets == {"a": 0, "c": 0, "b": 10, "d": 10} and pool.values == 15
    for x, nx, sx, ex in spans:
        for y, ny, sy, ey in spans:
            if x < y and sx <= ey and sy <= ex:   # alive at a common step: disjoint memory
                ox, oy = pool.offsets[x], pool.offsets[y]
                assert ox + nx <= oy or oy + ny <= ox, (x, y)


# ------------------------------------------------------------------------------ builds

@pytest.mark.e2e
def test_cifarnet_in_two_items_on_avr_fits_and_runs_within_its_bound(tmp_path):
    """items=2 on avr: per-layer costs from the built-in analyzer, the static schedule in one pool
    (without it: 38,194 B of RAM on a 16 KB part), one case under simavr, bound >= measured."""
    report = pipeline.build_multiitem(CIFARNET, tmp_path / "avr", board="avr", items=2, count=1, tolerance=1e-5)
    split = report["split"]
    assert split["cost_source"].startswith("builtin-avr per-layer WCET of the unsplit model")
    assert split["layers"]["dilated"] != split["layers"]["conv2x2"]
    board = report["board"]
    assert board["wcet"]["schedule_cycles"] >= max(board["measured_cycles"])
    assert board["timing"]["end_to_end_cycles"] < board["wcet"]["schedule_cycles"]
    assert report["gates_passed"] and (tmp_path / "avr" / "gate.json").exists()
    assert (tmp_path / "avr" / "split" / "cifarnet.nnef" / "split.json").exists()
    page = (tmp_path / "avr" / "report.html").read_text()
    assert "Split of the single-graph model" in page and "builtin-avr per-layer WCET" in page


from conftest import copy_project, scons  # noqa: E402


@pytest.mark.e2e
def test_scons_builds_cifarnet_split_in_two_items_on_host(tmp_path):
    project = copy_project(tmp_path)
    host = scons(project, "target=host", "model=cifarnet", "items=2")
    assert host.returncode == 0, host.stdout + host.stderr
    out = project / "build/host/cifarnet_items2"
    report = json.loads((out / "report.json").read_text())
    assert report["split"]["layers"]["dilated"] != report["split"]["layers"]["conv2x2"]
    assert "no WCET analyzer for target host" in report["split"]["cost_source"]
    assert report["petri"]["states"] == 37 and report["host"]["bit_equal_runs"] == 1000
    assert report["thread_sanitizer"]["sanitizer_reports"] == 0 and (out / "gate.json").exists()
    assert nnef_items.read_document(out / "split" / "cifarnet.nnef").items[1].item == "ITEM2"
    # the split reads back as the unsplit IR (its residual Add, fc2's softmax): fixed point is bit-equal
    fixed = multiitem_kind.check(out / "split" / "cifarnet.nnef", tmp_path / "q16", precision="q16-acc32", runs=100)
    assert fixed["bit_equal_runs"] == 100 and fixed["firing_sequences"]
    # a check failing in another precision or shape leaves no gate of the float32 build beside it
    refused = scons(project, "target=host", "model=cifarnet", "items=2", "precision=q16-acc32", "shape=v1")
    assert refused.returncode != 0 and "fixed point by shape v2 only" in refused.stdout + refused.stderr
    assert not (out / "gate.json").exists()
    (project / "map.json").write_text(json.dumps(report["split"]["layers"]))
    by_map = scons(project, "-n", "target=host", "model=cifarnet", "items=map.json")   # planned, not run
    assert by_map.returncode == 0, by_map.stdout + by_map.stderr
    assert "Multi-item split  build/host/cifarnet_split/split/cifarnet.nnef/graph.nnef" in by_map.stdout
    assert "Multi-item report build/host/cifarnet_split/report.json" in by_map.stdout


def test_a_split_into_one_item_compiles_without_sync_functions(tmp_path):
    """A chain has nothing to run in parallel (lenet5 items=2 gives one item): no variablesync, so
    no send/get function, which -Werror would refuse as unused."""
    import subprocess
    from nnbuild.codegen import multiitem as multiitem_c
    rng = np.random.default_rng(5)
    model = g.Model("chain", (4,), [g.Dense("d1", rng.normal(size=(4, 3)).astype(np.float32), None, "relu"),
                                    g.Dense("d2", rng.normal(size=(3, 2)).astype(np.float32), None, "softmax")])
    item_split.split(model, tmp_path / "c.nnef", items=2)
    system = nnef_items.load(tmp_path / "c.nnef")
    assert len(system.items) == 1 and not system.syncs
    multiitem_c.generate(system, tmp_path / "gen", shape="v2", precision="q16-acc32", sync="flags")
    compiled = subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-pthread", "-c",
                               f"{system.name}.c", "-o", str(tmp_path / "system.o")], cwd=tmp_path / "gen",
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
