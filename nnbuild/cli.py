"""Command line: `python -m nnbuild <step>`, one subcommand per pipeline step, plus `check`.

Users run generate and check; SCons actions run the other steps. The subcommands are made from the
step table (nnbuild.steps.STEPS).

Every failure the user can act on is one line `nnbuild: error: ...` on stderr and exit status 2.
"""

import argparse
import sys

from nnbuild import options, pipeline, steps
from nnbuild.errors import NNBuildError

DEFAULT_TOLERANCE = 1e-4


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


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's one-line errors (no usage block): `nnbuild: error: ...`, exit 2."""

    def error(self, message):
        self.exit(2, f"nnbuild: error: {self.prog}: {message}\n")


def parser():
    top = _Parser(prog="nnbuild", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for step in steps.STEPS.values():
        p = sub.add_parser(step.name, help=step.help)
        for arg in step.args:
            p.add_argument(*arg.flags, **({} if arg.positional else {"dest": arg.dest}), **arg.kwargs)
        p.set_defaults(func=_runner(step))

    p = sub.add_parser("check", help="build the C, run it on FILE.npz inputs x, compare with outputs y")
    p.add_argument("model")
    p.add_argument("--data", required=True, help=".npz with inputs x and expected outputs y")
    p.add_argument("--target", default="host", help=f"board ({', '.join(_boards())}) or a board file")
    p.add_argument("--tolerance", type=steps._parsed(options.tolerance), default=None,
                   help=f"max error allowed (default {DEFAULT_TOLERANCE:g}; fixed point: its proven bound)")
    p.add_argument("--opt", type=steps._parsed(options.opt), default=None,
                   help=f"optimisation flag, one of {', '.join(options.OPT_LEVELS)} (board default otherwise)")
    p.add_argument("--build-dir", default=None, help="keep the build here (default: a temp dir, removed)")
    for arg in steps.STEPS["generate"].args:
        if arg.dest in ("name", "environment", "shape", "precision", "input_range"):
            p.add_argument(*arg.flags, dest=arg.dest, **arg.kwargs)
    p.set_defaults(func=cmd_check)
    return top


def _boards():
    from nnbuild import boards
    return boards.available_boards()


def _runner(step):
    """The CLI handler of a step: its function with the parsed arguments."""
    def handler(args):
        step.function(**{a.dest: getattr(args, a.dest) for a in step.args})
    return handler


def cmd_check(args):
    """Semantic preservation against the training framework's own outputs (y of the .npz)."""
    tolerance = args.tolerance if args.tolerance is not None else DEFAULT_TOLERANCE
    pipeline.check(args.model, args.data, target=args.target, name=args.name, shape=args.shape,
                   precision=args.precision, opt=args.opt, input_range=args.input_range,
                   tolerance=tolerance, environment=args.environment, build_dir=args.build_dir)
