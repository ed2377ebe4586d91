"""Hostile NNEF and multi-item NNEF files (issue 23): bounded cost, refusals in one line before the
work, attributes validated against the NNEF spec, no traceback from input content."""

import os
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from nnbuild import names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import item_split, nnef_items
from nnbuild.frontends import nnef_text as nnef
from nnbuild.ir import petri

pytest.importorskip("onnx")


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


def write_model(folder, text, tensors=None):
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph.nnef").write_text(text)
    for label, data in (tensors or {}).items():
        (folder / f"{label}.dat").write_bytes(data if isinstance(data, bytes) else nnef.dat_bytes(data))
    return folder


def graph(*lines, shape="[1, 8]"):
    body = "\n".join(lines)
    return f"version 1.0;\ngraph g(x) -> (y)\n{{\n    x = external(shape = {shape});\n{body}\n}}\n"


def refusal(tmp_path, text, tensors=None):
    folder = write_model(tmp_path / "m.nnef", text, tensors)
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    return one_line(exc)


# ------------------------------------------------------------------------ element limits (point 4)

def refusal_and_peak(tmp_path, constants):
    """The refusal of a graph of `constants` then a relu, and the peak traced allocation while loading it."""
    tracemalloc.start()
    try:
        text = refusal(tmp_path, graph(*constants, "    y = relu(x);"))
        return text, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_twelve_huge_constants_are_refused_before_any_is_allocated(tmp_path):
    lines = [f"    c{k} = constant(shape = [134217728], value = [1.0]);" for k in range(12)]
    text, peak = refusal_and_peak(tmp_path, lines)
    assert "graph.nnef: line 5:" in text and "constant: shape [134217728] has 134,217,728 elements" in text
    assert "limit of 4,194,304 per tensor (limits.MAX_TENSOR_ELEMENTS)" in text
    assert peak < 32 << 20


def test_constants_within_the_tensor_limit_are_refused_by_the_total_before_allocating(tmp_path):
    lines = [f"    c{k} = constant(shape = [4194304], value = [1.0]);" for k in range(12)]
    text, peak = refusal_and_peak(tmp_path, lines)
    assert "line 13:" in text and "constant: shape [4194304] brings the graph's constants to 37,748,736" in text
    assert "above the limit of 33,554,432 in total (limits.MAX_TOTAL_CONSTANT_ELEMENTS)" in text
    assert peak < 32 << 20


@pytest.mark.parametrize("lines, op", [
    (["    y = tile(x, repeats = [1, 4194304]);"], "tile"),
    (["    a = reshape(x, shape = [8, 1]);", "    b = reshape(x, shape = [1, 8]);",
      "    c = tile(a, repeats = [1024, 1]);", "    d = tile(b, repeats = [1, 1024]);",
      "    y = matmul(c, d);"], "matmul"),
    (["    y = pad(x, padding = [(0, 0), (0, 20000000)]);"], "pad"),
])
def test_a_computed_tensor_above_the_limit_is_refused_naming_its_operation(tmp_path, lines, op):
    text = refusal(tmp_path, graph(*lines))
    assert f": {op}: result '" in text and "limits.MAX_TENSOR_ELEMENTS" in text


def test_dat_header_is_checked_against_the_file_and_the_declaration_before_reading(tmp_path):
    truncated = nnef.dat_bytes(np.zeros((2048, 2048), np.float32))[:nnef.DAT_HEADER + 16]
    text = refusal(tmp_path, graph("    w = variable(shape = [2048, 2048], label = 'w');", "    y = relu(x);"),
                   {"w": truncated})
    assert "w.dat: tensor file is 144 bytes, its header declares 16777344" in text
    text = refusal(tmp_path, graph("    w = variable(shape = [2], label = 'w');", "    y = relu(x);"),
                   {"w": nnef.dat_bytes(np.zeros(1000, np.float32))})
    assert "tensor shape [1000] differs from the declared [2]" in text


def test_graph_and_document_reads_are_capped(tmp_path):
    folder = tmp_path / "z.nnef"
    folder.mkdir()
    (folder / "graph.nnef").write_bytes(b"#" * (nnef.MAX_GRAPH_BYTES + 1))
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    assert "graph file is 8388609 bytes, more than 8388608 (MAX_GRAPH_BYTES)" in one_line(exc)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.read_document(folder)
    assert "multi-item document is 8388609 bytes, more than 8388608 (MAX_GRAPH_BYTES)" in one_line(exc)


def test_devices_and_fifos_are_not_read(tmp_path):
    folder = tmp_path / "z.nnef"
    folder.mkdir()
    os.symlink("/dev/zero", folder / "graph.nnef")
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(folder)
    assert "graph.nnef: graph file is not a regular file" in one_line(exc)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    assert "multi-item document is not a regular file" in one_line(exc)
    model = write_model(tmp_path / "f.nnef", graph("    w = variable(shape = [2], label = 'w');", "    y = relu(x);"))
    os.mkfifo(model / "w.dat")
    with pytest.raises(NNBuildError) as exc:
        nnef.to_onnx(model)
    assert "w.dat: tensor file is not a regular file" in one_line(exc)
    os.mkfifo(tmp_path / "map.json")
    with pytest.raises(NNBuildError) as exc:
        item_split.read_map(tmp_path / "map.json")
    assert "map.json: item map is not a regular file" in one_line(exc)


# --------------------------------------------------------------------- attributes (point 8)

@pytest.mark.parametrize("line, message", [
    ("y = conv(x, w, 0.0, border = 'evil */');", "border 'evil */' is not an NNEF border"),
    ("y = conv(x, w, 0.0, 'evil */');", "border 'evil */' is not an NNEF border"),
    ("y = conv(x, w, 0.0, border = 'replicate');", "automatic padding is not supported"),
    ("y = max_pool(x, size = [1, 1, 2, 2], border = 'evil');", "border 'evil' is not an NNEF border"),
    ("y = box(x, size = [1, 1, 2, 2], border = 'constant', normalize = 1);", "'normalize' must be true or false"),
    ("y = pad(x, padding = [(0, 0), (0, 0), (1, 1), (1, 1)], border = 'ignore');", "is not an NNEF border"),
    ("y = multilinear_upsample(x, factor = [2, 2], method = 'aligned', border = '*/');", "is not an NNEF border"),
    ("y = relu(x, 'a');", "'argument 2' takes no string"),
    ("y = conv(x, w, 0.0, stride = ['1', '1']);", "'stride' takes no string"),
    ("y = conv(x, w, 0.0, stride = [0, 1]);", "'stride' [0, 1] must be positive"),
    ("y = max_pool(x, size = [1, 1, 0, 2]);", "'size' [1, 1, 0, 2] must be positive"),
    ("y = conv(x, w, 0.0, padding = [(4294967296, 0), (0, 0)]);", "beyond the integer limit"),
    ("y = relu(x, true);", "takes no logical value"),
    ("y = leaky_relu(x, alpha = 1e999);", "'alpha' must be a number float32 can hold"),
    ("y = elu(x, alpha = -1e999);", "'alpha' must be a number float32 can hold"),
    ("y = batch_normalization(x, m, v, 0.0, 1.0, epsilon = -1.0);", "'epsilon' -1.0 is negative"),
    ("y = local_response_normalization(x, size = [1, 3, 1, 1], bias = 0.0);", "bias 0.0 positive"),
    ("y = local_response_normalization(x, size = [1, 3, 1, 1], alpha = -1.0);", "non-negative"),
    ("y = softmax(x, axes = [7]);", "'axes' [7] must name distinct axes"),
    ("y = concat([x, x], axis = 9);", "'axis' [9] must name distinct axes"),
    ("y = matmul(x, x, transposeA = 'yes');", "'transposeA' takes no string"),
])
def test_attributes_outside_the_nnef_spec_are_refused(tmp_path, line, message):
    tensors = {"w": np.ones((2, 2, 3, 3), np.float32), "m": np.zeros((1, 2), np.float32),
               "v": np.ones((1, 2), np.float32)}
    text = refusal(tmp_path, "version 1.0; graph g(x) -> (y) {\n x = external(shape = [1, 2, 4, 4]);\n"
                             " w = variable(shape = [2, 2, 3, 3], label = 'w');\n"
                             " m = variable(shape = [1, 2], label = 'm');\n v = variable(shape = [1, 2], label = 'v');\n"
                             f" {line}\n}}", tensors)
    assert message in text and "line 6:" in text


def test_every_nnef_border_and_method_is_known():
    assert set(nnef.BORDERS) == {"ignore", "constant", "replicate", "reflect", "reflect-even"}
    assert set(nnef.METHODS) == {"symmetric", "asymmetric", "aligned"}
    for (op, key), allowed in nnef.STRING_PARAMS.items():
        assert key in nnef.SIGNATURES[op]
        assert allowed is None or all(names.c_text(v) == v for v in allowed)


# ------------------------------------------------------------- multi-item state space (point 4)

def fanout_document(fan, length, width=4, cross=False):
    """ITEM0 sends x to `fan` items, each a chain of `length` instructions sent back and added up;
    `cross`: each instruction after the first also reads the chain's received tensor (no run of
    the net is then linked one to one)."""
    items = [f"ITEM{k}" for k in range(1, fan + 1)]
    head = [f"    e = external(shape = [1, {width}]);", "    x = relu(e);",
            f"    sx = variablesync(shape = [1, {width}]);"]
    head += [f"    s{k} = variablesync(shape = [1, {width}]);" for k in range(1, fan + 1)]
    head += [f"    sx = send_var([{', '.join(items)}], x);"]
    head += [f"    r{k} = get_var(ITEM{k}, s{k});" for k in range(1, fan + 1)]
    acc = "r1"
    for k in range(2, fan + 1):
        head.append(f"    a{k} = add({acc}, r{k});")
        acc = f"a{k}"
    head.append(f"    out = copy({acc});")
    inputs = ", ".join(["e"] + [f"s{k}" for k in range(1, fan + 1)])
    lines = ["version 1.0;", f"graphitem ITEM0 G0([{inputs}]) -> ([sx, out])", "{"] + head + ["}"]
    for k in range(1, fan + 1):
        body = [f"    sx = variablesync(shape = [1, {width}]);", f"    s{k} = variablesync(shape = [1, {width}]);",
                f"    c{k}_0 = get_var(ITEM0, sx);"]
        for j in range(1, length + 1):
            body.append(f"    c{k}_{j} = add(c{k}_{j - 1}, c{k}_0);" if cross and j > 1
                        else f"    c{k}_{j} = relu(c{k}_{j - 1});")
        body.append(f"    s{k} = send_var([ITEM0], c{k}_{length});")
        lines += [f"graphitem ITEM{k} G{k}([sx]) -> ([s{k}])", "{"] + body + ["}"]
    return "\n".join(lines) + "\n"


def write_document(tmp_path, text, name="fan.nnef"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "graph.nnef").write_text(text)
    return folder


@pytest.mark.parametrize("fan, cross, net, bound", [
    (8, False, "the data-flow net", "390,625"),
    (7, False, "the items' program order", "279,936"),
    (8, True, "the data-flow net", "390,625"),
    (7, True, "the items' program order", "279,936"),
])
def test_fan_out_bombs_are_refused_before_exploring(tmp_path, fan, cross, net, bound):
    text = fanout_document(fan, 3, cross=cross)
    assert len(text) < 3500
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(write_document(tmp_path, text))
    message = one_line(exc)
    assert f"{net} has at least {bound} reachable markings" in message
    assert "above the limit of 200,000 (MAX_STATES): not explored" in message and "graph.nnef" in message


def test_exploration_stops_the_moment_the_limit_is_passed(tmp_path):
    system_net = _nets(tmp_path, fanout_document(4, 3))[0]
    full = petri.explore(system_net)
    with pytest.raises(NNBuildError) as exc:
        petri.explore(system_net, limit=full.states - 1, what="the data-flow net")
    assert f"the data-flow net has more than {full.states - 1:,} reachable markings" in one_line(exc)
    assert petri.explore(system_net, limit=full.states).states == full.states


def _nets(tmp_path, text, name="fan.nnef"):
    saved, petri.verify = petri.verify, lambda system: {}
    try:
        system = nnef_items.load(write_document(tmp_path, text, name))
    finally:
        petri.verify = saved
    return petri.item_net(system), petri.item_net(system, program_order=True), petri.unsplit_net(system)


def test_the_lower_bound_never_exceeds_the_markings_explored(tmp_path):
    for k, (fan, length, cross) in enumerate([(2, 2, False), (3, 2, True), (4, 1, False), (3, 3, True)]):
        data, code, whole = _nets(tmp_path, fanout_document(fan, length, cross=cross), f"f{k}.nnef")
        assert petri.state_lower_bound(data) is not None
        for net in (data, code, whole):
            bound = petri.state_lower_bound(net)
            assert bound is None or bound[0] <= petri.explore(net).states
    rng = random.Random(1)
    for _ in range(60):   # random data-flow graphs: each instruction reads 1-3 earlier tensors
        count = rng.randint(2, 12)
        instructions = [(f"t{i}", sorted({f"t{j}" if j >= 0 else "x" for j in
                                          rng.sample(range(-1, i), min(i + 1, rng.randint(1, 3)))}))
                        for i in range(count)]
        net = petri.graph_net(instructions, ["x"], f"t{count - 1}")
        bound = petri.state_lower_bound(net)
        assert bound is None or bound[0] <= petri.explore(net).states


def test_the_bit_set_exploration_counts_what_the_token_count_one_does(tmp_path):
    for net in _nets(tmp_path, fanout_document(3, 2, cross=True)):
        bits = petri.explore(net)
        assert (bits.states, bits.edges, bits.dead, bits.unsafe) == _plain_explore(net) + (None,)


def _plain_explore(net):
    """The exploration over token-count tuples, written out here as the reference."""
    start = tuple(net.initial)
    seen, frontier, edges, dead = {start}, [start], 0, []
    while frontier:
        marking = frontier.pop(0)
        enabled = net.enabled(marking)
        if not enabled:
            dead.append(marking)
        for t in enabled:
            edges += 1
            nxt = net.fire(marking, t)
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return len(seen), edges, dead


# ------------------------------------------------------------------ tracebacks (point 7)

def test_an_item_sending_to_several_that_reads_several_back_loads(tmp_path):
    system = nnef_items.load(write_document(tmp_path, fanout_document(3, 2)))
    assert system.syncs["sx"].reader_items == ("ITEM1", "ITEM2", "ITEM3")
    tail = [s for s in system.item("ITEM0").segments.values() if len(s.inputs) > 1][0]
    assert tail.inputs == ("r1", "r2") and tail.model.input_shape == (8,)   # packed: two in NNEF order
    assert system.meta["petri"]["states"] == 72 and system.meta["petri"]["equivalence"]


def test_item_and_system_names_longer_than_the_limit_are_refused(tmp_path):
    text = fanout_document(2, 1).replace("ITEM1", "I" * 300)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(write_document(tmp_path, text))
    assert "graph.nnef: item name 'IIIIIIIIIIIIIIIIIIIIIIII...' has 300 characters; at most 63 are allowed" in one_line(exc)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(write_document(tmp_path, fanout_document(2, 1), "s" * 80 + ".nnef"))
    assert "system name 'ssssssssssssssssssssssss...' has 80 characters; at most 63" in one_line(exc)
    graph_ = nnef_items.unsplit(nnef_items.parse(fanout_document(2, 1)), tmp_path / "fan.nnef")
    assignment = {st.outputs[0]: "J" * 64 for st in graph_.statements if st.op not in nnef_items.SOURCES}
    with pytest.raises(NNBuildError) as exc:
        nnef_items.split(graph_, assignment)
    assert "has 64 characters; at most 63 are allowed" in one_line(exc)


def test_a_deeply_nested_item_map_is_one_line(tmp_path):
    path = tmp_path / "map.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(NNBuildError) as exc:
        item_split.read_map(path)
    assert "map.json: item map is nested too deeply (more than 64 levels; limits.MAX_JSON_DEPTH)" in one_line(exc)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.split_model(tmp_path, path)
    assert "item map is nested too deeply" in one_line(exc)


def test_a_huge_variablesync_is_refused(tmp_path):
    text = fanout_document(2, 1).replace("sx = variablesync(shape = [1, 4])",
                                         "sx = variablesync(shape = [1, 4, 65536, 65536])", 1)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(write_document(tmp_path, text))
    assert "item ITEM0: line 6: variablesync 'sx' of shape [1, 4, 65536, 65536]" in one_line(exc)
    assert "MAX_TENSOR_ELEMENTS" in one_line(exc)


def test_a_long_chain_of_binary_operations_runs_shape_inference_once(tmp_path, monkeypatch):
    """Shapes of element-wise results are followed statement by statement: ONNX shape inference
    over the whole graph per statement made a chain of n statements cost n^2."""
    lines = ["    y0 = relu(x);"] + [f"    y{i} = add(y{i - 1}, x);" for i in range(1, 500)]
    folder = write_model(tmp_path / "c.nnef", graph(*lines).replace("-> (y)", "-> (y499)"))
    calls = []
    original = nnef._Translator._infer
    monkeypatch.setattr(nnef._Translator, "_infer", lambda self: calls.append(1) or original(self))
    proto = nnef.to_onnx(folder)
    assert len(proto.graph.node) == 500 and len(calls) <= 1


def test_many_single_concurrent_instructions_are_bounded_too():
    wide = [(f"r{k}", ["x"]) for k in range(18)] + [("out", [f"r{k}" for k in range(18)])]
    with pytest.raises(NNBuildError) as exc:
        petri.explore(petri.graph_net(wide, ["x"], "out"), what="the unsplit net")
    assert ("the unsplit net has at least 262,144 reachable markings (18 concurrent chains of 1 transitions)"
            in one_line(exc))
    narrow = petri.graph_net(wide[:10] + [("out", [f"r{k}" for k in range(10)])], ["x"], "out")
    assert petri.state_lower_bound(narrow)[0] == 1024 and petri.explore(narrow).states == 1025


@pytest.mark.e2e
def test_a_fan_out_system_with_packed_nnef_order_inputs_runs_bit_equal_on_host(tmp_path):
    """The shape that raised AttributeError in _from_held: one item sends to three and adds up
    what they send back (segments packing several tensors held in NNEF order)."""
    import json
    from nnbuild import pipeline
    folder = write_document(tmp_path, fanout_document(3, 2))
    pipeline.build_multiitem(folder, tmp_path / "out", board="host", runs=200)
    written = json.loads((tmp_path / "out" / "report.json").read_text())
    assert written["host"]["bit_equal_runs"] == 200 and written["petri"]["states"] == 72


def test_stable_order_is_the_first_ready_step_each_time():
    """The heap order equals the plain rule (rescan for the first ready step), cycles left out."""
    def plain(steps, defined):
        done, pending, order = set(defined), list(range(len(steps))), []
        while True:
            ready = [i for i in pending if all(r in done for r in steps[i][1])]
            if not ready:
                return order
            order.append(ready[0])
            done.add(steps[ready[0]][0])
            pending.remove(ready[0])
    rng = random.Random(2)
    for _ in range(200):
        count = rng.randint(1, 10)
        names_ = [f"n{i}" for i in range(count)]
        steps = [(names_[i], rng.sample(names_ + ["x"], rng.randint(0, min(3, count + 1)))) for i in range(count)]
        rng.shuffle(steps)
        assert petri.stable_order(steps, {"x"}) == plain(steps, {"x"})
