"""patmos-clang (T-CREST): gcc-compatible flags, plus the PML that platin needs beside the ELF.

Linking with -mserialize=<elf>.pml makes the compiler write its CFGs and loop bounds (from the
generator's NN_LOOPBOUND pragmas) for `platin wcet`.
"""

import shutil
import subprocess
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from nnbuild.compilers import gcc
from nnbuild.compilers.gcc import (clock_flags, compile_flags, libs, path_map_flags,  # noqa: F401
                                   reproducible_flags, require_tool, section_sizes, tool_version)
# the program-too-big lines: GNU ld's region words, the board's v3 flash floor (neither on patmos.json)
from nnbuild.compilers.gcc import flash_floor_failure, link_failure, script_flags  # noqa: F401
from nnbuild.errors import NNBuildError

COMPILER = "patmos-clang"
INSTALL_HINT = ("install the T-CREST toolchain (github.com/t-crest: patmos-llvm, platin, "
                "patmos-simulator; or a T-CREST release tarball) and add its bin/ to PATH")
#: seconds a patmos-clang build may take (the board's wcet_timeout_s when it sets one)
BUILD_TIMEOUT_S = 600

#: written next to the linked program by the link flags below ({output} is the program path)
SIDE_OUTPUTS = ("{output}.pml",)


def link_flags(board, opt=None):
    return [*gcc.link_flags(board, opt), "-mserialize={output}.pml"]


def pml_path(elf) -> Path:
    """Where the PML of `elf` lives: the ELF path plus `.pml`."""
    return Path(str(elf) + ".pml")


# ---------------------------------------------------------------- compile


def compile_command(board, sources: Sequence, output, *, include_dirs: Iterable = (),
                    defines: Iterable[str] = (), entry: Optional[str] = None,
                    opt: Optional[str] = None) -> List[str]:
    """`patmos-clang -O2 <cflags> -mserialize=<output>.pml [-mserialize-roots=ENTRY] ... -o output`.

    `defines` are `NAME` or `NAME=VALUE` strings (as for the gcc family).
    """
    cmd = [board.get("cc", COMPILER), *compile_flags(board, opt),
           f"-mserialize={pml_path(output)}"]
    if entry:
        cmd.append(f"-mserialize-roots={entry}")
    cmd += [f"-I{d}" for d in include_dirs] + [f"-D{d}" for d in defines]
    cmd += ["-o", str(output), *map(str, sources), *board.get("ldflags", [])]
    return cmd + [f"-l{lib}" for lib in board.get("libs", [])]


def build_executable(board, sources, output, hint="", **options) -> Path:
    """Build `output` and its PML with patmos-clang (same call shape as the gcc family's; `hint`, the
    shape's advice for a program too big, is not used: patmos-clang's own words are the message)."""
    cc = shutil.which(board.get("cc", COMPILER))
    if not cc:
        raise NNBuildError(f"'{board.get('cc', COMPILER)}' not found on PATH for target={board.get('name')}: "
                           f"{INSTALL_HINT}")
    cmd = compile_command(board, sources, output, **options)
    timeout = board.get("wcet_timeout_s") or BUILD_TIMEOUT_S
    try:
        done = subprocess.run([cc, *cmd[1:]], capture_output=True, text=True, errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired:
        raise NNBuildError(f"{Path(cc).name} timed out after {timeout:g} s", path=sources[0]) from None
    if done.returncode != 0:
        first = next((l for l in done.stderr.splitlines() if "error" in l), done.stderr)
        raise NNBuildError(f"{Path(cc).name} failed: {' '.join(first.split())[:200]}", path=sources[0])
    return Path(output)
