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
