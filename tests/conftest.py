"""Shared test helpers: where the repo and ../shared are, and how to run scons on a project copy."""

import os
import shutil
import subprocess
import sys
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


def have(*tools):
    return all(shutil.which(t) for t in tools)


needs_avr = pytest.mark.skipif(not have("avr-gcc", "avr-nm", "avr-objdump"),
                               reason="avr-gcc/binutils-avr not installed (bash scripts/setup.sh)")


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
