"""Compiler families: one module per family maps a board's data onto command lines."""

import importlib

from nnbuild.errors import NNBuildError

FAMILIES = {
    "gcc": "nnbuild.compilers.gcc",
    "clang-patmos": "nnbuild.compilers.clang_patmos",
}


def family(board):
    """The module for the board's compiler family."""
    name = board.get("compiler", "gcc")
    try:
        return importlib.import_module(FAMILIES[name])
    except KeyError:
        raise NNBuildError(f"board '{board['name']}' names unknown compiler family '{name}'")
