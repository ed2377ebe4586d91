"""Semantic preservation (ACETONE Definition 15): max |C - reference| over the check inputs."""

import numpy as np

from nnbuild.errors import NNBuildError


def max_abs_error(outputs, expected):
    """L-infinity distance; any NaN or infinity in either side counts as an infinite error."""
    outputs = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    expected = np.asarray(expected, dtype=np.float64).reshape(len(expected), -1)
    if outputs.shape != expected.shape:
        raise NNBuildError(f"output shape {outputs.shape} differs from reference shape {expected.shape}")
    diff = np.abs(outputs - expected)
    if not np.all(np.isfinite(diff)):
        return float("inf"), int(np.argmax(~np.isfinite(diff).all(axis=1)))
    worst = int(np.argmax(diff.max(axis=1))) if len(diff) else 0
    return float(diff.max()) if diff.size else 0.0, worst


def error_violation(error, tolerance, label):
    """The clause that fails the build when the error exceeds the tolerance, or None."""
    if not error <= tolerance:
        return f"max error {error:.3g} > tolerance {tolerance:.3g} ({label})"
    return None


def gate_error(error, tolerance, label):
    """One line and a non-zero exit when the error exceeds the tolerance."""
    message = error_violation(error, tolerance, label)
    if message:
        raise NNBuildError(message)
