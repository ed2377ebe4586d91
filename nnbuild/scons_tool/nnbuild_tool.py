# The `nnbuild_tool` SCons tool of the installed package (toolpath=[nnbuild.scons_tool.toolpath()]).
# Not called `nnbuild`: SCons would shadow the package. Logic: nnbuild.scons_tool.
from nnbuild.scons_tool import exists, generate

__all__ = ["exists", "generate"]
