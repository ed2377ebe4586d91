"""End to end through SCons: real generator, gcc/avr-gcc, simavr, WCET and gates."""

import json
import os
import shutil
import sys

import h5py
import numpy as np
import pytest

from conftest import copy_project, have, needs_avr, scons, shared_file

#: runs scons, cross-compilers or simulators: the e2e tier
pytestmark = pytest.mark.e2e


#: the main example in float32, with a deadline float32 can meet
FLOAT_ARGS = ("target=avr", "model=f1tenth", "precision=float32", "deadline=10s")


@pytest.fixture(scope="module")
def avr_project(tmp_path_factory):
    """One float32 AVR build of the main example, shared by the tests that only read or re-gate it."""
    if not have("avr-gcc", "avr-nm", "avr-objdump"):
        pytest.skip("avr-gcc not installed (bash scripts/setup.sh)")
    project = copy_project(tmp_path_factory.mktemp("avr"))
    first = scons(project, *FLOAT_ARGS)
    assert first.returncode == 0, first.stdout + first.stderr
    return project, first


def report_of(project, target, model):
    with open(project / "build" / target / model / "report.json") as f:
        return json.load(f)


@needs_avr
def test_avr_f1tenth_report_has_every_field(avr_project):
    project, first = avr_project
    report = report_of(project, "avr", "f1tenth")
    for key in ("model", "target", "board", "precision", "shape", "clock_hz", "measured_cycles",
                "max_abs_error", "text_bytes", "data_bytes", "bss_bytes", "tool_versions"):
        assert report.get(key) is not None, key
    assert report["target"] == "avr" and report["clock_hz"] == 20_000_000
    assert report["max_abs_error_by_run"]["simavr"] <= 1e-5
    assert report["max_abs_error_by_run"]["host"] <= 1e-5
    assert report["measured_cycles"] > 100_000
    assert report["flash_bytes"] <= 131072 and report["ram_bytes"] <= 16384
    assert "avr-gcc" in report["tool_versions"]
    assert "nnbuild: f1tenth on avr" in first.stdout


@needs_avr
def test_second_identical_run_builds_nothing(avr_project):
    project, _ = avr_project
    again = scons(project, *FLOAT_ARGS)
    assert again.returncode == 0, again.stderr
    assert "[nnbuild]" not in again.stdout and "rebuilding" not in again.stdout
    assert "is up to date" in again.stdout


@needs_avr
def test_wcet_bound_is_sound_and_reported(avr_project):
    project, _ = avr_project
    report = report_of(project, "avr", "f1tenth")
    assert report["analyzer"] == "builtin-avr"
    assert report["wcet_cycles"] >= report["measured_cycles"]
    assert report["bound_over_measured"] >= 1.0
    assert set(report["wcet"]["per_layer"]) == {"dense_1", "dense_2", "dense_3"}


@needs_avr
def test_missed_deadline_fails_every_time_then_passes(avr_project):
    project, _ = avr_project
    for _ in range(2):
        miss = scons(project, *FLOAT_ARGS[:3], "deadline=1ms")
        assert miss.returncode != 0
        verdict = [l for l in miss.stdout.splitlines() + miss.stderr.splitlines() if "> deadline" in l]
        assert verdict and "WCET" in verdict[0] and "f1tenth on avr @ 20 MHz" in verdict[0], miss.stderr
        assert not (project / "build/avr/f1tenth/gate.json").exists()
    ok = scons(project, *FLOAT_ARGS)
    assert ok.returncode == 0, ok.stderr
    report = report_of(project, "avr", "f1tenth")
    assert report["deadline_ms"] == 10000 and report["margin"] > 0
    assert (project / "build/avr/f1tenth/gate.json").exists()


def edit_one_weight(path):
    with h5py.File(path, "r+") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and "kernel" in n else None)
        data = f[names[0]]
        data[0, 0] = data[0, 0] + np.float32(0.25)


def test_weight_change_reruns_only_downstream(tmp_path):
    project = copy_project(tmp_path)
    assert scons(project, "target=host", "model=f1tenth").returncode == 0
    edit_one_weight(project / "firmware_examples/f1tenth/weights.h5")
    again = scons(project, "target=host", "model=f1tenth")
    assert again.returncode == 0, again.stderr
    out = again.stdout
    assert "because `firmware_examples/f1tenth/weights.h5' changed" in out
    assert "Generating C" in out
    assert "obj/f1tenth_weights.o" in out and "Linking" in out
    assert "obj/f1tenth.o" not in out and "obj/main.o" not in out and "obj/check_main.o" not in out
    assert "Semantic check" in out and "Report" in out


# an option change regenerates: test_user_edge.py::test_the_repository_sconstruct_hint_speaks_its_options


def test_unknown_option_and_target_fail_clearly(tmp_path):
    project = copy_project(tmp_path)
    typo = scons(project, "taget=avr", "model=xor")
    assert typo.returncode != 0 and "unknown option 'taget'; did you mean target?" in typo.stderr
    bad = scons(project, "target=riscv", "model=xor")
    assert bad.returncode != 0 and "unknown target 'riscv'" in bad.stderr


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
def test_main_example_meets_the_f1tenth_deadline_in_fixed_point(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=f1tenth")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(project, "avr", "f1tenth")
    assert report["precision"] == "q16-acc32" and report["deadline_ms"] == 100
    assert report["measured_cycles"] <= report["wcet_cycles"] <= 2_000_000  # 100 ms at 20 MHz
    assert report["max_abs_error"] <= 1e-3 and report["bound_over_measured"] <= 1.05
    assert report["stack_bytes"] > 0 and report["ram_bytes"] >= report["stack_bytes"]


@needs_avr
def test_q8_f1tenth_on_avr_is_bit_exact_with_a_tight_sound_bound(tmp_path):
    """q8 through the whole build: simavr output == the bit-exact model (max error = the plan's), the
    NN_DOT8 loop bounded within 3% of the worst measured run, half the weight flash of q16-acc32."""
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=f1tenth", "precision=q8", "tolerance=2e-2")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(project, "avr", "f1tenth")
    assert report["precision"] == "q8"
    assert report["measured_cycles"] <= report["wcet_cycles"] and report["bound_over_measured"] <= 1.03
    assert 1e-3 < report["max_abs_error"] <= 1.6e-2  # int8 weights: above F1/10's 1e-3 target
    runs = {r: np.load(project / "build/avr/f1tenth" / f"run_{r}.npz") for r in ("host", "simavr")}
    assert np.array_equal(runs["host"]["outputs"].view(np.uint32), runs["simavr"]["outputs"].view(np.uint32))
    assert report["flash_bytes"] <= 32 * 1024  # q16-acc32: 54.2 KB


@needs_avr
def test_precision_auto_picks_the_fastest_qualifying_candidate(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=f1tenth", "precision=auto", "deadline=100ms", "tolerance=1e-3")
    assert result.returncode == 0, result.stdout + result.stderr
    report = report_of(project, "avr", "f1tenth")
    table = {row["precision"]: row for row in report["precision_auto"]["candidates"]}
    assert {"float32", "q16", "q16-acc32", "fix16"} <= set(table) and "float64" not in table
    assert any("> deadline 100 ms" in v for v in table["float32"]["violations"])
    winner = table[report["precision_auto"]["winner"]]
    assert winner["precision"] != "float32" and not winner["violations"]
    assert winner["wcet_ms"] <= 100 and winner["max_abs_error"] <= 1e-3
    assert all(r["wcet_cycles"] is None or r["violations"] or r["wcet_cycles"] >= winner["wcet_cycles"]
               for r in table.values())
    assert (project / "build/avr/f1tenth/firmware.elf").exists()
    strict = scons(project, "target=avr", "model=f1tenth", "precision=auto", "deadline=100ms", "tolerance=1e-9")
    assert strict.returncode != 0
    line = next(l for l in strict.stderr.splitlines() if "no candidate qualifies" in l)
    for precision in ("float32", "q16", "q16-acc32", "fix16"):
        assert f"{precision}: max error" in line
    assert not (project / "build/avr/f1tenth/report.json").exists()


def test_float64_is_refused_where_double_is_32_bits(tmp_path):
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=xor", "precision=float64")
    assert result.returncode != 0
    assert "precision float64 needs a 64-bit double; avr-gcc's double is 32 bits on target avr" in result.stderr
    host = scons(project, "target=host", "model=xor", "precision=float64")
    assert host.returncode == 0, host.stderr
    # computed in double; the API returns float, so the output's float32 rounding is the floor
    assert report_of(project, "host", "xor")["max_abs_error"] <= 6e-8


@pytest.mark.parametrize("args,words", [
    (("tolerance=abc",), "tolerance 'abc'"),
    (("tolerance=-1",), "tolerance '-1'"),
    (("tolerance=nan",), "tolerance 'nan'"),
    (("deadline=1e400ms",), "not a positive, finite duration"),
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


@pytest.mark.e2e
def test_a_model_named_like_our_own_files_builds(tmp_path):
    """model=check_main.h5 once made SCons see two different actions for check_main.o."""
    project = copy_project(tmp_path)
    shutil.copy(project / "firmware_examples" / "xor" / "xor.h5", project / "check_main.h5")
    result = scons(project, "target=host", "model=check_main.h5")
    assert result.returncode == 0, result.stderr
    assert (project / "build" / "host" / "check_main_model" / "gate.json").exists()
