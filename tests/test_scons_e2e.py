"""End to end through SCons: real generator, gcc/avr-gcc, simavr, WCET and gates."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import copy_project, have, needs_avr, scons, shared_file
from keras_files import edit_one_weight

#: runs scons, cross-compilers or simulators: the e2e tier
pytestmark = pytest.mark.e2e


#: the main example with precision=auto: the example's deadline (100 ms) and tolerance (1e-3)
AUTO_ARGS = ("target=avr", "model=f1tenth", "precision=auto")
#: every candidate precision of an MLP on the AVR (float64: avr-gcc's double is 32 bits)
AVR_CANDIDATES = ("float32", "q16", "q16-acc32", "q8", "fix16")


@pytest.fixture(scope="module")
def avr_auto(tmp_path_factory):
    """The one whole AVR build of the main example in this file: precision=auto builds, runs under
    simavr and bounds every candidate (build/avr/f1tenth/candidates/<precision>/, each the pipeline of
    `precision=<precision>` but its gate), and keeps the fastest that meets the example's deadline
    and tolerance. The tests of one precision (float32, q16-acc32, q8) read its candidate's build;
    the tests that change the tree work on a copy of it (built_copy)."""
    if not have("avr-gcc", "avr-nm", "avr-objdump"):
        pytest.skip("avr-gcc not installed (bash scripts/setup.sh)")
    project = copy_project(tmp_path_factory.mktemp("avr"))
    first = scons(project, *AUTO_ARGS)
    assert first.returncode == 0, first.stdout + first.stderr
    return project, first


def built_copy(project, dest):
    """A copy of a built project tree (outputs and SCons' signatures): up to date where it lands."""
    shutil.copytree(project, dest, symlinks=True)
    return dest


def candidate_report(project, precision):
    with open(project / "build/avr/f1tenth/candidates" / precision / "report.json") as f:
        return json.load(f)


def report_of(project, target, model):
    with open(project / "build" / target / model / "report.json") as f:
        return json.load(f)


@needs_avr
def test_avr_f1tenth_report_has_every_field(avr_auto):
    """The float32 build of the main example (the auto build's float32 candidate: soft float, far
    over the example's 100 ms, so not chosen) reports every field; so does the chosen build."""
    project, first = avr_auto
    report = candidate_report(project, "float32")
    for key in ("model", "target", "board", "precision", "shape", "clock_hz", "measured_cycles",
                "max_abs_error", "text_bytes", "data_bytes", "bss_bytes", "tool_versions"):
        assert report.get(key) is not None, key
        assert report_of(project, "avr", "f1tenth").get(key) is not None, key
    assert report["target"] == "avr" and report["clock_hz"] == 20_000_000 and report["precision"] == "float32"
    assert report["max_abs_error_by_run"]["simavr"] <= 1e-5
    assert report["max_abs_error_by_run"]["host"] <= 1e-5
    assert report["measured_cycles"] > 100_000
    assert report["flash_bytes"] <= 131072 and report["ram_bytes"] <= 16384
    assert "avr-gcc" in report["tool_versions"]
    assert "nnbuild: f1tenth on avr" in first.stdout


@needs_avr
def test_second_identical_run_builds_nothing(avr_auto):
    project, _ = avr_auto
    again = scons(project, *AUTO_ARGS)
    assert again.returncode == 0, again.stderr
    assert "[nnbuild]" not in again.stdout and "rebuilding" not in again.stdout
    assert "is up to date" in again.stdout


@needs_avr
def test_wcet_bound_is_sound_and_reported(avr_auto):
    project, _ = avr_auto
    report = candidate_report(project, "float32")
    assert report["analyzer"] == "builtin-avr"
    assert report["wcet_cycles"] >= report["measured_cycles"]
    assert report["bound_over_measured"] >= 1.0
    assert set(report["wcet"]["per_layer"]) == {"dense_1", "dense_2", "dense_3"}
    for precision in AVR_CANDIDATES:   # every candidate's bound holds its simavr runs
        bound = candidate_report(project, precision)["wcet"]
        assert bound["analyzer"] == "builtin-avr" and bound["wcet_cycles"] >= bound["measured_cycles"] > 0, precision


# a missed deadline fails the repository SConstruct's gate every time, leaves no gate.json, then
# passes: test_gravity_scons.py::test_a_train_deadline_it_cannot_meet_fails_the_build (and in a
# user's SConstruct: test_user_edge.py::test_a_failed_gate_leaves_no_gate_and_no_release_image)


#: the xor network saved as check_main.h5, in float64: a model named like our own files (check_main.c,
#: whose object once got two different actions in SCons) and the host's 64-bit double
HOST_ARGS = ("target=host", "model=check_main.h5", "precision=float64")


@pytest.fixture(scope="module")
def host_build(tmp_path_factory):
    """The one whole host build of this file (HOST_ARGS); the tests that edit or rebuild work on a
    copy of the built tree (built_copy), which starts up to date."""
    project = copy_project(tmp_path_factory.mktemp("host"))
    shutil.copy(project / "firmware_examples" / "xor" / "xor.h5", project / "check_main.h5")
    result = scons(project, *HOST_ARGS)
    assert result.returncode == 0, result.stdout + result.stderr
    return project


def test_a_model_named_like_our_own_files_builds(host_build):
    """model=check_main.h5 once made SCons see two different actions for check_main.o."""
    assert (host_build / "build" / "host" / "check_main_model" / "gate.json").exists()


def test_weight_change_reruns_only_downstream(host_build, tmp_path):
    project = built_copy(host_build, tmp_path / "copy")
    edit_one_weight(project / "check_main.h5")
    again = scons(project, *HOST_ARGS)
    assert again.returncode == 0, again.stderr
    out = again.stdout
    assert "because `check_main.h5' changed" in out
    assert "Generating C" in out
    assert "obj/check_main_model_weights.o" in out and "Linking" in out
    assert "obj/check_main_model.o" not in out and "obj/main.o" not in out and "obj/check_main.o" not in out
    assert "Semantic check" in out and "Report" in out


def test_the_repository_sconstruct_hint_speaks_its_options(host_build, tmp_path):
    """On the host (no WCET analyzer) a deadline cannot be checked: the hint names the waivers in the
    repository SConstruct's syntax; then, on the same build, deadline=none passes and a changed
    option (opt) regenerates: SCons says the build action changed. (NNModel's syntax:
    test_user_edge.py::test_waivers_read_the_same_in_nnmodel_and_the_hint_speaks_nnmodel.)"""
    project = built_copy(host_build, tmp_path / "copy")
    failed = scons(project, *HOST_ARGS, "deadline=5ms")
    assert failed.returncode != 0
    line = next(l for l in (failed.stdout + failed.stderr).splitlines() if "nnbuild:" in l and "cannot be checked" in l)
    assert "waive it with deadline=none or wcet=skip" in line, line
    again = scons(project, *HOST_ARGS, "deadline=none", "opt=-O0")
    assert again.returncode == 0, again.stderr
    assert "contents of the build action changed" in again.stdout


def test_unknown_option_and_target_fail_clearly(tmp_path):
    project = copy_project(tmp_path)
    typo = scons(project, "taget=avr", "model=xor")
    assert typo.returncode == 2 and "unknown option 'taget'; did you mean target?" in typo.stderr, typo.stderr
    bad = scons(project, "target=riscv", "model=xor")
    assert bad.returncode != 0 and "unknown target 'riscv'" in bad.stderr
    assert not (project / "build").exists()


def test_missing_compiler_is_one_line(tmp_path):
    project = copy_project(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("gcc", "cc", "size", "nm", "objdump", "as", "ld"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bindir / tool)
    # only these tools: python's own folder may be /usr/bin, where avr-gcc is too (SCons and the
    # steps run python by its absolute path, so it needs no PATH entry)
    env = dict(os.environ, PATH=str(bindir))
    result = scons(project, "target=avr", "model=xor", env=env)
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.startswith("scons: ***")]
    assert len(errors) == 1 and "'avr-gcc' not found on PATH for target=avr" in errors[0]
    assert not (project / "build").exists()


def test_patmos_stops_at_missing_patmos_clang(tmp_path):
    if have("patmos-clang"):
        pytest.skip("patmos-clang is installed: the T-CREST flow is tested by test_wcet_adapters")
    project = copy_project(tmp_path)
    result = scons(project, "target=patmos", "model=f1tenth")
    assert result.returncode != 0
    assert "'patmos-clang' not found on PATH for target=patmos" in result.stderr


def test_truncated_model_fails_without_outputs(tmp_path):
    project = copy_project(tmp_path)
    weights = project / "firmware_examples/f1tenth/weights.h5"
    weights.write_bytes(weights.read_bytes()[:5000])
    result = scons(project, "target=host", "model=f1tenth")
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if l.startswith("nnbuild: error:")]
    assert len(lines) >= 1 and "weights.h5" in lines[0], result.stderr
    gen = project / "build/host/f1tenth/gen"
    assert not gen.exists() or not any(gen.iterdir())
    assert not (project / "build/host/f1tenth/report.json").exists()


def test_real_f1tenth_controller_builds_on_host(tmp_path):
    model = shared_file("data", "f1tenth", "TD3_L21_64x64_C1.h5")
    project = copy_project(tmp_path)
    result = scons(project, "target=host", f"model={model}")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(project, "host", "TD3_L21_64x64_C1")
    assert report["max_abs_error"] <= 1e-5


@pytest.mark.otawa
@pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-arm"), reason="arm-none-eabi-gcc/qemu-arm not installed")
def test_arm_builds_runs_and_reports_sizes(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=arm", "model=xor", "wcet=skip")  # the example's 5 ms deadline waived
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(project, "arm", "xor")
    assert report["max_abs_error_by_run"]["qemu-arm"] <= 1e-5 and report["text_bytes"] > 0
    assert report["opt"] == "-O0" and report["waivers"] == ["wcet=skip: deadline 5 ms (example) not checked"]
    from nnbuild.wcet import otawa
    gated = scons(project, "target=arm", "model=xor")
    if otawa.locate() is None:
        assert report["wcet"] is None
        assert gated.returncode != 0
        assert "deadline 5 ms cannot be checked: 'owcet' (otawa) not found on PATH" in gated.stderr
        return
    # OTAWA built by `scripts/setup.sh --with-otawa`: the real owcet bounds the firmware, libgcc's
    # soft-float loops bounded from arm_libloops.json
    assert gated.returncode == 0, gated.stdout + gated.stderr
    wcet = report_of(project, "arm", "xor")["wcet"]
    assert wcet["analyzer"] == "otawa" and wcet["wcet_cycles"] > 0 and wcet["met"]
    # owcet ran nnbuild's ARM7TDMI script, and qemu-arm charged every executed instruction of each
    # inference the same ARM7TDMI clocks: the soundness gate held the bound to it
    details = json.loads((project / "build/arm/xor/wcet.json").read_text())["details"]
    assert details["script"] == "arm7tdmi" and any("costs=" in part for part in details["command"])
    assert 0 < wcet["measured_cycles"] <= wcet["wcet_cycles"]
    missed = scons(project, "target=arm", "model=xor", "deadline=10us")
    assert missed.returncode != 0
    assert f"{wcet['wcet_cycles']:,} cycles" in missed.stdout + missed.stderr


@pytest.mark.otawa
@pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-arm"), reason="arm-none-eabi-gcc/qemu-arm not installed")
def test_arm_v1_function_pointers_reach_otawa_and_the_bound_holds(tmp_path):
    """shape=v1 calls its kernels through a table of function pointers: the generator's `indirect`
    facts become owcet `multicall`s and its kernel loops carry per-inference totals; the soundness
    gate (bound >= every qemu-arm run, same ARM7TDMI clocks) passes."""
    from nnbuild.wcet import otawa
    if otawa.locate() is None:
        pytest.skip("OTAWA not built (bash scripts/setup.sh --with-otawa)")
    project = copy_project(tmp_path)
    result = scons(project, "target=arm", "model=xor", "shape=v1", "deadline=none")
    assert result.returncode == 0, result.stdout + result.stderr
    wcet = report_of(project, "arm", "xor")["wcet"]
    assert wcet["analyzer"] == "otawa" and 0 < wcet["measured_cycles"] <= wcet["wcet_cycles"]
    ff = next((project / "build/arm/xor/wcet").glob("*.ff")).read_text()
    assert "multicall 0x" in ff and " total " in ff


@needs_avr
def test_main_example_meets_the_f1tenth_deadline_in_fixed_point(avr_auto, tmp_path):
    """The main example's own precision, q16-acc32 (example.json), meets its 100 ms deadline and
    1e-3 tolerance: the auto build's q16-acc32 candidate (that precision's pipeline, gate aside; the
    gate's verdict is the candidate's row). `scons target=avr model=f1tenth` takes that precision:
    its generate step alone in a fresh copy."""
    project, _ = avr_auto
    report = candidate_report(project, "q16-acc32")
    assert report["precision"] == "q16-acc32" and report["deadline_ms"] == 100
    assert report["measured_cycles"] <= report["wcet_cycles"] <= 2_000_000  # 100 ms at 20 MHz
    assert report["max_abs_error"] <= 1e-3 and report["bound_over_measured"] <= 1.05
    assert report["stack_bytes"] > 0 and report["ram_bytes"] >= report["stack_bytes"]
    row = next(r for r in report_of(project, "avr", "f1tenth")["precision_auto"]["candidates"]
               if r["precision"] == "q16-acc32")
    assert row["violations"] == []
    default = copy_project(tmp_path)
    header = default / "build/avr/f1tenth/gen/f1tenth.h"
    generated = scons(default, "target=avr", "model=f1tenth", str(header.relative_to(default)))
    assert generated.returncode == 0, generated.stdout + generated.stderr
    assert "from architecture.json + weights.h5 (q16-acc32)" in header.read_text()


@needs_avr
def test_q8_f1tenth_on_avr_is_bit_exact_with_a_tight_sound_bound(avr_auto):
    """q8 through the whole build (the auto build's q8 candidate, judged by the example's 1e-3 it
    misses): simavr output == the bit-exact model (max error = the plan's), the NN_DOT8 loop bounded
    within 3% of the worst measured run, half the weight flash of q16-acc32."""
    project, _ = avr_auto
    report = candidate_report(project, "q8")
    assert report["precision"] == "q8"
    assert report["measured_cycles"] <= report["wcet_cycles"] and report["bound_over_measured"] <= 1.03
    assert 1e-3 < report["max_abs_error"] <= 1.6e-2  # int8 weights: above F1/10's 1e-3 target
    runs = {r: np.load(project / "build/avr/f1tenth/candidates/q8" / f"run_{r}.npz") for r in ("host", "simavr")}
    assert np.array_equal(runs["host"]["outputs"].view(np.uint32), runs["simavr"]["outputs"].view(np.uint32))
    assert report["flash_bytes"] <= 32 * 1024  # q16-acc32: 54.2 KB


@needs_avr
def test_precision_auto_picks_the_fastest_qualifying_candidate(avr_auto, tmp_path):
    """The suite's one whole precision=auto build of an MLP: every fixed-point candidate, ranked by
    WCET. NNModel, `nnbuild check` and CMake show they pass the option through and choose on models
    with two candidates (float32, float64) on the host: test_user_edge.py, test_cmake_module.py."""
    project, first = avr_auto
    assert f"precision=auto candidates for f1tenth on avr: {', '.join(AVR_CANDIDATES)}" in first.stdout
    report = report_of(project, "avr", "f1tenth")
    table = {row["precision"]: row for row in report["precision_auto"]["candidates"]}
    assert set(table) == set(AVR_CANDIDATES) and "float64" not in table
    assert any("> deadline 100 ms" in v for v in table["float32"]["violations"])
    winner = table[report["precision_auto"]["winner"]]
    assert winner["precision"] != "float32" and not winner["violations"]
    assert winner["wcet_ms"] <= 100 and winner["max_abs_error"] <= 1e-3
    assert all(r["wcet_cycles"] is None or r["violations"] or r["wcet_cycles"] >= winner["wcet_cycles"]
               for r in table.values())
    assert (project / "build/avr/f1tenth/firmware.elf").exists()
    strict_project = built_copy(project, tmp_path / "strict")   # the shared tree stays as built
    strict = scons(strict_project, *AUTO_ARGS, "tolerance=1e-9")
    assert strict.returncode != 0
    line = next(l for l in strict.stderr.splitlines() if "no candidate qualifies" in l)
    for precision in AVR_CANDIDATES:
        assert f"{precision}: max error" in line
    assert not (strict_project / "build/avr/f1tenth/report.json").exists()


def test_float64_is_refused_where_double_is_32_bits(host_build, tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=xor", "precision=float64")
    assert result.returncode != 0
    assert "precision float64 needs a 64-bit double; avr-gcc's double is 32 bits on target avr" in result.stderr
    assert not (project / "build").exists()
    # on the host (HOST_ARGS): computed in double; the API returns float, so the output's float32
    # rounding is the floor
    report = report_of(host_build, "host", "check_main_model")
    assert report["precision"] == "float64" and report["max_abs_error"] <= 6e-8


# one value per parser and option: the other values of each parser (tolerance 'nan', '-1'; deadline
# '1e400ms', ...) are refused by the same code, tested in test_cli.py::test_check_options_are_refused_in_one_line
# and test_checks.py
@pytest.mark.parametrize("args,words", [
    (("tolerance=abc",), "tolerance 'abc'"),
    (("deadline=5",), "duration with its unit"),
    (("precision=fixed99.3",), "fixed99.3"),
    (("opt=-O9",), "optimisation flag '-O9'"),
    (("environment=nosuch",), "applies to Tangled Program Graph models (.dot) only"),
    (("model=firmware_examples/xor/make_model.py",), "unknown model format '.py'"),
], ids=lambda v: v[0] if isinstance(v, tuple) else None)
def test_bad_options_fail_before_anything_is_built(tmp_path, args, words):
    project = copy_project(tmp_path)
    result = scons(project, "target=host", "model=xor", *args)
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(errors) == 1 and errors[0].startswith("scons: *** nnbuild: ") and words in errors[0], result.stderr
    assert not (project / "build").exists()


def test_example_config_is_checked(tmp_path):
    project = copy_project(tmp_path)
    config = project / "firmware_examples" / "xor" / "example.json"
    good = json.loads(config.read_text())
    for change, words in (({"main": "main.h"}, "'main' must name a C source"), ({"tolerence": 1}, "unknown key(s) tolerence"),
                          ({"check_inputs": 0}, "key 'check_inputs': 0 is not valid"), ({"input_range": [1, 0]}, "lo < hi")):
        config.write_text(json.dumps({**good, **change}))
        result = scons(project, "target=host", "model=xor")
        assert result.returncode != 0 and words in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (project / "build").exists()
