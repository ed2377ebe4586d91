# Shim: the tool must not be called `nnbuild` (SCons would shadow the package). Logic: nnbuild.scons_tool.
from nnbuild.scons_tool import exists, generate  # noqa: F401
