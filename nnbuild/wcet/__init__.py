"""WCET analyzers: one module per analyzer, chosen by the board's `wcet_tool`.

Every analyzer takes the linked ELF, the entry function and the generator's flow facts, and returns
a `WcetResult`. None of them may invent a number: a missing tool or an unbounded loop raises
NNBuildError with one line naming the tool, or the function and address.

Flow facts (`<model>.flowfacts.json`, written by the C generator beside the C file):
{
  "entry": "f1tenth_infer",
  "loops": [{"function": "f1tenth_infer", "file": "f1tenth.c", "line": 57, "last_line": 66,
             "max_iterations": 128, "layer": "dense_1"}],
  "layers": [{"name": "dense_1", "type": "Dense", "function": "f1tenth_infer",
              "file": "f1tenth.c", "first_line": 50, "last_line": 70}]
}
Optional "indirect": [{"file": "m.c", "line": 88, "targets": ["nn_conv2d", "nn_dense"]}, ...] (or
"function" + "offset", or "address", instead of file + line) lists the possible targets of the
function-pointer calls/jumps on that line (code shape v1); any indirect call without one is an error.
Optional "values": [{"file": "m.c", "line": 104, "op": "mul", "tags": ["__mulsf3:AB.normal", ...],
"why": "..."}] are facts the generator proved about the operands of the float operation `op` on that
line (nnbuild.numerics.float_facts); builtin-avr gives the call those tags as context (avr_paths).
An "add" fact may carry "adds": "0x3f800000" (float32 bits): it then holds only for a call on that
line that adds this constant (__addsf3 with B, or __subsf3 with -B, a known constant there).
Optional "total_iterations" on a loop (v1's kernel loops, v2's padded conv tap loops) bounds its body
executions summed over one call of the entry (OTAWA: `loop ... total N`; builtin-avr: per invocation
of the function holding the loop, when that `for` line is the only fact matching it; builtin-thumb2
uses max_iterations only).
`max_iterations` is the most times the loop BODY runs per entry into the loop (the source trip
count); `line` is the line of the `for` keyword and `last_line` that of its closing brace (an
optimiser may move the loop test off the `for` line: the range still contains the loop's code). Layer line ranges let analyzers split the bound
per layer.
"""

import importlib
from dataclasses import dataclass, field
from typing import Dict, Optional

from nnbuild.errors import NNBuildError

#: board "wcet_tool" value -> module under nnbuild.wcet
ANALYZERS = {
    "builtin-avr": "nnbuild.wcet.avr_ipet",
    "builtin-thumb2": "nnbuild.wcet.thumb2_ipet",
    "otawa": "nnbuild.wcet.otawa",
    "platin": "nnbuild.wcet.platin",
}

#: analyzers that drive an external tool: the executable that must be found, on PATH or in the
#: analyzer's own cached build (`scripts/setup.sh --with-<analyzer>`, see nnbuild.wcet.tools)
EXTERNAL_COMMANDS = {"otawa": "owcet", "platin": "platin"}

#: board "stack_tool" value -> module with stack_bound(elf, entry, board, flowfacts)
STACK_ANALYZERS = {"builtin-avr": "nnbuild.wcet.avr_stack", "builtin-thumb2": "nnbuild.wcet.thumb2_stack"}


@dataclass
class WcetResult:
    """A sound upper bound on the cycles of one call of `entry`, and where it comes from."""

    analyzer: str
    entry: str
    cycles: int
    #: layer name -> cycles of the bound attributed to that layer's code
    per_layer: Dict[str, int] = field(default_factory=dict)
    #: anything the analyzer wants in the report (tool version, ILP status, ...)
    details: dict = field(default_factory=dict)
    tool_version: Optional[str] = None


def analyzer_module(name):
    """The module implementing analyzer `name`; it exposes analyze(elf, entry, flowfacts, board, workdir)."""
    try:
        return importlib.import_module(ANALYZERS[name])
    except KeyError:
        raise NNBuildError(f"unknown WCET analyzer '{name}' (known: {', '.join(sorted(ANALYZERS))})")


def analyzer_for(board):
    """The board's WCET analyzer module, or None when it has no timing model."""
    name = board.get("wcet_tool")
    return analyzer_module(name) if name else None


def stack_analyzer_for(board):
    """The board's static stack analyzer module, or None."""
    name = board.get("stack_tool")
    if not name:
        return None
    try:
        return importlib.import_module(STACK_ANALYZERS[name])
    except KeyError:
        raise NNBuildError(f"unknown stack analyzer '{name}' (known: {', '.join(sorted(STACK_ANALYZERS))})") from None


def analyze(board, elf, entry, flowfacts, workdir):
    """Run the board's analyzer; a board without one, or a missing tool, is one clear line."""
    name = board.get("wcet_tool")
    if not name:
        raise NNBuildError(f"board '{board['name']}' has no WCET analyzer ({missing_analyzer(board)})")
    result = analyzer_module(name).analyze(elf, entry, flowfacts, board, workdir)
    if result.cycles is None or result.cycles < 0:
        raise NNBuildError(f"{name} returned no bound for {entry}")
    return result


def missing_analyzer(board):
    """Why a board has no analyzer, in a few words: no timing model at all, or one that only its
    runner charges so far (a qemu-system-arm board's instruction_timing)."""
    model = board.get("timing_model")
    return f"its timing model {model} has no analyzer yet" if model else "no timing model"


def unavailable_reason(board, path=None):
    """Why the board's analyzer cannot run here (None when it can): no analyzer, or its tool found
    neither on PATH (`path`, default $PATH) nor in the analyzer's cached build."""
    import shutil
    name = board.get("wcet_tool")
    if not name:
        return f"no WCET analyzer for target {board['name']} ({missing_analyzer(board)})"
    command = EXTERNAL_COMMANDS.get(name)
    if not command:
        return None
    from nnbuild.wcet import tools
    if not shutil.which(command, path=tools.search_path(name, base=path)):
        return f"'{command}' ({name}) not found on PATH for target={board['name']}"
    return None


def command_line(analyze_fn, module, doc, default_board, argv=None):
    """`python -m nnbuild.wcet.<module> ELF --entry FN --flowfacts F.json [--board B.json] [--json OUT]`:
    one command line for every built-in analyzer (the bound, its split per layer; exit 2 with one
    line on an error)."""
    import argparse
    import json
    import os
    import sys
    import tempfile
    from dataclasses import asdict
    board_path = os.path.join(os.path.dirname(__file__), "..", "..", "toolchains", f"{default_board}.json")
    ap = argparse.ArgumentParser(prog=f"python -m nnbuild.wcet.{module}", description=doc.splitlines()[0])
    ap.add_argument("elf")
    ap.add_argument("--entry", required=True)
    ap.add_argument("--flowfacts", required=True)
    ap.add_argument("--board", default=board_path, help=f"board file (default: toolchains/{default_board}.json)")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--workdir")
    args = ap.parse_args(argv)
    try:
        with open(args.board) as f:
            board = json.load(f)
        res = analyze_fn(args.elf, args.entry, args.flowfacts, board, args.workdir or tempfile.mkdtemp(prefix=f"{module}_"))
    except (NNBuildError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"WCET[{res.entry}] = {res.cycles} cycles")
    for name, cyc in res.per_layer.items():
        print(f"  layer {name}: {cyc} cycles ({100.0 * cyc / max(res.cycles, 1):.1f}%)")
    print(f"  other: {res.details['unattributed_cycles']} cycles")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(asdict(res), f, indent=2, default=str)
    return 0
