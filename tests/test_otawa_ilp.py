"""OTAWA's IPET system (lp_solve LP format, as nnbuild's plugin writes it) maximised by HiGHS."""

import pytest

from nnbuild.errors import NNBuildError
from nnbuild.wcet import otawa_ilp

#: a loop of at most 10 passes, entered once, and a branch in it: 4 x1 or 7 x2 per pass, in
#: OTAWA's own layout (comments, constants on either side, `int` lines)
LOOP_LP = """/* IPET system */
max: 3 x0 + 4 x1 + 7 x2 + 2 x3;
x4 = 1;\t/* program entry constraint*/
x0 = x4;\t/* structural input constraint*/
x0 + x5 = x1 + x2 + x6;
x1 + x2 = x5;
x6 = x3;
x5 <= 10 x0;
x2 <= 3 x4 + 0.5;
int x0;
int x1;
int x2;
"""


def test_loop_system_is_maximised_over_integers():
    """10 passes, at most 3 of them (3.5 rounded down: integers) on the 7-clock side."""
    lp = otawa_ilp.parse_lp(LOOP_LP)
    assert lp.objective == {"x0": 3, "x1": 4, "x2": 7, "x3": 2}
    assert ({"x5": 1.0, "x0": -10.0}, "<=", 0.0) in lp.rows
    solved = otawa_ilp.maximise(lp, time_limit=10)
    assert solved["bound"] == solved["primal"] == 3 + 7 * 4 + 3 * 7 + 2


def test_unreadable_system_is_one_line_error():
    with pytest.raises(NNBuildError, match="OTAWA ILP: cannot read"):
        otawa_ilp.parse_lp("max: 3 x0;\nx0 <= y1;\n")
    with pytest.raises(NNBuildError, match="no 'max:' objective"):
        otawa_ilp.parse_lp("min: x0;")
