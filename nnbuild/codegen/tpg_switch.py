"""TPG code shape `switch` (Desnos et al., SiPS'22, section IV): a finite-state machine over teams.

One function `<name>_infer(const double <source>[n], ...)` returning the action id: a `switch` on
the current team inside a loop bounded by the graph's longest root-to-action path (each team runs
at most once per inference, the graph being acyclic), with every team's programs inlined as
straight-line expressions (nnbuild.codegen.tpg_lower). A value computed in a team is reused by
the teams it dominates. The loop bound goes to the flow facts, each team's line range as a
"layer" so the WCET report splits the bound per team.
"""

from nnbuild.codegen import tpg_lower

#: number formats this shape generates (codegen.shape_refusal)
PRECISIONS = ("float32", "float64")


KIND = "tpg"

render = tpg_lower.shape_renderer("switch", share=True)
