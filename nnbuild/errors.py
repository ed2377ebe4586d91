"""One exception type for every user-facing failure, so the CLI prints one line and exits non-zero."""

from nnbuild.names import one_line


class NNBuildError(Exception):
    """A failure the user can act on: the message is one line naming the file and the layer/item."""

    def __init__(self, message, *, path=None, item=None):
        self.path = str(path) if path is not None else None
        self.item = item
        parts = [p for p in (self.path, item) if p]
        prefix = ": ".join(parts)
        # Names in the message may come from a model file: keep it one line, terminal-inert.
        super().__init__(one_line(f"{prefix}: {message}" if prefix else message))
