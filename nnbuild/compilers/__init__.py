"""Compiler families: one module per family maps a board's data onto command lines; each gives
the functions of INTERFACE, which the board's users (steps, pipeline, SCons) call without asking."""

import importlib

from nnbuild.errors import NNBuildError

#: what every family module gives; link_failure: the one line for a program that outgrew a memory
#: region (or None); flash_floor_failure: unrolled code refused before compiling (or None);
#: path_map_flags: the flags that keep the checkout's path out of the objects (reproducible builds);
#: script_flags: the link flags of a linker script (a runner's machine)
INTERFACE = ("require_tool", "compile_flags", "link_flags", "libs", "tool_version", "build_executable",
             "section_sizes", "link_failure", "flash_floor_failure", "path_map_flags", "clock_flags",
             "reproducible_flags", "script_flags")

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
