"""Semantics-preserving graph passes; each returns (model, log lines) so the report says what ran."""

from nnbuild.passes.fuse_activation import fuse_activation

#: Passes run by default, in order.
DEFAULT_PASSES = (fuse_activation,)


def run(model, passes=DEFAULT_PASSES):
    """Apply `passes` in order; the log names every change for the traceability report."""
    log = []
    for apply in passes:
        model, lines = apply(model)
        log.extend(lines)
    return model, log
