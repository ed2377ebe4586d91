"""Command line: `python -m nnbuild <step>`, one subcommand per pipeline step, plus `check`,
`multiitem` and `boards`.

Users run generate, check and boards; SCons actions run the other steps. The subcommands are made
from the step table (nnbuild.steps.STEPS).

Every failure the user can act on is one line `nnbuild: error: ...` on stderr and exit status 2.
"""

import argparse
import contextlib
import io
import json
import os
import sys

from nnbuild import __version__, options, pipeline, steps
from nnbuild.checks import deadline
from nnbuild.errors import NNBuildError

#: the float default; every precision's is options.default_tolerance
DEFAULT_TOLERANCE = options.DEFAULT_TOLERANCES["float32"][0]


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
    args = parser().parse_args(join_dash_values(sys.argv[1:] if argv is None else argv))
    try:
        return args.func(args) or 0
    except NNBuildError as error:
        print(f"nnbuild: error: {error}", file=sys.stderr)
        return 2
    except MemoryError:
        model = getattr(args, "model", None)
        print(f"nnbuild: error: {model + ': ' if model else ''}out of memory (a tensor of the model is too large "
              "for this machine)", file=sys.stderr)
        return 2


class _PrintAndExit(argparse.Action):
    """--cmake-dir: print a computed line and exit, like --version."""

    def __init__(self, *args, text, **kwargs):
        super().__init__(*args, **kwargs)
        self.text = text

    def __call__(self, parser, namespace, values, option_string=None):
        print(self.text())
        parser.exit(0)


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors (no usage block): `nnbuild: error: ...`, exit 2."""

    def error(self, message):
        self.exit(2, f"nnbuild: error: {self.prog}: {message}\n")


def parser():
    top = _Parser(prog="nnbuild", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"nnbuild {__version__}")
    top.add_argument("--cmake-dir", action=_PrintAndExit, nargs=0, text=lambda: str(pipeline.cmake_dir()),
                     help="print the folder of the CMake module (nnbuild.cmake) and exit")
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for step in steps.STEPS.values():
        p = sub.add_parser(step.name, help=step.help)
        for arg in step.args:
            p.add_argument(*arg.flags, **({} if arg.positional else {"dest": arg.dest}), **arg.kwargs)
        p.set_defaults(func=_runner(step))

    p = sub.add_parser("check", help="build the C, run it on FILE.npz inputs x, compare with outputs y")
    p.add_argument("model")
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
                   default="float32", help="a number format (float32, q16, ..., fixedW.F), or auto: every candidate "
                                           "built, run and bounded, the smallest qualifying WCET chosen")
    p.add_argument("--deadline", default=None,
                   help="with --precision auto: WCET deadline the choice must meet, e.g. 5ms; none waives it")
    p.add_argument("--wcet", default="auto", choices=deadline.WCET_MODES,
                   help="with --precision auto: skip to choose without WCET analysis (the deadline is not checked)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                   help="with --precision auto: candidates built in parallel (default: the cores)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("multiitem", help="a multi-item system's whole build outside SCons: its split, checks, "
                                         "report and gate in order (the tasks SCons runs)")
    p.add_argument("model")
    p.add_argument("-o", "--outdir", required=True)
    p.add_argument("--target", default="host", help="board name (see `nnbuild boards`) or a board file")
    p.add_argument("--shape", default="v2")
    p.add_argument("--precision", default="float32")
    p.add_argument("--sync", default="flags")
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--deadline", default=None, help="deadline, e.g. 100ms")
    p.add_argument("--tolerance", type=options.argparse_type(options.tolerance), default=1e-4)
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    for arg in steps.SPLIT_ARGS:
        p.add_argument(*arg.flags, dest=arg.dest, **arg.kwargs)
    p.set_defaults(func=cmd_multiitem)

    p = sub.add_parser("boards", help="list the boards: MCU, clock, memories, runner, WCET analyzer")
    p.add_argument("--json", action="store_true", help="one JSON object per board, as a list")
    p.set_defaults(func=cmd_boards)
    return top


def _runner(step):
    """The CLI handler of a step: its function with the parsed arguments."""
    def handler(args):
        step.function(**{a.dest: getattr(args, a.dest) for a in step.args})
    return handler


def cmd_check(args):
    """Semantic preservation against the training framework's own outputs (y of the .npz)."""
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
