"""IPET: maximise the cycles of a region over integer edge counts with scipy.optimize.milp (HiGHS).

One integer variable per edge (the virtual entry edge is fixed at 1), flow conservation at every
node, one constraint per loop bound, plus the table's path constraints (avr_paths: linear rows over
block execution counts and auxiliary 0/1 variables that encode a disjunction). The objective puts each node's cost on its incoming edges
plus the edge's extra cycles (taken branch, skip), so it is an exact integer for an integer
solution. The model is written to `workdir` in CPLEX LP format for review.
"""

import os

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

from nnbuild.errors import NNBuildError
from nnbuild.wcet.avr_cfg import ENTRY, EXIT

_STATUS = {0: "optimal", 1: "iteration or time limit", 2: "infeasible", 3: "unbounded", 4: "other"}


def edge_weights(region, node_cost):
    """Objective coefficient of each edge: cost of the node it enters + its extra cycles."""
    return [(node_cost[e.dst] if e.dst != EXIT else 0) + e.extra for e in region.edges]


def _rows(region, loops, paths=None):
    """Constraint rows as ({variable: coeff}, lo, hi); variables are edge indices, then one per
    auxiliary binary of `paths` (an avr_paths.PathRows)."""
    flow = {n: {} for n in region.node_ids()}
    into = {}
    for i, e in enumerate(region.edges):
        if e.dst in flow:
            flow[e.dst][i] = flow[e.dst].get(i, 0) + 1
            into.setdefault(e.dst, []).append(i)
        if e.src in flow:
            flow[e.src][i] = flow[e.src].get(i, 0) - 1
    rows = [(row, 0, 0) for row in flow.values()]
    for i, e in enumerate(region.edges):
        if e.src == ENTRY:
            rows.append(({i: 1}, 1, 1))
    for l in loops:
        for b in l.bounds:
            row = {}
            if b[0] == "header":
                counted = [i for h in l.headers for i in into.get(h, [])]
            elif b[0] == "back":
                counted = list(l.back_edges)
            else:
                counted = [b[2]]
            for i in counted:
                row[i] = row.get(i, 0) + 1
            for i in l.entry_edges:
                row[i] = row.get(i, 0) - b[1]
            rows.append((row, -np.inf, 0))
    if paths is not None:
        n = len(region.edges)
        for terms, hi in paths.rows:
            row = {}
            for (kind, key), c in terms.items():
                if kind == "node":
                    for i in into.get(key, []):
                        row[i] = row.get(i, 0) + c
                else:
                    row[n + key] = row.get(n + key, 0) + c
            rows.append((row, -np.inf, hi))
    return rows


def solve(region, loops, node_cost, workdir=None, label="region", paths=None):
    """Worst-case integer edge counts and cycles: (cycles, edge counts list, info dict)."""
    w = edge_weights(region, node_cost)
    rows = _rows(region, loops, paths)
    n_aux = paths.binaries if paths is not None else 0
    w = w + [0] * n_aux
    n = len(region.edges) + n_aux
    a = lil_matrix((len(rows), n))
    lo, hi = np.empty(len(rows)), np.empty(len(rows))
    for r, (row, l, h) in enumerate(rows):
        for i, c in row.items():
            a[r, i] = c
        lo[r], hi[r] = l, h
    if workdir:
        write_lp(os.path.join(workdir, f"{label}.lp"), region, rows, w)
    upper = np.full(n, np.inf)
    upper[len(region.edges):] = 1
    res = milp(c=-np.asarray(w, dtype=float), constraints=LinearConstraint(a.tocsr(), lo, hi),
               integrality=np.ones(n), bounds=Bounds(0, upper))
    if res.status != 0 or res.x is None:
        raise NNBuildError(f"builtin-avr: ILP for {region.name} is {_STATUS.get(res.status, res.status)}"
                           f" ({res.message})")
    counts = [int(round(v)) for v in res.x]
    if max(abs(v - c) for v, c in zip(res.x, counts)) > 1e-6:
        raise NNBuildError(f"builtin-avr: ILP for {region.name} returned a non-integer solution")
    _check(rows, counts, region)
    if any(c > 1 for c in counts[len(region.edges):]):
        raise NNBuildError(f"builtin-avr: ILP solution for {region.name} violates a constraint")
    cycles = sum(c * wi for c, wi in zip(counts, w))
    if abs(cycles + res.fun) > 1e-6 * max(1, cycles):
        raise NNBuildError(f"builtin-avr: ILP objective mismatch for {region.name}: {cycles} vs {-res.fun}")
    return cycles, counts[:len(region.edges)], {"variables": n, "constraints": len(rows),
                                                "status": _STATUS[res.status]}


def _check(rows, counts, region):
    """Re-check every constraint with exact integers (solver tolerances must not leak into a bound)."""
    for row, lo, hi in rows:
        v = sum(c * counts[i] for i, c in row.items())
        if v < lo or v > hi:
            raise NNBuildError(f"builtin-avr: ILP solution for {region.name} violates a constraint")


def write_lp(path, region, rows, w):
    """The ILP in CPLEX LP format (x<i> = edge i; comments name the edges)."""
    lines = ["\\ IPET for " + region.name]
    for i, e in enumerate(region.edges):
        lines.append(f"\\ x{i}: {_name(e.src)} -> {_name(e.dst)} extra {e.extra}")
    for i in range(len(region.edges), len(w)):
        lines.append(f"\\ x{i}: auxiliary 0/1 of a path constraint")
    lines.append("Maximize")
    lines.append(" obj: " + " + ".join(f"{wi} x{i}" for i, wi in enumerate(w) if wi) or " obj: 0")
    lines.append("Subject To")
    for k, (row, lo, hi) in enumerate(rows):
        expr = " ".join(f"{'+' if c >= 0 else '-'} {abs(c)} x{i}" for i, c in sorted(row.items()))
        if lo == hi:
            lines.append(f" c{k}: {expr} = {lo:g}")
        else:
            lines.append(f" c{k}: {expr} <= {hi:g}")
    n_edges = len(region.edges)
    if len(w) > n_edges:
        lines.append("Bounds")
        lines += [f" 0 <= x{i} <= 1" for i in range(n_edges, len(w))]
    lines.append("General")
    lines.append(" " + " ".join(f"x{i}" for i in range(len(w))))
    lines.append("End")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _name(n):
    if isinstance(n, int):
        return f"0x{n:x}"
    if isinstance(n, tuple):
        return f"tail(0x{n[1]:x}->0x{n[2]:x})"
    return str(n)
