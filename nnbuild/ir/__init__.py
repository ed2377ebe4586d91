"""Intermediate representation: layers with exact semantics, and the numpy reference executor."""

from nnbuild.ir.graph import (ACTIVATIONS, Activation, Add, BatchNorm, Concatenate, Conv2D, Dense, Flatten,
                              Model, Pool2D, Reshape, ZeroPadding2D)

__all__ = ["ACTIVATIONS", "Activation", "Add", "BatchNorm", "Concatenate", "Conv2D", "Dense", "Flatten",
           "Model", "Pool2D", "Reshape", "ZeroPadding2D"]
