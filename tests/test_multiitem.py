"""Multi-item NNEF systems (issue 15): parser, writer, split, the IR they build."""

import json
import re
import shutil
from pathlib import Path

import pytest

from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_items
from nnbuild.frontends import nnef_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "firmware_examples" / "multiitem_cnn" / "multiitem_cnn.nnef"
#: the example's split, as a map tensor -> item (the paper's example 5)
EXAMPLE_MAP = {"o1": "ITEM1", "o2": "ITEM2", "o3": "ITEM2", "o4": "ITEM3", "o5": "ITEM3",
               "o6": "ITEM1", "o7": "ITEM1", "out": "ITEM1"}


def one_line(exc):
    text = str(exc.value)
    assert "\n" not in text
    return text


def example_copy(tmp_path, replace=()):
    """The example folder in tmp_path, its document edited by (old, new) replacements."""
    folder = tmp_path / "sys.nnef"
    shutil.copytree(EXAMPLE, folder)
    text = (folder / "graph.nnef").read_text()
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new)
    (folder / "graph.nnef").write_text(text)
    return folder


def test_example_parses_into_items_syncs_and_segments():
    system = nnef_items.load(EXAMPLE)
    assert [i.name for i in system.items] == ["ITEM1", "ITEM2", "ITEM3"]
    assert system.input == "e1" and system.output == "out"
    sync1 = system.syncs["vsync1"]
    assert (sync1.writer, sync1.tensor, sync1.reader_items, sync1.shape) == \
        ("ITEM1", "o1", ("ITEM2", "ITEM3"), (1, 4, 8, 8))
    item1 = system.item("ITEM1")
    assert [k for k, _ in item1.actions] == ["run", "send", "get", "get", "run"]
    tail = item1.segments["multiitem_cnn_ITEM1_1"]
    assert tail.inputs == ("o3", "o5") and tail.instructions == ("o6", "o7", "out")
    assert tail.model.input_shape == (512,) and tail.model.output_shape == (10,)
    assert system.whole.output_shape == (10,)
    assert system.item("ITEM3").uses("v5") == 1 and item1.uses("o1") == 1


def test_write_then_parse_is_identity():
    document = nnef_items.read_document(EXAMPLE)
    text = nnef_items.write(document)
    assert nnef_items.parse(text) == document
    assert nnef_items.write(nnef_items.parse(text)) == text


def test_paper_bracket_lists_and_plain_lists_parse_alike():
    a = nnef_items.parse("version 1.0; graphitem A G([x]) -> ([y]) { y = relu(x); }")
    b = nnef_items.parse("version 1.0; graphitem A G(x) -> (y) { y = relu(x); }")
    assert a == b


def test_json_map_split_round_trips_and_rebuilds_the_example(tmp_path):
    document = nnef_items.read_document(EXAMPLE)
    single = tmp_path / "single.nnef"
    shutil.copytree(EXAMPLE, single)
    (single / "graph.nnef").write_text(nnef_items.write_graph(nnef_items.unsplit(document, EXAMPLE)))
    (tmp_path / "map.json").write_text(json.dumps(EXAMPLE_MAP))
    split = nnef_items.split_model(single, tmp_path / "map.json")
    assert nnef_items.parse(nnef_items.write(split)) == split
    out = tmp_path / "split.nnef"
    shutil.copytree(EXAMPLE, out)
    (out / "graph.nnef").write_text(nnef_items.write(split))
    system = nnef_items.load(out)
    assert {n: (s.writer, s.reader_items) for n, s in system.syncs.items()} == {
        "sync_o1": ("ITEM1", ("ITEM2", "ITEM3")), "sync_o3": ("ITEM2", ("ITEM1",)),
        "sync_o5": ("ITEM3", ("ITEM1",))}


def test_split_map_must_cover_every_instruction(tmp_path):
    document = nnef_items.read_document(EXAMPLE)
    graph = nnef_items.unsplit(document, EXAMPLE)
    partial = {k: v for k, v in EXAMPLE_MAP.items() if k != "o4"}
    with pytest.raises(NNBuildError) as exc:
        nnef_items.split(graph, partial, EXAMPLE / "graph.nnef")
    assert "'o4' (conv) is assigned to no item" in one_line(exc)


@pytest.mark.parametrize("replace, expected", [
    # a get_var with no send_var
    ([("    vsync2 = send_var([ITEM1], o3);\n", "")],
     "item ITEM1: get_var(ITEM2, vsync2) has no matching send_var in item ITEM2"),
    # a send to an item that never gets it
    ([("    o1 = get_var(ITEM1, vsync1);\n    o4", "    o1 = external<scalar>(shape = [1, 4, 8, 8]);\n    o4")],
     "item ITEM3: send_var 'vsync1' of item ITEM1 has no matching get_var in item ITEM3"),
    ([("o3 = get_var(ITEM2, vsync2)", "o3 = get_var(ITEM9, vsync2)")], "item ITEM1: get_var(ITEM9, vsync2): unknown item ITEM9"),
    # a name that would not be a C identifier (a keyword)
    ([("vsync3", "static")], "item ITEM1: line 13: name 'static' is not a C identifier"),
    ([("vsync2 = variablesync<scalar>(shape = [1, 4, 8, 8]);\n    o1", "vsync2 = variablesync<scalar>(shape = [1, 4, 8, 9]);\n    o1")],
     "variablesync 'vsync2'"),
    ([("o5 = conv(o4, v5, v6", "o2 = conv(o4, v5, v6"), ("vsync3 = send_var([ITEM1], o5)", "vsync3 = send_var([ITEM1], o2)")],
     "'o2' is also computed by item"),
])
def test_broken_documents_fail_in_one_line_naming_item_and_variable(tmp_path, replace, expected):
    folder = example_copy(tmp_path, replace)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    text = one_line(exc)
    assert expected in text and "graph.nnef" in text


def test_sync_shape_must_match_the_sent_tensor(tmp_path):
    folder = example_copy(tmp_path, [("[1, 4, 8, 8]", "[1, 4, 8, 7]")])
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    assert "item ITEM1: variablesync 'vsync1' has shape [1, 4, 8, 7] but 'o1' is [1, 4, 8, 8]" in one_line(exc)


# ------------------------------------------------------------------------------ Petri nets

from nnbuild.ir import petri  # noqa: E402

#: the seed's listing 1 (LeNet-5): its figure 4 net
LENET5 = """version 1.0;
graph torch_jit_export(e1) -> (out)
{
    e1 = external<scalar>(shape = [1, 1, 32, 32]);
    v1 = variable<scalar>(shape = [6, 1, 5, 5], label = 'v1');
    v2 = variable<scalar>(shape = [1, 6], label = 'v2');
    v3 = variable<scalar>(shape = [16, 6, 5, 5], label = 'v3');
    v4 = variable<scalar>(shape = [1, 16], label = 'v4');
    v5 = variable<scalar>(shape = [120, 400], label = 'v5');
    v6 = variable<scalar>(shape = [1, 120], label = 'v6');
    v7 = variable<scalar>(shape = [84, 120], label = 'v7');
    v8 = variable<scalar>(shape = [1, 84], label = 'v8');
    v9 = variable<scalar>(shape = [10, 84], label = 'v9');
    v10 = variable<scalar>(shape = [1, 10], label = 'v10');
    o1 = conv(e1, v1, v2, stride = [1, 1], dilation = [1, 1], padding = [(0, 0), (0, 0)], groups = 1);
    o2 = relu(o1);
    o3 = max_pool(o2, size = [1, 1, 2, 2], stride = [1, 1, 2, 2], border = 'ignore');
    o4 = conv(o3, v3, v4);
    o5 = relu(o4);
    o6 = max_pool(o5, size = [1, 1, 2, 2], stride = [1, 1, 2, 2], border = 'ignore');
    o7 = reshape(o6, shape = [0, -1]);
    o8 = linear(o7, v5, v6);
    o9 = relu(o8);
    o10 = linear(o9, v7, v8);
    o11 = relu(o10);
    o12 = linear(o11, v9, v10);
    out = softmax(o12, axes = [1]);
}
"""

#: two items each waiting for the other's variable: a cycle with no initial token
CYCLE = """version 1.0;
graphitem A GA([x, s2]) -> ([s1, y]) {
    x = external<scalar>(shape = [1, 4]);
    s1 = variablesync<scalar>(shape = [1, 4]);
    s2 = variablesync<scalar>(shape = [1, 4]);
    b = get_var(B, s2);
    a = add(x, b);
    s1 = send_var([B], a);
    y = relu(a);
}
graphitem B GB([s1]) -> ([s2]) {
    s1 = variablesync<scalar>(shape = [1, 4]);
    s2 = variablesync<scalar>(shape = [1, 4]);
    a = get_var(A, s1);
    b = relu(a);
    s2 = send_var([A], b);
}
"""


def test_lenet5_net_of_the_papers_figure_4():
    graph = nnef_text.parse(LENET5)
    sources = [st.outputs[0] for st in graph.statements if st.op in nnef_items.SOURCES]
    instructions = [(st.outputs[0], nnef_items.statement_reads(st)) for st in graph.statements
                    if st.op not in nnef_items.SOURCES]
    net = petri.graph_net(instructions, sources, "out")
    result = petri.check_live(net)
    # the paper's "24 states" are its 24 places (e1, v1..v10, o1..o12, out): 11 initial tokens, one
    # final; a chain of 13 instructions has 14 reachable markings
    assert len(net.places) == 24 and sum(net.initial) == 11 and sum(net.final) == 1
    assert result.states == 14 and result.dead == [tuple(net.final)]


def test_example_nets_are_live_safe_and_equivalent_to_the_unsplit_net():
    record = nnef_items.load(EXAMPLE).meta["petri"]
    assert record["states"] == 21 and record["unsplit_states"] == 13
    assert record["program_order_states"] == 36
    assert record["places"] == 25 and record["initial_tokens"] == 13
    assert record["deadlock_free"] and record["one_safe"] and record["trace_inclusion"] and record["equivalence"]


def test_cycle_between_items_fails_naming_items_and_variables(tmp_path):
    folder = tmp_path / "cycle.nnef"
    folder.mkdir()
    (folder / "graph.nnef").write_text(CYCLE)
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    assert ("deadlock in the data-flow net (1 states explored): A waits for s2 from B; B waits for s1 from A"
            in one_line(exc))


def test_get_before_send_deadlocks_in_program_order(tmp_path):
    folder = example_copy(tmp_path, [
        ("    vsync1 = send_var([ITEM2, ITEM3], o1);\n    o3 = get_var(ITEM2, vsync2);\n",
         "    o3 = get_var(ITEM2, vsync2);\n    vsync1 = send_var([ITEM2, ITEM3], o1);\n")])
    with pytest.raises(NNBuildError) as exc:
        nnef_items.load(folder)
    assert "deadlock in the items' program order" in one_line(exc)
    assert "ITEM1 waits for vsync2 from ITEM2" in one_line(exc) or "ITEM2" in one_line(exc)


def test_trace_inclusion_catches_an_instruction_that_lost_an_input():
    system = nnef_items.load(EXAMPLE)
    multi, whole = petri.item_net(system), petri.unsplit_net(system)
    concat = multi.index("ITEM1.o6")
    t = multi.transitions[concat]
    multi.transitions[concat] = petri.Transition(t.name, t.colour, t.kind, t.label, t.inputs[:1], t.outputs)
    with pytest.raises(NNBuildError) as exc:
        petri.check_traces(multi, whole)
    assert "trace inclusion fails: item ITEM1 can compute 'o6' where the unsplit model cannot" in one_line(exc)


def test_replay_accepts_firing_sequences_only():
    system = nnef_items.load(EXAMPLE)
    net = petri.item_net(system)
    good = ["ITEM1.o1", "sync.vsync1", "ITEM3.o4", "ITEM2.o2", "ITEM3.o5", "ITEM2.o3", "sync.vsync3",
            "sync.vsync2", "ITEM1.o6", "ITEM1.o7", "ITEM1.out"]
    assert petri.replay(net, good) is None
    assert "'ITEM2.o2' fires while not enabled" in petri.replay(net, ["ITEM1.o1", "ITEM2.o2"])
    assert "stop before the final marking" in petri.replay(net, good[:-1])


# ------------------------------------------------------------------------------ generated C

from nnbuild.checks import multiitem as multiitem_check  # noqa: E402
from nnbuild.checks.inputs import check_inputs  # noqa: E402
from nnbuild.codegen import multiitem as multiitem_c  # noqa: E402
from nnbuild.checks import report_html_multiitem as multiitem_html  # noqa: E402


@pytest.fixture(scope="module")
def example_system():
    return nnef_items.load(EXAMPLE)


def test_generation_is_byte_identical_and_each_sync_has_its_code(example_system, tmp_path):
    texts = {}
    for run, sync in (("a", "flags"), ("b", "flags"), ("a", "barrier"), ("a", "schedule")):
        multiitem_c.generate(example_system, tmp_path / run / sync, shape="v2", sync=sync)
        texts[(run, sync)] = {p.name: p.read_bytes() for p in sorted((tmp_path / run / sync).iterdir())}
    assert texts[("a", "flags")] == texts[("b", "flags")]
    c = {sync: texts[("a", sync)]["multiitem_cnn.c"].decode() for sync in multiitem_c.SYNCS}
    assert "pthread_cond_wait" in c["flags"] and "pthread_barrier_wait" not in c["flags"]
    assert "pthread_barrier_wait(&nn_mi_b_vsync1)" in c["barrier"]
    assert "pthread" not in c["schedule"] and "multiitem_cnn_ITEM2_0_infer(nn_mi_t_ITEM1_o1, nn_mi_t_ITEM2_o3)" in c["schedule"]
    net = json.loads(texts[("a", "schedule")]["multiitem_cnn.net.json"])
    assert net["schedule"][:2] == ["ITEM1.run.multiitem_cnn_ITEM1_0", "ITEM1.send.vsync1"]


def test_precision_and_sync_refusals_are_one_line(example_system, tmp_path):
    with pytest.raises(NNBuildError) as exc:
        multiitem_c.generate(example_system, tmp_path, shape="v2", precision="float64")
    assert "precision 'float64' asked" in one_line(exc)
    with pytest.raises(NNBuildError) as exc:
        multiitem_c.generate(example_system, tmp_path, shape="v3", precision="q16")
    assert "in fixed point by shape v2 only (shape 'v3' asked)" in one_line(exc)
    with pytest.raises(NNBuildError) as exc:
        multiitem_c.generate(example_system, tmp_path, shape="v2", sync="spin")
    assert "sync 'spin' is unknown" in one_line(exc)


@pytest.mark.e2e
@pytest.mark.parametrize("sync, sanitize", [("barrier", False), ("schedule", False), ("barrier", True)])
def test_host_runs_equal_the_unsplit_model_and_follow_the_net(example_system, tmp_path, sync, sanitize):
    """The other threadings; flags (the default), plain and under ThreadSanitizer, with the same
    checks: the SCons host build's report (check_host_report)."""
    record = multiitem_check.check_host(example_system, tmp_path, shape="v2", runs=1000, max_delay_us=200,
                                        sync=sync, sanitize=sanitize)
    assert record["bit_equal_runs"] == 1000 and record["firing_sequences"]
    assert record["sanitizer_reports"] == 0 and record["exit_status"] == 0
    if sync != "schedule":
        assert record["distinct_orders"] > 1   # the random delays do interleave the items


@pytest.mark.e2e
def test_a_reader_that_does_not_wait_is_caught(example_system, tmp_path):
    sources = multiitem_check.generate_host_check(example_system, tmp_path, shape="v2", sync="flags")
    system_c = tmp_path / "gen" / "multiitem_cnn.c"
    text = system_c.read_text()
    copy_line = "    memcpy(value, buf, n * sizeof *value);\n"
    get_start = text.index("static void nn_mi_get(")
    lock_line = text.index("    pthread_mutex_lock(&s->lock);\n", get_start)
    # the reader copies before it waits for its writer: a data race, and stale values
    text = text[:lock_line] + copy_line + text[lock_line:].replace(copy_line, "", 1)
    system_c.write_text(text)
    x = check_inputs(128, 4, 1, (-1.0, 1.0))
    program = multiitem_check.compile_host_check(example_system, tmp_path, sources, sanitize=True)
    record = multiitem_check.run_host_check(example_system, program, x, runs=50, max_delay_us=2000,
                                            timeout=120)
    assert not record["ok"] and record["sanitizer_reports"] > 0
    assert "ThreadSanitizer: data race" in multiitem_check.failure(record)
    plain = multiitem_check.compile_host_check(example_system, tmp_path, sources)
    record = multiitem_check.run_host_check(example_system, plain, x, runs=50, max_delay_us=2000, timeout=120)
    assert record["bit_equal_runs"] < 50 and "differ from the unsplit model" in multiitem_check.failure(record)


def test_timing_is_the_longest_path_of_the_timed_net(example_system):
    cycles = {"multiitem_cnn_ITEM1_0": 10, "multiitem_cnn_ITEM1_1": 20, "multiitem_cnn_ITEM2_0": 100,
              "multiitem_cnn_ITEM3_0": 300}
    timing = multiitem_check.timing(example_system, cycles, schedule_cycles=437, sync_cycles=5)
    # head 10, send 5, get 5, branch 3: 300, send 5, get 5, tail 20; 7 cycles outside the segments
    assert timing["end_to_end_cycles"] == 10 + 5 + 5 + 300 + 5 + 5 + 20 + 7
    assert timing["item_cycles"] == {"ITEM1": 30, "ITEM2": 100, "ITEM3": 300}
    assert timing["speedup_bound"] == round(437 / 357, 3)


# ------------------------------------------------------------------------------ the whole build outside SCons


@pytest.mark.e2e
def test_avr_build_fails_its_deadline_on_the_end_to_end_bound(tmp_path):
    """`nnbuild multiitem` (the plan's tasks outside SCons) in a real process: one line, exit 2.
    Its board record is the static schedule's run under simavr (check_on_board), within its WCET
    bound, timed as the longest path of the timed net."""
    import subprocess
    import sys
    (tmp_path / "gate.json").write_text("{}")   # a gate passed earlier must not outlive this build
    run = subprocess.run([sys.executable, "-m", "nnbuild", "multiitem", str(EXAMPLE), "-o", str(tmp_path),
                          "--target", "avr", "--deadline", "800ms", "--count", "2"], capture_output=True, text=True)
    error = run.stderr.strip()
    assert run.returncode == 2 and "\n" not in error, run.stderr
    assert error.startswith("nnbuild: error: ") and "end-to-end bound" in error and "> deadline 800 ms" in error
    assert "Petri net 21 states" in run.stdout   # the report step's summary
    assert not (tmp_path / "gate.json").exists()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["deadline"]["met"] is False and not report["gates_passed"]
    page = (tmp_path / "report.html").read_text()
    bound = report["deadline"]["end_to_end_bound_ms"]
    assert 850 < bound < 1000   # float32 soft-float, sums split by sign with their value facts: about 0.92 s
    assert f"{bound} ms" in page and f"end-to-end bound {bound:.1f} ms &gt; deadline 800 ms" in page
    assert report["deadline"]["items_on_own_cores_bound_ms"] < report["deadline"]["end_to_end_bound_ms"]
    record = report["board"]
    assert record["max_abs_error"] < 1e-5 and len(record["measured_cycles"]) == record["cases"] > 0
    bound = record["wcet"]["schedule_cycles"]
    assert max(record["measured_cycles"]) <= bound
    timing = record["timing"]
    segments = record["wcet"]["segment_cycles"]
    # ITEM1's head, then the longer of the two parallel branches, then ITEM1's tail
    assert timing["outside_segments_cycles"] == bound - sum(segments.values()) > 0
    assert timing["end_to_end_cycles"] == (segments["multiitem_cnn_ITEM1_0"] + segments["multiitem_cnn_ITEM1_1"]
                                           + max(segments["multiitem_cnn_ITEM2_0"], segments["multiitem_cnn_ITEM3_0"])
                                           + timing["outside_segments_cycles"])
    assert timing["sequential_cycles"] <= bound and timing["speedup_bound"] > 1.0


# ------------------------------------------------------------------------------ SCons

from conftest import copy_project, needs_avr, scons  # noqa: E402


def check_host_report(folder):
    """The host build's report (the same plan `nnbuild multiitem` runs, whose avr build
    test_avr_build_fails_its_deadline_on_the_end_to_end_bound runs outside SCons): Petri net, 1000
    bit-equal threaded runs (sync flags) that follow the net and interleave, the same under
    ThreadSanitizer with no report, measured timing, the page, the gate."""
    written = json.loads((folder / "report.json").read_text())
    assert written["petri"]["states"] == 21 and written["host"]["bit_equal_runs"] == 1000
    for record in (written["host"], written["thread_sanitizer"]):
        assert record["bit_equal_runs"] == 1000 and record["firing_sequences"]
        assert record["sanitizer_reports"] == 0 and record["exit_status"] == 0
        assert record["distinct_orders"] > 1   # the random delays do interleave the items
    assert (folder / "gate.json").exists() and written["sync"] == "flags"
    measured = written["host_timing"]
    assert measured["runs"] == 1000 and 0 < measured["median_critical_path_ns"]
    page = (folder / "report.html").read_text()
    assert "21 / 36 / 13" in page and "1000 / 1000" in page and "<script" not in page
    assert multiitem_html.render(written) == page   # the same report gives the same bytes


@pytest.mark.e2e
@needs_avr
def test_scons_builds_the_example_on_host_and_avr_and_gates_the_deadline(tmp_path):
    project = copy_project(tmp_path)
    host = scons(project, "target=host", "model=multiitem_cnn")
    assert host.returncode == 0, host.stdout + host.stderr
    check_host_report(project / "build/host/multiitem_cnn")
    again = scons(project, "target=host", "model=multiitem_cnn")
    assert "Multi-item" not in again.stdout   # nothing changed: nothing rebuilt
    late = scons(project, "target=host", "model=multiitem_cnn", "tolerance=1e-3")
    assert late.returncode == 0 and "Multi-item report" in late.stdout and "Multi-item check" not in late.stdout
    late = scons(project, "target=avr", "model=multiitem_cnn", "deadline=800ms")
    assert late.returncode != 0
    assert re.search(r"end-to-end bound \d+\.\d ms > deadline 800 ms", late.stdout + late.stderr)
    assert not (project / "build/avr/multiitem_cnn/gate.json").exists()
    avr = scons(project, "target=avr", "model=multiitem_cnn")
    assert avr.returncode == 0, avr.stdout + avr.stderr
    deadline = json.loads((project / "build/avr/multiitem_cnn/report.json").read_text())["deadline"]
    assert deadline["met"] and deadline["deadline_ms"] == 2500


# ------------------------------------------------------------------------------ items=N

def auto_split_of_the_example(tmp_path, items):
    document = nnef_items.read_document(EXAMPLE)
    graph = nnef_items.unsplit(document, EXAMPLE)
    split = nnef_items.auto_split(graph, items, path=EXAMPLE / "graph.nnef")
    folder = tmp_path / "auto.nnef"
    shutil.copytree(EXAMPLE, folder)
    (folder / "graph.nnef").write_text(nnef_items.write(split))
    return split, folder


def test_auto_split_puts_the_parallel_branches_on_different_items(tmp_path):
    split, folder = auto_split_of_the_example(tmp_path, 2)
    computed = {b.item: [s.outputs[0] for s in b.statements if s.op not in nnef_items.SOURCES + nnef_items.SYNC_OPS]
                for b in split.items}
    assert computed == {"ITEM1": ["o1", "o2", "o3", "o6", "o7", "out"], "ITEM2": ["o4", "o5"]}
    graph = nnef_items.unsplit(nnef_items.read_document(EXAMPLE), EXAMPLE)
    costs = nnef_items.instruction_costs(graph, EXAMPLE / "graph.nnef")
    one = {k: "ITEM1" for k in costs}
    assignment = {n: item for item, names in computed.items() for n in names}
    assert nnef_items.split_makespan(graph, assignment, costs) == sum(costs.values()) - costs["o4"] - costs["o5"]
    assert nnef_items.split_makespan(graph, one, costs) == sum(costs.values())
    system = nnef_items.load(folder)
    assert system.meta["petri"]["equivalence"] and sorted(system.syncs) == ["sync_o1", "sync_o5"]


def test_auto_split_beyond_the_exhaustive_search_is_greedy(tmp_path):
    graph = nnef_items.unsplit(nnef_items.read_document(EXAMPLE), EXAMPLE)
    costs = nnef_items.instruction_costs(graph, EXAMPLE / "graph.nnef")
    assignment, search = nnef_items.auto_assignment(graph, 9, path=EXAMPLE / "graph.nnef")
    assert search.startswith("greedy (an exhaustive search would try 9^7 > 300,000 splits)")
    assert assignment["o4"] != assignment["o2"]   # the branches apart, the rest where it waits least
    assert nnef_items.split_makespan(graph, assignment, costs) == sum(costs.values()) - costs["o4"] - costs["o5"]
    assert nnef_items.auto_assignment(graph, 2, path=EXAMPLE / "graph.nnef")[1] == "exhaustive"


@pytest.mark.e2e
def test_auto_split_runs_bit_equal_on_threads(tmp_path):
    _, folder = auto_split_of_the_example(tmp_path, 2)
    record = multiitem_check.check_host(nnef_items.load(folder), tmp_path / "build", shape="v2", runs=1000)
    assert record["bit_equal_runs"] == 1000 and record["firing_sequences"]


def test_single_model_steps_refuse_a_system_in_one_line(tmp_path):
    from nnbuild import steps
    with pytest.raises(NNBuildError) as exc:
        steps.generate(str(EXAMPLE), tmp_path)
    assert "builds through `python3 -m nnbuild multiitem`" in one_line(exc)
    assert not any(tmp_path.iterdir())
    steps.reference(str(EXAMPLE), tmp_path / "r.npz", count=4)
    import numpy as np
    with np.load(tmp_path / "r.npz") as data:
        assert data["x"].shape[1] == 128 and data["y"].shape[1] == 10
