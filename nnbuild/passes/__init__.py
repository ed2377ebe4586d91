"""Semantics-preserving graph passes; each returns (model, log lines) so the report says what ran.

Every pass is optional: `run(model, passes)` takes callables or names from PASSES (in that order
of preference: fold_batchnorm before fuse_activation so a Conv2D -> BatchNorm -> Activation folds
completely; relu_after_maxpool after fuse_activation so it sees the fused ReLU).
"""

from nnbuild import limits
from nnbuild.errors import NNBuildError
from nnbuild.passes.fold_batchnorm import fold_batchnorm
from nnbuild.passes.fuse_activation import fuse_activation
from nnbuild.passes.plan_buffers import plan_buffers
from nnbuild.passes.relu_after_maxpool import relu_after_maxpool

#: Every pass by name, in the order they run by default.
PASSES = {
    "fold_batchnorm": fold_batchnorm,
    "fuse_activation": fuse_activation,
    "relu_after_maxpool": relu_after_maxpool,
    "plan_buffers": plan_buffers,
}

#: Passes run by default, in order.
DEFAULT_PASSES = tuple(PASSES.values())


def resolve(passes):
    """Pass names (a list, or a comma-separated string; '' or 'none' = no pass) -> callables."""
    if passes is None:
        return DEFAULT_PASSES
    if isinstance(passes, str):
        passes = [p for p in passes.replace(" ", "").split(",") if p and p != "none"]
    out = []
    for p in passes:
        if callable(p):
            out.append(p)
        elif p in PASSES:
            out.append(PASSES[p])
        else:
            raise NNBuildError(f"unknown pass '{p}' (passes: {', '.join(PASSES)})")
    return tuple(out)


def run(model, passes=DEFAULT_PASSES):
    """Apply `passes` in order; the log names every change for the traceability report."""
    if len(model.layers) > limits.MAX_LAYERS:
        raise NNBuildError(f"{len(model.layers)} layers (limit MAX_LAYERS = {limits.MAX_LAYERS})",
                           path=model.source_files[0] if model.source_files else None)
    log = []
    for apply in resolve(passes):
        model, lines = apply(model)
        log.extend(lines)
    return model, log
