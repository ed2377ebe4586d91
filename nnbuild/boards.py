"""Boards are data: one JSON file per board in toolchains/ (mcu, clock, memories, flags, tools),
read into a Board that owns its compiler family, its runner and its WCET and stack analyzers.

A Board is a dict of its file (so `board["cc"]` reads the data) plus the objects behind the names
in it: `board.compiler`, `board.runner`, `board.analyzer`, `board.stack_analyzer`. Those names are
looked up in their registries (nnbuild.compilers.FAMILIES, nnbuild.runners.RUNNERS,
nnbuild.wcet.ANALYZERS / STACK_ANALYZERS); nothing else in nnbuild branches on them.
"""

import json
import os
from pathlib import Path

from nnbuild.errors import NNBuildError

REPO_TOOLCHAINS = Path(__file__).resolve().parent.parent / "toolchains"

#: every key a board file may hold, and what it means (a misspelled key is an error)
KEYS = {
    "name": "board name (default: the file name)",
    "description": "one line for reports",
    "compiler": "compiler family (nnbuild.compilers.FAMILIES), default gcc",
    "cc": "C compiler executable", "size": "size tool", "nm": "nm tool", "objdump": "objdump tool",
    "objcopy": "objcopy tool",
    "mcu": "chip name (simavr needs it)",
    "cflags": "compile flags", "ldflags": "link flags", "libs": "libraries", "opt": "default optimisation flag",
    "clock_hz": "core clock (cycles -> time)", "flash_bytes": "flash capacity", "ram_bytes": "RAM capacity",
    "double_bits": "width of C double (float64 needs 64)",
    "weights_storage": "const | avr-progmem-far",
    "simulator": "runner (nnbuild.runners.RUNNERS) or null",
    "timing_model": "informational: the timing model the analyzer uses",
    "wcet_tool": "WCET analyzer (nnbuild.wcet.ANALYZERS) or null",
    "stack_tool": "stack analyzer (nnbuild.wcet.STACK_ANALYZERS) or null",
    "install_hint": "how to install the toolchain (said when a tool is missing)",
    "deadline_ms": "default deadline of the board (ms) or null",
    "otawa_script": "owcet -s value", "otawa_params": "owcet -p ID=VAL list",
    "otawa_strip_debug": "strip DWARF before owcet", "wcet_timeout_s": "seconds before the WCET tool is killed",
    "platin_config": "platin architecture configuration", "platin_trace": "platin trace options",
    "notes": "free text per key",
}
REQUIRED = ("cc", "cflags")


def toolchains_dir() -> Path:
    """Where board files live: $NNBUILD_TOOLCHAINS, else the checkout's toolchains/."""
    return Path(os.environ.get("NNBUILD_TOOLCHAINS", REPO_TOOLCHAINS))


def available_boards():
    """Sorted board names, discovered from the files (a new board is one new file)."""
    return sorted(p.stem for p in toolchains_dir().glob("*.json"))


def board_path(name) -> Path:
    """The file of board `name`, or `name` itself when it is a path to a board file."""
    if str(name).endswith(".json"):
        return Path(name)
    return toolchains_dir() / f"{name}.json"


class Board(dict):
    """One board's data, and the compiler, runner and analyzers it names."""

    def __init__(self, data, path=None):
        super().__init__(data)
        self.path = Path(path) if path else None

    @property
    def name(self):
        return self["name"]

    @property
    def compiler(self):
        """The compiler family module (nnbuild.compilers)."""
        from nnbuild import compilers
        return compilers.family(self)

    @property
    def runner(self):
        """The runner module (nnbuild.runners) that executes check programs, or None."""
        from nnbuild import runners
        return runners.runner_for(self)

    @property
    def analyzer(self):
        """The WCET analyzer module (nnbuild.wcet), or None when the board has no timing model."""
        from nnbuild import wcet
        return wcet.analyzer_for(self)

    @property
    def stack_analyzer(self):
        from nnbuild import wcet
        return wcet.stack_analyzer_for(self)

    @property
    def program_suffix(self):
        """'.elf' for a cross-built program, '' for one the host runs directly."""
        runner = self.runner
        return getattr(runner, "PROGRAM_SUFFIX", ".elf") if runner else ".elf"

    def run_label(self):
        """The name of this board's target run in reports (the runner's label: the simulator, or the
        board's own name for the host)."""
        runner = self.runner
        return runner.label(self) if runner else None

    def check(self):
        """Every problem of the data, one line naming the file and the key."""
        where = self.path or self.get("name")
        unknown = sorted(set(self) - set(KEYS))
        if unknown:
            raise NNBuildError(f"unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})", path=where)
        missing = [k for k in REQUIRED if k not in self]
        if missing:
            raise NNBuildError(f"missing key(s) {', '.join(missing)}", path=where)
        for key in ("clock_hz", "flash_bytes", "ram_bytes", "double_bits"):
            value = self.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise NNBuildError(f"'{key}' must be a positive integer or null, not {value!r}", path=where)
        for key in ("cflags", "ldflags", "libs"):
            if not isinstance(self.get(key, []), list) or not all(isinstance(v, str) for v in self.get(key, [])):
                raise NNBuildError(f"'{key}' must be a list of strings", path=where)
        try:
            self.compiler
            runner, analyzer, stack = self.runner, self.analyzer, self.stack_analyzer
        except NNBuildError as error:
            raise NNBuildError(str(error), path=where) from None
        for module, what in ((runner, "simulator"), (analyzer, "wcet_tool"), (stack, "stack_tool")):
            needs = [k for k in getattr(module, "BOARD_NEEDS", ()) if self.get(k) in (None, "")]
            if needs:
                raise NNBuildError(f"{what} '{self[what]}' needs key(s) {', '.join(needs)}", path=where)
        return self


def load_board(name) -> Board:
    """The board by name (toolchains/NAME.json) or by the path of its file, checked; an unknown
    name lists the known ones."""
    if isinstance(name, Board):
        return name
    path = board_path(name)
    if not path.is_file():
        if str(name).endswith(".json"):
            raise NNBuildError("board file not found", path=path)
        raise NNBuildError(f"unknown target '{name}' (boards: {', '.join(available_boards())})",
                           path=toolchains_dir())
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as error:
        raise NNBuildError(f"cannot read board file ({error})", path=path) from None
    if not isinstance(data, dict):
        raise NNBuildError("board file is not a JSON object", path=path)
    data.setdefault("name", path.stem)
    return Board(data, path).check()


def clock_hz(board):
    return board.get("clock_hz")
