"""nnbuild outside its checkout: the wheel holds every package, template, C source, JSON table and
board file, and the installed `nnbuild` works from any directory (issue 11)."""

import json
import os
import shutil
import subprocess
import sys
import tomllib

import pytest
import setuptools

from conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_package_of_the_source_tree_is_in_the_wheel_list():
    """The packages are listed (so toolchains/ can map to nnbuild.toolchains): a new subpackage that is
    not listed would be missing from the wheel."""
    found = set(setuptools.find_namespace_packages(str(REPO), include=["nnbuild*"]))
    assert set(SETUPTOOLS["packages"]) == found | {"nnbuild.toolchains"}
    assert SETUPTOOLS["package-dir"] == {"nnbuild.toolchains": "toolchains"}


def test_every_data_file_of_the_package_matches_the_package_data_patterns():
    patterns = SETUPTOOLS["package-data"]["*"]
    data = [p for p in (REPO / "nnbuild").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".py", ".pyc")]
    assert data and all(any(p.match(pattern) for pattern in patterns) for p in data), \
        [str(p) for p in data if not any(p.match(pattern) for pattern in patterns)]
    assert all(p.match("*.json") for p in (REPO / "toolchains").iterdir())
    assert "jsonschema>=4" in PYPROJECT["project"]["dependencies"]


@pytest.mark.e2e
def test_the_wheel_installed_in_a_fresh_venv_generates_checks_and_lists_boards(tmp_path, nnbuild_wheel):
    """The run's wheel (pip wheel of the files a user gets), a venv without the system's packages
    (dependencies from the package index), then the installed nnbuild from a directory that is not
    the checkout. The venv gets no pip of its own (ensurepip costs seconds): this interpreter's pip
    installs into it (`pip --python`), without byte-compiling every dependency up front (the
    installed modules compile as they are imported, as from any read-write site-packages)."""
    wheel = nnbuild_wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                              "--no-compile", str(wheel)], capture_output=True, text=True)
    if install.returncode != 0 and "No matching distribution" in install.stderr:
        pytest.skip(f"the package index is not reachable: {install.stderr.strip().splitlines()[-1]}")
    assert install.returncode == 0, install.stderr

    work = tmp_path / "user_project"
    work.mkdir()
    shutil.copy(REPO / "firmware_examples" / "xor" / "xor.h5", work / "xor.h5")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NNBUILD_BOARDS", "NNBUILD_TOOLCHAINS")}
    nnbuild = str(venv / "bin" / "nnbuild")

    def run(*args, **extra):
        return subprocess.run([nnbuild, *args], cwd=work, capture_output=True, text=True, env={**env, **extra})

    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import nnbuild; print(nnbuild.__file__)"], cwd=work,
                           capture_output=True, text=True, env=env).stdout
    assert str(venv) in where and str(REPO) not in where
    assert run("--version").stdout.strip() == "nnbuild 0.1.0"
    boards = run("boards")
    assert boards.returncode == 0, boards.stderr
    shipped = sorted(p.stem for p in (REPO / "toolchains").glob("*.json"))
    assert [line.split()[0] for line in boards.stdout.splitlines()[1:1 + len(shipped)]] == shipped
    assert str(venv) in boards.stdout.splitlines()[-1]  # the shipped boards come from the installed package
    generated = run("generate", "xor.h5", "-o", "probe")
    assert generated.returncode == 0, generated.stderr
    assert sorted(p.name for p in (work / "probe").iterdir()) == sorted(
        ["xor.h", "xor.c", "xor_weights.h", "xor_weights.c", "xor.flowfacts.json", "xor.trace.json"])
    import numpy as np
    np.savez(work / "xor.npz", x=np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32))
    checked = run("check", "xor.h5", "--data", "xor.npz", "--precision", "q16", "--range", "0,1")
    assert checked.returncode == 0, checked.stderr
    assert "xor on host: 4 inputs" in checked.stdout
    record = json.loads(run("check", "xor.h5", "--data", "xor.npz", "--precision", "float32", "--range", "0,1",
                            "--json").stdout)   # float32, and the JSON record
    assert record["passed"] and "xor on host: 4 inputs" in record["summary"][-1]

    mine = work / "boards"
    mine.mkdir()
    host = json.loads((REPO / "toolchains" / "host.json").read_text())
    (mine / "myhost.json").write_text(json.dumps({**host, "name": "myhost", "description": "my own host board"}))
    listed = run("boards", "--json", NNBUILD_BOARDS=str(mine))
    assert "myhost" in {b["name"] for b in json.loads(listed.stdout)}
    checked = run("check", "xor.h5", "--data", "xor.npz", "--target", "myhost", NNBUILD_BOARDS=str(mine))
    assert checked.returncode == 0, checked.stderr
    (mine / "myhost.json").write_text(json.dumps({**host, "name": "myhost", "clock_mhz": 1}))
    bad = run("check", "xor.h5", "--data", "xor.npz", "--target", "myhost", NNBUILD_BOARDS=str(mine))
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"nnbuild: error: {mine / 'myhost.json'}: unknown key 'clock_mhz' (did you mean 'clock_hz'?)")
