"""One exception type for every user-facing failure, so the CLI prints one line and exits non-zero."""


class NNBuildError(Exception):
    """A failure the user can act on: the message is one line naming the file and the layer/item."""

    def __init__(self, message, *, path=None, item=None):
        self.path = str(path) if path is not None else None
        self.item = item
        parts = [p for p in (self.path, item) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)
