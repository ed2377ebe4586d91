"""nnbuild in a user's own project, as a user gets it: a wheel built from this checkout installed in
a fresh venv, then examples/scons_project (SCons) and examples/cmake_project (CMake + Ninja, through
the arm-none-eabi-gcc.cmake toolchain file) built for the STM32F407 (Cortex-M4F, checks on
qemu-system-arm): two models in one firmware, .elf/.hex/.bin, gates over the linked image with the
static stack bound of `main` (RAM = data + bss + bound) and each model's run held to its
inference's own bound, a null build that does nothing, and a weight change that reruns only its
model's chain. The same project on the host and on AVR (a deadline per model) is the slow tier's."""

import json
import shutil
import subprocess

import pytest

import cmake_tools
from conftest import REPO, have, slow
from keras_files import edit_one_weight

pytestmark = pytest.mark.e2e

MODELS = ("xor", "f1tenth")


def run(cmd, cwd, env, check=True):
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if check:
        assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory, nnbuild_venv):
    """(python of the run's venv holding the nnbuild wheel, environment, work dir holding the examples).
    The venv is conftest's nnbuild_venv (test_docs' too): the dependencies (numpy, scipy, h5py, jinja2,
    scons) come from this interpreter's site-packages."""
    bin_dir, env = nnbuild_venv
    root = tmp_path_factory.mktemp("user")
    python = str(bin_dir / "python")
    where = run([python, "-c", "import nnbuild, sys; print(nnbuild.__file__)"], root, env).stdout.strip()
    assert where.startswith(str(bin_dir.parent)), where
    work = root / "work"
    shutil.copytree(REPO / "examples", work / "examples", ignore=shutil.ignore_patterns("build", ".sconsign*"))
    for model in MODELS:
        shutil.copytree(REPO / "firmware_examples" / model, work / "firmware_examples" / model)
    return python, dict(env), work


def restore(work, model):
    shutil.rmtree(work / "firmware_examples" / model)
    shutil.copytree(REPO / "firmware_examples" / model, work / "firmware_examples" / model)


HAVE_CORTEX_M = have("arm-none-eabi-gcc", "arm-none-eabi-objcopy", "qemu-system-arm")
HAVE_AVR = have("avr-gcc", "avr-objcopy", "simavr")
#: where each board's run of the same project is covered when it is not run by default
COVERED_BY = {
    "host": "test_scons_project[stm32f407] (the same project, wheel, null build and weight edit) and "
            "tests/test_user_edge.py (NNFirmware on the host: build/app, app.hex, the gates)",
    "avr": "test_scons_project[stm32f407] and test_cmake_project[stm32f407] (the same project from the wheel, "
           "null build, weight edit); tests/test_docs.py::test_the_readme_blocks_run_from_the_wheel (the wheel "
           "on AVR with SCons and avr-gcc.cmake, a deadline held by the WCET bound over the image); "
           "tests/test_cmake_module.py::test_a_failed_gate_leaves_no_gate_and_no_image_on_a_board_given_by_path "
           "(CMake AVR firmware, WCET and deadline per model)",
}


def boards(*candidates):
    """The boards whose tools are here; the first of stm32f407, avr runs by default, the rest in
    the slow tier."""
    usable = [b for b in candidates if b == "host" or (b == "stm32f407" and HAVE_CORTEX_M) or (b == "avr" and HAVE_AVR)]
    default = next((b for b in ("stm32f407", "avr") if b in usable), None)
    return [b if b == default or default is None else pytest.param(b, marks=slow(COVERED_BY[b])) for b in usable]


def check_image_reports(out):
    """STM32F407: both models' gates over the image passed; the stack bound is main's, counted in
    RAM, and the check run's high-water mark is within its inference's own bound."""
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


@pytest.mark.parametrize("board", boards("host", "avr", "stm32f407"))
def test_scons_project(installed, board):
    python, env, work = installed
    project = work / "examples" / "scons_project"
    scons = [python, "-m", "SCons", "-Q", "--debug=explain", f"board={board}"]
    first = run(scons, project, env)
    out = project / "build" / board
    suffix = ".elf" if board != "host" else ""
    for name in (f"app{suffix}", "app.hex", "app.bin", "app.checks/xor/gate.json", "app.checks/steer/gate.json",
                 "xor/libxor.a", "steer/libsteer.a"):
        assert (out / name).is_file(), (name, first.stdout[-2000:])
    assert (out / "app.bin").stat().st_size > 0 and (out / "app.hex").read_text().startswith(":")
    # the user's sources: the user's flags (gnu11, its defines), not the board's -Werror -pedantic
    assert "lidar" in first.stdout
    if board == "avr":
        for model in ("xor", "steer"):
            report = (out / "app.checks" / model / "report.json").read_text()
            assert '"wcet"' in report and "builtin-avr" in report
    if board == "stm32f407":
        assert "qemu-system-arm" in first.stdout
        check_image_reports(out)
    null = run(scons, project, env)
    assert "[nnbuild]" not in null.stdout and "rebuilding" not in null.stdout, null.stdout
    edit_one_weight(work / "firmware_examples/xor/xor.h5")
    try:
        again = run(scons, project, env)
    finally:
        restore(work, "xor")
    lines = [l for l in again.stdout.splitlines() if l.startswith("[nnbuild]")]
    assert any("xor/gen/xor.h" in l for l in lines) and any("app.checks/xor/gate.json" in l for l in lines)
    # the other model's own chain stays up to date; only its checks over the relinked image rerun
    assert not any(f"build/{board}/steer/" in l for l in lines), lines
    assert any("app.checks/steer/" in l for l in lines) and not any("app.obj" in l for l in lines), lines


#: the CMake toolchain file of each board
TOOLCHAIN_FILES = {"avr": "avr-gcc.cmake", "stm32f407": "arm-none-eabi-gcc.cmake"}


@pytest.mark.skipif(not have("cmake", "ninja"), reason="cmake and ninja not installed (pip install cmake ninja)")
# the host's CMake build of an installed package is test_gravity_scons's
@pytest.mark.parametrize("board", boards("avr", "stm32f407"))
def test_cmake_project(installed, board):
    python, env, work = installed
    project = work / "examples" / "cmake_project"
    build = project / "build" / board
    cmake_dir = run([python, "-m", "nnbuild.pipeline", "cmake-dir"], project, env).stdout.strip()
    assert cmake_dir.startswith(str(python).rsplit("/bin/", 1)[0])  # the installed package's folder
    configure = [cmake_tools.cmake(), "-G", "Ninja", "-S", str(project), "-B", str(build), f"-DNNBUILD_PYTHON={python}"]
    configure.append(f"-DCMAKE_TOOLCHAIN_FILE={cmake_dir}/{TOOLCHAIN_FILES[board]}")
    run(configure, project, env)
    first = run([cmake_tools.ninja(), "-C", str(build)], project, env)
    suffix = ".elf" if board != "host" else ""
    for name in (f"app{suffix}", "app.hex", "app.bin", "app.checks/xor/gate.json", "app.checks/steer/gate.json"):
        assert (build / name).is_file(), (name, first.stdout[-2000:])
    if board == "stm32f407":
        check_image_reports(build)
    null = run([cmake_tools.ninja(), "-C", str(build)], project, env)
    assert "no work to do" in null.stdout, null.stdout
    edit_one_weight(work / "firmware_examples/xor/xor.h5")
    try:
        again = run([cmake_tools.ninja(), "-C", str(build)], project, env)
    finally:
        restore(work, "xor")
    ran = [l for l in again.stdout.splitlines() if l.startswith("[")]
    assert [l.split("] ", 1)[1] for l in ran if "Generating C" in l] == ["[nnbuild] Generating C xor/gen/xor.h"], ran
    assert any("Gates app.checks/xor/gate.json" in l for l in ran)
    # the other model's chain stays up to date (its checks over the relinked image rerun), and of the
    # user's sources only the one including xor.h recompiles
    assert not any(" steer/" in l or "steer.dir" in l for l in ran), ran
    assert not any("src/main.c" in l or "src/lidar.c" in l for l in ran), ran


@slow("tests/test_cmake_module.py::test_a_failed_gate_leaves_no_gate_and_no_image_on_a_board_given_by_path "
      "(a deadline the avr build cannot meet fails ninja, no gate.json, no image, also on a rerun); the wheel's "
      "avr-gcc.cmake: tests/test_docs.py::test_the_readme_blocks_run_from_the_wheel")
def test_a_gate_violation_fails_the_cmake_build(installed, tmp_path):
    """A deadline the model cannot meet fails `ninja`, leaving no gate output."""
    if not (have("cmake", "ninja") and have("avr-gcc", "avr-objcopy")):
        pytest.skip("cmake, ninja and avr-gcc needed")
    python, env, work = installed
    project = work / "examples" / "cmake_project"
    text = (project / "CMakeLists.txt").read_text().replace("DEADLINE 5ms", "DEADLINE 0.01ms")
    strict = tmp_path / "strict"
    shutil.copytree(project, strict, ignore=shutil.ignore_patterns("build"))
    (strict / "CMakeLists.txt").write_text(text.replace("${CMAKE_CURRENT_SOURCE_DIR}/../../firmware_examples",
                                                        str(work / "firmware_examples")))
    cmake_dir = run([python, "-m", "nnbuild.pipeline", "cmake-dir"], strict, env).stdout.strip()
    run([cmake_tools.cmake(), "-G", "Ninja", "-S", str(strict), "-B", str(strict / "b"), f"-DNNBUILD_PYTHON={python}",
         f"-DCMAKE_TOOLCHAIN_FILE={cmake_dir}/avr-gcc.cmake"], strict, env)
    failed = run([cmake_tools.ninja(), "-C", str(strict / "b"), "xor_checks"], strict, env, check=False)
    assert failed.returncode != 0 and "deadline" in (failed.stdout + failed.stderr)
    assert not (strict / "b" / "nnbuild-models" / "xor" / "gate.json").exists()
