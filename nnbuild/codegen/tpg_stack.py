"""TPG code shape `stack` (Desnos et al., SiPS'22, section IV): one C function per team.

Each team function computes its programs' bids (inlined straight-line expressions, see
nnbuild.codegen.tpg_lower), then returns the action or calls the winning edge's team function
directly (a tail call; GEGELATI returns function pointers to a driver loop instead). The call
graph is the TPG itself, acyclic, so the WCET analyzer bounds it without any loop bound, each team
function once per path; the call depth is at most the longest root-to-action path.
"""

from nnbuild.codegen import tpg_lower

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64")


KIND = "tpg"

render = tpg_lower.shape_renderer("stack", share=False)
