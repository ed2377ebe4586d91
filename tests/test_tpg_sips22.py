"""The SiPS'22 Tangled Program Graphs of ../shared (GEGELATI exports, unlicensed: read there, never
copied): the recorded game traces replayed through the reference and the compiled C of both
shapes, every cleaned TPG against the reference on random inputs, one TPG on AVR under simavr
with its WCET bound, and `scons model=tpg_fishing_derby` on host and AVR.

What runs by default (about a minute): the reference on all 12 traced TPGs (6 games, cleaned and
full) over the whole traces; the compiled C (host warning flags, -O0 by default, the host board's
-O2 with NNBUILD_SLOW_TESTS=1: HOST_PROGRAM_OPT) of both shapes on the whole traces for the 6
cleaned TPGs and the two small full ones (fishing_derby.9, frostbite.2), and of all 50 cleaned
TPGs on random inputs, from one program compiled once (host_program); the other four full graphs
(122 to 505 teams, up to 2.6 MB) take minutes to compile and run with NNBUILD_SLOW_TESTS=1. AVR: fishing_derby.9 cleaned, the example's TPG, on its whole trace, and on
random and adversarial inputs (with the slowest ones bench/tpg_avr_wcet.py found) against its WCET
bound, which the switch shape's visit facts tighten.
"""

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import copy_project, have, needs_avr, scons
from tpg_helpers import GAMES, SIPS22, build_replay, dot_file, replay, trace

from nnbuild import codegen, pipeline, wcet
from nnbuild.frontends import gegelati_dot
from nnbuild.ir import tpg_reference
from nnbuild.ir.tpg import Environment
from nnbuild.runners import tpg_run

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not SIPS22.is_dir(), reason=f"{SIPS22} not present (../shared is not beside this checkout)")]

SLOW = os.environ.get("NNBUILD_SLOW_TESTS") == "1"
SMALL_FULL = ("fishing_derby.9", "frostbite.2")
#: host_program's optimisation: its tests compare values only (x86-64: SSE2 doubles, -ffp-contract=off:
#: the same results at every level for C without undefined behaviour), and -O0 compiles its 104 models in a third of -O2's CPU. The host
#: board's -O2 stays covered by default: its warnings over both TPG shapes by
#: test_c_warnings.py::test_generated_c_compiles_without_a_warning[tpg-switch-const-host] and
#: [tpg-stack-const-host] (-Werror), its values
#: by test_scons_builds_the_tpg_example_on_host[switch/stack] (fishing_derby.9, 32 inputs against the
#: reference); all 104 models at -O2 in the slow tier.
HOST_PROGRAM_OPT = "-O2" if SLOW else "-O0"


@pytest.fixture(scope="module")
def env():
    return Environment.load("sips22-atari")


@pytest.fixture(scope="module")
def traces():
    return {g: trace(g) for g in GAMES}


def model(game, kind, env, name=None):
    m = gegelati_dot.load(dot_file(game, kind), env)
    if name:
        m.name = name
    return m


@pytest.mark.parametrize("kind", ["cleaned", "full"])
def test_reference_reproduces_every_recorded_trace(env, traces, kind):
    for game in GAMES:
        obs, recorded = traces[game]
        actions = tpg_reference.run(model(game, kind, env), obs)
        assert np.array_equal(actions, recorded), f"{game} {kind}: {np.sum(actions != recorded)} differ"


def replay_all(tmp_path, env, traces, pairs, opt="-O2"):
    """Generate both shapes of every (game, kind), link them in one program, replay each trace."""
    gen, names = tmp_path / "gen", []
    for game, kind in pairs:
        for shape in ("switch", "stack"):
            name = f"{kind}_{game.replace('.', '_')}_{shape}"
            codegen.generate(model(game, kind, env, name), gen, shape=shape)
            names.append((name, game))
    program = build_replay(gen, [n for n, _ in names], 1344, tmp_path / "replay", opt=opt)
    result = {}
    for k, (name, game) in enumerate(names):
        obs, recorded = traces[game]
        actions = replay(program, k, obs, u8=True)
        result[name] = (int(np.sum(actions != recorded)), len(recorded))
    print()
    for name, (bad, n) in result.items():
        print(f"  {name}: {n - bad}/{n} actions identical to the recorded ones")
    return result


def game_of(path):
    """The game of a SiPS'22 .dot file (out_best[_cleaned].<game>.t48.dot)."""
    return path.name.split(".", 1)[1].rsplit(".t48", 1)[0]


@pytest.fixture(scope="module")
def host_program(tmp_path_factory, env):
    """One host program (HOST_PROGRAM_OPT, -Wall -Wextra -Werror -pedantic -std=c99) of both shapes of all 50
    cleaned SiPS'22 TPGs and of the two small full ones (SMALL_FULL): (program, {(game, kind,
    shape): index}, {(game, kind): model}). The trace replay and the random-input comparison both
    run it: compiling the same generated C twice checked nothing more."""
    files = sorted((SIPS22 / "cleaned").glob("*.dot"))
    assert len(files) == 50
    work = tmp_path_factory.mktemp("host_program")
    gen, index, models = work / "gen", {}, {}
    for path, kind in [(f, "cleaned") for f in files] + [(dot_file(g, "full"), "full") for g in SMALL_FULL]:
        game = game_of(path)
        m = gegelati_dot.load(path, env)
        models[(game, kind)] = m
        for shape in ("switch", "stack"):
            m.name = f"{kind[0]}_{game.replace('.', '_')}_{shape}"
            codegen.generate(m, gen, shape=shape)
            index[(game, kind, shape)] = m.name
    names = list(index.values())
    program = build_replay(gen, names, 1344, work / "replay", opt=HOST_PROGRAM_OPT)
    return program, {key: names.index(name) for key, name in index.items()}, models


def test_compiled_c_reproduces_the_traces(host_program, traces):
    program, index, _ = host_program
    pairs = [(g, "cleaned") for g in GAMES] + [(g, "full") for g in SMALL_FULL]
    result = {}
    for game, kind in pairs:
        obs, recorded = traces[game]
        for shape in ("switch", "stack"):
            actions = replay(program, index[(game, kind, shape)], obs, u8=True)
            result[f"{kind}_{game}_{shape}"] = (int(np.sum(actions != recorded)), len(recorded))
    print()
    for name, (bad, n) in result.items():
        print(f"  {name}: {n - bad}/{n} actions identical to the recorded ones")
    assert len(result) == 16 and all(bad == 0 for bad, _ in result.values()), result


@pytest.mark.skipif(not SLOW, reason="the four large full graphs compile for minutes: NNBUILD_SLOW_TESTS=1")
@pytest.mark.parametrize("game", [g for g in GAMES if g not in SMALL_FULL])
def test_compiled_c_reproduces_the_traces_of_the_large_full_graphs(tmp_path, env, traces, game):
    result = replay_all(tmp_path, env, traces, [(game, "full")])
    assert all(bad == 0 for bad, _ in result.values()), result


def test_every_cleaned_tpg_compiles_cleanly_and_equals_the_reference(host_program):
    """All 50 cleaned SiPS'22 TPGs, both shapes, in one program (HOST_PROGRAM_OPT, -Wall -Wextra -Werror
    -pedantic -std=c99: host_program): random observations (reals, integers, extremes, NaN/inf)
    give the reference's actions."""
    rng = np.random.default_rng(22)
    x = rng.uniform(0, 255, size=(300, 1344))
    x[::2] = np.round(x[::2])
    x[1::10] = rng.uniform(-1e4, 1e4, size=x[1::10].shape)
    x[0] = 0.0
    x[3] = np.nan
    x[5, ::7] = np.inf
    program, index, models = host_program
    cleaned = [(game, m) for (game, kind), m in models.items() if kind == "cleaned"]
    assert len(cleaned) == 50
    for game, m in cleaned:
        want = tpg_reference.run(m, x)   # the reference does not depend on the shape
        for shape in ("switch", "stack"):
            got = replay(program, index[(game, "cleaned", shape)], x)
            assert np.array_equal(got, want), f"{game} {shape}: {np.sum(got != want)} of {len(x)} differ"


def test_cli_check_on_a_recorded_trace(tmp_path, traces, run_cli):
    obs, recorded = traces["frostbite.2"]
    np.savez(tmp_path / "trace.npz", x=obs.astype(float), y=recorded)
    result = run_cli("check", str(dot_file("frostbite.2", "cleaned")), "--environment", "sips22-atari",
                     "--data", str(tmp_path / "trace.npz"))
    assert result.returncode == 0, result.stderr
    assert f"(switch) on host: {len(obs)} observations, 0 actions differ from y, 0 from the reference" in result.stdout


# ------------------------------------------------------------------------------- AVR


@pytest.fixture(scope="module")
def avr_builds(tmp_path_factory):
    """fishing_derby.9 cleaned (the example's TPG) built for AVR in both shapes."""
    if not have("avr-gcc", "avr-nm", "avr-objdump"):
        pytest.skip("avr-gcc not installed (bash scripts/setup.sh)")
    board = pipeline.load_board("avr")
    out = {}
    for shape in ("switch", "stack"):
        work = tmp_path_factory.mktemp(f"avr_{shape}")
        program, harness = pipeline.build_check_program(str(dot_file("fishing_derby.9", "cleaned")), board, work,
                                                        name="fd", shape=shape, environment="sips22-atari")
        out[shape] = (board, program, harness, work / "gen" / "fd.flowfacts.json")
    return out


@pytest.fixture(scope="module")
def avr_bounds(avr_builds, tmp_path_factory):
    """The WCET bound of each shape's program with its generated flow facts, analysed once: the
    trace, the random and adversarial inputs and the adversarial search all check against it."""
    return {shape: wcet.analyze(board, program, "fd_infer", str(facts), tmp_path_factory.mktemp(f"wcet_{shape}"))
            for shape, (board, program, _, facts) in avr_builds.items()}


@needs_avr
@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_avr_on_the_whole_trace_and_a_sound_wcet_bound(avr_builds, avr_bounds, traces, shape):
    """avr-gcc's double is 32 bits: the mismatch count is reported as measured (the TPG is the
    example's, fixed before any AVR run). The WCET bound covers every measured inference."""
    board, program, harness, facts = avr_builds[shape]
    obs, recorded = traces["fishing_derby.9"]
    t0 = time.time()
    actions, cycles = tpg_run.run_simavr(program, obs.astype(float), entry_symbol="fd_infer", mcu=board["mcu"],
                                         freq=board["clock_hz"], harness=harness, nm=board["nm"])
    mismatches = int(np.sum(actions != recorded))
    bound = avr_bounds[shape]
    print(f"\n  fishing_derby.9 cleaned, {shape}, simavr: {mismatches} of {len(obs)} actions differ from the "
          f"recorded ones; cycles per inference max {cycles.max():,} mean {cycles.mean():,.0f}; "
          f"WCET bound {bound.cycles:,} ({bound.cycles / cycles.max():.2f}x); {time.time() - t0:.1f} s")
    assert mismatches == 0  # as measured on this trace
    assert bound.cycles >= cycles.max()
    assert set(bound.per_layer) == {"T0", "T1", "T2", "T3"}


#: the slowest inputs bench/tpg_avr_wcet.py --write-slow found per shape (screen cell -> value)
SLOW_INPUTS = Path(__file__).parent / "data" / "tpg_fishing_derby_slow.json"
#: bound / slowest measured inference, per shape, as measured (README, Tangled Program Graphs)
TIGHTNESS = {"switch": 1.28, "stack": 1.28}


def adversarial_screens(rng, n):
    """Random screens (bytes), random doubles of every magnitude in the cells, and the stored
    slowest inputs of both shapes: the C function takes any double, so the bound must cover them."""
    bytes_ = rng.integers(0, 256, (n, 1344)).astype(float)
    magnitudes = rng.choice([-1.0, 1.0], (n, 1344)) * 10.0 ** rng.uniform(-40, 38.5, (n, 1344))
    fractions = rng.integers(-300, 300, (n, 1344)) + rng.choice([0.0, 0.25, 0.5, 0.999], (n, 1344))
    slow = np.zeros((2, 1344))
    for row, shape in zip(slow, ("switch", "stack")):
        for cell, value in json.loads(SLOW_INPUTS.read_text())[shape].items():
            row[int(cell)] = value
    return np.vstack([bytes_, magnitudes, fractions, slow])


@needs_avr
@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_avr_bound_covers_random_and_adversarial_inputs(avr_builds, avr_bounds, shape, tmp_path):
    """Soundness beyond the trace, and tightness: the switch bound uses the visit facts (each team
    once per inference: without them it charges the costliest team to every loop pass), and is
    within TIGHTNESS of the slowest input found."""
    board, program, harness, facts_path = avr_builds[shape]
    x = adversarial_screens(np.random.default_rng(3), 600)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # doubles beyond float range become inf on AVR
        _, cycles = tpg_run.run_simavr(program, x, entry_symbol="fd_infer", mcu=board["mcu"],
                                       freq=board["clock_hz"], harness=harness, nm=board["nm"])
    facts = json.loads(facts_path.read_text())
    bound = avr_bounds[shape]
    print(f"\n  fishing_derby.9 cleaned, {shape}: WCET bound {bound.cycles:,}; simavr max {cycles.max():,} over "
          f"{len(x)} random and adversarial inputs ({bound.cycles / cycles.max():.2f}x)")
    assert bound.cycles >= cycles.max()
    assert bound.cycles <= TIGHTNESS[shape] * cycles[-2:].max()
    if shape == "switch":
        notes = bound.details["paths"][next(k for k in bound.details["paths"] if k.startswith("fd_infer"))]
        assert all("not bounded" not in n for n in notes) and len(notes) == 5
        assert notes[-1] == "visits: the visited teams form one root path (4 teams, 4 edges)"
        loop_only = wcet.analyze(board, program, "fd_infer", {k: v for k, v in facts.items() if k != "visits"},
                                 tmp_path / "loop_only")
        assert cycles.max() <= bound.cycles < 0.8 * loop_only.cycles
    else:
        assert "visits" not in facts  # the call graph visits each team once per path already


@needs_avr
@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_avr_adversarial_search_never_beats_the_bound(avr_builds, avr_bounds, shape):
    """tests/adversarial_search.py over the screen cells the programs read (corners in -300..300,
    NaN, infinities, subnormals, values beyond float range, then a hill-climb on simavr's cycles),
    500 inputs per shape: none may run longer than the bound."""
    import re

    from adversarial_search import check_bound
    board, program, harness, facts_path = avr_builds[shape]
    code = (facts_path.parent / "fd.c").read_text()
    cells = sorted({int(m) for m in re.findall(r"screen\[(\d+)\]", code)} - {1344})  # 1344: the parameter's size

    def run(x):
        screens = np.zeros((len(x), 1344))
        screens[:, cells] = x
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # doubles beyond float range become inf on AVR
            actions, cycles = tpg_run.run_simavr(program, screens, entry_symbol="fd_infer", mcu=board["mcu"],
                                                 freq=board["clock_hz"], harness=harness, nm=board["nm"])
        return np.asarray(actions)[:, None], np.asarray(cycles)

    bound = avr_bounds[shape]
    check_bound(f"fishing_derby.9 cleaned, {shape}, AVR", bound.cycles, run, len(cells), -300.0, 300.0,
                seed=11, total=500, batch=40)


@needs_avr
def test_avr_visit_facts_with_one_function_per_team(tmp_path, traces, monkeypatch):
    """The switch shape of a large graph (over SWITCH_INLINE_OPERATIONS; lowered to 0 here so the
    example's TPG takes that form and still fits the ATmega1284) calls each team body from its case:
    the visit facts are the cases, every team gets its rows and the visited teams one root path; the
    bound covers the whole trace and is well under the loop-bound-only one."""
    from nnbuild.codegen import tpg_lower
    monkeypatch.setattr(tpg_lower, "SWITCH_INLINE_OPERATIONS", 0)
    board = pipeline.load_board("avr")
    program, harness = pipeline.build_check_program(str(dot_file("fishing_derby.9", "cleaned")), board, tmp_path,
                                                    name="fd", shape="switch", environment="sips22-atari")
    facts = json.loads((tmp_path / "gen" / "fd.flowfacts.json").read_text())
    assert "static NN_NOINLINE int fd_T2(" in (tmp_path / "gen" / "fd.c").read_text()
    assert {v["function"] for v in facts["visits"]} == {"fd_infer"}
    bound = wcet.analyze(board, program, "fd_infer", facts, tmp_path / "visits")
    notes = bound.details["paths"][next(k for k in bound.details["paths"] if k.startswith("fd_infer"))]
    assert not [n for n in notes if "not bounded" in n]
    assert notes[-1] == "visits: the visited teams form one root path (4 teams, 4 edges)"
    loop_only = wcet.analyze(board, program, "fd_infer", {k: v for k, v in facts.items() if k != "visits"},
                             tmp_path / "loop_only")
    obs, _ = traces["fishing_derby.9"]
    _, cycles = tpg_run.run_simavr(program, obs.astype(float), entry_symbol="fd_infer", mcu=board["mcu"],
                                   freq=board["clock_hz"], harness=harness, nm=board["nm"])
    print(f"\n  fishing_derby.9, switch, one function per team: WCET bound {bound.cycles:,} (loop bound only "
          f"{loop_only.cycles:,}); trace max {cycles.max():,}")
    assert cycles.max() <= bound.cycles < 0.8 * loop_only.cycles


# ------------------------------------------------------------------------------- SCons


@pytest.fixture
def project_beside_shared(tmp_path):
    """A project copy with ../shared beside it (a symlink), as in a checkout."""
    (tmp_path / "main").mkdir()
    project = copy_project(tmp_path / "main")
    (tmp_path / "shared").symlink_to(SIPS22.parents[2])
    return project


@pytest.mark.parametrize("shape", ["switch", "stack"])
def test_scons_builds_the_tpg_example_on_host(project_beside_shared, shape):
    result = scons(project_beside_shared, "target=host", "model=tpg_fishing_derby", f"shape={shape}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "host: 0 of 32 actions differ from the reference" in result.stdout
    assert f"shape {shape}" in result.stdout and "actions  : 0 (host) of 32 differ" in result.stdout
    again = scons(project_beside_shared, "target=host", "model=tpg_fishing_derby", f"shape={shape}")
    assert again.returncode == 0 and "[nnbuild]" not in again.stdout


@needs_avr
def test_scons_builds_the_tpg_example_on_avr(project_beside_shared):
    result = scons(project_beside_shared, "target=avr", "model=tpg_fishing_derby")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "simavr: 0 of 32 actions differ from the reference" in out and "shape switch" in out
    import json
    report = json.loads((project_beside_shared / "build/avr/tpg_fishing_derby/report.json").read_text())
    assert report["kind"] == "tpg" and report["wcet_cycles"] >= report["measured_cycles"] > 0
    assert report["max_abs_error_by_run"] == {"host": 0, "simavr": 0}


def test_the_example_without_shared_fails_with_one_line(tmp_path):
    (tmp_path / "lonely").mkdir()
    project = copy_project(tmp_path / "lonely")
    result = scons(project, "target=host", "model=tpg_fishing_derby")
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if "nnbuild" in l]
    assert len(errors) == 1 and "model file of example 'tpg_fishing_derby' not found" in errors[0]
    assert "../shared" in errors[0] and not (project / "build").exists()
