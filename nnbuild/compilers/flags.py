"""What a board file may ask of its compiler: flags from an allow-list, derived from the shipped
boards (toolchains/*.json) and widened to their families (-m*, -O*, -f*, -W*, -D*, -g*, -std=, ...).

Board files are data, not code. A flag that makes the compiler driver run another program or load
code (-wrapper, -B, -fplugin, -specs= of an unknown file, -Xlinker, -Wa,/-Wp, @file), read files
outside the package (-I elsewhere, -include, -T, -L, --sysroot) or write files of its own (-save-temps,
-MF, -Map) is refused when the board loads, in one line naming the file, the key and the flag.
"""

import re
from pathlib import Path

#: spec files a board may name with --specs= (newlib/picolibc's, looked up in the toolchain's own
#: directories only: the name has no '/')
KNOWN_SPECS = frozenset(f"{n}.specs" for n in (
    "nano", "nosys", "rdimon", "rdimon-v2m", "rdpmon", "redboot", "pid", "linux", "sim", "picolibc",
    "picolibcpp", "semihost", "aprofile-ve", "aprofile-validation", "aprofile-ve-v2m", "iq80310"))
#: -f options that load code or choose another program
_REFUSED_F = re.compile(r"-f(plugin|use-ld|profile|auto-profile|dump|record-gcc|debug-prefix|stack-usage|"
                        r"callgraph-info|opt-info|save-optimization|lto-|ltrans|diagnostics-urls|dump-)")
#: -Wl, suboptions a board may pass the linker (section placement and region sizes)
_LINKER = re.compile(r"-Wl,(--section-start=[.A-Za-z0-9_]+=0x[0-9A-Fa-f]+|--defsym=[A-Za-z_][A-Za-z0-9_]*="
                     r"(0x[0-9A-Fa-f]+|[0-9]+)|--gc-sections|--relax|--no-relax|--print-memory-usage|"
                     r"--no-warn-rwx-segments|--sort-section=(name|alignment))")
_ALLOWED = (
    re.compile(r"-m[a-z0-9][A-Za-z0-9_.=+-]*"),                 # the target: -mmcu=, -mcpu=, -mthumb, -mfpu=
    re.compile(r"-O[0-3sgz]?|-Ofast"),
    re.compile(r"-f(no-)?[a-z0-9][a-z0-9_.=+-]*"),                # code generation (less _REFUSED_F)
    re.compile(r"-W(no-)?[a-z0-9][a-z0-9_=+-]*"),                  # warnings (-Wl, -Wa, -Wp have a comma)
    _LINKER,
    re.compile(r"-D[A-Za-z_][A-Za-z0-9_]*(=[A-Za-z0-9_.+-]*)?"),  # plain macro values only
    re.compile(r"-U[A-Za-z_][A-Za-z0-9_]*"),
    re.compile(r"-g(gdb|dwarf(-[2-5])?|[0-3]|no-[a-z-]+|column-info|strict-dwarf)?"),
    re.compile(r"-std=(c|gnu|iso9899:)(89|90|99|9x|11|1x|17|18|2x|23|1990|199409|1999|2011|2017|2018)"),
    re.compile(r"-pedantic(-errors)?|-ansi|-w|-static|-nostartfiles|-nostdlib|-nodefaultlibs|-nolibc|"
               r"-ffreestanding|-pipe"),
    re.compile(r"--?specs=(?P<spec>[A-Za-z0-9_.-]+)"),
)
#: why some flags people reach for are refused (the rest: "not in the allow-list")
_WHY = (("-wrapper", "runs a program around each compiler pass"), ("-B", "takes compiler programs from a folder"),
        ("-fplugin", "loads code into the compiler"), ("@", "reads more options from a file"),
        ("-specs", "names a spec file, which can run programs"), ("--specs", "names a spec file, which can run programs"),
        ("-X", "passes options past this check"), ("-Wa,", "passes options past this check"),
        ("-Wp,", "passes options past this check"), ("-Wl,", "passes options past this check"),
        ("-I", "reads headers from outside nnbuild"), ("-include", "reads a file into every compilation"),
        ("-T", "reads a linker script"), ("-L", "reads libraries from a folder"),
        ("--sysroot", "reads headers and libraries from a folder"), ("-save-temps", "writes files of its own"))
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def problem(flag):
    """Why a board flag is refused, or None when it is allowed."""
    if not isinstance(flag, str) or not flag.startswith("-") or any(c.isspace() for c in flag):
        reason = next((why for prefix, why in _WHY if isinstance(flag, str) and flag.startswith(prefix)), None)
        return reason or "a flag is one word starting with '-'"
    if flag.startswith("-I") and _inside_package(flag[2:]):
        return None
    for pattern in _ALLOWED:
        match = pattern.fullmatch(flag)
        if match and not (flag.startswith("-f") and _REFUSED_F.match(flag)):
            if "spec" in pattern.groupindex and match.group("spec") not in KNOWN_SPECS:
                return f"names a spec file, which can run programs (known: {', '.join(sorted(KNOWN_SPECS))})"
            return None
    return next((why for prefix, why in _WHY if flag.startswith(prefix)), "not in the allow-list of board flags")


def _inside_package(path):
    try:
        return Path(path).is_absolute() and Path(path).resolve().is_relative_to(PACKAGE_DIR)
    except (OSError, ValueError):
        return False


#: the program keys of a board: binutils and compilers by their usual names (a prefix such as
#: avr-, arm-none-eabi-, patmos-llvm-; a version suffix), in any folder
TOOL_KEYS = ("cc", "size", "nm", "objdump", "objcopy")
_TOOL = re.compile(r"([A-Za-z0-9][A-Za-z0-9._+]*-)*(gcc|clang|cc|size|nm|objdump|objcopy)(-[0-9][0-9.]*)?")


def tool_problem(value):
    """Why a board's program key is refused (a program that is not a compiler or binutil), or None."""
    if not isinstance(value, str) or any(c.isspace() or ord(c) < 32 for c in value):
        return "a program name or path without blanks"
    if not _TOOL.fullmatch(Path(value).name):
        return "not a compiler or binutils program name (gcc, clang, cc, size, nm, objdump, objcopy, with a prefix)"
    return None


#: a library name of the `libs` key (-l NAME): no path, no option
_LIBRARY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_+.-]*")


def check_board(board):
    """The first refused value of a board's programs, cflags, ldflags, opt or libs as (key, value,
    why), or None."""
    for key in TOOL_KEYS:
        if board.get(key) is not None and tool_problem(board[key]):
            return key, board[key], tool_problem(board[key])
    for key in ("cflags", "ldflags"):
        for flag in board.get(key) or []:
            why = problem(flag)
            if why:
                return key, flag, why
    if board.get("opt") is not None and problem(board["opt"]):
        return "opt", board["opt"], problem(board["opt"])
    for lib in board.get("libs") or []:
        if not (isinstance(lib, str) and _LIBRARY.fullmatch(lib)):
            return "libs", lib, "a library is a name (linked as -lNAME), not a path or an option"
    return None
