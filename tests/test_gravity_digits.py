"""Gravity programs learn: scikit-learn's bundled digits (8x8, 1,797 images), trained by the
generated C through the JIT, 64-32-10 relu/softmax, cross-entropy, SGD 0.1, batch 1, 30 epochs;
1,437 training and 360 test images (a seeded split)."""

import numpy as np
import pytest

from nnbuild import jit

pytestmark = pytest.mark.e2e   # about 3 s of training per precision

PROGRAM = """.module "digits"; .prefix "digits";
.optimizer sgd 0.1; .precision {precision}; .costfnc cross_entropy; .batch 1;
.input 8 * 8;
.hidden 32 relu;
.output 10 softmax;
"""


def digits_split(seed=0):
    datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is a test extra (pip install .[test])")
    digits = datasets.load_digits()
    x, labels = digits.data / 16.0, digits.target
    order = np.random.default_rng(seed).permutation(len(x))
    return x[order[:1437]], labels[order[:1437]], x[order[1437:]], labels[order[1437:]]


def accuracy(tmp_path, monkeypatch, precision, epochs=30):
    """Test accuracy after `epochs` of SGD in `precision`."""
    monkeypatch.setenv("NNBUILD_JIT_CACHE", str(tmp_path / "jit"))
    path = tmp_path / f"digits_{precision.replace(' ', '').replace(',', '_').strip('[]')}.g"
    path.write_text(PROGRAM.format(precision=precision))
    x, labels, x_test, labels_test = digits_split()
    net = jit.compile(path, seed=1)
    net.fit(x, np.eye(10)[labels], epochs, seed=1)
    return float(np.mean(np.argmax(net.activate(x_test), axis=1) == labels_test))


def test_float_double_and_the_best_fixed_format(tmp_path, monkeypatch):
    scores = {p: accuracy(tmp_path, monkeypatch, p) for p in ("float", "double", "fixed [8, 16]", "fixed [6, 10]")}
    print(scores)
    assert scores["float"] >= 0.95 and scores["double"] >= 0.95
    assert max(scores["fixed [8, 16]"], scores["fixed [6, 10]"]) >= scores["float"] - 0.02
