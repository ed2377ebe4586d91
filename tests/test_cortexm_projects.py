"""The Cortex-M boards from a user's own project: examples/scons_project (NNFirmware, board=stm32f407)
and examples/cmake_project (nnbuild_add_model/nnbuild_add_firmware through the arm-none-eabi-gcc.cmake
toolchain file) build both models for the STM32F407, run their checks on qemu-system-arm, and pass
every gate over the linked image: the memory report with the static stack bound of `main` (RAM =
data + bss + bound) and each model's run held to its inference's own bound. No deadline: the
examples set one only on boards with a WCET analyzer."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, have

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "arm-none-eabi-objcopy", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc and qemu-system-arm needed")]
MODELS = ("xor", "f1tenth")


def environment():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    return env


def run(cmd, cwd):
    result = subprocess.run(cmd, cwd=cwd, env=environment(), capture_output=True, text=True)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture
def work(tmp_path):
    """The examples and the two models they name, as a user's checkout holds them."""
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("build", ".sconsign*"))
    for model in MODELS:
        shutil.copytree(REPO / "firmware_examples" / model, tmp_path / "firmware_examples" / model)
    return tmp_path


def check_image_reports(out):
    """Both models' gates over the image passed; the stack bound is main's, counted in RAM, and the
    check run's high-water mark is within its inference's own bound."""
    for name in ("app.elf", "app.hex", "app.bin", "app.checks/xor/gate.json", "app.checks/steer/gate.json"):
        assert (out / name).is_file(), name
    for model, entry in (("xor", "xor_infer"), ("steer", "steer_infer")):
        report = json.loads((out / "app.checks" / model / "report.json").read_text())
        assert report["target"] == "stm32f407" and report["passed"]
        stack = report["stack"]
        assert stack["entry"] == "main" and stack["path"][0] == "main", stack   # the deepest model's chain
        assert report["ram_bytes"] == report["data_bytes"] + report["bss_bytes"] + report["stack_bytes"]
        assert report["measured_stack_entry"] == entry
        assert 0 < report["measured_stack_bytes"] <= stack["entries"][entry] < stack["bytes"]
        verdicts = {g["name"]: g["verdict"] for g in report["gates"]}
        assert verdicts["stack bound soundness"] == "pass" and verdicts["memory (RAM)"] == "pass", verdicts


def test_nnfirmware_builds_and_checks_the_models_for_stm32f407(work):
    project = work / "examples" / "scons_project"
    first = run([sys.executable, "-m", "SCons", "-Q", "board=stm32f407"], project)
    assert "qemu-system-arm" in first.stdout
    check_image_reports(project / "build" / "stm32f407")


@pytest.mark.skipif(not have("cmake", "ninja"), reason="cmake and ninja not installed (pip install cmake ninja)")
def test_cmake_builds_and_checks_the_models_for_stm32f407(work):
    project = work / "examples" / "cmake_project"
    build = project / "build" / "stm32f407"
    toolchain = REPO / "nnbuild" / "cmake" / "arm-none-eabi-gcc.cmake"
    run(["cmake", "-G", "Ninja", "-S", str(project), "-B", str(build), f"-DNNBUILD_PYTHON={sys.executable}",
         f"-DCMAKE_TOOLCHAIN_FILE={toolchain}"], project)
    run(["ninja", "-C", str(build)], project)
    check_image_reports(build)


@pytest.mark.skipif(not have("cmake"), reason="cmake not installed")
def test_the_arm_toolchain_file_refuses_a_board_another_compiler_builds(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(p C)\n")
    result = subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "b"), f"-DNNBUILD_PYTHON={sys.executable}",
                             f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'nnbuild' / 'cmake' / 'arm-none-eabi-gcc.cmake'}",
                             "-DNNBUILD_BOARD=avr"], capture_output=True, text=True, env=environment())
    assert result.returncode != 0
    assert "arm-none-eabi-gcc.cmake: board 'avr' is compiled by avr-gcc, not arm-none-eabi-gcc" in " ".join(
        result.stderr.split()), result.stderr
