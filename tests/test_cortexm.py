"""The Cortex-M boards run their check programs on qemu-system-arm: stm32f407 (Cortex-M4F, mps2-an386)
and rp2040 (Cortex-M0+, on microbit's ARMv6-M Cortex-M0). The semantic gate reads the target's
outputs, the cycles are the TRM table charged over the executed path, the same on every run; an
executed instruction the board's table cannot cost stops the run in one line; builtin-thumb2 bounds
every build, and the soundness gate holds the bound >= the executed-path cycles of every input; the
stack the run measures stays within the static stack bound."""

import json
import shutil

import numpy as np
import pytest

from conftest import copy_project, have, scons, slow
from nnbuild import steps

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]
TARGET_RUN = "run_qemu-system-arm.npz"


#: (board, model, precision or None): the builds the issue names, and xor on the M4 with its example deadline.
#: One per core runs by default (M4: q16-acc32 on the DSP kernels; M0+: float32 in soft float); the others
#: re-run the same SCons chain on a core already covered, with their code on the core held elsewhere:
#: xor in float32 on the M4's FPU by tests/test_user_project.py's STM32F407 builds of the example project,
#: LeNet-5 and F1/10 on the M0+ by tests/test_cortexm_adversarial.py (bound >= every input's cycles,
#: bound/executed ratio, fixed-point outputs equal to the bit-exact model's): slow tier
BUILDS = [pytest.param("stm32f407", "xor", None, marks=slow(
              "tests/test_user_project.py::test_scons_project[stm32f407] and test_cmake_project[stm32f407] (xor in "
              "float32 on the M4 through its chain: qemu-system-arm run, semantic and bound-soundness gates, stack "
              "within its bound); [stm32f407-f1tenth-None] (the report's bound, deadline and instruction timing on "
              "the M4); [rp2040-xor-None] (float32 outputs within tolerance, the same cycles on a second run)")),
          ("stm32f407", "f1tenth", None),
          pytest.param("stm32f407", "lenet5", "q16-acc32", marks=slow(
              "[stm32f407-f1tenth-None] (the SCons chain, gates, stack, q16-acc32 on the DSP kernels, bound within 1.3 "
              "of the run); test_cortexm_adversarial.py::test_lenet5_q16_acc32_on_the_m4_no_input_beats_the_bound "
              "(LeNet-5 q16-acc32 on the M4: bound, ratio <= 1.03, bit-exact outputs); test_cortexm_dsp.py::"
              "test_the_v2_kernels_equal_the_bit_exact_model (its DSP kernels' C)")),
          ("rp2040", "xor", None),
          pytest.param("rp2040", "f1tenth", None, marks=slow(
              "[rp2040-xor-None] (the SCons chain, gates, stack on the M0+); test_cortexm_adversarial.py::"
              "test_f1tenth_q16_acc32_no_input_beats_the_bound[rp2040] (F1/10 q16-acc32 on the M0+: bound, "
              "ratio <= 1.01, bit-exact outputs)"))]


@pytest.mark.parametrize("board, model, precision", BUILDS)
def test_models_run_on_the_cortex_m_core_and_pass_their_gates_with_a_real_bound(tmp_path, board, model, precision,
                                                                                build_cache):
    project = copy_project(tmp_path)
    result = scons(project, f"target={board}", f"model={model}", *([f"precision={precision}"] if precision else []),
                   f"cache={build_cache}")
    assert result.returncode == 0, result.stdout + result.stderr
    build = project / "build" / board / model
    report = json.loads((build / "report.json").read_text())
    target, host = np.load(build / TARGET_RUN), np.load(build / "run_host.npz")
    if report["precision"] == "float32":   # libm differs (newlib vs glibc): equal within the gate's tolerance
        assert np.max(np.abs(target["outputs"] - host["outputs"])) <= report["tolerance"]
    else:                                   # fixed point: the same integers on both
        assert np.array_equal(target["outputs"], host["outputs"]), report["precision"]
    assert report["max_abs_error_by_run"]["qemu-system-arm"] <= report["tolerance"]
    cycles = target["cycles"]
    assert len(cycles) == len(target["outputs"]) and (cycles > 0).all()
    assert report["measured_cycles"] == int(cycles.max())
    bound = report["wcet"]
    assert bound["analyzer"] == "builtin-thumb2"
    assert (bound["deadline_ms"] is None) == (model == "lenet5")   # the examples' deadlines (lenet5 has none)
    assert bound["met"] or bound["deadline_ms"] is None
    assert bound["wcet_cycles"] >= int(cycles.max())           # the soundness gate, on every check input
    if report["precision"] != "float32":                        # fixed point: no data-dependent library paths
        assert bound["wcet_cycles"] <= 1.3 * int(cycles.max())
    wcet_json = json.loads((build / "wcet.json").read_text())
    assert wcet_json["details"]["instruction_timing"] == json.loads(
        (project / "toolchains" / f"{board}.json").read_text())["instruction_timing"]
    assert (build / "gate.json").exists()
    # the stack: painted and read around each call on the core, within the call's static bound
    stack, entry = report["stack"], f"{model}_infer"
    assert report["ram_bytes"] == report["data_bytes"] + report["bss_bytes"] + stack["bytes"]
    assert report["measured_stack_entry"] == entry and len(target["stack"]) == len(target["outputs"])
    assert 0 < report["measured_stack_bytes"] == int(target["stack"].max()) <= stack["entries"][entry]
    assert {g["name"]: g["verdict"] for g in report["gates"]}["stack bound soundness"] == "pass"
    if model == "xor":   # the same figure on every run (a second run of the same program)
        again = tmp_path / "again.npz"
        steps.run(str(build / "check.elf"), str(again), board=board, inputs=str(build / "inputs.npz"),
                  entry=f"{model}_infer")
        assert np.array_equal(np.load(again)["cycles"], cycles)


def test_a_deadline_below_the_bound_fails_the_gate_in_one_line(tmp_path, build_cache):
    """The bound is checked against the deadline: 0.01 ms is below xor's bound on the M0+ (about 0.07 ms).
    The deadline is no option of the steps before the gate: the run's cache may serve them (the rp2040
    xor build above); the gates are never cached, they judge the bound here."""
    project = copy_project(tmp_path)
    result = scons(project, "target=rp2040", "model=xor", "deadline=0.01ms", f"cache={build_cache}")
    assert result.returncode != 0
    assert "Retrieved `build/rp2040/xor/gate.json'" not in result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("nnbuild: error:")]
    assert len(errors) == 1 and "deadline" in errors[0], result.stderr
    assert not (project / "build/rp2040/xor/gate.json").exists()


def test_an_instruction_the_board_table_cannot_cost_stops_the_run_in_one_line(tmp_path):
    """A Cortex-M4 build charged with the Cortex-M0+ table: its first Thumb-2-only instruction inside the
    inference has no cost, and the run says which address."""
    project = copy_project(tmp_path)
    data = json.loads((project / "toolchains/stm32f407.json").read_text())
    (project / "boards").mkdir()
    (project / "boards/m4wrongtable.json").write_text(json.dumps({**data, "name": "m4wrongtable",
                                                                  "instruction_timing": "cortex-m0plus"}))
    result = scons(project, "target=m4wrongtable", "model=xor", "deadline=none")
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.startswith("nnbuild: error:")]
    assert len(errors) == 1, result.stderr
    assert errors[0].endswith("which has no cortex-m0plus cost") and "qemu-system-arm executed 0x" in errors[0]
    assert not (project / "build/m4wrongtable/xor" / TARGET_RUN).exists()


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="qemu-system-arm not installed")
def test_a_fault_on_the_machine_is_a_failed_run_not_a_hang(tmp_path):
    """The reset code's fault handler exits through semihosting: a program that faults fails at once."""
    import subprocess
    from nnbuild import boards
    from nnbuild.runners import qemu_system
    board = boards.load_board("stm32f407")
    source = tmp_path / "fault.c"
    source.write_text("int main(void) { return *(volatile int *)0xfffffff0u; }\n")
    elf = tmp_path / "fault.elf"
    parts = qemu_system.check_program(board)
    board.compiler.build_executable(board, [source, *parts["sources"]], elf, ldscript=parts["ldscript"])
    done = subprocess.run([*qemu_system.command(board), str(elf)], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60)
    assert done.returncode == 4
