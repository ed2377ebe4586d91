"""The gcc family (host gcc, avr-gcc, arm-none-eabi-gcc): flags from board data, builds, versions."""

import shutil
import subprocess
from pathlib import Path

from nnbuild.errors import NNBuildError


def require_tool(board, key="cc", path=None):
    """The absolute path of the board's tool `key`, or one line naming it and how to install it."""
    tool = board[key]
    found = shutil.which(tool, path=path)
    if not found:
        hint = board.get("install_hint", "")
        raise NNBuildError(f"'{tool}' not found on PATH for target={board['name']}"
                           + (f"; install it with: {hint}" if hint else ""))
    return found


def compile_flags(board, opt=None):
    """C flags for this board; `opt` overrides the board's default optimisation level."""
    return [opt or board.get("opt", "-O2"), *board.get("cflags", [])]


def link_flags(board, opt=None):
    return [opt or board.get("opt", "-O2"), *board.get("ldflags", [])]


def libs(board):
    return list(board.get("libs", []))


def tool_version(executable):
    """First line of `tool --version`, for reports (None when the tool cannot say)."""
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0] if lines else None


def build_executable(board, sources, output, *, include_dirs=(), defines=(), opt=None):
    """Compile and link `sources` into `output` in one gcc call (used outside SCons, by the CLI)."""
    cc = require_tool(board)
    cmd = [cc, *compile_flags(board, opt), *(f"-I{d}" for d in include_dirs),
           *(f"-D{d}" for d in defines), *map(str, sources), "-o", str(output),
           *board.get("ldflags", []), *(f"-l{lib}" for lib in libs(board))]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        first = next((l for l in result.stderr.splitlines() if "error" in l), result.stderr.strip()[:300])
        raise NNBuildError(f"{board['cc']} failed: {first}", path=sources[0])
    return Path(output)


def section_sizes(board, elf):
    """text/data/bss bytes of an ELF, from the board's `size` tool (Berkeley format)."""
    size = require_tool(board, "size")
    out = subprocess.run([size, "-B", str(elf)], capture_output=True, text=True, check=True).stdout
    text, data, bss = (int(v) for v in out.strip().splitlines()[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}

