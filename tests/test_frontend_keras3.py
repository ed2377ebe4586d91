"""Keras 3 `.keras` archives: the archives made with real Keras 3.15.1 (tests/data/keras3/
make_goldens.py) give Keras' outputs; the Keras 3 weights layout maps by the vars `name` attribute
or, without it, by class and order; hostile archives (zip bombs, paths, missing members, corrupt
data) are refused in one line naming the file."""

import io
import json
import re
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import error_of
from nnbuild import frontends
from nnbuild.frontends import keras3
from nnbuild.ir import reference

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "keras3"
GOLDEN = np.load(DATA / "golden.npz")


def members(name="conv1d"):
    with zipfile.ZipFile(DATA / f"{name}.keras") as z:
        return {n: z.read(n) for n in z.namelist()}


def write_zip(path, items, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in items.items():
            z.writestr(name, data)
    return path


@pytest.mark.parametrize("name", ["conv1d", "cnn2d", "merge"])
def test_keras_archive_golden(name):
    path = DATA / f"{name}.keras"
    assert frontends.format_for(path).name == "keras3"
    model = frontends.load(path)
    x, want = GOLDEN[f"{name}_x"], GOLDEN[f"{name}_y"]
    np.testing.assert_allclose(reference.run(model, x, np.float64), want, rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(reference.run(model, x, np.float32), want, rtol=1e-5, atol=2e-6)
    assert model.meta["format"] == "keras3" and model.meta["keras_version"] == "3.15.1"
    assert model.source_files == (str(path),)


def test_archive_and_legacy_h5_load_the_same_weights():
    a, b = frontends.load(DATA / "cnn2d.keras"), frontends.load(DATA / "cnn2d.h5")
    assert [l.name for l in a.layers] == [l.name for l in b.layers]
    for la, lb in zip(a.layers, b.layers):
        for field in ("kernel", "bias", "gamma"):
            if getattr(la, field, None) is not None:
                np.testing.assert_array_equal(getattr(la, field), getattr(lb, field))


def strip_vars_names(data: bytes) -> bytes:
    """The weights file without the vars `name` attributes (older Keras 3 writes none)."""
    buffer = io.BytesIO(data)
    with h5py.File(buffer, "r+") as f:
        for key in f["layers"]:
            if "name" in f["layers"][key]["vars"].attrs:
                del f["layers"][key]["vars"].attrs["name"]
    return buffer.getvalue()


def test_weights_without_name_attributes_map_by_class_and_order(tmp_path):
    items = members("merge")
    items["model.weights.h5"] = strip_vars_names(items["model.weights.h5"])
    model = frontends.load(write_zip(tmp_path / "old.keras", items))
    np.testing.assert_allclose(reference.run(model, GOLDEN["merge_x"]), GOLDEN["merge_y"], rtol=1e-5, atol=2e-6)


def test_keras3_weights_layout_in_a_keras_json_pair(tmp_path):
    """save_weights of Keras 3 (layers/*/vars) beside a to_json(): the keras-json pair reads it too."""
    items = members("conv1d")
    (tmp_path / "m.json").write_bytes(items["config.json"])
    (tmp_path / "m.weights.h5").write_bytes(items["model.weights.h5"])
    model = frontends.load(tmp_path / "m.json")
    np.testing.assert_allclose(reference.run(model, GOLDEN["conv1d_x"]), GOLDEN["conv1d_y"], rtol=1e-5, atol=2e-6)


def test_no_tensorflow_or_keras_import_in_nnbuild():
    pattern = re.compile(r"^\s*(import|from)\s+(tensorflow|keras|tf_keras)\b", re.M)
    offenders = [str(p) for p in (REPO / "nnbuild").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


# ----------------------------------------------------------------------------- hostile archives


@pytest.mark.parametrize("missing", ["config.json", "model.weights.h5"])
def test_missing_member(tmp_path, missing):
    items = members()
    del items[missing]
    msg = error_of(write_zip(tmp_path / "hole.keras", items))
    assert f"member {missing} is missing" in msg


@pytest.mark.parametrize("bad", ["../evil.txt", "/etc/passwd", "a/../../b", "C:/x"])
def test_paths_in_the_zip_are_refused(tmp_path, bad):
    items = dict(members(), **{bad: b"x"})
    msg = error_of(write_zip(tmp_path / "path.keras", items))
    assert "absolute or parent path" in msg


def test_zip_bomb_is_refused_before_reading(tmp_path):
    items = members()
    items["config.json"] = items["config.json"] + b" " * (8 * 2 ** 20)   # 8 MiB of blanks: ratio > 200
    msg = error_of(write_zip(tmp_path / "bomb.keras", items))
    assert "zip bomb" in msg and "config.json" in msg


def test_member_larger_than_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(keras3, "MAX_WEIGHTS_BYTES", 1000)
    msg = error_of(DATA / "conv1d.keras")
    assert "member model.weights.h5 unpacks to" in msg and "at most 1000" in msg


def test_lying_header_is_one_line(tmp_path):
    """A member whose headers understate its size (a bomb hiding from the size check): reading stops
    at the declared size and the archive is refused (CRC), never read further."""
    path = write_zip(tmp_path / "liar.keras", members(), compression=zipfile.ZIP_STORED)
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("config.json")
    data = bytearray(path.read_bytes())
    central = data.rfind(b"PK\x01\x02", 0, data.find(b"config.json", data.find(b"PK\x01\x02")))
    for offset in (central + 24, info.header_offset + 22):   # uncompressed size fields
        data[offset:offset + 4] = (10).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert info.file_size > 10
    assert "cannot unpack the archive" in error_of(path)


def test_not_a_zip_truncated_and_bad_json(tmp_path):
    (tmp_path / "text.keras").write_text("hello")
    assert "not a readable .keras archive" in error_of(tmp_path / "text.keras")
    data = (DATA / "conv1d.keras").read_bytes()
    (tmp_path / "cut.keras").write_bytes(data[: len(data) // 2])
    error_of(tmp_path / "cut.keras")
    items = members()
    items["config.json"] = b'{"class_name": '
    assert "config.json is not valid JSON" in error_of(write_zip(tmp_path / "json.keras", items))
    items = members()
    items["model.weights.h5"] = b"not hdf5"
    assert "model.weights.h5" in error_of(write_zip(tmp_path / "h5.keras", items))


def test_unknown_layer_in_archive_names_layer_and_class(tmp_path):
    items = members()
    config = json.loads(items["config.json"])
    config["config"]["layers"][2]["class_name"] = "SimpleRNN"
    items["config.json"] = json.dumps(config).encode()
    msg = error_of(write_zip(tmp_path / "rnn.keras", items))
    assert "layer 'c2'" in msg and "SimpleRNN is not supported" in msg


def test_weights_missing_for_a_layer(tmp_path):
    items = members()
    buffer = io.BytesIO(items["model.weights.h5"])
    with h5py.File(buffer, "r+") as f:
        del f["layers/dense"]
    items["model.weights.h5"] = buffer.getvalue()
    msg = error_of(write_zip(tmp_path / "now.keras", items))
    assert "layer 'd'" in msg and "missing weight group" in msg


# ----------------------------------------------------------------------------- host C


def host_outputs(tmp_path, model, x):
    """Generate v2 C for `model`, build it with gcc on the host and run it on the cases `x`."""
    import subprocess
    from nnbuild import codegen
    from nnbuild.runners import CHECK_MAIN, check_main_defines, native
    out = tmp_path / "gen"
    codegen.generate(model, out, shape="v2", storage="const", passes_log=[])
    exe = tmp_path / "check"
    subprocess.run(["gcc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off",
                    f"-I{out}", *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size,
                                                    model.output_size),
                    str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN),
                    "-o", str(exe), "-lm"], check=True, capture_output=True, text=True)
    return native.run_cases(exe, np.asarray(x, np.float32).reshape(len(x), -1), model.output_size)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["conv1d", "cnn2d", "merge"])
def test_host_c_matches_keras(tmp_path, name):
    model = frontends.load(DATA / f"{name}.keras")
    x, want = GOLDEN[f"{name}_x"], GOLDEN[f"{name}_y"]
    got = host_outputs(tmp_path, model, x).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
