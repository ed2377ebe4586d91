"""Shared helpers for external WCET tools: find them, run them under a timeout, ask their version.

Every failure is one NNBuildError line naming the tool, so the build never falls back to a number
that no tool produced.
"""

import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from nnbuild.errors import NNBuildError

#: seconds an analyzer may run when the board does not say (OTAWA's old gel can hang forever)
DEFAULT_TIMEOUT_S = 300
#: seconds for a `--version` probe
VERSION_TIMEOUT_S = 10
VERSION_RE = re.compile(r"\d+\.\d+")


@dataclass
class Completed:
    """What a finished tool run left: exit status and both streams as text."""

    argv: List[str]
    returncode: int
    stdout: str
    stderr: str


def cache_dir() -> Path:
    """Where `scripts/setup.sh --with-otawa` builds tools nnbuild finds without PATH changes:
    $NNBUILD_CACHE, else $XDG_CACHE_HOME/nnbuild, else ~/.cache/nnbuild."""
    if os.environ.get("NNBUILD_CACHE"):
        return Path(os.environ["NNBUILD_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nnbuild"


def cached_bin(name) -> Optional[str]:
    """The bin/ of the tool build `name` that set-up recorded as current (a complete build: its
    prefix holds the `.nnbuild-complete` mark), or None."""
    pointer = cache_dir() / f"{name}.current"
    try:
        prefix = Path(pointer.read_text().strip())
    except OSError:
        return None
    if not (prefix / ".nnbuild-complete").is_file() or not (prefix / "bin").is_dir():
        return None
    return str(prefix / "bin")


def search_path(*cached, base=None) -> str:
    """`base` (default: PATH), then the bin/ of each named cached tool build."""
    extra = [b for b in (cached_bin(name) for name in cached) if b]
    return os.pathsep.join([base if base is not None else os.environ.get("PATH", os.defpath)] + extra)


def which(tool, *, target, hint, path=None):
    """Absolute path of `tool`, or one line naming it, the target and how to get it."""
    found = shutil.which(tool, path=path)
    if not found:
        raise NNBuildError(f"'{tool}' not found on PATH for target={target}: {hint}")
    return found


def timeout_of(board, default=DEFAULT_TIMEOUT_S):
    """The board's `wcet_timeout_s`, else `default`; must be a positive number."""
    value = board.get("wcet_timeout_s") or default
    if not isinstance(value, (int, float)) or value <= 0:
        raise NNBuildError(f"wcet_timeout_s must be a positive number of seconds, not {value!r}",
                           item=board.get("name"))
    return value


def run(argv: Sequence[str], *, timeout, cwd=None, what=None) -> Completed:
    """Run `argv` in its own process group; on timeout kill the whole group and raise.

    The group kill matters: a wrapper script (or a tool that forks) leaves children holding the
    pipes, and a plain kill of the direct child would make communicate() wait for them.
    """
    argv = [str(a) for a in argv]
    label = what or os.path.basename(argv[0])
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace",
                                start_new_session=True)
    except OSError as e:
        raise NNBuildError(f"cannot start '{label}': {e.strerror or e}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise NNBuildError(f"'{label}' timed out after {timeout:g} s and was killed; no WCET taken "
                           f"(raise wcet_timeout_s in the board file if the analysis is just slow)")
    return Completed(argv, proc.returncode, out, err)


def kill_group(proc):
    """SIGKILL the process group started for `proc` and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def version(argv: Sequence[str], timeout=VERSION_TIMEOUT_S) -> Optional[str]:
    """First output line that contains a version number, or None; never fails the build.

    The exit status is ignored on purpose: some tools (old otawa-config) exit 1 after printing it.
    """
    if not shutil.which(str(argv[0])):
        return None
    try:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                              errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if VERSION_RE.search(line) and "error" not in line.lower():
            return line.strip()
    return None


def one_line(text, limit=200):
    """`text` squeezed to one line of at most `limit` characters, for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def load_flowfacts(flowfacts):
    """The generator's flow facts: the dict itself, or the path of `<model>.flowfacts.json`."""
    if isinstance(flowfacts, dict):
        return flowfacts
    path = Path(flowfacts)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise NNBuildError(f"cannot read flow facts: {e}", path=path)
