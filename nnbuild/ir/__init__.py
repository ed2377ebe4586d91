"""Intermediate representation: layers with exact semantics, and the numpy reference executor."""

from nnbuild.ir.graph import ACTIVATIONS, Activation, Dense, Model  # noqa: F401
