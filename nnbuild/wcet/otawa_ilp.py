"""OTAWA's IPET system solved by HiGHS (scipy) instead of OTAWA's lp_solve.

lp_solve 5.5's branch and bound did not finish in 8 minutes on the f1tenth float32 -O2 system (about
960 variables, 900 constraints), which HiGHS solves in well under a second. nnbuild's OTAWA plugin
writes the system in lp_solve's LP format (`-p ilp=FILE`); this module reads it and maximises it.
The bound is taken from HiGHS's dual bound, an upper bound of the integer maximum even when the
time limit stops the search, and every objective coefficient is an integer (clocks), so rounding
it to the nearest integer is exact to within half a clock of solver tolerance.
"""

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

from nnbuild.errors import NNBuildError

#: a term: sign, coefficient, variable (x12, or with otawa::ipet::EXPLICIT x12_fn / e3_4_fn, the
#: label empty for a routine OTAWA has no symbol for);
#: a coefficient's exponent needs no space before it, a variable follows one
_TERM_RE = re.compile(r"([+-])?\s*(\d+(?:\.\d+)?(?:e[+-]?\d+(?![\w.]))?)?\s*(x\d+(?:_[\w.$@]*)?|e\d+_\d+_[\w.$@]*)?")
_COMMENT_RE = re.compile(r"/\*.*?\*/", re.S)


@dataclass
class LinearProgram:
    """max objective . x  subject to rows (coefficients by variable, comparator, constant)."""

    objective: Dict[str, float]
    rows: List[Tuple[Dict[str, float], str, float]]


def linear_form(text) -> Tuple[Dict[str, float], float]:
    """'12 x0 + x1 - 3' -> ({'x0': 12, 'x1': 1}, -3)."""
    coefs: Dict[str, float] = {}
    constant = 0.0
    text = " ".join(text.split())
    pos = 0
    while pos < len(text):
        m = _TERM_RE.match(text, pos)
        if not m or m.end() == pos:
            raise NNBuildError(f"OTAWA ILP: cannot read '{text[pos:pos + 40]}'")
        sign = -1.0 if m.group(1) == "-" else 1.0
        number = float(m.group(2)) if m.group(2) else None
        if m.group(3):
            coefs[m.group(3)] = coefs.get(m.group(3), 0.0) + sign * (1.0 if number is None else number)
        elif number is not None:
            constant += sign * number
        pos = m.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
    return coefs, constant


def parse_lp(text) -> LinearProgram:
    """OTAWA's dumpLPSolve output: `max: ...;`, `LHS (=|<=|>=) RHS;` rows and `int xN;` lines."""
    statements = [s.strip() for s in _COMMENT_RE.sub("", text).split(";") if s.strip()]
    if not statements or not statements[0].startswith("max:"):
        raise NNBuildError("OTAWA ILP: no 'max:' objective")
    objective, _ = linear_form(statements[0][len("max:"):])
    rows = []
    for statement in statements[1:]:
        if statement.startswith("int "):
            continue
        m = re.match(r"^(.*?)(<=|>=|=)(.*)$", statement, re.S)
        if not m:
            raise NNBuildError(f"OTAWA ILP: cannot read the constraint '{statement[:60]}'")
        left, lconst = linear_form(m.group(1))
        right, rconst = linear_form(m.group(3))
        for var, c in right.items():
            left[var] = left.get(var, 0.0) - c
        rows.append((left, m.group(2), rconst - lconst))
    return LinearProgram(objective, rows)


def maximise(lp: LinearProgram, time_limit) -> dict:
    """{"bound": int, "status": str, "primal": int or None}: the integer maximum's upper bound."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    names = sorted({v for v in lp.objective} | {v for coefs, _, _ in lp.rows for v in coefs})
    index = {v: k for k, v in enumerate(names)}
    if any(c != int(c) for c in lp.objective.values()):
        raise NNBuildError("OTAWA ILP: a block time is not an integer number of clocks")
    c = np.zeros(len(names))
    for v, coef in lp.objective.items():
        c[index[v]] = -coef          # milp minimises
    matrix = lil_matrix((len(lp.rows), len(names)))
    lower, upper = np.full(len(lp.rows), -np.inf), np.full(len(lp.rows), np.inf)
    for r, (coefs, comparator, constant) in enumerate(lp.rows):
        for v, coef in coefs.items():
            matrix[r, index[v]] = coef
        if comparator in ("<=", "="):
            upper[r] = constant
        if comparator in (">=", "="):
            lower[r] = constant
    result = milp(c, constraints=LinearConstraint(matrix.tocsr(), lower, upper), integrality=np.ones(len(names)),
                  bounds=Bounds(0, np.inf), options={"time_limit": float(time_limit), "mip_rel_gap": 0.0})
    dual = getattr(result, "mip_dual_bound", None)
    if dual is None or not math.isfinite(dual):
        raise NNBuildError(f"OTAWA ILP: HiGHS gave no bound ({result.message})")
    primal = None if result.x is None else int(round(-result.fun))
    # every coefficient is an integer: the maximum is an integer, and -dual is >= it up to tolerance
    return {"bound": max(math.ceil(-dual - 0.5), primal or 0), "status": result.message, "primal": primal}


def solve_file(path, time_limit) -> dict:
    """Read OTAWA's LP file and maximise it."""
    with open(path) as f:
        return maximise(parse_lp(f.read()), time_limit)
