"""Check data files are untrusted: a regular file within limits.MAX_DATA_BYTES, x and y checked from
their .npy headers (numpy's own reader) before anything is allocated; every refusal names the data
file, not the model."""

import io
import json
import os
import zipfile

import numpy as np
import pytest

from nnbuild import limits, project
from nnbuild.checks import data as check_data
from nnbuild.errors import NNBuildError


def npy_header(shape, descr="<f8"):
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False, "shape": shape})
    return out.getvalue()


def refusal(path, n_in=2, n_out=None) -> str:
    with pytest.raises(NNBuildError) as info:
        check_data.load(path, n_in, n_out)
    assert str(info.value).startswith(f"{path}: ")
    return str(info.value)


def test_header_claiming_two_billion_values_is_refused_before_allocation(tmp_path, monkeypatch):
    """An 8 MB .npz whose x.npy claims shape (1e9, 2): refused from its header, nothing loaded."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", npy_header((1_000_000_000, 2)) + bytes(8 << 20))
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load was called"))
    message = refusal(path)
    assert "'x' declares shape (1000000000, 2): 2000000000 values" in message
    assert "limits.MAX_DATA_ELEMENTS" in message


def test_header_claiming_more_than_the_member_holds_is_refused(tmp_path):
    path = tmp_path / "forged.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", npy_header((1000, 2)) + bytes(16))
    assert "'x' declares shape (1000, 2) (16000 bytes), its member holds" in refusal(path)


def test_y_is_checked_too(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_DATA_ELEMENTS", 10)
    path = tmp_path / "big_y.npz"
    np.savez(path, x=np.zeros((2, 2)), y=np.zeros((2, 4)))
    assert "'x' and 'y' declare 12 values, more than 10" in refusal(path)


def test_object_arrays_are_refused_from_the_header(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, x=np.array([[1, None]], dtype=object))
    assert "holds object arrays (pickles are not loaded)" in refusal(path)


def test_a_member_that_is_not_an_npy_is_refused(tmp_path):
    path = tmp_path / "raw.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x", bytes(1 << 20))
    assert "member 'x' is not an .npy array" in refusal(path)


def test_other_arrays_are_not_read(tmp_path, monkeypatch):
    path = tmp_path / "extra.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", npy_header((1, 2)) + np.ones(2).tobytes())
        archive.writestr("junk.npy", npy_header((1_000_000_000,)))
    x, y = check_data.load(path, 2)
    assert x.tolist() == [[1.0, 1.0]] and y is None


def test_devices_and_fifos_are_refused(tmp_path):
    assert "/dev/zero: check data file is not a regular file" in refusal("/dev/zero")
    fifo = tmp_path / "data.npz"
    os.mkfifo(fifo)
    assert "check data file is not a regular file" in refusal(fifo)


def test_file_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "d.npz"
    np.savez(path, x=np.zeros((4, 2)))
    monkeypatch.setattr(limits, "MAX_DATA_BYTES", 100)
    assert "limits.MAX_DATA_BYTES" in refusal(path)


def test_example_check_data_on_a_device_is_refused_before_any_step(tmp_path):
    """example.json "check_data": "/dev/zero" was hashed by SCons (an unbounded read)."""
    example = tmp_path / "ex"
    example.mkdir()
    (example / "m.h5").write_bytes(b"")
    (example / "example.json").write_text(json.dumps({"model": "m.h5", "check_data": "/dev/zero"}))
    with pytest.raises(NNBuildError, match="^/dev/zero: check data file is not a regular file"):
        project.resolve("ex", root=tmp_path)


def test_check_inputs_are_bounded_before_they_are_drawn():
    """--count 1e9 was 'out of memory' naming the model; now one line naming the limit."""
    from nnbuild.checks.inputs import check_inputs
    assert check_inputs(2, 4, 1, (-1.0, 1.0)).shape == (9, 2)
    with pytest.raises(NNBuildError, match=r"^1000000000 check inputs of 2 values \(and 5 corner cases\) are "
                                           r"2000000010 values, more than 33554432 \(limits.MAX_DATA_ELEMENTS\)$"):
        check_inputs(2, 1_000_000_000, 1, (-1.0, 1.0))
