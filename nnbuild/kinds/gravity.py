"""Gravity programs (nnbuild.ir.gravity): networks that carry their own training code.

What differs from a neural network: the model is a program, not trained weights; its C has two
entry points (activate and train) over one caller-owned blob, and its numbers are those of the
`.g` file's `.precision` (float, double, fixed[w, f]) unless precision= says otherwise.
"""

from nnbuild import frontends
from nnbuild.ir import gravity as ir

NAME = ir.KIND
SHAPES = ("gravity",)
PRECISIONS = ("float32", "float64")


def load(path, name=None, environment=None):
    """The program a .g file declares; no graph passes apply: (model, [])."""
    model = frontends.load(path)
    if name:
        from nnbuild import codegen
        model.name = codegen.check_model_name(name)
    return model, []
