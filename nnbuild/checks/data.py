"""A user's check data (`nnbuild check --data FILE.npz`): inputs x and expected outputs y, checked
before anything is built so a wrong file is one line saying what is wrong with it. The file is
untrusted: a regular file within limits.MAX_DATA_BYTES, and x and y are checked from their .npy
headers (numbers, sizes within limits.MAX_DATA_ELEMENTS, no more than the member holds) before
anything is allocated.

A model of several inputs or outputs takes either the flat `x` (one row per case: every input's
values one after the other, in the model's order) or one array per input under the name of its C
argument (`in_<name>`, [cases, ...] flattening to that input's size); `y` likewise (flat, or one
`out_<name>` array per output)."""

import stat
import zipfile
from pathlib import Path

import numpy as np

from nnbuild import limits
from nnbuild.errors import NNBuildError


def parts_of(model):
    """[(role "x" | "y", argument name, values)] of a model of several inputs or outputs, else None:
    the per-argument arrays a check data file may hold instead of the flat x and y."""
    if not getattr(model, "several_io", False):
        return None
    return [("x" if a["role"] == "in" else "y", a["name"], a["size"]) for a in model.arguments()]


def _joined(arrays, parts, role, path):
    """The flat rows of `role` (x or y) joined from its per-argument arrays, or None when the file
    holds none of them (it then gives the flat array, or nothing)."""
    wanted = [(name, size) for r, name, size in parts if r == role]
    present = [name for name, _ in wanted if name in arrays]
    if not present:
        return None
    if role in arrays:
        raise NNBuildError(f"both '{role}' and '{present[0]}': give the flat '{role}' or one array per "
                           "argument, not both", path=path)
    missing = [name for name, _ in wanted if name not in arrays]
    if missing:
        raise NNBuildError(f"no '{missing[0]}' beside '{present[0]}' (one array per argument: "
                           f"{', '.join(n for n, _ in wanted)})", path=path)
    rows = []
    for name, size in wanted:
        a = _real(arrays[name], name, path)
        if a.ndim == 0 or len(a) == 0:
            raise NNBuildError(f"'{name}' holds no cases (expected an array [cases, ...])", path=path)
        a = a.reshape(len(a), -1)
        if a.shape[1] != size:
            raise NNBuildError(f"argument {name} takes {size} values per case, '{name}' has {a.shape[1]}", path=path)
        if rows and len(a) != len(rows[0]):
            raise NNBuildError(f"'{name}' has {len(a)} cases, '{wanted[0][0]}' {len(rows[0])}", path=path)
        rows.append(a)
    return np.concatenate(rows, axis=1)


def load(path, n_in, n_out=None, *, what_out="values", parts=None, names=("x", "y")):
    """(x as float64 [cases, n_in], y as float64 [cases, n_out] or None) from an .npz.

    x: real numbers (bool/int/float), at least one case, n_in values per case (any shape that
    flattens to that). y (optional): real numbers, one row per case, n_out values per case.
    `parts` (parts_of(model)): the per-argument arrays of a model of several inputs or outputs,
    read and joined into x and y when the file holds them. `names`: the members read as x and y
    (an int8 model reads x_q and y_q where the file has them).
    """
    arrays = _read(path, [name for _, name, _ in parts or ()] + [n for n in names if n not in ("x", "y")])
    if tuple(names) != ("x", "y"):
        arrays = {k: v for k, v in arrays.items() if k not in ("x", "y")}
        arrays.update({role: arrays[name] for role, name in zip(("x", "y"), names) if arrays.get(name) is not None})
    for role in ("x", "y") if parts else ():
        joined = _joined(arrays, parts, role, path)
        if joined is not None:
            arrays[role] = joined
    if "x" not in arrays:
        raise NNBuildError(f"no inputs 'x' in the file (it holds: {', '.join(sorted(arrays)) or 'nothing'})", path=path)
    x = _real(arrays["x"], "x", path)
    if x.ndim == 0 or len(x) == 0:
        raise NNBuildError("'x' holds no cases (expected an array [cases, ...])", path=path)
    x = x.reshape(len(x), -1)
    if x.shape[1] != n_in:
        raise NNBuildError(f"the model takes {n_in} values per case, 'x' has {x.shape[1]} "
                           f"({x.shape[0]} cases)", path=path)
    y = None
    if "y" in arrays:
        y = _real(arrays["y"], "y", path)
        if y.ndim == 0 or len(y) != len(x):
            raise NNBuildError(f"'y' has {0 if y.ndim == 0 else len(y)} rows for {len(x)} cases in 'x'", path=path)
        y = y.reshape(len(y), -1)
        if n_out is not None and y.shape[1] != n_out:
            raise NNBuildError(f"the model gives {n_out} {what_out} per case, 'y' has {y.shape[1]}", path=path)
    return x, y


#: the arrays read from a check data file (any others are listed in errors, never read)
ARRAYS = ("x", "y")


def checked_file(path, what="check data file"):
    """`path` as a regular file of at most limits.MAX_DATA_BYTES, checked without opening it (a
    device such as /dev/zero, or a FIFO, would be an unbounded read or wait)."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError:
        raise NNBuildError(f"{what} not found", path=path) from None
    if not stat.S_ISREG(info.st_mode):
        raise NNBuildError(f"{what} is not a regular file (a device, FIFO or folder is not read)", path=path)
    if info.st_size > limits.MAX_DATA_BYTES:
        raise NNBuildError(f"{what} is {info.st_size} bytes, more than {limits.MAX_DATA_BYTES} "
                           "(limits.MAX_DATA_BYTES)", path=path)
    return path


def _read(path, more=()):
    """{name: array} of an .npz: x, y and the names `more` read (their .npy headers checked first),
    other names None. No pickles: object arrays are refused."""
    read = ARRAYS + tuple(more)
    path = checked_file(path)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x93NUMPY"):
        raise NNBuildError("a single .npy array, not an .npz; save with np.savez(path, x=..., y=...)", path=path)
    if not magic.startswith(b"PK"):
        raise NNBuildError("not an .npz archive (empty or another format); save with np.savez(path, x=..., y=...)",
                           path=path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename[:-4] if info.filename.endswith(".npy") else info.filename: info
                       for info in archive.infolist()}
            elements = 0
            for key in read:
                if key in members and not members[key].filename.endswith(".npy"):
                    raise NNBuildError(f"member '{members[key].filename}' is not an .npy array", path=path)
                if key in members:
                    elements += _header_elements(archive, members[key], key, path)
            if elements > limits.MAX_DATA_ELEMENTS:
                arrays = "'x' and 'y'" if not more else "the check arrays"
                raise NNBuildError(f"{arrays} declare {elements} values, more than {limits.MAX_DATA_ELEMENTS} "
                                   "(limits.MAX_DATA_ELEMENTS)", path=path)
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] if name in read else None for name in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise NNBuildError("holds object arrays (pickles are not loaded); store numbers", path=path) from None
        raise NNBuildError(f"not a readable .npz ({error})", path=path) from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError, NotImplementedError) as error:
        raise NNBuildError(f"not a readable .npz ({error})", path=path) from None


def _header_elements(archive, info, key, path) -> int:
    """How many values the .npy member `key` declares, from its header (numpy's own reader), checked
    before anything is allocated: numbers, not objects, and no more bytes than the member holds."""
    with archive.open(info) as stream:
        version = np.lib.format.read_magic(stream)
        if version not in ((1, 0), (2, 0)):
            raise NNBuildError(f"'{key}' is an .npy of version {version[0]}.{version[1]} (1.0 and 2.0 are read)",
                               path=path)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    if dtype.hasobject:
        raise NNBuildError("holds object arrays (pickles are not loaded); store numbers", path=path)
    _real_dtype(dtype, key, path)
    count = int(np.prod(shape, dtype=object))
    if count > limits.MAX_DATA_ELEMENTS:
        raise NNBuildError(f"'{key}' declares shape {tuple(shape)}: {count} values, more than "
                           f"{limits.MAX_DATA_ELEMENTS} (limits.MAX_DATA_ELEMENTS)", path=path)
    if count * dtype.itemsize > info.file_size:
        raise NNBuildError(f"'{key}' declares shape {tuple(shape)} ({count * dtype.itemsize} bytes), its member "
                           f"holds {info.file_size} bytes (truncated or forged header)", path=path)
    return count


def _real_dtype(dtype, key, path):
    if dtype.kind not in "biuf":
        kind = {"c": "complex", "U": "text", "S": "bytes", "O": "objects"}.get(dtype.kind, str(dtype))
        raise NNBuildError(f"'{key}' holds {kind}, not real numbers", path=path)


def _real(array, key, path):
    array = np.asarray(array)
    _real_dtype(array.dtype, key, path)
    return array.astype(np.float64)
