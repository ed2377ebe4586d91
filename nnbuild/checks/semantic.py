"""Semantic preservation (ACETONE Definition 15): max |C - reference| over the check inputs."""

import numpy as np

from nnbuild.errors import NNBuildError


def max_abs_error(outputs, expected):
    """L-infinity distance and the case where it occurs.

    NaN positions are compared first: a NaN where the reference has a NaN is equal (a float model
    fed NaN gives NaN on both sides), a NaN on one side only is an infinite error. Infinities of
    the same sign on both sides are equal; any other infinity is an infinite error.
    """
    outputs = np.asarray(outputs, dtype=np.float64).reshape(len(outputs), -1)
    expected = np.asarray(expected, dtype=np.float64).reshape(len(expected), -1)
    if outputs.shape != expected.shape:
        raise NNBuildError(f"output shape {outputs.shape} differs from reference shape {expected.shape}")
    if not outputs.size:
        return 0.0, 0
    nan_out, nan_ref = np.isnan(outputs), np.isnan(expected)
    if np.any(nan_out != nan_ref):
        return float("inf"), int(np.argmax(np.any(nan_out != nan_ref, axis=1)))
    equal = nan_out | (np.isinf(outputs) & (outputs == expected))
    with np.errstate(invalid="ignore"):
        diff = np.where(equal, 0.0, np.abs(outputs - expected))
    if not np.all(np.isfinite(diff)):
        return float("inf"), int(np.argmax(~np.isfinite(diff).all(axis=1)))
    return float(diff.max()), int(np.argmax(diff.max(axis=1)))


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
