"""nnbuild's command line.

Users run `generate` (a model's C for any build system), `check` (build a model for a board, run it
on recorded inputs and compare with the recorded outputs), `boards` and `multiitem`; the other
subcommands are the pipeline's steps, which SCons and CMake run (`python -m nnbuild STEP`), made
from the step table (nnbuild.steps.STEPS) and left out of the top-level help.

Conventions (those of pip and ruff): every failure the user can act on is one line
`nnbuild: error: ...` on stderr and exit status 2; a mistyped command or option gets "did you mean";
`-q` prints errors only, `-v` adds the timing lines of the simulators and analyzers; `--json` gives
machine-readable output.
"""

import argparse
import contextlib
import difflib
import io
import json
import logging
import os
import re
import sys

from nnbuild import __version__, options, pipeline, steps
from nnbuild.checks import deadline
from nnbuild.errors import NNBuildError

#: the float default; every precision's is options.default_tolerance
DEFAULT_TOLERANCE = options.DEFAULT_TOLERANCES["float32"][0]
#: the commands of the top-level help; every other subcommand is a pipeline step
USER_COMMANDS = ("generate", "check", "boards", "multiitem")


def join_dash_values(argv):
    """`--opt -O0` read as `--opt=-O0` (argparse would take '-O0' for an option)."""
    out, items = [], list(argv)
    while items:
        item = items.pop(0)
        if item in steps.DASH_VALUE_OPTIONS and items:
            item = f"{item}={items.pop(0)}"
        out.append(item)
    return out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if pipeline.STEP_SEPARATOR in argv:
        return run_steps(argv)
    top = parser()
    args, unknown = top.parse_known_args(join_dash_values(argv))
    if unknown:
        top.fail(unknown_option(top, args.command, unknown[0]))
    verbosity = args.verbose - args.quiet
    configure_logging(verbosity)
    try:
        with contextlib.redirect_stdout(open(os.devnull, "w")) if verbosity < 0 else contextlib.nullcontext():
            return args.func(args) or 0
    except NNBuildError as error:
        print(f"nnbuild: error: {error}", file=sys.stderr)
        return 2
    except MemoryError:
        model = getattr(args, "model", None)
        print(f"nnbuild: error: {model + ': ' if model else ''}out of memory (a tensor of the model is too large "
              "for this machine)", file=sys.stderr)
        return 2


def run_steps(argv):
    """Each `--then`-separated pipeline step in order, as its own `nnbuild STEP` would run (CMake's
    grouped commands: one interpreter start-up for several steps); the first failing one's status
    ends the run (argparse's refusal too: status 2)."""
    parts = [[]]
    for word in argv:
        if word == pipeline.STEP_SEPARATOR:
            parts.append([])
        else:
            parts[-1].append(word)
    for part in parts:
        if not part or part[0] not in steps.STEPS:
            print(f"nnbuild: error: '{pipeline.STEP_SEPARATOR}' separates pipeline steps (got "
                  f"'{part[0] if part else ''}')", file=sys.stderr)
            return 2
    for part in parts:
        try:
            code = main(part)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        if code:
            return code
    return 0


def configure_logging(verbosity):
    """nnbuild's loggers carry the timing lines (simulators, analyzers): shown on stderr with -v."""
    logger = logging.getLogger("nnbuild")
    logger.handlers[:] = [logging.StreamHandler(sys.stderr)]
    logger.handlers[0].setFormatter(logging.Formatter("%(message)s"))
    logger.setLevel(logging.INFO if verbosity > 0 else logging.WARNING)


def suggestion(word, choices):
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_option(top, command, word):
    """The one line for an argument the command does not take, with the nearest option it does."""
    sub = top.commands.choices[command]
    flags = [f for action in sub._actions for f in action.option_strings]
    name = word.split("=", 1)[0]
    if name.startswith("-"):
        return f"{command}: unknown option '{name}'{suggestion(name, flags)}; see nnbuild {command} --help"
    return f"{command}: unexpected argument '{word}'; see nnbuild {command} --help"


class _PrintAndExit(argparse.Action):
    """--cmake-dir: print a computed line and exit, like --version."""

    def __init__(self, *args, text, **kwargs):
        super().__init__(*args, **kwargs)
        self.text = text

    def __call__(self, parser, namespace, values, option_string=None):
        print(self.text())
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors (no usage block): `nnbuild: error: ...`, exit 2, and
    the nearest valid name for a mistyped command or choice."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def fail(self, message):
        self.exit(2, f"nnbuild: error: {message}\n")

    def error(self, message):
        command = self.prog.split(" ", 1)[1] if " " in self.prog else None
        choice = re.match(r"argument (\S+): invalid choice: '(.*?)' \(choose from (.*)\)$", message)
        if choice:
            where, word, listed = choice.groups()
            if where == "command" or where.startswith("{"):
                self.fail(f"unknown command '{word}'{suggestion(word, USER_COMMANDS + tuple(steps.STEPS))}; "
                          f"commands: {', '.join(USER_COMMANDS)} (see nnbuild --help)")
            allowed = [c.strip(" '") for c in listed.split(",")]
            message = f"{where}: '{word}' is not one of {', '.join(allowed)}{suggestion(word, allowed)}"
        else:
            message = re.sub(r"^argument (\S+?)(/\S+)?: ", r"\1: ", message)
        self.fail(f"{command}: {message}" if command else message)


def _verbosity_options(parser, top):
    """-q/-v on the top level and on every command (the command's own count adds to the top's)."""
    default = 0 if top else argparse.SUPPRESS
    group = parser.add_argument_group("output")
    group.add_argument("-q", "--quiet", action="count", default=default, help="print errors only")
    group.add_argument("-v", "--verbose", action="count", default=default,
                       help="also print the timing lines of simulators and analyzers")


def parser():
    top = _Parser(prog="nnbuild", description="A trained model as a build source: static C, checked on the target "
                                              "against a float64 reference, with a WCET bound against a deadline.",
                  epilog="pipeline steps, run by SCons and CMake (nnbuild STEP --help): "
                         + ", ".join(s for s in steps.STEPS if s not in USER_COMMANDS))
    top.add_argument("--version", action="version", version=f"nnbuild {__version__}")
    top.add_argument("--cmake-dir", action=_PrintAndExit, nargs=0, text=lambda: str(pipeline.cmake_dir()),
                     help="print the folder of the CMake module (nnbuild.cmake) and exit")
    _verbosity_options(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser, title="commands",
                             metavar="{" + ",".join(USER_COMMANDS) + "}")
    top.commands = sub
    for step in steps.STEPS.values():
        if step.name in USER_COMMANDS:
            p = sub.add_parser(step.name, help=step.help, description=step.help)
        else:
            p = sub.add_parser(step.name, description=f"pipeline step (SCons and CMake run it): {step.help}")
        for arg in step.args:
            p.add_argument(*arg.flags, **({} if arg.positional else {"dest": arg.dest}), **arg.kwargs)
        if step.name == "generate":
            p.add_argument("--json", action="store_true", help="print the files written, as JSON on stdout")
            p.set_defaults(func=cmd_generate)
        else:
            p.set_defaults(func=_runner(step))
        _verbosity_options(p, top=False)

    p = sub.add_parser("check", help="build the C for a board, run it on FILE.npz inputs x, compare with outputs y",
                       description="build a model's C for a board in a temporary folder, run it on the inputs x of "
                                   "FILE.npz and compare with the outputs y recorded from the training framework and "
                                   "with nnbuild's float64 reference")
    p.add_argument("model", help="the model file")
    p.add_argument("--data", required=True, help=".npz with inputs x and expected outputs y")
    p.add_argument("--target", default="host", help="board name (see `nnbuild boards`) or a board file")
    p.add_argument("--tolerance", type=options.argparse_type(options.tolerance), default=None,
                   help=f"max error allowed (default: {DEFAULT_TOLERANCE:g} for float32/float64; fixed point: "
                        "the precision's documented default, see nnbuild.options.DEFAULT_TOLERANCES)")
    p.add_argument("--opt", type=options.argparse_type(options.opt), default=None,
                   help=f"optimisation flag, one of {', '.join(options.OPT_LEVELS)} (board default otherwise)")
    p.add_argument("--build-dir", default=None, help="keep the build here (default: a temp dir, removed)")
    p.add_argument("--json", action="store_true",
                   help="print the semantic record, the summary and the tolerance as JSON on stdout")
    for arg in steps.STEPS["generate"].args:
        if arg.dest in ("name", "environment", "shape", "input_range"):
            p.add_argument(*arg.flags, dest=arg.dest, **arg.kwargs)
    p.add_argument("--precision", type=options.argparse_type(lambda text: options.precision(text, auto=True)),
                   default=None, help="a number format (float32, q16, ..., fixedW.F, int8), or auto: every candidate "
                                      "built, run and bounded, the smallest qualifying WCET chosen (default float32; "
                                      "int8 for a full-integer model)")
    p.add_argument("--deadline", default=None,
                   help="with --precision auto: WCET deadline the choice must meet, e.g. 5ms; none waives it")
    p.add_argument("--wcet", default="auto", choices=deadline.WCET_MODES,
                   help="with --precision auto: skip to choose without WCET analysis (the deadline is not checked)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="with --precision auto: candidates built in parallel (default: the cores)")
    p.set_defaults(func=cmd_check)

    _verbosity_options(p, top=False)

    p = sub.add_parser("multiitem", help="a multi-item system's whole build outside SCons",
                       description="a multi-item system's whole build outside SCons: its split, checks, report and "
                                   "gate in order (the tasks SCons runs)")
    p.add_argument("model", help="the multi-item document, or a single-graph model with --items/--map")
    p.add_argument("-o", "--outdir", required=True, help="folder of the build's outputs")
    p.add_argument("--target", default="host", help="board name (see `nnbuild boards`) or a board file")
    p.add_argument("--shape", default="v2", help="code shape of every item (default v2)")
    p.add_argument("--precision", default="float32", help="float32, or a fixed-point precision of the v2 shape")
    p.add_argument("--sync", default="flags", help="synchronisation of the items' threads: flags or barrier")
    p.add_argument("--runs", type=int, default=1000, help="host runs of the threaded check (default 1000)")
    p.add_argument("--deadline", default=None, help="deadline, e.g. 100ms, or none")
    p.add_argument("--tolerance", type=options.argparse_type(options.tolerance), default=1e-4,
                   help="max error allowed against the unsplit model's float64 reference (default 1e-4)")
    p.add_argument("--count", type=int, default=8, help="number of check inputs (default 8)")
    p.add_argument("--seed", type=int, default=1, help="seed of the check inputs (default 1)")
    for arg in steps.SPLIT_ARGS:
        p.add_argument(*arg.flags, dest=arg.dest, **arg.kwargs)
    p.set_defaults(func=cmd_multiitem)
    _verbosity_options(p, top=False)

    p = sub.add_parser("boards", help="list the boards: MCU, clock, memories, runner, WCET analyzer",
                       description="list the boards nnbuild knows (shipped and $NNBUILD_BOARDS)")
    p.add_argument("--json", action="store_true", help="one JSON object per board, as a list")
    p.set_defaults(func=cmd_boards)
    _verbosity_options(p, top=False)
    return top


def _runner(step):
    """The CLI handler of a step: its function with the parsed arguments."""
    def handler(args):
        step.function(**{a.dest: getattr(args, a.dest) for a in step.args})
    return handler


def cmd_generate(args):
    """The generate step, then one line (or --json) naming what it wrote."""
    step = steps.STEPS["generate"]
    written = step.function(**{a.dest: getattr(args, a.dest) for a in step.args})
    names = [str(path) for path in written]
    if args.json:
        print(json.dumps({"outdir": str(args.outdir), "files": names}, indent=1))
    else:
        print(f"nnbuild: wrote {len(names)} files to {args.outdir}: "
              + ", ".join(os.path.basename(n) for n in names))


def cmd_check(args):
    """Semantic preservation against the training framework's own outputs (y of the .npz)."""
    from nnbuild import kinds
    args.precision = kinds.default_precision(kinds.of_file(args.model), args.precision)
    if args.precision == "auto":
        return check_auto(args)
    if args.deadline is not None and not deadline.is_no_deadline(args.deadline):
        raise NNBuildError("--deadline applies to --precision auto (a check of one precision runs no WCET analysis; "
                           "build it with SCons, CMake or NNModel to gate a deadline)")
    if args.tolerance is not None:
        tolerance, why = args.tolerance, "--tolerance"
    else:
        tolerance, why = options.default_tolerance(args.precision)
    line = f"tolerance {tolerance:g} ({why})"
    if not args.json:
        print(line)
        _check(args, tolerance, args.build_dir)
        return 0
    import tempfile
    from pathlib import Path
    captured = io.StringIO()
    record = {"passed": True, "tolerance": tolerance, "tolerance_why": why, "error": None}
    with tempfile.TemporaryDirectory(prefix="nnbuild-check-") as tmp:
        build_dir = Path(args.build_dir or tmp)
        try:
            with contextlib.redirect_stdout(captured):
                _check(args, tolerance, build_dir)
        except NNBuildError as error:
            record.update(passed=False, error=str(error))
        semantic = build_dir / "semantic.json"
        record["semantic"] = steps.read_json(semantic) if semantic.is_file() else None
    record["summary"] = [line] + captured.getvalue().splitlines()
    if record["semantic"] is None:  # failed before any comparison: nothing to print but the error
        raise NNBuildError(record["error"])
    print(json.dumps(record, indent=1, sort_keys=True))
    if not record["passed"]:
        print(f"nnbuild: error: {record['error']}", file=sys.stderr)
        return 2
    return 0


def _check(args, tolerance, build_dir):
    pipeline.check(args.model, args.data, target=args.target, name=args.name, shape=args.shape,
                   precision=args.precision, opt=args.opt, input_range=args.input_range,
                   tolerance=tolerance, environment=args.environment, build_dir=build_dir)


#: the SConstruct `nnbuild check --precision auto` runs in its build directory: NNModel's auto, so the
#: candidates are the same independent, parallel, cached targets as in a user's SConstruct
AUTO_SCONSTRUCT = """\
# written by `nnbuild check --precision auto`: NNModel(precision="auto") of the model on the data
import nnbuild.scons_tool
env = Environment(tools=["default", "nnbuild_tool"], toolpath=[nnbuild.scons_tool.toolpath()],
                  NNBUILD_INTERFACE="cli")
env.SConsignFile(".sconsign")
env.Decider("content")
model = env.NNModel({name!r}, {model!r}, board={board!r}, build_dir="build", precision="auto",
                    check_data={data!r}, input_range={input_range!r}, tolerance={tolerance!r},
                    tolerances={tolerances!r}, deadline={deadline!r}, wcet={wcet!r}{extra})
Default(model.gate)
"""


def check_auto(args):
    """`nnbuild check --precision auto`: every candidate precision the kind, shape and board allow,
    built, run on the data, measured and bounded as SCons targets of NNModel(precision="auto") (in
    parallel, and cached in --build-dir), the winner chosen by the rule of every other interface."""
    import subprocess
    import tempfile
    from pathlib import Path

    from nnbuild import boards, kinds
    board = boards.load_board(args.target)
    model = str(Path(args.model).resolve())
    kind = kinds.of_file(model)
    loaded, _ = kind.load(model, args.name, args.environment)
    input_range = args.input_range or pipeline._data_range(kind, loaded, args.data, "q16")
    if args.tolerance is not None:
        tolerance, tolerances = args.tolerance, None
    else:
        tolerance = options.DEFAULT_TOLERANCES["float32"][0]
        tolerances = {p: options.default_tolerance(p)[0] for p in options.DEFAULT_TOLERANCES}
    # a board by name where a step in the build directory finds the same file, else its absolute path
    ref = board.ref
    board_arg = ref if not ref.endswith(".json") and ref == board.name and not boards.project_dirs() else \
        str(board.path.resolve())
    extra = "".join(f", {k}={v!r}" for k, v in (("shape", args.shape), ("environment", args.environment)) if v)
    text = AUTO_SCONSTRUCT.format(name=loaded.name, model=model, board=board_arg, data=str(Path(args.data).resolve()),
                                  input_range=tuple(input_range), tolerance=tolerance, tolerances=tolerances,
                                  deadline=args.deadline, wcet=args.wcet, extra=extra)
    with tempfile.TemporaryDirectory(prefix="nnbuild-auto-") as tmp:
        build_dir = Path(args.build_dir or tmp).resolve()
        build_dir.mkdir(parents=True, exist_ok=True)
        (build_dir / "SConstruct").write_text(text)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(Path(__file__).resolve().parent.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        result = subprocess.run([sys.executable, "-m", "SCons", "-Q", f"-j{max(1, args.jobs)}"], cwd=build_dir,
                                env=env, capture_output=True, text=True)
        sys.stdout.write("".join(line for line in result.stdout.splitlines(keepends=True)
                                 if not line.startswith("scons: ")))
        errors = [line for line in result.stderr.splitlines() if line.startswith("nnbuild: ")]
        if result.returncode != 0:
            raise NNBuildError(errors[-1][len("nnbuild: "):].removeprefix("error: ") if errors else
                               (result.stderr.strip().splitlines() or ["the build failed"])[-1])
        report = steps.read_json(build_dir / "build" / "report.json")
    chosen = report["auto"]["chosen"]
    wcet = report.get("wcet") or {}
    timing = f", WCET {wcet['wcet_ms']:.4g} ms" if wcet.get("wcet_ms") is not None else ""
    print(f"precision=auto: {chosen} chosen{timing} ({report['auto']['why']})")
    if args.json:
        print(json.dumps({"passed": True, "auto": report["auto"], "report": report}, indent=1, sort_keys=True))
    return 0


def cmd_multiitem(args):
    spec, _ = deadline.deadline_spec(args.deadline)   # --deadline none: no deadline (one vocabulary)
    pipeline.build_multiitem(args.model, args.outdir, board=args.target, shape=args.shape, precision=args.precision,
                             sync=args.sync, runs=args.runs, deadline=spec, tolerance=args.tolerance,
                             count=args.count, seed=args.seed, items=args.items, item_map=args.item_map)


def cmd_boards(args):
    """Every board nnbuild knows (shipped and $NNBUILD_BOARDS), as a table or as JSON. A board file
    that does not validate is one error line each (after the table) and exit status 2."""
    from nnbuild import boards
    rows, errors = [], []
    for name in boards.available_boards():
        try:
            rows.append(board_row(boards.load_board(name)))
        except NNBuildError as error:
            errors.append(str(error))
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(boards_table(rows))
        print(f"board directories: {', '.join(str(d) for d in boards.board_dirs())}")
    for error in errors:
        print(f"nnbuild: error: {error}", file=sys.stderr)
    return 2 if errors else 0


def board_row(board):
    """One board's facts for `nnbuild boards`."""
    from nnbuild import wcet
    return {"name": board.name, "description": board.get("description"), "mcu": board.get("mcu"),
            "clock_hz": board.get("clock_hz"), "flash_bytes": board.get("flash_bytes"),
            "ram_bytes": board.get("ram_bytes"), "runner": board.get("simulator"),
            "wcet_analyzer": board.get("wcet_tool"), "wcet_unavailable": wcet.unavailable_reason(board),
            "deadline_ms": board.get("deadline_ms"), "file": str(board.path) if board.path else None}


def boards_table(rows):
    def size(n):
        return "-" if n is None else f"{n // 1024:,} KB" if n % 1024 == 0 else f"{n:,} B"

    def analyzer(r):
        if not r["wcet_analyzer"]:
            return "-"
        return r["wcet_analyzer"] + ("" if not r["wcet_unavailable"] else " (not available here)")

    header = ("board", "MCU", "clock", "flash", "RAM", "runner", "WCET analyzer")
    lines = [header] + [(r["name"], r["mcu"] or "-", f"{r['clock_hz'] / 1e6:g} MHz" if r["clock_hz"] else "-",
                         size(r["flash_bytes"]), size(r["ram_bytes"]), r["runner"] or "-", analyzer(r))
                        for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)
