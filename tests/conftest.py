"""Shared test helpers: where the repo and ../shared are, and how to run scons on a project copy."""

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
PROJECT_PARTS = ("SConstruct", "site_scons", "nnbuild", "toolchains", "firmware_examples")


def shared_file(*parts):
    """A file of ../shared (third-party data stays there); skip when this checkout has none."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not present (../shared is not beside this checkout)")
    return path


#: the slow tier: tests whose code path a faster test of the default run also covers (named in the
#: reason), skipped visibly unless NNBUILD_SLOW_TESTS=1, to keep the whole suite in its 15 minutes
SLOW_TIER = os.environ.get("NNBUILD_SLOW_TESTS") == "1"


def slow(covered_by):
    """Mark a test (or a pytest.param) for the slow tier; `covered_by` says what covers it by default."""
    return pytest.mark.skipif(not SLOW_TIER, reason=f"slow tier (NNBUILD_SLOW_TESTS=1): {covered_by}")


def have(*tools):
    return all(shutil.which(t) for t in tools)


needs_avr = pytest.mark.skipif(not have("avr-gcc", "avr-nm", "avr-objdump"),
                               reason="avr-gcc/binutils-avr not installed (bash scripts/setup.sh)")


def _otawa_missing():
    from nnbuild.wcet import otawa
    return otawa.locate() is None


def needs_otawa(test):
    """A test that runs OTAWA's owcet: skipped with a reason where it is not built, and marked
    `otawa` so that the run's last lines count the OTAWA tests that ran (CI's log shows it)."""
    skip = pytest.mark.skipif(_otawa_missing(),
                              reason="OTAWA owcet neither on PATH nor built by `bash scripts/setup.sh --with-otawa`")
    return pytest.mark.otawa(skip(test))


def pytest_terminal_summary(terminalreporter):
    """One line: how many tests marked `otawa` passed, failed or were skipped, and which owcet ran."""
    outcomes = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "otawa" in getattr(report, "keywords", {}):
                outcomes.setdefault(outcome, set()).add(report.nodeid)
    if outcomes:
        from nnbuild.wcet import otawa
        counts = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in outcomes.items())
        terminalreporter.write_line(f"OTAWA tests: {counts} (owcet: {otawa.locate() or 'not built'})")


def copy_project(dest):
    """A private copy of the project so a test can edit models and build without touching the repo."""
    dest = Path(dest)
    for part in PROJECT_PARTS:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__", "build"))
        else:
            shutil.copy2(src, dest / part)
    return dest


def scons(project, *args, env=None):
    """Run scons in `project` with --debug=explain; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "SCons", "-Q", "--debug=explain", *args],
                          cwd=project, capture_output=True, text=True, env=env or os.environ.copy())


#: the warnings a plain `python` prints (its default filters), so in-process runs see what a shell would
_SILENT_BY_DEFAULT = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@pytest.fixture
def run_cli(capfd, monkeypatch):
    """`python -m nnbuild ARGS` in this process (no interpreter start, imports done once): a
    CompletedProcess with the exit status and the fd-level stdout/stderr (a compiler's output
    counts), Python warnings appended to stderr as the interpreter would print them. The real
    command in its own process stays tested by test_cli's `nnbuild(...)` tests."""
    from nnbuild import cli

    def run(*args, cwd=REPO):
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            for category in _SILENT_BY_DEFAULT:
                warnings.simplefilter("ignore", category)
            try:
                status = cli.main([str(a) for a in args])
            except SystemExit as exit_:  # argparse: --help, --version, a refused option
                status = exit_.code
                if isinstance(status, str):
                    print(status, file=sys.stderr)
                    status = 1
        out, err = capfd.readouterr()
        err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
        return subprocess.CompletedProcess(["nnbuild", *map(str, args)], status or 0, out, err)
    return run
