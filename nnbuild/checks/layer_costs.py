"""Per-layer costs for an automatic multi-item split (items=N): the board's WCET analyzer run on the
unsplit model's code, split per layer (report.json's `wcet.per_layer` of a single-model build). A
layer's share of the bound is the cost of running that layer's code on one item, the code each item
runs for it. A board without an analyzer, or one that gives no per-layer split, gives None and the
reason: the caller falls back to multiply-accumulate counts and says so.
"""

from pathlib import Path

from nnbuild import codegen
from nnbuild.errors import NNBuildError


def wcet_layer_costs(model, board, workdir, *, shape, check_main, check_defines):
    """({layer: cycles}, where they come from), or (None, why not). The model is compiled for
    `board` around the kind's check main (float32, the multi-item code's precision) and its
    inference function bounded by the board's analyzer."""
    from nnbuild import wcet as analyzers
    reason = analyzers.unavailable_reason(board)
    if reason:
        return None, reason
    workdir = Path(workdir)
    gen = workdir / "gen"
    sources = codegen.generate(model, gen, shape=shape, precision="float32",
                               storage=board.get("weights_storage", "const"))
    program = board.compiler.build_executable(board, [f for f in sources if f.suffix == ".c"] + [check_main],
                                              workdir / f"unsplit{board.program_suffix}", include_dirs=[gen],
                                              defines=[f"{k}={v}" for k, v in check_defines])
    result = analyzers.analyze(board, program, f"{model.name}_infer", str(gen / f"{model.name}.flowfacts.json"),
                               workdir / "wcet")
    if not result.per_layer:
        note = (result.details or {}).get("per_layer_note", "no per-layer split")
        return None, f"{result.analyzer}: {note}"
    missing = [layer.name for layer in model.layers if layer.name not in result.per_layer]
    if len(missing) == len(model.layers):
        raise NNBuildError(f"{result.analyzer}: the per-layer split names no layer of '{model.name}'")
    costs = {layer.name: int(result.per_layer.get(layer.name, 0)) for layer in model.layers}
    source = (f"{result.analyzer} per-layer WCET of the unsplit model ({shape}, float32, {board.name}; "
              f"bound {int(result.cycles)} cycles, {int(result.cycles) - sum(costs.values())} outside the layers)")
    return costs, source
