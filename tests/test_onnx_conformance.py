"""The ONNX backend test data of the onnx wheel through nnbuild on the host (see onnx_conformance.py):
every case onnxruntime reproduces is either refused in one line or matched by the generated C at the
float floor; none is wrong. The counts are the README's table.

The C of a case onnxruntime does not reproduce is generated (a refusal there must be one line too)
but not compiled nor run: its match is not counted, and a mismatch there is not a failure.
pytorch-converted's MaxPool2d_stride_padding_dilation (lowered to 4,800 movement layers: 3.4 MB of
C, two thirds of the file's CPU time) runs in the slow tier (NNBUILD_SLOW_TESTS=1); its code path,
a dilated, strided, padded MaxPool, is test_onnx_forms.py's maxpool2d_dilated and
maxpool1d_dilated cases (C against onnxruntime, v1, v2 and v3)."""

import pytest

import onnx_conformance as oc
from conftest import SLOW_TIER

pytestmark = pytest.mark.e2e
pytest.importorskip("onnxruntime")

#: cases matched when this was written (README table); fewer is a regression
MATCHED_AT_LEAST = {"pytorch-converted": 57, "pytorch-operator": 19, "simple": 3, "node-recurrent": 6}
#: matched cases that run in the slow tier only (see the module docstring)
SLOW_CASES = {"pytorch-converted": ("test_MaxPool2d_stride_padding_dilation",)}


@pytest.mark.parametrize("suite", oc.SUITES)
def test_backend_suite(tmp_path, suite):
    leave_out = () if SLOW_TIER else SLOW_CASES.get(suite, ())
    rows = oc.survey((suite,), workdir=tmp_path, leave_out=leave_out, denominator_c_only=True)[suite]
    denominator = [r for r in rows if r[1]]
    wrong = [(name, detail) for name, _, status, detail in denominator if status == "fail"]
    assert not wrong, wrong
    matched = sum(1 for r in denominator if r[2] == "pass")
    assert matched >= MATCHED_AT_LEAST[suite] - len(leave_out), \
        (matched, [(r[0], r[3]) for r in denominator if r[2] != "pass"])
    for name, _, status, detail in rows:
        if status == "refused":
            assert "\n" not in detail.strip() and "model.onnx" in detail, (name, detail)
