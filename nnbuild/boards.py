"""Boards are data: one JSON file per board (mcu, clock, memories, flags, tools), validated against
nnbuild/board.schema.json and read into a Board that owns its compiler family, its runner and its
WCET and stack analyzers. The shipped boards are toolchains/*.json (in the wheel: nnbuild/toolchains);
$NNBUILD_BOARDS adds directories of the user's own, which override shipped boards of the same name,
and a `boards/` folder at the project's root (PlatformIO's convention: the current directory, which
is the SConstruct's directory under SCons) comes before both, found without any variable. A board
may also be given by the path of its file.

A Board is a dict of its file (so `board["cc"]` reads the data) plus the objects behind the names
in it: `board.compiler`, `board.runner`, `board.analyzer`, `board.stack_analyzer`. Those names are
looked up in their registries (nnbuild.compilers.FAMILIES, nnbuild.runners.RUNNERS,
nnbuild.wcet.ANALYZERS / STACK_ANALYZERS); nothing else in nnbuild branches on them.
"""

import difflib
import functools
import json
import os
from pathlib import Path

from nnbuild import files, names
from nnbuild.errors import NNBuildError

PACKAGE_DIR = Path(__file__).resolve().parent
#: the JSON Schema every board file is validated against (shipped in the package)
SCHEMA_FILE = PACKAGE_DIR / "board.schema.json"
#: the board files of an installed nnbuild (the wheel maps toolchains/ to nnbuild/toolchains)
PACKAGE_TOOLCHAINS = PACKAGE_DIR / "toolchains"
#: the board files of a checkout (the repository layout)
REPO_TOOLCHAINS = PACKAGE_DIR.parent / "toolchains"
#: environment variables naming directories of the user's own board files, which add boards and
#: override the shipped ones of the same name (earlier wins; each may hold several directories
#: separated by os.pathsep). NNBUILD_TOOLCHAINS is the old name of NNBUILD_BOARDS.
ENV_VARS = ("NNBUILD_BOARDS", "NNBUILD_TOOLCHAINS")
#: a board name as given to target=/--target/--board (anything else must be a path to a .json file)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def schema():
    """The board file schema (nnbuild/board.schema.json) as a dict."""
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        return json.load(f)


#: every key a board file may hold, and what it means (from the schema: one home)
KEYS = {key: spec.get("description", "") for key, spec in schema()["properties"].items()}
REQUIRED = tuple(schema()["required"])


def builtin_dir() -> Path:
    """The shipped boards: inside the installed package, else the checkout's toolchains/."""
    return PACKAGE_TOOLCHAINS if any(PACKAGE_TOOLCHAINS.glob("*.json")) else REPO_TOOLCHAINS


def user_dirs():
    """The directories of $NNBUILD_BOARDS (then $NNBUILD_TOOLCHAINS), absolute; one that does not
    exist is an error naming the variable."""
    found = []
    for var in ENV_VARS:
        for entry in (os.environ.get(var) or "").split(os.pathsep):
            if not entry:
                continue
            path = Path(entry).expanduser().resolve()
            if not path.is_dir():
                raise NNBuildError(f"{var}: board directory '{entry}' not found")
            if path not in found:
                found.append(path)
    return found


#: the folder of a project's own boards, at the project's root (found without any variable)
PROJECT_BOARDS = "boards"


def project_dirs(project_dir=None):
    """The project's own board folder (`boards/` in `project_dir`, default the current directory:
    the SConstruct's directory under SCons, where the CLI runs for the CLI), when it exists."""
    folder = Path(project_dir or os.getcwd()) / PROJECT_BOARDS
    return [folder.resolve()] if folder.is_dir() and any(folder.glob("*.json")) else []


def board_dirs(project_dir=None):
    """Where board names are looked up, first match wins: the project's boards/ folder, the user's
    directories ($NNBUILD_BOARDS), then the shipped."""
    found = project_dirs(project_dir)
    return found + [d for d in user_dirs() if d not in found] + [builtin_dir()]


def toolchains_dir() -> Path:
    """The directory of the shipped board files (kept for callers of the old name)."""
    return builtin_dir()


def environment():
    """The board variables to pass to step subprocesses (SCons actions run with env['ENV'], not the
    user's environment): {name: absolute directories}; empty when none is set."""
    dirs = {var: [str(d) for d in (Path(e).expanduser().resolve()
                                   for e in (os.environ.get(var) or "").split(os.pathsep) if e)]
            for var in ENV_VARS}
    return {var: os.pathsep.join(paths) for var, paths in dirs.items() if paths}


def available_boards(project_dir=None):
    """Sorted board names, discovered from the files (a new board is one new file)."""
    return sorted({p.stem for d in board_dirs(project_dir) for p in d.glob("*.json")})


def board_path(name, project_dir=None) -> Path:
    """The file of board `name` (the first board directory holding NAME.json), or `name` itself when
    it is a path to a board file (relative: to `project_dir`, default the current directory); None
    when no directory holds it."""
    if str(name).endswith(".json"):
        path = Path(name).expanduser()
        return path if path.is_absolute() or project_dir is None else Path(project_dir) / path
    if not str(name) or not set(str(name)) <= _NAME_CHARS:
        return None
    for directory in board_dirs(project_dir):
        if (directory / f"{name}.json").is_file():
            return directory / f"{name}.json"
    return None


def validate(data, where):
    """The board data against the schema: the first problem as one line naming the file and the key
    (an unknown key with the nearest known one)."""
    unknown = sorted(set(data) - set(KEYS)) if isinstance(data, dict) else []
    if unknown:
        key = unknown[0]
        near = difflib.get_close_matches(key, KEYS, n=1)
        hint = f" (did you mean '{near[0]}'?)" if near else f" (known: {', '.join(sorted(KEYS))})"
        raise NNBuildError(f"unknown key '{key}'{hint}", path=where)
    errors = sorted(board_validator().iter_errors(data), key=lambda e: (list(e.absolute_path), e.message))
    if not errors:
        return
    error = errors[0]
    if error.validator == "required":
        missing = [k for k in REQUIRED if k not in data]
        raise NNBuildError(f"missing key(s) {', '.join(missing)}", path=where)
    if not error.absolute_path:
        raise NNBuildError(f"board file: {error.message}", path=where)
    key = error.absolute_path[0]
    rest = "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in list(error.absolute_path)[1:])
    allowed = error.schema.get("description") if error.validator in ("type", "enum", "pattern") else None
    raise NNBuildError(f"key '{key}{rest}': {error.message}" + (f" ({allowed})" if allowed and not rest else ""),
                       path=where)


@functools.lru_cache(maxsize=None)
def board_validator():
    """The schema's validator, built once per process (jsonschema is loaded only when a board is
    validated)."""
    import jsonschema
    return jsonschema.Draft202012Validator(schema())


class Board(dict):
    """One board's data, and the compiler, runner and analyzers it names."""

    def __init__(self, data, path=None, project_dir=None):
        super().__init__(data)
        self.path = Path(path) if path else None
        #: the project root it was loaded for, when a build tool's steps run elsewhere (CMake: ninja
        #: runs them in the build tree); None: the current directory, where the steps run (SCons, CLI)
        self.project_dir = project_dir

    @property
    def name(self):
        return self["name"]

    @property
    def ref(self):
        """How the steps of a build name this board, so that every step subprocess finds this same
        file: its name when the name finds this file (shipped, $NNBUILD_BOARDS, the project's
        boards/), else its file's path, relative to the current directory (the build's top, where
        SCons runs the steps) when it lies under it. Never an absolute path when it can be helped:
        the command lines are SCons signatures, the same in every checkout."""
        if self.path is None:
            return self.name
        path = self.path.resolve()
        if self.project_dir is not None:   # steps run elsewhere: a name only where no project folder is needed
            found = next((d / f"{self.name}.json" for d in user_dirs() + [builtin_dir()]
                          if (d / f"{self.name}.json").is_file()), None)
            return self.name if found is not None and found.resolve() == path else str(path)
        found = board_path(self.name)
        if found is not None and found.is_file() and found.resolve() == path:
            return self.name
        try:
            return str(path.relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path)

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

    def measures_cycles(self):
        """Whether this board's runs report cycles: the runner's measures_cycles(board) where it
        decides per board (qemu-arm: with an instruction cost model), else its MEASURES_CYCLES."""
        runner = self.runner
        if runner is None:
            return False
        decide = getattr(runner, "measures_cycles", None)
        return decide(self) if decide else runner.MEASURES_CYCLES

    def run_label(self):
        """The name of this board's target run in reports (the runner's label: the simulator, or the
        board's own name for the host)."""
        runner = self.runner
        return runner.label(self) if runner else None

    def clock_flags(self):
        """The compiler's clock define derived from clock_hz (avr: -DF_CPU=20000000UL), the board's
        one source of the clock; [] when the board names no clock_define."""
        return self.compiler.clock_flags(self)

    def check(self):
        """Every problem of the data, one line naming the file and the key."""
        where = self.path or self.get("name")
        if isinstance(self.get("name"), str) and names.too_long(self["name"], "board name"):
            raise NNBuildError(f"key 'name': {names.too_long(self['name'], 'board name')}", path=where)
        validate(dict(self), where)
        check_clock(self, where)   # before the flag allow-list: its line says where the clock belongs
        from nnbuild.compilers import flags
        refused = flags.check_board(self)
        if refused:
            key, value, why = refused
            raise NNBuildError(f"key '{key}': {value!r} is refused: {why} (a board file is data: see "
                               "'what a board file can do' in the manual)", path=where)
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


def clock_defined_in_flags(data):
    """The flag of `cflags` that defines the clock macro (clock_define, and F_CPU always), or None."""
    macros = {data.get("clock_define") or "F_CPU", "F_CPU"}
    flags = list(data.get("cflags") or [])
    for flag, after in zip(flags, flags[1:] + [""]):
        text = after if flag == "-D" else flag[2:] if flag.startswith("-D") else None
        if text is not None and text.partition("=")[0] in macros:
            return flag if flag != "-D" else f"-D {after}"
    return None


def check_clock(data, where):
    """The clock is written once, in clock_hz: a board whose cflags define F_CPU (or its
    clock_define) as well, or that names a clock_define without a clock_hz, is refused in one line."""
    flag = clock_defined_in_flags(data)
    if flag:
        macro = data.get("clock_define") or "F_CPU"
        raise NNBuildError(f"key 'cflags': '{flag}' writes the clock a second time; remove it and keep clock_hz "
                           f"(with \"clock_define\": \"{macro}\" the compiler gets -D{macro}=<clock_hz>UL)",
                           path=where)
    if data.get("clock_define") and not data.get("clock_hz"):
        raise NNBuildError(f"key 'clock_define': '{data['clock_define']}' needs a clock_hz to derive it from",
                           path=where)


def load_board(name, project_dir=None) -> Board:
    """The board by name (NAME.json in a board directory) or by the path of its file, validated
    against the schema and checked; an unknown name lists the known ones. `project_dir`: the
    project's root, whose boards/ folder is looked in first and against which a relative path is
    read (default: the current directory)."""
    if isinstance(name, Board):
        return name
    path = board_path(name, project_dir)
    if path is None or not path.is_file():
        if str(name).endswith(".json"):
            raise NNBuildError("board file not found", path=path)
        dirs = ", ".join(str(d) for d in board_dirs(project_dir))
        raise NNBuildError(f"unknown target '{name}' (boards: {', '.join(available_boards(project_dir))}; "
                           f"looked in {dirs})")
    data = files.read_json_object(path, "board file")
    data.setdefault("name", path.stem)
    return Board(data, path, project_dir).check()
