"""The Cortex-M boards run their check programs on qemu-system-arm: stm32f407 (Cortex-M4F, mps2-an386)
and rp2040 (Cortex-M0+, on microbit's ARMv6-M Cortex-M0). The semantic gate reads the target's
outputs, the cycles are the TRM table charged over the executed path, the same on every run; an
executed instruction the board's table cannot cost stops the run in one line; the stack the run
measures stays within the static bound; a deadline still needs a waiver (no analyzer yet)."""

import json
import shutil

import numpy as np
import pytest

from conftest import copy_project, have, scons
from nnbuild import steps

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]
TARGET_RUN = "run_qemu-system-arm.npz"


@pytest.mark.parametrize("board", ["stm32f407", "rp2040"])
@pytest.mark.parametrize("model", ["xor", "f1tenth"])
def test_models_run_on_the_cortex_m_core_with_stable_cycles(tmp_path, board, model):
    project = copy_project(tmp_path)
    result = scons(project, f"target={board}", f"model={model}", "deadline=none")
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
    if model == "xor" and board == "stm32f407":   # the example's deadline: no analyzer yet, so no gate
        result = scons(project, f"target={board}", f"model={model}")
        assert result.returncode != 0
        errors = [line for line in result.stderr.splitlines() if line.startswith("nnbuild: error:")]
        assert len(errors) == 1, result.stderr
        assert errors[0].startswith("nnbuild: error: deadline 5 ms cannot be checked: no WCET analyzer for target "
                                    "stm32f407 (its timing model cortex-m4-zero-wait has no analyzer yet)")
        assert not (build / "gate.json").exists()


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
