"""The Cortex-M boards from a user's own project: the arm-none-eabi-gcc.cmake toolchain file refuses a
board another compiler builds.

The example projects built for the STM32F407 (examples/scons_project through NNFirmware and
examples/cmake_project through arm-none-eabi-gcc.cmake: both models' checks on qemu-system-arm,
every gate over the linked image, the static stack bound of `main` counted in RAM, each model's run
held to its inference's own bound) are tests/test_user_project.py's test_scons_project[stm32f407]
and test_cmake_project[stm32f407]: the same builds, from the installed wheel, with a null build and
a weight edit on top."""

import os
import subprocess
import sys

import pytest

import cmake_tools
from conftest import REPO, have

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "arm-none-eabi-objcopy", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc and qemu-system-arm needed")]


def environment():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    return env


@pytest.mark.skipif(not have("cmake"), reason="cmake not installed")
def test_the_arm_toolchain_file_refuses_a_board_another_compiler_builds(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(p C)\n")
    result = subprocess.run([cmake_tools.cmake(), "-S", str(tmp_path), "-B", str(tmp_path / "b"),
                             f"-DNNBUILD_PYTHON={sys.executable}",
                             f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'nnbuild' / 'cmake' / 'arm-none-eabi-gcc.cmake'}",
                             "-DNNBUILD_BOARD=avr"], capture_output=True, text=True, env=environment())
    assert result.returncode != 0
    assert "arm-none-eabi-gcc.cmake: board 'avr' is compiled by avr-gcc, not arm-none-eabi-gcc" in " ".join(
        result.stderr.split()), result.stderr
