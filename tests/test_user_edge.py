"""The gate holds from a user's own project: NNModel/NNFirmware refuse a misspelled keyword in one
line, a failed gate leaves no gate.json and no release image (.hex, .bin), boards are found by path
and in the project's boards/ folder, precision=auto works from NNModel and `nnbuild check`, and the
waivers (deadline none, wcet skip) read the same in every interface, each hint in its own syntax.

Each test writes a small user project (an SConstruct of its own, a main.c, the xor model) into a
temp folder and runs the real scons (and the CLI) on it, with this checkout's nnbuild importable."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, have, scons

pytestmark = pytest.mark.e2e

MAIN_C = """#include "xor.h"
int main(void) {
    float in[2] = {1.0f, 0.0f}, out[1];
    xor_infer(in, out);
    return out[0] > 0.5f ? 0 : 1;
}
"""

SCONSTRUCT = """import nnbuild.scons_tool
env = Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()],
                  NNBOARD=ARGUMENTS.get("board", "host"))
xor = env.NNModel("xor", "models/xor.h5", tolerance=1e-5, input_range=(0.0, 1.0), count=8, {model})
firmware = env.NNFirmware("build/app", ["src/main.c"], {firmware})
Default(firmware)
"""


def user_project(root, model="", firmware="models=[xor]"):
    """A user's project: SConstruct with NNModel(xor, ... `model`) and NNFirmware(app, ... `firmware`)."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    shutil.copy2(REPO / "firmware_examples" / "xor" / "xor.h5", root / "models" / "xor.h5")
    (root / "src" / "main.c").write_text(MAIN_C)
    write_sconstruct(root, model, firmware)
    return root


def write_sconstruct(root, model="", firmware="models=[xor]"):
    (root / "SConstruct").write_text(SCONSTRUCT.format(model=model, firmware=firmware))


def user_env():
    """The user's shell, with this checkout's nnbuild importable (the wheel's is tests/test_user_project)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NNBUILD_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def build(root, *args):
    return scons(root, "-j2", *args, env=user_env())


def nnbuild_cli(root, *args):
    return subprocess.run([sys.executable, "-m", "nnbuild", *args], cwd=root, env=user_env(), capture_output=True,
                          text=True)


def failure_lines(result):
    return [l for l in (result.stdout + result.stderr).splitlines() if "nnbuild:" in l]


def listing(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


# --------------------------------------------------------------------------- point 1: no silent keyword


def test_a_misspelled_nnmodel_keyword_stops_the_build_in_one_line(tmp_path):
    root = user_project(tmp_path, model='deadlne="5ms"')
    result = build(root)
    assert result.returncode == 2
    assert "NNModel('xor'): unknown keyword 'deadlne'; did you mean deadline?" in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and not (root / "build").exists()


def test_a_misspelled_nnfirmware_keyword_stops_the_build_in_one_line(tmp_path):
    root = user_project(tmp_path, firmware="modles=[xor]")
    result = build(root)
    assert result.returncode == 2
    assert "NNFirmware('build/app'): unknown keyword 'modles'; did you mean models?" in result.stderr, result.stderr
    write_sconstruct(root, firmware='models=[xor], deadline="5ms"')   # a deadline belongs to NNModel
    result = build(root)
    assert result.returncode == 2 and "unknown keyword 'deadline'; known: board, models" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr and not (root / "build").exists()


# the repository SConstruct names the nearest option (exit 2, one line):
# test_scons_e2e.py::test_unknown_option_and_target_fail_clearly


# --------------------------------------------------------------------------- point 5: one waiver vocabulary


def test_waivers_read_the_same_in_nnmodel_and_the_hint_speaks_nnmodel(tmp_path):
    """On a board without a WCET analyzer (host) a deadline cannot be checked: the build fails with
    NNModel's syntax of the waivers; deadline="none" and wcet="skip" both build."""
    root = user_project(tmp_path, model='deadline="5ms"')
    failed = build(root)
    assert failed.returncode != 0
    line = next(l for l in failure_lines(failed) if "cannot be checked" in l)
    assert 'waive it with deadline="none" or wcet="skip"' in line, line
    assert not (root / "build/app.checks/xor/gate.json").exists() and not (root / "build/app.hex").exists()
    write_sconstruct(root, model='deadline="none"')
    assert build(root).returncode == 0
    write_sconstruct(root, model='deadline="5ms", wcet="skip"')
    skipped = build(root)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    report = json.loads((root / "build/app.checks/xor/report.json").read_text())
    assert report["deadline_ms"] is None and any("not checked" in w for w in report["waivers"])
    assert (root / "build/app.hex").is_file() and (root / "build/app.checks/xor/gate.json").is_file()


# the hint in the repository SConstruct's syntax, and a changed option regenerating, on a copy of a
# built tree: test_scons_e2e.py::test_the_repository_sconstruct_hint_speaks_its_options


# --------------------------------------------------------------------------- point 2: nothing "passed" outlives a failure


@pytest.mark.skipif(not have("avr-gcc", "avr-objcopy", "simavr"), reason="avr-gcc and simavr needed")
def test_a_failed_gate_leaves_no_gate_and_no_release_image(tmp_path):
    root = user_project(tmp_path, model='deadline="5ms"')
    out = root / "build"
    ok = build(root, "board=avr")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr
    assert {"app.elf", "app.hex", "app.bin"} <= set(listing(out)) and "gate.json" in listing(out / "app.checks/xor")
    write_sconstruct(root, model='deadline="1us"')
    for _ in range(2):   # the failing build, then its rerun
        failed = build(root, "board=avr")
        assert failed.returncode != 0
        line = next(l for l in failure_lines(failed) if "> deadline 1 us" in l)
        assert "no release image (app.hex, app.bin" in line, line
        assert "gate.json" not in listing(out / "app.checks/xor")
        assert "app.hex" not in listing(out) and "app.bin" not in listing(out)
        assert "app.elf" in listing(out)      # the analyses need it; it is not a release
    write_sconstruct(root, model='deadline="5ms"')
    fixed = build(root, "board=avr")
    assert fixed.returncode == 0, fixed.stderr
    assert {"app.hex", "app.bin"} <= set(listing(out)) and "gate.json" in listing(out / "app.checks/xor")
    # the images come after every gate
    ran = [l.split()[-1] for l in fixed.stdout.splitlines() if l.startswith("[nnbuild]")]
    assert ran.index("build/app.checks/xor/gate.json") < min(ran.index("build/app.hex"), ran.index("build/app.bin"))


# --------------------------------------------------------------------------- point 3: boards by path, the project's boards/


def write_board(path, name, **changes):
    board = json.loads((REPO / "toolchains" / "host.json").read_text())
    board.update(name=name, **changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(board, indent=1))


def test_boards_by_path_and_from_the_project_boards_folder(tmp_path, run_cli, monkeypatch):
    """A board named from the project's boards/ folder builds the model's library with it (a step
    target: the whole chain is the board given by path's); `nnbuild check` finds both too."""
    root = user_project(tmp_path)
    write_board(root / "boards" / "host3.json", "host3")
    write_board(root / "myboards" / "host2.json", "host2")
    named = build(root, "board=host3", "build/host3/xor/libxor.a")   # found in boards/ without any variable
    assert named.returncode == 0, named.stdout[-2000:] + named.stderr
    assert (root / "build/host3/xor/libxor.a").is_file()
    by_path = build(root, "board=myboards/host2.json")
    assert by_path.returncode == 0, by_path.stdout[-2000:] + by_path.stderr
    report = json.loads((root / "build/app.checks/xor/report.json").read_text())
    assert report["target"] == "host2" and (root / "build/app.hex").is_file()
    # the steps name the board by a relative path: no checkout path in their signatures
    explained = build(root, "board=myboards/host2.json", "-n", "--debug=presub", "build/app.checks/xor/report.json")
    assert str(root) not in "".join(l for l in explained.stdout.splitlines() if "-m nnbuild" in l)
    # editing the board file reruns what depends on it
    write_board(root / "myboards" / "host2.json", "host2", description="my host, edited")
    again = build(root, "board=myboards/host2.json", "build/app.checks/xor/report.json")
    assert again.returncode == 0 and "app.checks/xor/report.json" in again.stdout, again.stdout
    import numpy as np
    np.savez(root / "d.npz", x=np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32))
    for name in [k for k in os.environ if k.startswith("NNBUILD_")]:   # the user's shell (user_env)
        monkeypatch.delenv(name)
    for target in ("myboards/host2.json", "host3"):   # in-process: test_cli starts the real command
        check = run_cli("check", "models/xor.h5", "--data", "d.npz", "--target", target, cwd=root)
        assert check.returncode == 0, check.stderr
        assert f"xor on {target.split('/')[-1].removesuffix('.json')}: 4 inputs" in check.stdout


# --------------------------------------------------------------------------- point 4: precision=auto


GRAVITY_SCONSTRUCT = """import nnbuild.scons_tool
env = Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()], NNBOARD="host")
digits = env.NNModel("gravity_digits", "models/gravity_digits.g", precision="auto", input_range=(0.0, 1.0), count=4)
Default(env.NNFirmware("build/app", ["src/main.c"], models=[digits]))
"""


def test_precision_auto_from_nnmodel_links_the_chosen_candidate(tmp_path):
    """NNModel(precision="auto") on a Gravity program (two candidates on the host, float32 and
    float64: the cheapest real choice; CMake's PRECISION auto builds the same program and chooses the
    same, test_cmake_module.py): every candidate built, the chosen one's library linked into the
    firmware and gated. The whole precision=auto build of an MLP, every fixed-point candidate
    and a WCET ranking: test_scons_e2e.py::test_precision_auto_picks_the_fastest_qualifying_candidate."""
    example = REPO / "firmware_examples" / "gravity_digits"
    (tmp_path / "src").mkdir()
    (tmp_path / "models").mkdir()
    shutil.copy2(example / "main.c", tmp_path / "src" / "main.c")
    shutil.copy2(example / "gravity_digits.g", tmp_path / "models" / "gravity_digits.g")
    (tmp_path / "SConstruct").write_text(GRAVITY_SCONSTRUCT)
    result = build(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "precision=auto candidates for gravity_digits on host: float32, float64" in result.stdout
    model = tmp_path / "build/host/gravity_digits"
    report = json.loads((model / "report.json").read_text())
    chosen, table = report["auto"]["chosen"], {r["precision"]: r for r in report["auto"]["candidates"]}
    assert set(table) == {"float32", "float64"} and chosen == "float32" and not table[chosen]["violations"]
    assert report["precision"] == chosen and "smallest memory footprint" in report["auto"]["why"]
    assert all((model / f"candidates/{p}/report.json").is_file() for p in table)
    assert (tmp_path / "build/app").is_file() and (tmp_path / "build/app.checks/gravity_digits/gate.json").is_file()
    assert (model / "report.html").is_file()


#: a recurrent Keras model (stacked LSTM/GRU layers) and its check data: shape v2 generates recurrent
#: layers in floating point only, so precision=auto has two candidates on the host
RECURRENT = REPO / "tests" / "data" / "keras_recurrent" / "stacked"


def test_precision_auto_from_the_cli_is_cached(tmp_path, run_cli, monkeypatch):
    """`nnbuild check --precision auto` (the CLI writes an NNModel(precision="auto") build and runs
    scons on it) on a recurrent model (two candidates, float32 and float64: the cheapest real
    choice; NNModel and CMake choose the same, float32): the option and the data pass through, the
    winner is named, the build is cached, and a deadline the host cannot check is refused in the
    CLI's syntax. In-process (run_cli; scons still runs as its own process): test_cli.py starts the
    real command."""
    for name in [k for k in os.environ if k.startswith("NNBUILD_")]:   # the user's shell (user_env)
        monkeypatch.delenv(name)
    args = ("check", RECURRENT.with_suffix(".h5"), "--data", RECURRENT.with_suffix(".npz"), "--precision", "auto",
            "--build-dir", "auto")
    first = run_cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    assert "precision=auto: float32 chosen" in first.stdout
    report = json.loads((tmp_path / "auto/build/report.json").read_text())
    assert report["auto"]["chosen"] == "float32"
    assert {r["precision"] for r in report["auto"]["candidates"]} == {"float32", "float64"}
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and "[nnbuild]" not in again.stdout, again.stdout
    strict = run_cli(*args, "--deadline", "5ms", cwd=tmp_path)
    assert strict.returncode == 2
    assert "waive it with --deadline none or --wcet skip" in strict.stderr, strict.stderr
