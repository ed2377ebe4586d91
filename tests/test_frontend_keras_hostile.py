"""Hostile Keras HDF5 files (.h5, Keras2C weights.h5 pairs, .keras archives): nothing outside the
model file is read, and every weight is checked from its header (storage, dtype, declared shape
against the config, size limits) before it is read. Each attack is refused in one line naming the
file and the dataset; a canary file whose bytes would land in the weights shows they do not."""

import io
import json
import zipfile

import h5py
import numpy as np
import pytest

from nnbuild import limits
from nnbuild.errors import NNBuildError
from nnbuild.frontends import keras3, keras_h5

SECRET = 7.25


@pytest.fixture
def canary(tmp_path):
    path = tmp_path / "canary.bin"
    np.full(6, SECRET, np.float32).tofile(path)
    return path


@pytest.fixture
def other(tmp_path):
    """Another HDF5 file on the machine, holding a (2, 3) dataset 'k' of the secret value."""
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f["k"] = np.full((2, 3), SECRET, np.float32)
    return path


def config(units=3, n_in=2, keras3_style=False):
    layer = {"class_name": "Dense", "config": {"name": "d", "units": units, "activation": "linear",
                                               "use_bias": True, "batch_input_shape": [None, n_in]}}
    if keras3_style:
        layer["module"] = "keras.layers"
    return {"class_name": "Sequential", "config": {"name": "s", "layers": [layer]}}


def legacy_weights(root, kernel, units=3, f=None):
    """The Keras 2 layout of one Dense 'd' under `root`; kernel(f, group) writes 'kernel:0'."""
    root.attrs["layer_names"] = np.array([b"d"])
    group = root.create_group("d")
    group.attrs["weight_names"] = np.array([b"d/kernel:0", b"d/bias:0"])
    sub = group.create_group("d")
    kernel(f, sub)
    if units > 1000:  # unwritten: a few KB whatever its declared size
        sub.create_dataset("bias:0", shape=(units,), dtype=np.float32, chunks=(1_000_000,))
    else:
        sub.create_dataset("bias:0", data=np.zeros(units, np.float32))
    return sub


def full_model(path, kernel, units=3):
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "2.3.1"
        f.attrs["model_config"] = np.bytes_(json.dumps(config(units)).encode())  # fixed-length, as h5py 2 wrote it
        legacy_weights(f.create_group("model_weights"), kernel, units, f)
    return path


def pair(folder, kernel):
    folder.mkdir()
    (folder / "architecture.json").write_text(json.dumps(config()))
    with h5py.File(folder / "weights.h5", "w") as f:
        legacy_weights(f, kernel, f=f)
    return folder / "architecture.json"


def archive(path, kernel):
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        vars_ = f.create_group("layers/dense/vars")
        vars_.attrs["name"] = "d"
        kernel(f, vars_, "0")
        vars_.create_dataset("1", data=np.zeros(3, np.float32))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config(keras3_style=True)))
        z.writestr("metadata.json", json.dumps({"keras_version": "3.4.1"}))
        z.writestr("model.weights.h5", buf.getvalue())
    return path


def load(path):
    if str(path).endswith(".keras"):
        return keras3.load(path)
    return keras_h5.load(path)


def refusal(path) -> str:
    with pytest.raises(NNBuildError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def external_storage(target):
    def write(f, group, name="kernel:0"):
        group.create_dataset(name, shape=(2, 3), dtype=np.float32, external=[(str(target), 0, h5py.h5f.UNLIMITED)])
    return write


def plain(f, group, name="kernel:0"):
    group.create_dataset(name, data=np.ones((2, 3), np.float32))


# --------------------------------------------------------------------------- outside the file


def test_the_plain_files_load(tmp_path):
    """The writers below make loadable models when nothing is hostile (so each refusal is the attack's)."""
    for model in (load(full_model(tmp_path / "m.h5", plain)), load(pair(tmp_path / "p", plain)),
                  load(archive(tmp_path / "m.keras", plain))):
        assert model.layers[0].kernel.tolist() == [[1.0] * 3] * 2


@pytest.mark.parametrize("writer", [full_model, pair, archive])
def test_external_raw_storage_is_refused(tmp_path, canary, writer):
    name = {full_model: "m.h5", pair: "p", archive: "m.keras"}[writer]
    path = writer(tmp_path / name, external_storage(canary))
    message = refusal(path)
    assert "keeps its data in an external file" in message and str(canary) in message
    assert "kernel:0" in message or "vars/0" in message
    assert ("weights.h5" if writer is pair else str(path)) in message


def test_external_storage_of_the_process_environment_is_refused(tmp_path):
    message = refusal(full_model(tmp_path / "m.h5", external_storage("/proc/self/environ")))
    assert "'/proc/self/environ'" in message and "model_weights/d/d/kernel:0" in message


def test_external_link_is_refused(tmp_path, other):
    def link(f, group, name="kernel:0"):
        group[name] = h5py.ExternalLink(str(other), "/k")
    message = refusal(full_model(tmp_path / "m.h5", link))
    assert "is an external link to" in message and "model_weights/d/d/kernel:0" in message
    assert "external link" in refusal(pair(tmp_path / "p", link))
    assert "external link" in refusal(archive(tmp_path / "m.keras", link))


def test_virtual_dataset_is_refused(tmp_path, other):
    def virtual(f, group, name="kernel:0"):
        layout = h5py.VirtualLayout(shape=(2, 3), dtype=np.float32)
        layout[:] = h5py.VirtualSource(str(other), "k", shape=(2, 3))
        group.create_virtual_dataset(name, layout)
    message = refusal(full_model(tmp_path / "m.h5", virtual))
    assert "is a virtual dataset" in message and "kernel:0" in message
    assert "virtual dataset" in refusal(archive(tmp_path / "m.keras", virtual))


def test_soft_link_through_an_external_link_is_refused(tmp_path, other):
    def soft(f, group, name="kernel:0"):
        f["hidden"] = h5py.ExternalLink(str(other), "/k")
        group[name] = h5py.SoftLink("/hidden")
    assert "'hidden' is an external link" in refusal(full_model(tmp_path / "m.h5", soft))


def test_soft_link_inside_the_file_is_read(tmp_path):
    def soft(f, group, name="kernel:0"):
        f["elsewhere"] = np.full((2, 3), 2.0, np.float32)
        group[name] = h5py.SoftLink("/elsewhere")
    assert load(full_model(tmp_path / "m.h5", soft)).layers[0].kernel.tolist() == [[2.0] * 3] * 2


def test_plugin_filter_is_refused(tmp_path):
    def filtered(f, group, name="kernel:0"):
        group.create_dataset(name, data=np.ones((2, 3), np.float32), chunks=(2, 3), compression=307,
                             allow_unknown_filter=True)
    message = refusal(full_model(tmp_path / "m.h5", filtered))
    assert "uses HDF5 filter 307" in message and "kernel:0" in message


def test_builtin_compression_is_read(tmp_path):
    def gzip(f, group, name="kernel:0"):
        group.create_dataset(name, data=np.ones((2, 3), np.float32), compression="gzip", shuffle=True)
    assert load(full_model(tmp_path / "m.h5", gzip)).layers[0].kernel.sum() == 6


# --------------------------------------------------------------------------- declared sizes


def unwritten(shape):
    """A chunked dataset with nothing written: a few KB on disk, any declared shape."""
    def write(f, group, name="kernel:0"):
        group.create_dataset(name, shape=shape, dtype=np.float32, chunks=(1, min(shape[1], 1_000_000)))
    return write


@pytest.fixture
def no_reads(monkeypatch):
    """Fail the test if any weight is read."""
    def read(self):
        raise AssertionError(f"{self.shown} was read")
    monkeypatch.setattr(keras_h5.Stored, "read", read)


def test_huge_declared_dataset_is_refused_from_its_header(tmp_path, no_reads):
    path = full_model(tmp_path / "m.h5", unwritten((2, 150_000_000)), units=150_000_000)
    assert path.stat().st_size < 100_000
    message = refusal(path)
    assert "declares shape (2, 150000000)" in message and "limits.MAX_TENSOR_ELEMENTS" in message
    assert "layer 'd'" in message and str(path) in message


def test_declared_shape_is_checked_against_the_config_before_reading(tmp_path, no_reads):
    message = refusal(full_model(tmp_path / "m.h5", unwritten((2, 2_000_000))))   # within MAX_TENSOR_ELEMENTS
    assert "kernel shape (2, 2000000) does not match units=3" in message


def test_dtype_is_checked_before_reading(tmp_path, no_reads):
    def strings(f, group, name="kernel:0"):
        group.create_dataset(name, data=np.array([[b"a"] * 3] * 2))
    assert "is not a float16/32/64 array" in refusal(full_model(tmp_path / "m.h5", strings))


def test_huge_chunks_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_TENSOR_BYTES", 20)
    def chunked(f, group, name="kernel:0"):
        group.create_dataset(name, shape=(2, 3), dtype=np.float32, chunks=(2, 3))
    assert "limits.MAX_TENSOR_BYTES" in refusal(full_model(tmp_path / "m.h5", chunked))


def test_weights_read_per_file_are_bounded(tmp_path, monkeypatch):
    """One dataset hard-linked under many names counts each time it is read."""
    monkeypatch.setattr(limits, "MAX_MODEL_ELEMENTS", 8)
    message = refusal(full_model(tmp_path / "m.h5", plain))
    assert "limits.MAX_MODEL_ELEMENTS" in message and "bias:0" in message


def test_hdf5_objects_walked_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_HDF5_OBJECTS", 3)
    assert "limits.MAX_HDF5_OBJECTS" in refusal(full_model(tmp_path / "m.h5", plain))


def test_attribute_size_is_checked_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_ATTRIBUTE_BYTES", 100)
    message = refusal(full_model(tmp_path / "m.h5", plain))
    assert "attribute model_config declares" in message and "limits.MAX_ATTRIBUTE_BYTES" in message


def test_file_size_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_HDF5_BYTES", 1000)
    assert "limits.MAX_HDF5_BYTES" in refusal(full_model(tmp_path / "m.h5", plain))
