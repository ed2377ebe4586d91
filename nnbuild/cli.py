"""Command line: `python -m nnbuild <step>`. Users run generate/check; SCons actions run the rest.

Every failure the user can act on is one line `nnbuild: error: ...` on stderr and exit status 2.
"""

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path

import numpy as np

from nnbuild import codegen, options, pipeline, tpg_pipeline
from nnbuild.passes import quantize
from nnbuild.errors import NNBuildError

DEFAULT_TOLERANCE = 1e-4


#: options whose value may start with '-' (`--opt -O0`, `--range -1,1`): argparse would take the
#: value for an option, so `--opt -O0` is read as `--opt=-O0`
DASH_VALUE_OPTIONS = ("--opt", "--range", "--tolerance", "--deadline")


def join_dash_values(argv):
    out, items = [], list(argv)
    while items:
        item = items.pop(0)
        if item in DASH_VALUE_OPTIONS and items:
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


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors (no usage block): `nnbuild: error: ...`, exit 2."""

    def error(self, message):
        self.exit(2, f"nnbuild: error: {self.prog}: {message}\n")


def option(parse):
    """An argparse type from an nnbuild.options parser (its one-line message kept)."""
    def convert(text):
        try:
            return parse(text)
        except NNBuildError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = parse.__name__
    return convert


def parser():
    top = _Parser(prog="nnbuild", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("generate", help="write the C code of a model")
    p.add_argument("model")
    p.add_argument("-o", "--outdir", required=True)
    add_codegen_options(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("check", help="build the C, run it on FILE.npz inputs x, compare with outputs y")
    p.add_argument("model")
    p.add_argument("--data", required=True, help=".npz with inputs x and expected outputs y")
    p.add_argument("--target", default="host")
    p.add_argument("--tolerance", type=option(options.tolerance), default=DEFAULT_TOLERANCE)
    p.add_argument("--opt", type=option(options.opt), default=None,
                   help=f"optimisation flag, one of {', '.join(options.OPT_LEVELS)} (board default otherwise)")
    p.add_argument("--build-dir", default=None, help="keep the build here (default: a temp dir)")
    add_codegen_options(p, storage=False)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("reference", help="seeded check inputs and float64 reference outputs (.npz)")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--count", type=option(options.count), default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--range", type=option(options.input_range), default=(-1.0, 1.0), help="input range lo,hi")
    p.add_argument("--environment", help="environment description of a TPG (.dot): JSON file or shipped name")
    p.add_argument("--data", help="TPG: take the check observations from this file (.npz x, or .u8.gz bytes)")
    p.set_defaults(func=cmd_reference)

    p = sub.add_parser("run", help="run a check program on the board's simulator")
    p.add_argument("program")
    p.add_argument("--board", required=True)
    p.add_argument("--inputs", required=True, help=".npz with x (and y)")
    p.add_argument("--entry", help="inference function (cycle measurement)")
    p.add_argument("--harness", help="simavr harness executable")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("compare", help="semantic gate: max |C - reference| <= tolerance")
    p.add_argument("--reference", required=True)
    p.add_argument("runs", nargs="+", metavar="LABEL=RUN.npz")
    p.add_argument("--tolerance", type=option(options.tolerance), default=DEFAULT_TOLERANCE)
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("size", help="memory report and gate of a linked image")
    p.add_argument("elf")
    p.add_argument("--board", required=True)
    p.add_argument("--entry", action="append", default=[],
                   help="function whose stack bound counts in RAM (first that can be bounded wins)")
    p.add_argument("--trace", help="trace.json of the generated code (flash placement check)")
    p.add_argument("--flowfacts", help="flow facts of the generated code (indirect call targets for the stack bound)")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_size)

    p = sub.add_parser("wcet", help="static WCET bound of the inference function")
    p.add_argument("elf")
    p.add_argument("--board", required=True)
    p.add_argument("--entry", required=True)
    p.add_argument("--flowfacts", required=True)
    p.add_argument("--record-errors", action="store_true",
                   help="write the analyzer's error into the output instead of failing (precision=auto)")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_wcet)

    p = sub.add_parser("gate", help="fail when report.json shows a missed deadline or an unsound bound")
    p.add_argument("report")
    p.add_argument("-o", "--output", required=True)
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("select", help="precision=auto: pick the candidate with the smallest qualifying WCET")
    p.add_argument("candidates", nargs="+", metavar="PRECISION=REPORT.json[:FIRMWARE]")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--firmware-output", help="where to copy the winner's firmware")
    p.set_defaults(func=cmd_select)

    p = sub.add_parser("report", help="merge the step results into report.json and print a summary")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--board", required=True)
    p.add_argument("--precision", default="float32")
    p.add_argument("--shape", default="mlp")
    p.add_argument("--opt", default=None)
    p.add_argument("--semantic", required=True)
    p.add_argument("--size", required=True)
    p.add_argument("--trace", required=True)
    p.add_argument("--run", default=None, help="the target run (.npz with cycles)")
    p.add_argument("--wcet", default=None, help="wcet.json of the WCET step")
    p.add_argument("--deadline", default=None, help="deadline, e.g. 100ms")
    p.add_argument("--deadline-origin", default=None, help="where the deadline came from")
    p.set_defaults(func=cmd_report)
    return top


def add_codegen_options(p, storage=True):
    p.add_argument("--name", type=option(options.model_name), help="C prefix of the API (default: from the model file)")
    p.add_argument("--environment", help="environment description of a TPG (.dot): JSON file or shipped name")
    p.add_argument("--shape", default="auto", choices=sorted(codegen.SHAPES),
                   help="code shape (auto: mlp for MLPs, v2 for other models)")
    p.add_argument("--precision", type=option(options.precision), default="float32",
                   help=f"{', '.join(codegen.PRECISIONS)} or fixedW.F (default float32)")
    p.add_argument("--range", dest="input_range", default=None, type=option(options.input_range),
                   help="declared input range lo,hi (fixed point proves its formats over it)")
    if storage:
        p.add_argument("--storage", default=None, choices=codegen.STORAGES,
                       help="weights storage (default: the --target board's)")
        p.add_argument("--target", default="host", help="board whose weights storage to use")


def cmd_generate(args):
    board = pipeline.load_board(args.target)
    codegen.check_precision(args.precision, board)
    storage = args.storage or board.get("weights_storage", "const")
    pipeline.generate(args.model, args.outdir, name=args.name, shape=args.shape,
                      precision=args.precision, storage=storage, input_range=args.input_range,
                      environment=args.environment)


def cmd_reference(args):
    pipeline.write_reference(args.model, args.output, count=args.count, seed=args.seed, input_range=args.range,
                             environment=args.environment, data=args.data)


def cmd_run(args):
    board = pipeline.load_board(args.board)
    data = np.load(args.inputs)
    x, n_out = data["x"], data["y"].reshape(len(data["y"]), -1).shape[1]
    outputs, cycles = pipeline.run_cases(board, args.program, x, n_out, entry=args.entry, harness=args.harness,
                                         kind=tpg_pipeline.npz_kind(data))
    arrays = {"outputs": outputs}
    if cycles is not None:
        arrays["cycles"] = np.asarray(cycles, dtype=np.int64)
    pipeline.save_npz(args.output, **arrays)


def cmd_compare(args):
    from nnbuild.checks.semantic import max_abs_error
    expected = np.load(args.reference)["y"]
    if tpg_pipeline.npz_kind(np.load(args.reference)) == tpg_pipeline.KIND:
        runs = {label: np.load(path)["outputs"] for label, _, path in (s.partition("=") for s in args.runs)}
        results = tpg_pipeline.compare(runs, expected, args.tolerance)
        pipeline.save_json(args.output, results)
        print("\n".join(tpg_pipeline.describe(results)))
        return
    results = {"tolerance": args.tolerance, "cases": int(len(expected)), "runs": {}}
    for spec in args.runs:
        label, _, path = spec.partition("=")
        error, worst = max_abs_error(np.load(path)["outputs"], expected)
        results["runs"][label] = {"max_abs_error": error, "worst_case": worst}
    pipeline.save_json(args.output, results)
    for label, run in sorted(results["runs"].items()):
        print(f"{label}: max |C - reference| = {run['max_abs_error']:.3g} over {results['cases']} inputs")


def cmd_size(args):
    from nnbuild.checks import memory
    from nnbuild.compilers import gcc
    board = pipeline.load_board(args.board)
    stack = memory.stack_bound(board, args.elf, args.entry, args.flowfacts)
    use = memory.usage(board, gcc.section_sizes(board, args.elf), stack["bytes"] if stack else None)
    use["stack"] = stack
    if args.trace:
        memory.check_near_flash(board, args.elf, args.trace)
    memory.gate_memory(board, use)
    pipeline.save_json(args.output, use)


def cmd_report(args):
    from nnbuild.checks import report
    summary = report.build_report(args)
    pipeline.save_json(args.output, summary)
    print(report.summary_text(summary))


def cmd_wcet(args):
    import dataclasses
    from nnbuild import wcet
    board = pipeline.load_board(args.board)
    workdir = Path(args.output).parent / "wcet"
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        result = wcet.analyze(board, args.elf, args.entry, args.flowfacts, workdir)
    except NNBuildError as error:
        if not args.record_errors:
            raise
        pipeline.save_json(args.output, {"error": str(error), "analyzer": board.get("wcet_tool")})
        print(f"WCET[{args.entry}]: no bound ({error})")
        return
    pipeline.save_json(args.output, dataclasses.asdict(result))
    print(f"WCET[{result.entry}] = {result.cycles} cycles ({result.analyzer})")


def cmd_gate(args):
    """The build's verdict from report.json: every gate (tolerance, deadline, bound soundness)
    holds, or one line naming what broke and exit 2."""
    from nnbuild.checks import deadline, gates
    from nnbuild.checks.report import read_json
    report = read_json(args.report)
    broken = gates.violations(report)
    if broken:
        raise NNBuildError("; ".join(broken))
    if report.get("wcet"):
        print(deadline.bar(report["wcet"]))
    pipeline.save_json(args.output, {"passed": True, "wcet": report.get("wcet")})


def cmd_select(args):
    from nnbuild.checks import select
    from nnbuild.checks.report import read_json, summary_text
    reports, firmwares = {}, {}
    for spec in args.candidates:
        precision, _, rest = spec.partition("=")
        path, _, firmware = rest.partition(":")
        reports[precision], firmwares[precision] = read_json(path), firmware or None
    winner, table, why = select.choose(reports)
    print("precision=auto candidates:")
    for r in table:
        wcet = f"{r['wcet_ms']:9.3f} ms" if r["wcet_ms"] is not None else "   no bound"
        err = f"{r['max_abs_error']:.3g}" if r["max_abs_error"] is not None else "-"
        verdict = "ok" if not r["violations"] and r["wcet_cycles"] is not None else "; ".join(r["violations"]) or "no WCET bound"
        print(f"  {r['precision']:<10} WCET {wcet}  max error {err:<9}  flash {r['flash_bytes']:>7,}  {verdict}")
    if winner is None:
        raise NNBuildError(select.refusal(table))
    final = dict(reports[winner], precision_auto={"winner": winner, "why": why, "candidates": table})
    if args.firmware_output:
        select.install_winner(firmwares[winner], args.firmware_output)
    pipeline.save_json(args.output, final)
    print(f"winner: {why}")
    print(summary_text(final))


def cmd_check(args):
    """Semantic preservation against the training framework's own outputs (y of the .npz)."""
    from nnbuild.checks import data as check_data
    from nnbuild.checks.semantic import max_abs_error
    from nnbuild.ir import reference
    board = pipeline.load_board(args.target)
    codegen.check_precision(args.precision, board)
    model, log = pipeline.load_model(args.model, args.name, args.environment)
    if tpg_pipeline.is_tpg(model):
        x, y = check_data.load(args.data, model.input_size, 1, what_out="actions")
        with work_dir(args.build_dir) as workdir:
            return tpg_pipeline.check(args, board, model, x, y, workdir)
    x, y = check_data.load(args.data, model.input_size, model.output_size)
    if args.input_range is None and quantize.is_fixed(args.precision):
        args.input_range = (float(np.nanmin(x)), float(np.nanmax(x)))
        print(f"fixed point formats proven over the data's range [{args.input_range[0]:g}, {args.input_range[1]:g}]"
              " (give --range to set the model's declared range)")
    with work_dir(args.build_dir) as workdir:
        program, harness = pipeline.build_check_program(model, board, workdir, shape=args.shape,
                                                        precision=args.precision, opt=args.opt,
                                                        input_range=args.input_range, passes_log=log)
        outputs, cycles = pipeline.run_cases(board, program, x.astype(np.float32), model.output_size,
                                             entry=f"{model.name}_infer", harness=harness)
    ours = reference.run(model, x.astype(np.float32).reshape((len(x),) + tuple(model.input_shape)), dtype=np.float64)
    errors = {"framework": max_abs_error(outputs, y)[0] if y is not None else None,
              "reference": max_abs_error(outputs, np.asarray(ours).reshape(len(x), -1))[0]}
    where = "simavr" if board.get("simulator") == "simavr" else board["name"]
    line = f"{model.name} on {where}: {len(x)} inputs"
    if errors["framework"] is not None:
        line += f", max |C - y| = {errors['framework']:.3g}"
    line += f", max |C - reference| = {errors['reference']:.3g}"
    if cycles is not None:
        line += f", max {int(np.max(cycles)):,} cycles"
    print(line)
    worst = max(e for e in errors.values() if e is not None)
    if not worst <= args.tolerance:
        raise NNBuildError(f"max error {worst:.3g} > tolerance {args.tolerance:.3g}", path=args.model)


@contextlib.contextmanager
def work_dir(build_dir):
    """--build-dir kept as given; otherwise a temporary directory removed afterwards, pass or fail."""
    if build_dir:
        yield Path(build_dir)
        return
    with tempfile.TemporaryDirectory(prefix="nnbuild-check-") as tmp:
        yield Path(tmp)
