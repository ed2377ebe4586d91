"""`python -m nnbuild ...`: what a user runs outside SCons."""

import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, needs_avr, shared_file
from keras_files import dense, write_full_model

GOLDEN_L61 = -0.662313857  # ../shared/data/f1tenth/README.md, all inputs 0.1 (tf_keras: -0.6623139)


def nnbuild(*args):
    return subprocess.run([sys.executable, "-m", "nnbuild", *args], cwd=REPO, capture_output=True, text=True)


def golden_data(tmp_path, y=GOLDEN_L61):
    data = tmp_path / "golden.npz"
    np.savez(data, x=np.full((1, 61), 0.1, dtype=np.float32), y=np.array([[y]]))
    return data


def test_check_matches_keras_golden_on_host(tmp_path):
    model = shared_file("data", "f1tenth", "TD3_L61_128x128_C1.h5")
    result = nnbuild("check", str(model), "--data", str(golden_data(tmp_path)), "--tolerance", "1e-6")
    assert result.returncode == 0, result.stderr
    assert "max |C - y|" in result.stdout and "max |C - reference|" in result.stdout


@needs_avr
def test_check_matches_keras_golden_on_simavr(tmp_path):
    model = shared_file("data", "f1tenth", "TD3_L61_128x128_C1.h5")
    result = nnbuild("check", str(model), "--data", str(golden_data(tmp_path)), "--target", "avr",
                     "--tolerance", "1e-6")
    assert result.returncode == 0, result.stderr
    assert "on simavr" in result.stdout and "cycles" in result.stdout


def test_check_fails_above_tolerance_with_one_line(tmp_path):
    model = shared_file("data", "f1tenth", "TD3_L21_64x64_C1.h5")
    data = tmp_path / "bad.npz"
    np.savez(data, x=np.full((1, 21), 0.1, dtype=np.float32), y=np.array([[-0.6]]))
    result = nnbuild("check", str(model), "--data", str(data), "--tolerance", "1e-3")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "> tolerance" in result.stderr


def test_generate_unsupported_layer_is_one_line_and_writes_nothing(tmp_path):
    lstm = {"class_name": "LSTM", "weights": [],
            "config": {"name": "lstm_1", "units": 4, "batch_input_shape": [None, 3, 2]}}
    path = write_full_model(tmp_path / "rnn.h5", [lstm, dense("dense_1", np.zeros((4, 2)), np.zeros(2))])
    out = tmp_path / "out"
    result = nnbuild("generate", str(path), "-o", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith("nnbuild: error:") and result.stderr.strip().count("\n") == 0
    assert "lstm_1" in result.stderr and "LSTM" in result.stderr and "rnn.h5" in result.stderr
    assert not out.exists()


def test_generate_writes_the_declared_files(tmp_path):
    result = nnbuild("generate", "firmware_examples/xor/xor.h5", "-o", str(tmp_path), "--target", "avr")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["xor.h", "xor.c", "xor_weights.h", "xor_weights.c", "xor.flowfacts.json", "xor.trace.json"])
