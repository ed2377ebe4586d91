"""Files in and out: every output is written atomically (a temp file renamed into place, with the
mode open() would give it), so a failed step leaves nothing a later run could take for up to date;
every JSON file a user writes (board, example) is read with one-line errors naming it, within a
size and a nesting limit (untrusted JSON: parse_json, read_json).

Base layer: imports nothing of nnbuild but errors and limits.
"""

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path

from nnbuild import limits
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
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise NNBuildError(f"{what} is not a JSON object", path=path)
    return data


def read_bounded(path, what, max_bytes, limit_name=None):
    """The bytes of a regular file of at most `max_bytes` (a device, a FIFO or /dev/zero would be
    an unbounded read or wait; opened without blocking): one line naming the file otherwise."""
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise NNBuildError(f"{what} is not a regular file (a device, FIFO or folder is not read)", path=path)
            if info.st_size > max_bytes:
                named = f" ({limit_name})" if limit_name else ""
                raise NNBuildError(f"{what} is {info.st_size} bytes, more than {max_bytes}{named}", path=path)
            data = f.read(max_bytes + 1)
    except OSError as error:
        raise NNBuildError(f"cannot read {what} ({error.strerror or error})", path=path) from None
    if len(data) > max_bytes:
        raise NNBuildError(f"{what} is more than {max_bytes} bytes", path=path)
    return data


def read_json(path, what, max_bytes=None, max_depth=None):
    """A JSON file from an untrusted source: a regular file of at most max_bytes
    (limits.MAX_JSON_BYTES), UTF-8, nested at most max_depth deep (parse_json)."""
    data = read_bounded(path, what, limits.MAX_JSON_BYTES if max_bytes is None else max_bytes, "limits.MAX_JSON_BYTES")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NNBuildError(f"cannot read {what} (not UTF-8: {error.reason} at byte {error.start})",
                           path=path) from None
    return parse_json(text, what, path, max_depth)


def parse_json(text, what, path=None, max_depth=None):
    """JSON text from an untrusted source as Python values, nested at most max_depth deep
    (limits.MAX_JSON_DEPTH), so no later walk over it can recurse without end. Invalid or too deep
    is one line naming `what` and the file."""
    limit = limits.MAX_JSON_DEPTH if max_depth is None else max_depth
    deep = f"{what} is nested too deeply (more than {limit} levels; limits.MAX_JSON_DEPTH)"
    try:
        value = json.loads(text)
    except RecursionError:
        raise NNBuildError(deep, path=path) from None
    except ValueError as error:
        raise NNBuildError(f"{what} is not valid JSON ({error})", path=path) from None
    # a text with at most `limit` brackets cannot nest deeper: no vectorised pass (nor numpy) for it
    if text.count("[") + text.count("{") > limit and json_depth(text) > limit:
        raise NNBuildError(deep, path=path)
    return value


def json_depth(text) -> int:
    """How deep the arrays and objects of a valid JSON text nest (0 for a scalar): one vectorised
    pass over its bytes (brackets outside strings; a quote after an odd run of backslashes is
    escaped), in chunks, so a 64 MB file takes a second, whatever it holds."""
    import numpy as np  # here, not at the top: reading a board or an option must not load numpy
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    depth = deepest = 0
    in_string, backslashes = 0, 0   # carried across chunks: inside a string; backslashes just before
    step = 1 << 22
    for start in range(0, len(data), step):
        chunk = np.frombuffer(data, np.uint8, min(step, len(data) - start), start)
        index = np.arange(len(chunk), dtype=np.int32)
        slash = chunk == ord("\\")
        last_other = np.maximum.accumulate(np.where(slash, -1, index))  # last non-backslash at or before i
        quotes = np.flatnonzero(chunk == ord('"'))
        before = quotes - 1
        run = np.where(before >= 0, before - last_other[np.maximum(before, 0)], 0)
        run = np.where((before >= 0) & (last_other[np.maximum(before, 0)] >= 0), run, quotes + backslashes)
        toggles = np.zeros(len(chunk), np.int32)
        toggles[quotes[run % 2 == 0]] = 1
        inside = (np.cumsum(toggles) + in_string) & 1
        opens = ((chunk == ord("[")) | (chunk == ord("{"))) & (inside == 0)
        closes = ((chunk == ord("]")) | (chunk == ord("}"))) & (inside == 0)
        levels = np.cumsum(opens.astype(np.int32) - closes.astype(np.int32)) + depth
        deepest, depth, in_string = max(deepest, int(levels.max())), int(levels[-1]), int(inside[-1])
        trailing = len(chunk) - 1 - int(last_other[-1])
        backslashes = trailing + backslashes if trailing == len(chunk) else trailing
    return deepest


def schema_problem(data, schema):
    """The first problem of `data` against a JSON Schema as one line naming the key, or None."""
    import jsonschema
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(data),
                    key=lambda e: (list(e.absolute_path), e.message))
    if not errors:
        return None
    error = errors[0]
    path = list(error.absolute_path)
    if not path:
        return error.message
    key = path[0] + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in path[1:])
    value = json.dumps(error.instance)
    value = value if len(value) <= 60 else value[:57] + "..."
    described = error.schema.get("description") or (schema["properties"].get(path[0], {}).get("description"))
    return f"key '{key}': {value} is not valid" + (f" (expected: {described})" if described else "")
