"""Files in and out: every output is written atomically (a temp file renamed into place, with the
mode open() would give it), so a failed step leaves nothing a later run could take for up to date;
every JSON file a user writes (board, example) is read with one-line errors naming it.

Base layer: imports nothing of nnbuild but errors.
"""

import contextlib
import json
import os
import tempfile
from pathlib import Path

from nnbuild.errors import NNBuildError


def output_mode(executable=False):
    """What open() would give a new file: 0666 less the umask (mkstemp's temp files are 0600, which
    would leave outputs unreadable to the group and others); `executable` adds x where readable."""
    mask = os.umask(0)
    os.umask(mask)
    mode = 0o666 & ~mask
    return mode | (mode & 0o444) >> 2 if executable else mode


@contextlib.contextmanager
def atomic(path, *, suffix="", executable=False):
    """Yield a temp path beside `path`; when the block ends without an error it becomes `path`
    (with the output mode), otherwise it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, output_mode(executable))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path, text):
    with atomic(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


def read_json_object(path, what):
    """A JSON object file as a dict; unreadable, invalid or not an object is one line naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as error:
        raise NNBuildError(f"cannot read {what} ({error})", path=path) from None
    if not isinstance(data, dict):
        raise NNBuildError(f"{what} is not a JSON object", path=path)
    return data
