"""A user's check data (`nnbuild check --data FILE.npz`): inputs x and expected outputs y, checked
before anything is built so a wrong file is one line saying what is wrong with it."""

import zipfile
from pathlib import Path

import numpy as np

from nnbuild.errors import NNBuildError


def load(path, n_in, n_out=None, *, what_out="values"):
    """(x as float64 [cases, n_in], y as float64 [cases, n_out] or None) from an .npz.

    x: real numbers (bool/int/float), at least one case, n_in values per case (any shape that
    flattens to that). y (optional): real numbers, one row per case, n_out values per case.
    """
    arrays = _read(path)
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


def _read(path):
    """Every array of an .npz, loaded now (no pickles: object arrays are refused)."""
    path = Path(path)
    if not path.is_file():
        raise NNBuildError("check data file not found", path=path)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith(b"\x93NUMPY"):
        raise NNBuildError("a single .npy array, not an .npz; save with np.savez(path, x=..., y=...)", path=path)
    if not magic.startswith(b"PK"):
        raise NNBuildError("not an .npz archive (empty or another format); save with np.savez(path, x=..., y=...)",
                           path=path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except ValueError as error:
        if "allow_pickle" in str(error):
            raise NNBuildError("holds object arrays (pickles are not loaded); store numbers", path=path) from None
        raise NNBuildError(f"not a readable .npz ({error})", path=path) from None
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise NNBuildError(f"not a readable .npz ({error})", path=path) from None


def _real(array, key, path):
    array = np.asarray(array)
    if array.dtype.kind not in "biuf":
        kind = {"c": "complex", "U": "text", "S": "bytes", "O": "objects"}.get(array.dtype.kind, str(array.dtype))
        raise NNBuildError(f"'{key}' holds {kind}, not real numbers", path=path)
    return array.astype(np.float64)
