"""Keras 3 native `.keras` archives, read with zipfile + h5py only (never imports Keras).

A `.keras` file is a zip of `config.json` (the model config, as in a legacy h5's model_config),
`metadata.json` (keras_version) and `model.weights.h5` (the Keras 3 weights layout:
`layers/<key>/vars/0, 1, ...`, mapped to layers by keras_h5.Keras3Weights). The layer conversion is
keras_h5's. The archive is untrusted: member names, sizes and compression ratios are checked
before anything is read, and every failure is one line naming the file.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from nnbuild import limits
from nnbuild.errors import NNBuildError
from nnbuild.frontends import keras_h5
from nnbuild.ir.graph import Model

#: read in a child process with a time limit (frontends.load): HDF5 can hang on a damaged file
ISOLATE = True

#: the members nnbuild reads
CONFIG, METADATA, WEIGHTS = "config.json", "metadata.json", "model.weights.h5"
#: largest uncompressed size read per member (bytes): JSON and weights
MAX_JSON_BYTES = limits.MAX_JSON_BYTES
MAX_WEIGHTS_BYTES = limits.MAX_HDF5_BYTES
#: largest compression ratio accepted (a zip bomb has thousands)
MAX_RATIO = 200
#: most members an archive may list
MAX_MEMBERS = 10000


def _err(message, path) -> NNBuildError:
    return NNBuildError(" ".join(str(message).split()), path=path)


def _checked_members(archive: zipfile.ZipFile, path) -> dict:
    """{name: ZipInfo}, refusing unsafe names, duplicate names, and members whose declared
    size or compression ratio is too large (before reading any data)."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise _err(f"the archive lists {len(infos)} members (at most {MAX_MEMBERS})", path)
    members = {}
    for info in infos:
        name = info.filename
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or ".." in parts or ":" in parts[0] or "\0" in name:
            raise _err(f"the archive member name {name!r} is an absolute or parent path", path)
        if name in members:
            raise _err(f"the archive holds member {name!r} twice", path)
        members[name] = info
    for name, limit in ((CONFIG, MAX_JSON_BYTES), (METADATA, MAX_JSON_BYTES), (WEIGHTS, MAX_WEIGHTS_BYTES)):
        info = members.get(name)
        if info is None:
            if name == METADATA:
                continue
            raise _err(f"not a Keras 3 archive: member {name} is missing", path)
        if info.file_size > limit:
            raise _err(f"member {name} unpacks to {info.file_size} bytes (at most {limit})", path)
        if info.file_size > 2 ** 20 and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise _err(f"member {name} unpacks {info.file_size // max(info.compress_size, 1)} times its "
                       f"packed size (at most {MAX_RATIO}: a zip bomb?)", path)
        if info.flag_bits & 0x1:
            raise _err(f"member {name} is encrypted", path)
    return members


def _read(archive, info, limit, path) -> bytes:
    """A member's bytes, reading at most `limit` + 1 bytes whatever its header claims."""
    with archive.open(info) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise _err(f"member {info.filename} unpacks to more than {limit} bytes", path)
    return data


def _text(data: bytes, name, path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _err(f"member {name} is not valid UTF-8 ({exc.reason} at byte {exc.start})", path) from None


def load(path) -> Model:
    """Read a `.keras` archive into an IR model."""
    try:
        archive = zipfile.ZipFile(str(path))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise _err(f"not a readable .keras archive (zip): {exc}", path) from None
    with archive:
        members = _checked_members(archive, path)
        try:
            config_text = _text(_read(archive, members[CONFIG], MAX_JSON_BYTES, path), CONFIG, path)
            meta_raw = members.get(METADATA)
            metadata = {}
            if meta_raw is not None:
                metadata = keras_h5._json(_text(_read(archive, meta_raw, MAX_JSON_BYTES, path), METADATA, path),
                                          path, METADATA)
            weights = _read(archive, members[WEIGHTS], MAX_WEIGHTS_BYTES, path)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
            if isinstance(exc, NNBuildError):
                raise
            raise _err(f"cannot unpack the archive (truncated or corrupt): {exc}", path) from None
    config = keras_h5._json(config_text, path, CONFIG)
    version = metadata.get("keras_version", "unknown") if isinstance(metadata, dict) else "unknown"
    if not isinstance(version, str):
        version = "unknown"
    return _model(path, config, weights, version)


def _model(path, config, weights: bytes, version) -> Model:
    h5py = keras_h5.h5py
    if keras_h5._h5py_missing():  # pragma: no cover
        raise _err("h5py is required to read Keras archives (pip install h5py)", path)
    wpath = f"{path}:{WEIGHTS}"
    try:
        with h5py.File(io.BytesIO(weights), "r") as f:
            keras_h5.check_hdf5(f, wpath)
            group = f.get("layers")
            if not isinstance(group, h5py.Group):
                raise NNBuildError("has no 'layers' group (not the Keras 3 weights layout)", path=wpath)
            meta = {"format": "keras3", "keras_version": version, "backend": "unknown"}
            model = keras_h5._model(Path(path).stem, config, keras_h5.keras3_weights(group, wpath),
                                    path, wpath, meta)
    except (OSError, RuntimeError) as exc:
        if isinstance(exc, RecursionError):
            raise
        raise _err(f"cannot read {WEIGHTS} (truncated or corrupt HDF5): {exc}", path) from None
    model.source_files = (str(path),)
    model.meta["source_files"] = [str(path)]
    return model
