"""The gcc family (host gcc, avr-gcc, arm-none-eabi-gcc): flags from board data, builds, versions."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from nnbuild.compilers import elf as elf_file
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


#: flags every build gets for byte-identical objects: gcc before 8 (avr-gcc 5.4) writes its whole
#: command line, -fdebug-prefix-map's absolute path included, into DWARF's DW_AT_producer; the
#: flags are in report.json instead
REPRODUCIBLE_FLAGS = ("-gno-record-gcc-switches",)


def compile_flags(board, opt=None):
    """C flags for this board; `opt` overrides the board's default optimisation level. The clock
    define (F_CPU) comes from the board's clock_hz, never from its cflags (one source of the clock)."""
    return [opt or board.get("opt", "-O2"), *board.get("cflags", []), *clock_flags(board), *REPRODUCIBLE_FLAGS]


def clock_flags(board):
    """The clock define derived from the board's clock_hz (avr: -DF_CPU=20000000UL) when the board
    names a clock_define; [] otherwise."""
    name, clock = board.get("clock_define"), board.get("clock_hz")
    return [f"-D{name}={clock}UL"] if name and clock else []


#: nnbuild's own C sources (the check programs' main, the simulator harness), as debug info names them
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def path_map_flags(*roots):
    """Flags that write each of `roots` (the build's root directory, the directory a program is
    built in; the most specific last) as '.' and nnbuild's installed package, when outside them,
    as 'nnbuild' into debug info: DWARF's comp_dir and file names then read the same in every
    checkout and on every machine, and so do the objects, the linked ELF (its merged .debug_str)
    and the .hex. -fdebug-prefix-map, not -ffile-prefix-map: avr-gcc 5.4 predates the latter, and
    nnbuild's C uses no __FILE__ (the only other path it would map)."""
    roots = [Path(r).resolve() for r in roots]
    inside = any(root == PACKAGE_DIR or root in PACKAGE_DIR.parents for root in roots)
    maps = ([] if inside else [(PACKAGE_DIR, "nnbuild")]) + [(root, ".") for root in roots]
    return [f"-fdebug-prefix-map={d}={name}" for d, name in maps]


def reproducible_flags(directories):
    """REPRODUCIBLE_FLAGS and a debug path map writing each of `directories` (as given: a build
    tool's variable such as ${CMAKE_SOURCE_DIR} too; the most specific last) as '.': for compiles a
    build tool runs with its own flags (CMake's library of the generated code, the user's sources)."""
    return [*REPRODUCIBLE_FLAGS, *(f"-fdebug-prefix-map={d}=." for d in directories)]


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


def build_executable(board, sources, output, *, include_dirs=(), defines=(), opt=None, hint="", ldscript=None):
    """Compile and link `sources` into `output` in one gcc call (used outside SCons, by the CLI);
    `ldscript`: the linker script of the machine a runner runs it on."""
    cc = require_tool(board)
    cmd = [cc, *compile_flags(board, opt), *path_map_flags(Path.cwd(), Path(output).parent),
           *(f"-I{d}" for d in include_dirs),
           *(f"-D{d}" for d in defines), *map(str, sources), "-o", str(output),
           *board.get("ldflags", []), *script_flags(ldscript), *(f"-l{lib}" for lib in libs(board))]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        too_big = link_failure(board, result.stderr, output=output, model=Path(sources[0]).stem, hint=hint,
                               relink=lambda extra: subprocess.run(cmd + extra, capture_output=True).returncode)
        if too_big:
            raise NNBuildError(too_big)
        first = next((l for l in result.stderr.splitlines() if "error" in l), result.stderr.strip()[:300])
        raise NNBuildError(f"{board['cc']} failed: {first}", path=sources[0])
    return Path(output)


def script_flags(ldscript):
    """The link flags that make `ldscript` (or none) the program's linker script."""
    return [f"-T{ldscript}"] if ldscript else []


def section_sizes(board, elf):
    """text/data/bss bytes of an ELF as the board's `size -B` counts them (read with pyelftools)."""
    return elf_file.section_sizes(elf)




#: GNU ld's words when a section outgrows a memory region of the linker script (older binutils, such
#: as Debian's avr binutils 2.26, say only "will not fit"; newer ones add "overflowed by N bytes")
REGION_OVERFLOW = re.compile(r"will not fit in region `(\w+)'|region `(\w+)' overflowed by \d+ bytes")
#: the board memory a linker region stands for: (its word, the board key, the ELF sections it holds)
REGION_MEMORY = {"text": ("flash", "flash_bytes", ("text", "data")),
                 "data": ("RAM", "ram_bytes", ("data", "bss"))}


def link_failure(board, stderr, *, output, model, relink, hint=""):
    """One line for a link that failed because the program outgrew a memory region, naming the output,
    the model, the bytes it needs (measured by `relink(extra_args)`: the same link again with
    --noinhibit-exec into a scratch file) and the board's; None for any other failure (the linker's
    own words are then the message)."""
    found = REGION_OVERFLOW.search(stderr or "")
    if not found:
        return None
    region = found.group(1) or found.group(2)
    memory, key, sections = REGION_MEMORY.get(region, (f"'{region}' region", None, ()))
    needed = needed_bytes(board, sections, relink) if sections else None
    chip = board.get(key) if key else None
    needs = f"it needs {needed:,} bytes" if needed else "it does not fit the linker's region"
    return (f"{output}: {model} does not fit the {chip_name(board)}'s {memory}: {needs}"
            + (f", the board has {chip:,}" if chip else "") + (f" ({hint})" if hint else ""))


def chip_name(board):
    return board.get("description", board["name"]).split(" (")[0].split(",")[0]


def flash_floor_failure(board, *, output, model, terms, hint=""):
    """link_failure's line before any compile, for unrolled code (shape v3) whose `terms` distinct
    terms need more flash than the board has at its measured lower bound of bytes per term
    (`v3_term_flash_bytes`); None when the board gives no bound or the terms may fit."""
    per_term, flash = board.get("v3_term_flash_bytes"), board.get("flash_bytes")
    if not per_term or not flash or terms * per_term <= flash:
        return None
    return (f"{output}: {model} does not fit the {chip_name(board)}'s flash: it needs at least "
            f"{terms * per_term:,} bytes ({terms:,} unrolled terms of at least {per_term} bytes each), "
            f"the board has {flash:,}" + (f" ({hint})" if hint else ""))


def needed_bytes(board, sections, relink):
    """Bytes of `sections` in the image the failed link would have made (None if it cannot be made)."""
    with tempfile.TemporaryDirectory() as scratch:
        probe = Path(scratch) / "overflow.elf"
        if relink(["-Wl,--noinhibit-exec", "-o", str(probe)]) != 0 or not probe.exists():
            return None
        sizes = section_sizes(board, probe)
    return sum(sizes[s] for s in sections)
