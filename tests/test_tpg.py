"""Tangled Program Graphs without third-party data: the .dot loader and its refusals, the
environment description, GEGELATI's inference rules in the reference, and the generated C
(byte-identical, prefixed, warning-free, equal to the reference) on small graphs written here."""

import json
import math
import subprocess

import numpy as np
import pytest

from conftest import needs_avr
from tpg_helpers import (DOT_HEADER, TEST_ENV, action, build_replay, program, replay, small_graph, write,
                         write_env)

from nnbuild import codegen
from nnbuild.errors import NNBuildError
from nnbuild.frontends import load
from nnbuild.ir import tpg_reference
from nnbuild.ir.tpg import Environment


@pytest.fixture
def env_file(tmp_path):
    return write_env(tmp_path / "test_env.json")


@pytest.fixture
def graph(tmp_path, env_file):
    path = write(tmp_path / "small.dot", small_graph())
    return load(path, environment=env_file)


def one_line_error(excinfo, *fragments):
    text = str(excinfo.value)
    assert "\n" not in text, text
    for f in fragments:
        assert f in text, text
    return text


# ------------------------------------------------------------------------------- loader


def test_loader_reads_teams_programs_shared_edges_and_actions(graph):
    assert [t.label for t in graph.teams] == ["T5", "T2"]
    assert graph.teams[graph.root].label == "T2"
    edges = [(graph.teams[e.source].label, graph.programs[e.program].label, e.target) for e in graph.edges]
    assert edges == [("T2", "P0", ("action", 1)), ("T2", "P1", ("team", 0)), ("T2", "P2", ("action", 3)),
                     ("T5", "P3", ("action", 2)), ("T5", "P0", ("action", 1))]
    p3 = graph.programs[3]
    assert p3.constants == (3, -2)
    assert [(l.instruction, l.destination, [(o.source, o.location) for o in l.operands]) for l in p3.lines] == \
        [(5, 2, [(2, 5), (1, 3)]), (3, 0, [(0, 2), (0, 0)])]
    assert graph.meta["gegelati_version"].startswith("unknown") and graph.depth() == 2
    assert graph.kind == "tpg" and graph.input_size == 6 and graph.output_size == 1


def test_header_lines_of_v1_and_v2_exports(tmp_path, env_file):
    v1 = write(tmp_path / "v1.dot", small_graph("// File exported with GEGELATI v1.3.1\n// On the 2022-01-01 10:00:00\n"
                                                "// With the File::TPGGraphDotExporter\n"))
    assert load(v1, environment=env_file).meta["gegelati_version"] == "1.3.1"
    text = small_graph("// File exported with GEGELATI v2.0.0\n// On the 2025-01-01\n// With the File::TPGGraphDotExporter\n")
    text = text.replace('shape=point] //0|0|', 'shape=point label="0"] //0.000000|0.000000|').replace(
        'shape=point] //3|-2|', 'shape=point label="0"] //3.500000|-2.000000|')
    g = load(write(tmp_path / "v2.dot", text), environment=env_file)
    assert g.meta["gegelati_version"] == "2.0.0" and g.programs[3].constants == (3.5, -2.0)


@pytest.mark.parametrize("edit, fragments", [
    (lambda t: t.replace('\t\tT2 [fillcolor="#1199bb"]\n', '\t\tT2 [fillcolor="#1199bb"]\n\t\tT6 [fillcolor="#66ddff"]\n')
     .replace("\t\tT5 -> P0\n", "\t\tT5 -> P0\n" + program(8, ["0|0&2|1#2|1"]) + "\t\tT5 -> P8 -> T6\n"
              + program(9, ["0|0&2|2#2|1"]) + "\t\tT6 -> P9 -> T5\n"),
     ["root T2", "cycle reachable from the root: T5 -> T6 -> T5"]),
    (lambda t: t.replace('\t\tT2 [fillcolor="#1199bb"]\n', '\t\tT2 [fillcolor="#1199bb"]\n\t\tT9 [fillcolor="#1199bb"]\n')
     + "", ["T9", "no outgoing edge"]),
    (lambda t: t.replace("6|0&0|1#2|8", "9|0&0|1#2|8"), ["P1 line 2", "instruction index 9 outside the 7 instructions"]),
    (lambda t: t.replace("0|0&2|1#2|3", "0|6&2|1#2|3"), ["P0 line 1", "destination register 6"]),
    (lambda t: t.replace("0|0&2|1#2|3", "0|0&2|1#2|3#2|4"), ["P0 line 1", "3 operands", "wrong environment"]),
    (lambda t: t.replace("0|0&2|1#2|3", "0|0&5|1#2|3"), ["P0 line 1", "data source 5"]),
    (lambda t: t.replace("5|2&2|5#1|3", "5|2&2|5#2|3"), ["P3 line 1", "needs a constant"]),
    (lambda t: t.replace("//3|-2|", "//3|"), ["P3", "1 constants"]),
    (lambda t: t.replace('label="3"', 'label="7"'), ["action 7 outside the 4 actions"]),
    (lambda t: t.replace("\t\t{ rank", "\t\tT2 -- T5\n\t\t{ rank"), ["unrecognised statement 'T2 -- T5'"]),
    (lambda t: t[:t.rindex("}")], ["truncated"]),
    (lambda t: t.replace("shape=point] //0|0|", "shape=point]"), ["pre-v0.5"]),
    (lambda t: "// File exported with GEGELATI v3.0.0\n" + t, ["v3.0.0", "not supported"]),
    (lambda t: t.replace('shape=point] //0|0|', 'shape=point label="1"] //0|0|'), ["v2 header"]),
    (lambda t: "// File exported with GEGELATI v2.0.0\n" + t.replace('label="3"', 'label="3-1"'),
     ["continuous or multi-action"]),
    (lambda t: t.replace("\t\tT5 -> P0\n", "\t\tA2 -> P0\n"), ["action programs"]),
    (lambda t: t.replace("\t\tT5 -> P0\n", "\t\tT5 -> P3 -> T5\n"), ["self-loop"]),
    (lambda t: t.replace("\t\tT2 -> P0 -> A0\n", "").replace("\t\tT5 -> P0\n", "\t\tT5 -> P0\n\t\tT2 -> P0 -> A0\n"),
     ["shares program P0 before any edge gave it a destination"]),
    (lambda t: t.replace("T2 -> P1 -> T5", "T2 -> P7 -> T5"), ["undeclared program P7"]),
    (lambda t: t.replace("0|0&2|1#2|3", "0|0&2|1#2|x"), ["P0 line 1", "is not 'instr|dest&src|loc"]),
])
def test_bad_graphs_are_one_clear_line(tmp_path, env_file, edit, fragments):
    path = write(tmp_path / "bad.dot", edit(small_graph()))
    with pytest.raises(NNBuildError) as excinfo:
        load(path, environment=env_file)
    one_line_error(excinfo, "bad.dot", *fragments)


def test_no_root_and_several_roots(tmp_path, env_file):
    ring = (DOT_HEADER + '\t\tT0 [fillcolor="#66ddff"]\n\t\tT1 [fillcolor="#66ddff"]\n' + program(0, ["0|0&2|1#2|3"])
            + "\t\tT0 -> P0 -> T1\n" + program(1, ["0|0&2|1#2|2"]) + "\t\tT1 -> P1 -> T0\n}\n")
    with pytest.raises(NNBuildError) as excinfo:
        load(write(tmp_path / "ring.dot", ring), environment=env_file)
    one_line_error(excinfo, "ring.dot", "no root team")
    two = (DOT_HEADER + '\t\tT0 [fillcolor="#1199bb"]\n\t\tT1 [fillcolor="#1199bb"]\n' + program(0, ["0|0&2|1#2|3"])
           + action(0, 1) + "\t\tT0 -> P0 -> A0\n" + program(1, ["0|0&2|1#2|2"]) + action(1, 2)
           + "\t\tT1 -> P1 -> A1\n}\n")
    with pytest.raises(NNBuildError) as excinfo:
        load(write(tmp_path / "two.dot", two), environment=env_file)
    one_line_error(excinfo, "two.dot", "2 root teams (T0, T1)")


def test_a_dot_file_needs_an_environment(tmp_path):
    path = write(tmp_path / "small.dot", small_graph())
    with pytest.raises(NNBuildError) as excinfo:
        load(path)
    one_line_error(excinfo, "small.dot", "carries no instruction set", "--environment")


# ------------------------------------------------------------------------------- environment


@pytest.mark.parametrize("changes, fragments", [
    ({"registers": 0}, ["'registers'", ">= 1"]),
    ({"instructions": [{"name": "x", "operands": ["double"], "c": "r = $1;", "python": "$1"}]},
     ["instructions[0]", "not of the form '$0 = <expression>;'"]),
    ({"instructions": [{"name": "x", "operands": ["double"], "c": "$0 = $1 + $2;", "python": "$1"}]},
     ["instructions[0]", "uses $2 but the instruction has 1 operand(s)"]),
    ({"instructions": [{"name": "x", "operands": ["double"], "c": "$0 = $1;", "python": "__import__('os')"}]},
     ["instructions[0]", "unsupported expression"]),
    ({"instructions": [{"name": "x", "operands": ["double[2]"], "c": "$0 = $1;", "python": "$1"}]},
     ["instructions[0]", "array operands are not supported"]),
    ({"data_sources": [{"name": "in", "type": "int", "shape": [3]}]}, ["data_sources[0]", "'int' is not supported"]),
    ({"integer_tables": {"min": 0, "max": 10000}}, ["'integer_tables'"]),
    ({"nnbuild_tpg_environment": 2}, ["not an nnbuild TPG environment"]),
])
def test_bad_environments_are_one_clear_line(tmp_path, changes, fragments):
    path = write_env(tmp_path / "env.json", **changes)
    with pytest.raises(NNBuildError) as excinfo:
        Environment.load(path)
    one_line_error(excinfo, "env.json", *fragments)


def test_shipped_environment_is_the_sips22_atari_set():
    env = Environment.load("sips22-atari")
    assert env.registers == 8 and env.constants == 0 and env.input_size == 1344 and env.actions == 18
    assert [i.c for i in env.instructions] == [
        "$0 = $1 - $2;", "$0 = $1 + $2;", "$0 = $1 * $2;", "$0 = $1 / $2;",
        "$0 = (($1) < ($2)) ? -($1) : ($1);", "$0 = cos($1);", "$0 = log($1);", "$0 = exp($1);"]
    assert [s.role for s in env.sources] == ["registers", "input"] and env.max_operands == 2
    with pytest.raises(NNBuildError) as excinfo:
        Environment.load("no-such-env")
    one_line_error(excinfo, "sips22-atari")


def test_instructions_no_source_can_feed_are_dropped_before_indexing(tmp_path):
    env = Environment.load(write_env(tmp_path / "e.json", constants=0))
    assert [i.name for i in env.instructions] == ["add", "sub", "div", "cos", "log", "neg_if_less"]


# ------------------------------------------------------------------------------- reference rules


def bids(graph, team_label, x):
    """Register 0 of each program of a team, as the reference computes them."""
    it = tpg_reference.Interpreter(graph)
    team = next(t for t in graph.teams if t.label == team_label)
    return [it.program(graph.programs[graph.edges[e].program], np.atleast_2d(x))[0] for e in team.edges]


def test_programs_run_on_zeroed_registers_with_locations_modulo_the_source(graph):
    x = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 5.0])
    b = bids(graph, "T2", x)
    assert b[0] == 2.0 + 4.0  # obs[1] + obs[3]
    assert b[1] == -(1.0 / 6.0)  # r1 = obs0/obs4 < obs[8 % 6 = 2]: negated
    assert b[2] == math.cos(3.0) + (-math.inf if math.cos(3.0) == 0 else math.nan) or math.isnan(b[2])
    assert bids(graph, "T5", x)[0] == math.cos(5.0 + -2.0)  # obs5 + constant[3 % 2 = 1]


def test_ties_go_to_the_last_edge_and_nan_counts_as_minus_infinity(tmp_path, env_file):
    tie = (DOT_HEADER + '\t\tT0 [fillcolor="#1199bb"]\n'
           + program(0, ["0|0&2|0#2|1"]) + action(0, 1) + "\t\tT0 -> P0 -> A0\n"
           + program(1, ["0|0&2|1#2|0"]) + action(1, 2) + "\t\tT0 -> P1 -> A1\n"
           + program(2, ["2|0&2|2#2|2"]) + action(2, 3) + "\t\tT0 -> P2 -> A2\n}\n")
    g = load(write(tmp_path / "tie.dot", tie), environment=env_file)
    # equal bids 3 = 1 + 2 = 2 + 1, and 0/0 = NaN for the last edge: the NaN never wins, the tie goes to P1
    assert tpg_reference.run(g, np.array([1.0, 2.0, 0.0, 0, 0, 0])) == 2
    # bid 1 + 2 = 3 vs P2 = 1/1 = 1: P0/P1 tie wins over a lower last edge
    assert tpg_reference.run(g, np.array([1.0, 2.0, 1.0, 0, 0, 0])) == 2
    # everything NaN: all bids are -inf, the last edge wins
    assert tpg_reference.run(g, np.array([np.nan, 1.0, 0.0, 0, 0, 0])) == 3
    # -inf bids and a NaN: -inf >= -inf, so the last edge still wins
    assert tpg_reference.run(g, np.array([-np.inf, 1.0, 0.0, 0, 0, 0])) == 3


def test_reference_follows_teams_until_an_action(graph):
    rng = np.random.default_rng(3)
    x = rng.uniform(-5, 5, size=(200, 6))
    actions, paths = tpg_reference.Interpreter(graph).run(x, path=True)
    for obs, a, path in zip(x, actions, paths):
        b = [(-math.inf if math.isnan(v) else v) for v in bids(graph, "T2", obs)]
        best = max(range(3), key=lambda k: (b[k], k))
        if best == 1:
            b5 = [(-math.inf if math.isnan(v) else v) for v in bids(graph, "T5", obs)]
            assert path == [1, 0] and a == (1 if b5[1] >= b5[0] else 2)
        else:
            assert path == [1] and a == (1 if best == 0 else 3)


# ------------------------------------------------------------------------------- generated C


def generate(graph, outdir, shape, name):
    graph.name = name
    return codegen.generate(graph, outdir, shape=shape)


@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_generation_is_byte_identical_and_complete(tmp_path, graph, shape):
    a = generate(graph, tmp_path / "a", shape, "small")
    b = generate(graph, tmp_path / "b", shape, "small")
    assert [p.name for p in a] == codegen.outputs("small")
    for pa, pb in zip(a, b):
        assert pa.read_bytes() == pb.read_bytes(), pa.name
    code = (tmp_path / "a" / "small.c").read_text()
    assert "int small_infer(const double obs[6])" in code and "static" in code
    assert "timestamp" not in code.lower() and "malloc" not in code
    header = (tmp_path / "a" / "small.h").read_text()
    assert "#define SMALL_ACTION_JUMP 3" in header and "#define SMALL_INPUTS 6" in header
    facts = json.loads((tmp_path / "a" / "small.flowfacts.json").read_text())
    assert facts["entry"] == "small_infer" and {l["name"] for l in facts["layers"]} >= {"T2", "T5"}
    if shape == "switch":
        assert [l["max_iterations"] for l in facts["loops"]] == [2]
    trace = json.loads((tmp_path / "a" / "small.trace.json").read_text())
    assert trace["kind"] == "tpg" and trace["teams"][0]["team"] == "T2"
    assert trace["teams"][0]["edges"][1] == {"program": "P1", "to": "T5", "dot_line": 14,
                                             "bid": trace["teams"][0]["edges"][1]["bid"]}


@pytest.mark.parametrize("functions", [False, True])
def test_switch_visit_facts_name_each_teams_code_in_the_loop(tmp_path, graph, monkeypatch, functions):
    """Each team runs at most once per inference: one fact per team over the lines the team loop
    runs for it (its case; with one function per team, the case that calls it). The stack shape
    has none: its call graph visits each team once per path."""
    from nnbuild.codegen import tpg_lower
    if functions:
        monkeypatch.setattr(tpg_lower, "SWITCH_INLINE_OPERATIONS", 0)
    generate(graph, tmp_path / "s", "switch", "small")
    lines = (tmp_path / "s" / "small.c").read_text().split("\n")
    facts = json.loads((tmp_path / "s" / "small.flowfacts.json").read_text())
    assert [(v["name"], v["parents"]) for v in facts["visits"]] == [("T2", []), ("T5", ["T2"])]
    for v in facts["visits"]:
        assert v["function"] == "small_infer" and v["max_per_call"] == 1 and "acyclic" in v["why"]
        case = lines[v["first_line"] - 1:v["last_line"]]
        assert case[0].lstrip().startswith("case ") and case[-1].strip().startswith("}")
        if functions:
            assert any(f"small_{v['name']}(" in l for l in case)
        else:
            assert f"nnbuild-team {v['name']}" in case[0] and f"nnbuild-team-end {v['name']}" in case[-1]
    generate(graph, tmp_path / "k", "stack", "small")
    assert "visits" not in json.loads((tmp_path / "k" / "small.flowfacts.json").read_text())


def test_single_edge_teams_run_no_program_and_introns_vanish(tmp_path, env_file):
    text = small_graph().replace("\t\tT5 -> P0\n", "")  # T5 keeps one edge
    g = load(write(tmp_path / "one.dot", text), environment=env_file)
    code = (generate(g, tmp_path / "g", "switch", "one")[1]).read_text()
    assert "P3 line" not in code and "one edge (P3 -> action 2)" in code
    assert "P1 line 3" not in code  # r2 = r0 - r3 never reaches register 0


def test_shape_and_kind_must_match(tmp_path, graph):
    with pytest.raises(NNBuildError) as excinfo:
        codegen.generate(graph, tmp_path / "x", shape="mlp")
    one_line_error(excinfo, "shape 'mlp' does not generate TPG models", "switch, stack")


def random_observations(n, seed=5):
    """Reals, integers in and out of the table range, and IEEE specials."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-10, 10, size=(n, 6))
    x[1::3] = np.round(x[1::3])
    x[2::7] = rng.uniform(-1e3, 1e3, size=x[2::7].shape)
    x[0] = [np.nan, 1, 2, 3, 4, 5]
    x[3] = [np.inf, -np.inf, 0.0, -0.0, 1e308, -1e-310]
    return x


def test_both_shapes_equal_the_reference_and_link_together(tmp_path, graph):
    gen = tmp_path / "gen"
    for shape in ("switch", "stack"):
        generate(graph, gen, shape, f"small_{shape}")
    program_ = build_replay(gen, ["small_switch", "small_stack"], 6, tmp_path / "replay")
    x = random_observations(2000)
    want = tpg_reference.run(graph, x)
    assert len(set(want.tolist())) == 3  # every action is reached
    for k in range(2):
        assert np.array_equal(replay(program_, k, x), want)
    nm = subprocess.run(["nm", "--defined-only", "-g", str(program_)], capture_output=True, text=True).stdout
    ours = [l.split()[-1] for l in nm.splitlines() if "small" in l]
    assert sorted(ours) == ["small_stack_cos_table", "small_stack_infer", "small_stack_log_cos_table",
                            "small_stack_log_table", "small_switch_cos_table", "small_switch_infer",
                            "small_switch_log_cos_table", "small_switch_log_table"]


def test_a_nan_bid_after_minus_infinity_does_not_block_later_edges(tmp_path, env_file):
    """bids -inf (log 0), NaN (0/0), then finite: the finite one wins; NaN only ties with -inf."""
    text = (DOT_HEADER + '\t\tT0 [fillcolor="#1199bb"]\n'
            + program(0, ["4|0&2|0#2|0"]) + action(0, 1) + "\t\tT0 -> P0 -> A0\n"
            + program(1, ["2|0&2|1#2|2"]) + action(1, 2) + "\t\tT0 -> P1 -> A1\n"
            + program(2, ["1|0&2|3#2|4"]) + action(2, 3) + "\t\tT0 -> P2 -> A2\n"
            + program(3, ["2|0&2|1#2|2"]) + action(3, 0) + "\t\tT0 -> P3 -> A3\n}\n")
    g = load(write(tmp_path / "nan.dot", text), environment=env_file)
    x = np.array([[0, 0, 0, 5, 1, 0], [0, 0, 0, -np.inf, 1, 0], [1, 0, 0, np.nan, 1, 0],
                  [1, 1, 1, 2, 3, 0], [np.nan] * 6, [0, 1, 0, 1, 1, 0]], dtype=float)
    want = tpg_reference.run(g, x)
    assert want.tolist() == [3, 0, 1, 0, 0, 0]  # rows 3 and 5: P1 and P3 tie, the last wins
    gen = tmp_path / "gen"
    for shape in ("switch", "stack"):
        generate(g, gen, shape, f"nan_{shape}")
    program_ = build_replay(gen, ["nan_switch", "nan_stack"], 6, tmp_path / "replay")
    for k in range(2):
        assert replay(program_, k, x).tolist() == want.tolist()


@pytest.mark.e2e  # avr-gcc
@needs_avr
@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_avr_build_is_warning_free(tmp_path, graph, shape):
    graph.name = "small"
    codegen.generate(graph, tmp_path, shape=shape, storage="avr-progmem-far")
    for src in ("small.c", "small_weights.c"):
        subprocess.run(["avr-gcc", "-mmcu=atmega1284", "-Os", "-std=c99", "-Wall", "-Wextra", "-Werror",
                        "-pedantic", "-c", str(tmp_path / src), "-o", str(tmp_path / (src + ".o"))],
                       check=True, capture_output=True)


# ------------------------------------------------------------------------------- CLI


def test_cli_check_counts_mismatching_actions(tmp_path, graph, env_file, run_cli):
    dot = write(tmp_path / "small.dot", small_graph())
    x = random_observations(50)
    y = tpg_reference.run(graph, x)
    np.savez(tmp_path / "ok.npz", x=x, y=y)
    ok = run_cli("check", str(dot), "--environment", str(env_file), "--data", str(tmp_path / "ok.npz"),
                 "--shape", "stack")
    assert ok.returncode == 0, ok.stderr
    assert "(stack) on host: 50 observations, 0 actions differ from y, 0 from the reference" in ok.stdout
    y[[4, 9, 11]] = (y[[4, 9, 11]] + 1) % 4
    np.savez(tmp_path / "bad.npz", x=x, y=y)
    bad = run_cli("check", str(dot), "--environment", str(env_file), "--data", str(tmp_path / "bad.npz"))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "3 of 50 actions differ from y (first at observation 4)" in bad.stderr
    assert "(switch) on host: 50 observations, 3 actions differ from y, 0 from the reference" in bad.stdout


def test_cli_generate_names_the_missing_environment(tmp_path, run_cli):
    dot = write(tmp_path / "small.dot", small_graph())
    result = run_cli("generate", str(dot), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert "small.dot" in result.stderr and "--environment" in result.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------- hostile inputs (issue 9)


@pytest.mark.parametrize("edit, fragments", [
    (lambda t: t.replace("T5 [", "T" + "9" * 5000 + " ["), ["unrecognised statement"]),
    (lambda t: t.replace("0|0&2|1#2|3", "0|0&2|1#2|" + "7" * 5000), ["P0 line 1", "is not 'instr|dest&src|loc"]),
    (lambda t: t.replace("//3|-2|", "//3|" + "1" * 5000 + "|"), ["program constant", "not finite"]),
    (lambda t: t.replace("//3|-2|", "//3|4294967296|"), ["program constant 4294967296 is outside the int32 range"]),
    (lambda t: t.replace("//3|-2|", "//3|nan|"), ["program constant 'nan' is not finite"]),
    (lambda t: t.replace("//3|-2|", "//3|1e-300|"), ["program constant '1e-300' is not 0 or a normal 32-bit float"]),
    (lambda t: t.replace("//3|-2|", "//3|-1e39|"), ["program constant '-1e39' is not 0 or a normal 32-bit float"]),
])
def test_hostile_numbers_in_a_graph_are_one_clear_line(tmp_path, env_file, edit, fragments):
    """5,000-digit ids were an int() ValueError traceback; NaN or out-of-range constants were accepted."""
    path = write(tmp_path / "bad.dot", edit(small_graph()))
    with pytest.raises(NNBuildError) as excinfo:
        load(path, environment=env_file)
    assert str(excinfo.value).startswith(f"{path}: ")
    one_line_error(excinfo, *fragments)


@pytest.mark.parametrize("text, fragments", [
    ('{"nnbuild_tpg_environment": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}", ["RecursionError"]),
    (json.dumps({**TEST_ENV, "instructions": [{"name": "x", "operands": ["double"], "c": "$0 = $1;",
                                              "python": "$1\u0000"}]}), ["null"]),
    (json.dumps({**TEST_ENV, "instructions": [{"name": "x", "operands": [["double"]], "c": "$0 = $1;",
                                              "python": "$1"}]}), ["malformed TPG environment"]),
    (json.dumps({**TEST_ENV, "instructions": TEST_ENV["instructions"] + [
        {"name": "x", "operands": ["double", "double"], "c": "$0 = $1 */ + $2;", "python": "$1 + $2"}]}),
     ["'instructions[7]'", "closes a comment ('*/'"]),
    (json.dumps({**TEST_ENV, "instructions": [
        {"name": "x", "operands": ["double"], "c": "$0 = $1; }\n#include <stdlib.h>\nstatic int y = (1);",
         "python": "$1"}]}), ["'instructions[0]'", "closes a brace ('}'"]),
    (json.dumps({**TEST_ENV, "instructions": [
        {"name": "x", "operands": ["double"], "c": "$0 = cos(($1);", "python": "$1"}]}),
     ["'instructions[0]'", "expects ')' closing the call of cos, found ';'"]),
    (json.dumps({**TEST_ENV, "instructions": [
        {"name": "x", "operands": ["double"], "c": "$0 = --$1;", "python": "$1 - 1"}]}),
     ["'instructions[0]'", "decrements ('--'"]),
    (json.dumps({**TEST_ENV, "instructions": [
        {"name": "x", "operands": ["double"], "c": "$0 = $1 * 1e400;", "python": "$1 * 1e400"}]}),
     ["'instructions[0]'", "1e400, which is not a finite double"]),
])
def test_hostile_environment_files_are_one_line_naming_them(tmp_path, text, fragments):
    """Environment JSON nested 100,000 deep or a NUL in a Python expression escaped Environment.load
    as a traceback; a C template that closes a comment or adds directives made C that does not
    compile (or does more than compute). The .dot loader names the environment file."""
    env = write(tmp_path / "env.json", text)
    path = write(tmp_path / "small.dot", small_graph())
    with pytest.raises(NNBuildError) as excinfo:
        load(path, environment=env)
    assert str(excinfo.value).startswith(f"{env}: ")
    one_line_error(excinfo, *fragments)
