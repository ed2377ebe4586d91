"""TPG code shape `stack` (Desnos et al., SiPS'22, section IV): one C function per team.

Each team function computes its programs' bids (inlined straight-line expressions, see
nnbuild.codegen.tpg_lower), then returns the action or calls the winning edge's team function
directly (a tail call; GEGELATI returns function pointers to a driver loop instead). The call
graph is the TPG itself, acyclic, so the WCET analyzer bounds it without any loop bound, each team
function once per path; the call depth is at most the longest root-to-action path.
"""

from nnbuild.codegen import tpg_lower
from nnbuild.errors import NNBuildError

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64")


KIND = "tpg"


def render(model, *, precision, storage, passes_log, **_options):
    tpg_lower.check_options(model, precision)
    if getattr(model, "kind", "nn") != "tpg":
        raise NNBuildError("shape 'stack' generates Tangled Program Graphs; use shape mlp for this model")
    return tpg_lower.render(model, shape="stack", template="tpg_stack.c.j2", storage=storage, share=False)
