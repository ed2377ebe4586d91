"""patmos-clang (T-CREST): gcc-compatible flags, plus the PML that platin needs beside the ELF.

Linking with -mserialize=<elf>.pml makes the compiler write its CFGs and loop bounds (from the
generator's NN_LOOPBOUND pragmas) for `platin wcet`.
"""

from nnbuild.compilers.gcc import compile_flags, libs, require_tool, section_sizes, tool_version  # noqa: F401
from nnbuild.compilers import gcc
from nnbuild.wcet.platin import build_executable  # noqa: F401  (adds -mserialize)

#: written next to the linked program by the link flags below ({output} is the program path)
SIDE_OUTPUTS = ("{output}.pml",)


def link_flags(board, opt=None):
    return [*gcc.link_flags(board, opt), "-mserialize={output}.pml"]
