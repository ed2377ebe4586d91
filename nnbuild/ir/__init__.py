"""Intermediate representation: layers with exact semantics, and the numpy reference executor."""

from nnbuild.ir.graph import (ACTIVATIONS, Activation, Add, BatchNorm, Concatenate, Conv2D,  # noqa: F401
                              Dense, Flatten, Model, Pool2D, Reshape, ZeroPadding2D)
