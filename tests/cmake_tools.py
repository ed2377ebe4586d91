"""The cmake and ninja binaries the CMake tests run, resolved once per test process.

`cmake` and `ninja` on PATH are often launchers: pyenv's shims (a bash script running `pyenv
exec`) and pip's cmake package (a Python script exec'ing its binary) cost about 0.25 s of CPU
per call before CMake starts. The tests run the binaries those launchers end in: the same CMake
and Ninja, as CMake itself runs them inside a build (CMAKE_COMMAND is the real binary)."""

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _is_binary(path):
    with open(path, "rb") as f:
        return f.read(2) != b"#!"


@functools.lru_cache(maxsize=None)
def cmake():
    """CMake's own executable (its CMAKE_COMMAND), or `cmake` when none is found."""
    found = shutil.which("cmake")
    if found is None or _is_binary(found):
        return found or "cmake"
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "where.cmake"
        script.write_text('message("${CMAKE_COMMAND}")\n')
        said = subprocess.run([found, "-P", str(script)], capture_output=True, text=True)
    path = said.stderr.strip()
    return path if said.returncode == 0 and os.path.isfile(path) else found


@functools.lru_cache(maxsize=None)
def ninja():
    """The ninja binary: PATH's when it is one, else the one beside this Python (where pip and
    pyenv put it), else `ninja`."""
    found = shutil.which("ninja")
    if found and _is_binary(found):
        return found
    beside = Path(sys.executable).parent / "ninja"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) and _is_binary(beside) else found or "ninja"
