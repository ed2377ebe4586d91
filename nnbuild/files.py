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


#: the deepest nesting a user's JSON file (board, example) may have: a bomb of 100,000 brackets is
#: one line, not a RecursionError, and every later reader (jsonschema) stays far from the limit
MAX_JSON_DEPTH = 32


def read_json_object(path, what):
    """A JSON object file as a dict; unreadable, invalid, nested deeper than MAX_JSON_DEPTH or not
    an object is one line naming it."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except RecursionError:
        raise NNBuildError(f"cannot read {what}: nested deeper than {MAX_JSON_DEPTH} levels", path=path) from None
    except (OSError, ValueError) as error:
        raise NNBuildError(f"cannot read {what} ({error})", path=path) from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise NNBuildError(f"cannot read {what}: nested deeper than {MAX_JSON_DEPTH} levels", path=path)
    if not isinstance(data, dict):
        raise NNBuildError(f"{what} is not a JSON object", path=path)
    return data


def json_depth(data):
    """How deep lists and objects nest in `data` (0 for a number or string), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_JSON_DEPTH:
            stack.extend((child, depth + 1) for child in children)
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
