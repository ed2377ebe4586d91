"""The pipeline described once: the step table drives the CLI and the SCons actions, plans list the
tasks of a build, kinds and boards are plug-ins, one capability check answers for everyone."""

import argparse
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, copy_project, scons, slow
from nnbuild import __version__, boards, cli, codegen, kinds, pipeline, steps
from nnbuild.checks import select
from nnbuild.errors import NNBuildError

EXAMPLES = REPO / "firmware_examples"
LENET = EXAMPLES / "lenet5" / "lenet5.h5"
F1 = EXAMPLES / "f1tenth" / "architecture.json"


def test_every_step_is_a_cli_subcommand_and_its_command_line_parses_back():
    """SCons and CMake run steps.arguments(...) as argument lists: the CLI must parse exactly them."""
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(steps.STEPS) <= set(sub.choices)
    argv = steps.arguments("report", output="r.json", model="m", board="avr", semantic="s.json", size="z.json",
                           trace="t.json", opt="-O0", deadline="100.0ms", deadline_origin="command line")
    args = cli.parser().parse_args(argv)
    assert (args.opt, args.deadline, args.board, args.output) == ("-O0", "100.0ms", "avr", "r.json")
    assert args.deadline_origin == "command line"
    argv = steps.arguments("generate", model="dir/a `id` $(b);'c\"\nd.h5", outdir="gen", name="x",
                           input_range=(-1.0, 1.0), shape="auto")
    args = cli.parser().parse_args(argv)
    assert args.input_range == (-1.0, 1.0) and args.shape == "auto" and args.outdir == "gen"
    assert args.model == "dir/a `id` $(b);'c\"\nd.h5"
    assert steps.command("gate", report="a b", output="g") == "gate 'a b' --output g"
    with pytest.raises(ValueError, match="no argument"):
        steps.arguments("gate", report="r", output="g", nonsense=1)


def test_plan_lists_the_whole_avr_build_and_the_check_subset():
    build = pipeline.plan(name="f1tenth", model=str(F1), board="avr", kind="nn", precision="q16-acc32",
                          main=str(EXAMPLES / "f1tenth" / "main.c"), deadline="100ms")
    names = [t.step for t in build.tasks]
    assert names == ["generate", "reference", "program", "program", "program", "run", "harness", "run", "compare",
                     "size", "wcet", "report", "gate"]
    assert build.nodes["runs"] == {"host": "run_host.npz", "simavr": "run_simavr.npz"}
    simavr_run = next(t for t in build.tasks if t.targets == ["run_simavr.npz"])
    assert simavr_run.after == ["size.json"] and simavr_run.options["entry"] == "f1tenth_infer"
    check = pipeline.plan(name="f1tenth", model=str(F1), board="avr", kind="nn", purpose="check", data="d.npz")
    assert [t.step for t in check.tasks] == ["generate", "reference", "program", "harness", "run", "compare"]


def test_capability_check_is_the_one_answer():
    nn, tpg = kinds.get("nn"), kinds.get("tpg")
    avr, host = boards.load_board("avr"), boards.load_board("host")
    assert kinds.refusal(nn, "v1", "fix16", host) == ("shape v1 does not generate precision 'fix16' "
                                                      "(it generates: float32, float64, q16, q16-acc32, q8)")
    assert kinds.refusal(nn, "v1", "q16", host) is None
    assert kinds.refusal(nn, "v1", "q8", avr) is None and kinds.refusal(nn, "v3", "q8", avr) is None
    assert kinds.refusal(nn, "v2", "q16-acc32", avr) is None
    assert "64-bit double" in kinds.refusal(nn, "mlp", "float64", avr)
    assert kinds.refusal(nn, "mlp", "fixed16.8", avr) is None
    assert "does not generate TPG models" in kinds.refusal(tpg, "mlp", "float32")
    assert "does not generate precision 'q16'" in kinds.refusal(tpg, "auto", "q16")
    lenet, _ = pipeline.load_model(LENET)
    assert kinds.precision_candidates(nn, "auto", host, lenet) == ["float32", "float64", "q16", "q16-acc32", "q8"]
    f1, _ = pipeline.load_model(F1)
    assert kinds.precision_candidates(nn, "auto", avr, f1) == ["float32", "q16", "q16-acc32", "q8", "fix16"]
    assert kinds.precision_candidates(nn, "auto", host, f1) == ["float32", "float64", "q16", "q16-acc32", "q8",
                                                                  "fix16"]


def test_precision_auto_judges_each_candidate_by_its_own_tolerance():
    """The decision SCons' precision=auto builds from (pipeline.auto_candidates, project.tolerances):
    an example's per-precision tolerances, unless the command line gives one for every precision."""
    from nnbuild import project
    host = boards.load_board("host")
    tolerance, tolerances = project.tolerances(project.resolve("lenet5"))
    assert pipeline.auto_candidates(LENET, host, tolerance=tolerance, tolerances=tolerances) == {
        "float32": 1e-5, "float64": 1e-5, "q16": 1e-3, "q16-acc32": 1e-3, "q8": 1e-5}
    tolerance, tolerances = project.tolerances(project.resolve("lenet5"), given=2e-2)
    assert set(pipeline.auto_candidates(LENET, host, tolerance=tolerance, tolerances=tolerances).values()) == {2e-2}
    assert project.tolerance_for(project.resolve("lenet5"), "q16", given=2e-2) == 2e-2


def test_library_defaults_match_the_cli_and_scons(tmp_path):
    """nnbuild.pipeline.generate without shape= works on a CNN (shape=auto everywhere)."""
    files = pipeline.generate(LENET, tmp_path)
    trace = json.loads((tmp_path / "lenet5.trace.json").read_text())
    assert trace["shape"] == "v2" and len(files) == 6
    assert cli.parser().parse_args(["generate", "m.h5", "-o", "o"]).shape == kinds.DEFAULT_SHAPE == "auto"


def test_boards_are_checked_and_own_their_tools(tmp_path):
    avr = boards.load_board("avr")
    assert avr.runner.MEASURES_CYCLES and avr.analyzer.__name__.endswith("avr_ipet")
    assert avr.program_suffix == ".elf" and boards.load_board("host").program_suffix == ""
    data = json.loads(boards.board_path("avr").read_text())
    for change, words in (({"mcuu": "x"}, "myboard.json: unknown key 'mcuu' (did you mean 'mcu'?)"),
                          ({"simulator": "gem5"}, "unknown simulator 'gem5'"),
                          ({"clock_hz": "20MHz"}, "myboard.json: key 'clock_hz': '20MHz' is not of type 'integer'"),
                          ({"clock_hz": 0}, "key 'clock_hz': 0 is less than the minimum of 1"),
                          ({"cflags": ["-O2", 3]}, "key 'cflags[1]': 3 is not of type 'string'"),
                          ({"weights_storage": "flash"}, "key 'weights_storage': 'flash' is not one of"),
                          ({"name": "../x"}, "key 'name': '../x' does not match")):
        path = tmp_path / "myboard.json"
        path.write_text(json.dumps({**data, **change}))
        with pytest.raises(NNBuildError, match=re.escape(words)):
            boards.load_board(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "cc"}))
    with pytest.raises(NNBuildError, match=r"myboard.json: missing key\(s\) cc$"):
        boards.load_board(path)
    path.write_text(json.dumps({k: v for k, v in data.items() if k != "mcu"}))
    with pytest.raises(NNBuildError, match=r"myboard.json: simulator 'simavr' needs key\(s\) mcu"):
        boards.load_board(path)


def test_board_schema_is_valid_and_agrees_with_the_registries_and_every_shipped_board():
    import jsonschema
    from nnbuild import options
    schema = boards.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    props = schema["properties"]
    assert [v for v in props["opt"]["enum"] if v] == list(options.OPT_LEVELS)
    assert props["weights_storage"]["enum"] == list(codegen.STORAGES)
    assert set(boards.KEYS) == set(props) and boards.REQUIRED == ("cc", "cflags")
    for name in ("arm", "avr", "cortex-m4", "host", "patmos"):
        jsonschema.validate(json.loads(boards.board_path(name).read_text()), schema)


def test_board_directories_add_and_override_boards(tmp_path, monkeypatch):
    """NNBUILD_BOARDS=DIR adds boards and overrides shipped ones; NNBUILD_TOOLCHAINS is its old name."""
    data = json.loads(boards.board_path("avr").read_text())
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "avr.json").write_text(json.dumps({**data, "clock_hz": 16000000}))
    (mine / "m328.json").write_text(json.dumps({**data, "name": "m328", "mcu": "atmega328p"}))
    for var in boards.ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    assert boards.load_board("avr")["clock_hz"] == 20000000 and "m328" not in boards.available_boards()
    for var in boards.ENV_VARS:
        monkeypatch.setenv(var, str(mine))
        assert boards.load_board("avr")["clock_hz"] == 16000000 and boards.load_board("m328")["mcu"] == "atmega328p"
        assert {"avr", "host", "m328"} <= set(boards.available_boards())
        assert boards.environment() == {var: str(mine)}
        monkeypatch.delenv(var)
    monkeypatch.setenv("NNBUILD_BOARDS", str(tmp_path / "nowhere"))
    with pytest.raises(NNBuildError, match="NNBUILD_BOARDS: board directory '.*nowhere' not found"):
        boards.load_board("avr")
    monkeypatch.setenv("NNBUILD_BOARDS", str(mine))
    with pytest.raises(NNBuildError, match="unknown target 'm329' .*m328"):
        boards.load_board("m329")


def test_boards_subcommand_lists_each_board(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NNBUILD_TOOLCHAINS", raising=False)
    monkeypatch.setenv("NNBUILD_BOARDS", str(tmp_path))
    (tmp_path / "bad.json").write_text(json.dumps({"cc": "gcc", "cflags": [], "mcuu": "x"}))
    assert cli.main(["boards"]) == 2
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].split() == ["board", "MCU", "clock", "flash", "RAM", "runner", "WCET", "analyzer"]
    assert ["avr", "atmega1284", "20", "MHz", "128", "KB", "16", "KB", "simavr", "builtin-avr"] in [
        line.split() for line in lines]
    assert err.strip() == f"nnbuild: error: {tmp_path / 'bad.json'}: unknown key 'mcuu' (did you mean 'mcu'?)"
    (tmp_path / "bad.json").unlink()
    assert cli.main(["boards", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["avr"]["runner"] == "simavr" and rows["avr"]["wcet_analyzer"] == "builtin-avr"
    assert rows["cortex-m4"]["wcet_analyzer"] is None and rows["cortex-m4"]["clock_hz"] == 168000000
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"nnbuild {__version__}"


def test_select_without_an_analyzer_ranks_by_cycles_then_size():
    def report(error, flash, cycles=None, wcet=None):
        return {"tolerance": 1e-3, "max_abs_error_by_run": {"host": error}, "check_inputs": 4, "flash_bytes": flash,
                "ram_bytes": 1, "measured_cycles": cycles,
                "wcet": {"wcet_cycles": wcet, "wcet_ms": wcet / 1e3, "measured_cycles": cycles, "analyzer": "x",
                         "deadline_ms": None, "met": None, "label": "l"} if wcet else None}
    winner, _, why = select.choose({"float32": report(1e-7, 900), "q16": report(5e-4, 400), "fix16": report(2e-2, 300)})
    assert winner == "q16" and "smallest memory footprint" in why
    winner, _, why = select.choose({"float32": report(1e-7, 900, 50), "q16": report(5e-4, 400, 70)})
    assert winner == "float32" and "fewest measured cycles" in why
    winner, _, _ = select.choose({"float32": report(1e-7, 900, 50, 90), "q16": report(5e-4, 400, 70, 80)})
    assert winner == "q16"


@pytest.mark.e2e
@slow("precision=auto from SCons, NNModel, CMake and the CLI (tests/test_scons_e2e.py, test_user_edge.py, test_cmake_module.py)")
def test_precision_auto_on_a_cnn_names_its_pick(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=host", "model=lenet5", "precision=auto")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "precision=auto candidates for lenet5 on host: float32, float64, q16, q16-acc32, q8" in result.stdout
    # each candidate is judged by its own tolerance (example.json "tolerances": 1e-3 for q16*, 1e-5 else):
    # with the float tolerance no 16-bit candidate could qualify
    assert "winner: q16-acc32 has the smallest memory footprint" in result.stdout
    assert "(float32, float64, q16 also qualify)" in result.stdout


def test_check_runs_the_plan_steps_in_a_temp_dir(tmp_path, capsys):
    data = tmp_path / "d.npz"
    np.savez(data, x=np.array([[0, 1], [1, 1]], dtype=np.float32), y=np.array([[1.0], [0.0]]))
    results = pipeline.check(EXAMPLES / "xor" / "xor.h5", data, tolerance=1e-3, build_dir=tmp_path / "b")
    assert set(results["runs"]) == {"host"} and results["runs"]["host"]["vs_framework"] < 1e-3
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["check", "gen", "inputs.npz", "run_host.npz",
                                                                   "semantic.json"]
    assert "xor on host: 2 inputs, max |C - y|" in capsys.readouterr().out


def test_codegen_offers_shapes_per_kind():
    assert codegen.shapes_of_kind("nn")[0] == "auto" and codegen.shapes_of_kind("tpg")[0] == "switch"


def test_step_subcommand_runs_from_the_shell(tmp_path):
    out = tmp_path / "inputs.npz"
    run = subprocess.run([sys.executable, "-m", "nnbuild", "reference", str(EXAMPLES / "xor" / "xor.h5"), "-o", str(out),
                          "--count", "3", "--range", "-1,1"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    with np.load(out) as data:
        assert data["x"].shape == (8, 2) and data["y"].shape == (8, 1)


def test_a_missed_deadline_names_the_builds_known_to_meet_it(tmp_path):
    """Only what the build tree measured: a precision=auto candidate that met the deadline."""
    from nnbuild.checks import select as selection
    def report(precision, wcet_ms, error):
        return {"precision": precision, "target": "avr", "tolerance": 1e-3, "check_inputs": 4,
                "max_abs_error_by_run": {"host": error},
                "wcet": {"wcet_cycles": int(wcet_ms * 2e4), "wcet_ms": wcet_ms, "deadline_ms": 100.0,
                         "met": wcet_ms <= 100, "measured_cycles": None, "analyzer": "builtin-avr", "label": "l"}}
    base = tmp_path / "build" / "avr" / "f1tenth"
    for precision, ms, err in (("float32", 1113.6, 1e-7), ("q16-acc32", 73.6, 7.6e-4), ("fix16", 429.6, 2e-4)):
        (base / "candidates" / precision).mkdir(parents=True)
        (base / "candidates" / precision / "report.json").write_text(json.dumps(report(precision, ms, err)))
    missed = report("float32", 1113.6, 1e-7)
    hint = selection.known_to_meet(missed, base / "candidates" / "float32" / "report.json")
    assert hint == "known to meet it: precision=q16-acc32 on avr (73.6 ms, avr/f1tenth/candidates/q16-acc32)"
    assert selection.known_to_meet(missed, tmp_path / "elsewhere" / "m" / "report.json") is None


def test_the_board_clock_is_written_once_in_clock_hz(tmp_path):
    """F_CPU comes from clock_hz (clock_define names the macro): changing clock_hz alone changes
    the compiler's clock; a board that also defines the clock in its cflags refuses to load."""
    from nnbuild import pipeline
    from nnbuild.compilers import gcc
    avr = boards.load_board("avr")
    assert "-DF_CPU=20000000UL" in gcc.compile_flags(avr)
    assert not any(f.startswith("-DF_CPU") for f in avr["cflags"])
    assert "-DF_CPU=20000000UL" in pipeline.cmake_board("avr") and "-DF_CPU=20000000UL" in pipeline.user_compile_flags("avr")
    assert "-DF_CPU=16000000UL" in gcc.compile_flags(boards.load_board("atmega328p"))
    for name in boards.available_boards():
        board = boards.load_board(name)
        assert board.get("assumptions"), f"{name}: no stated timing assumption"
        assert not boards.clock_defined_in_flags(board)
    data = json.loads(boards.board_path("avr").read_text())
    path = tmp_path / "m1284_8.json"
    path.write_text(json.dumps({**data, "clock_hz": 8000000}))
    flags = gcc.compile_flags(boards.load_board(path))
    assert "-DF_CPU=8000000UL" in flags and not any(f.startswith("-DF_CPU=2") for f in flags)
    for cflags in (["-mmcu=atmega1284", "-DF_CPU=20000000UL"], ["-D", "F_CPU=8000000"], ["-DF_CPU"]):
        path.write_text(json.dumps({**data, "cflags": cflags}))
        with pytest.raises(NNBuildError) as error:
            boards.load_board(path)
        assert str(error.value).startswith(f"{path}: key 'cflags': ") and "writes the clock a second time" in str(error.value)
        assert "\n" not in str(error.value)
    path.write_text(json.dumps({**data, "clock_hz": None, "simulator": None, "wcet_tool": None, "stack_tool": None}))
    with pytest.raises(NNBuildError, match=r"key 'clock_define': 'F_CPU' needs a clock_hz"):
        boards.load_board(path)


def test_cmake_compiles_the_generated_library_reproducibly():
    """CMake's own compile of the generated code maps the source and build folders to '.' (the
    check programs map theirs in the program step) and archives without timestamps."""
    from nnbuild import pipeline
    text = pipeline.cmake_model("xor", "/b", "/t", name="xor", model=str(REPO / "firmware_examples/xor/xor.h5"),
                                board="avr")
    options = next(l for l in text.splitlines() if l.startswith("target_compile_options(xor PRIVATE"))
    assert options.endswith('"-gno-record-gcc-switches" "-fdebug-prefix-map=${CMAKE_SOURCE_DIR}=." '
                            '"-fdebug-prefix-map=${CMAKE_BINARY_DIR}=.")')
    assert options.count("-gno-record-gcc-switches") == 1
    assert 'set(CMAKE_C_ARCHIVE_CREATE "<CMAKE_AR> qcD <TARGET> <LINK_FLAGS> <OBJECTS>" PARENT_SCOPE)' in text
