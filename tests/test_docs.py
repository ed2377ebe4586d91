"""The manual keeps its promises: README.md is short and points into docs/, every page it links
exists, no prose carries a commit hash, and the README's runnable blocks (marked
`<!-- runnable: NAME -->` before a ```sh fence) run, in order, from a fresh venv holding the
nnbuild wheel, as a new user would copy and paste them."""

import re
import subprocess

import pytest

from conftest import REPO, have

README = REPO / "README.md"
DOCS = REPO / "docs"
RUNNABLE = re.compile(r"<!-- runnable: (\w[\w-]*) -->\n```sh\n(.*?)```", re.S)


def runnable_blocks(text):
    """[(name, shell text)] of the blocks marked runnable, in the order they appear."""
    return RUNNABLE.findall(text)


def manual_pages():
    return [README, REPO / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def test_the_readme_is_short_and_user_first():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings.index("## Install") < headings.index("## Developing nnbuild")
    assert [name for name, _ in runnable_blocks(text)] == ["start", "scons", "cmake", "cli"]


def test_the_readme_keeps_the_two_fresh_machine_commands_ci_runs():
    text = README.read_text()
    assert "bash scripts/setup.sh && scons target=avr model=f1tenth" in text
    test_command = "bash scripts/setup.sh --with-otawa && python3 -m pytest -q -rs"
    assert test_command in text
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/setup.sh --with-otawa" in ci and "python3 -m pytest -q" in ci


def test_every_local_link_of_the_manual_resolves():
    for page in manual_pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(REPO)}: broken link {target}"


def test_no_page_of_the_manual_carries_a_commit_hash():
    """Figures come with the command that reproduces them, never with the commit they were taken at."""
    hash_like = re.compile(r"\b(?:at|commit|on) ([0-9a-f]{7,12})\b")
    for page in manual_pages():
        found = hash_like.findall(page.read_text())
        assert not found, f"{page.relative_to(REPO)}: commit hashes {found}"


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory, nnbuild_venv):
    """The run's venv holding the nnbuild wheel built from this checkout (conftest's nnbuild_venv:
    dependencies from this interpreter's site-packages, the console scripts its dependencies would
    install; test_user_project's too) and this module's own folder for the user's files."""
    bin_dir, env = nnbuild_venv
    return dict(env), tmp_path_factory.mktemp("readme"), bin_dir.parent


@pytest.mark.e2e
@pytest.mark.skipif(not (have("avr-gcc", "avr-objcopy", "simavr", "cmake", "ninja")),
                    reason="the README's blocks build for AVR with SCons and CMake (bash scripts/setup.sh)")
def test_the_readme_blocks_run_from_the_wheel(wheel_venv):
    env, root, venv_dir = wheel_venv
    work = root / "user"
    work.mkdir()
    script = "set -euo pipefail\n" + "\n".join(body for _, body in runnable_blocks(README.read_text()))
    result = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    hello = work / "hello"
    where = subprocess.run(["python3", "-c", "import nnbuild; print(nnbuild.__file__)"], cwd=hello, env=env,
                           capture_output=True, text=True).stdout
    assert str(venv_dir) in where and str(REPO) not in where
    for built in ("build/avr/app.hex", "build/avr/app.checks/ctl/gate.json", "build-cmake/app.hex",
                  "build-cmake/app.checks/ctl/gate.json", "gen/ctl.c"):
        assert (hello / built).is_file(), built
    assert "ms of 1 ms deadline" in result.stdout
    # each analysis once per build: the SCons firmware build bounds the model over its linked image only
    scons_analyses = re.findall(r"\[nnbuild\] WCET analysis\s+(build/avr/\S+)", result.stdout)
    assert scons_analyses == ["build/avr/app.checks/ctl/wcet.json"], scons_analyses


def test_every_keyword_nnmodel_nnfirmware_and_nnexample_take_is_in_the_manual():
    """docs/using.md names every keyword the SCons pseudo-builders accept (they refuse any other)."""
    from nnbuild import scons_tool
    using = (DOCS / "using.md").read_text()
    for keywords in (scons_tool.NNMODEL_KEYWORDS, scons_tool.NNFIRMWARE_KEYWORDS, scons_tool.NNEXAMPLE_KEYWORDS):
        missing = [k for k in keywords if f"`{k}`" not in using]
        assert not missing, f"docs/using.md does not name {missing}"
