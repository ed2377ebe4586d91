"""The ONNX backend test data of the onnx wheel through nnbuild on the host (see onnx_conformance.py):
every case onnxruntime reproduces is either refused in one line or matched by the generated C at the
float floor; none is wrong. The counts are the README's table."""

import pytest

import onnx_conformance as oc

pytestmark = pytest.mark.e2e
pytest.importorskip("onnxruntime")

#: cases matched when this was written (README table); fewer is a regression
MATCHED_AT_LEAST = {"pytorch-converted": 57, "pytorch-operator": 19, "simple": 3, "node-recurrent": 6}


@pytest.mark.parametrize("suite", oc.SUITES)
def test_backend_suite(tmp_path, suite):
    rows = oc.survey((suite,), workdir=tmp_path)[suite]
    denominator = [r for r in rows if r[1]]
    wrong = [(name, detail) for name, _, status, detail in denominator if status == "fail"]
    assert not wrong, wrong
    matched = sum(1 for r in denominator if r[2] == "pass")
    assert matched >= MATCHED_AT_LEAST[suite], (matched, [(r[0], r[3]) for r in denominator if r[2] != "pass"])
    for name, _, status, detail in rows:
        if status == "refused":
            assert "\n" not in detail.strip() and "model.onnx" in detail, (name, detail)
