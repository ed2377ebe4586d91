"""IPET: maximise the cycles of a region over integer edge counts with scipy.optimize.milp (HiGHS).

One integer variable per edge (the virtual entry edge is fixed at 1), flow conservation at every
node, one constraint per loop bound, plus the table's path constraints (avr_paths: linear rows over
block execution counts, auxiliary 0/1 variables that encode a disjunction, and counters whose
callee part comes from "choice" variables: a parametric callee's cycles per counter value).
The objective puts each node's cost on its incoming edges
plus the edge's extra cycles (taken branch, skip), so it is an exact integer for an integer
solution. The model is written to `workdir` in CPLEX LP format for review.
"""

import os

import numpy as np

from nnbuild.errors import NNBuildError
from nnbuild.wcet.cfg import ENTRY, EXIT

_STATUS = {0: "optimal", 1: "iteration or time limit", 2: "infeasible", 3: "unbounded", 4: "other"}


def edge_weights(region, node_cost):
    """Objective coefficient of each edge: cost of the node it enters + its extra cycles."""
    return [(node_cost[e.dst] if e.dst != EXIT else 0) + e.extra for e in region.edges]


def _layout(region, paths, choices):
    """Variable indices: edges, then the binaries of `paths`, then per choice one variable per
    value (avr_paths: executions of the choice node whose callee took that counter value)."""
    n = len(region.edges) + (paths.binaries if paths is not None else 0)
    starts = []
    for ch in choices:
        starts.append(n)
        n += len(ch["values"])
    return n, starts


def _rows(region, loops, paths=None, choices=(), cap=None):
    """Constraint rows as ({variable: coeff}, lo, hi); variables per _layout."""
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
            if b[0] == "total":  # body executions per invocation: header passes (or back edges) <= N
                counted = [i for h in l.headers for i in into.get(h, [])] if b[2] == "header" else list(l.back_edges)
                rows.append(({i: 1 for i in counted}, -np.inf, b[1]))
                continue
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
    _, starts = _layout(region, paths, choices)
    for ch, s in zip(choices, starts):  # each execution of the node picks one value
        row = {s + k: 1 for k in range(len(ch["values"]))}
        for i in into.get(ch["node"], []):
            row[i] = row.get(i, 0) - 1
        rows.append((row, 0, 0))

    def counter(name, c, row):
        for node in (paths.counter_nodes.get(name, []) if paths is not None else []):
            for i in into.get(node, []):
                row[i] = row.get(i, 0) + c
        for ch, s in zip(choices, starts):
            if ch["counter"] == name:
                for k in range(1, len(ch["values"])):
                    row[s + k] = row.get(s + k, 0) + c * k

    if paths is not None:
        n = len(region.edges)
        for terms, hi in paths.rows:
            row = {}
            for (kind, key), c in terms.items():
                if kind == "node":
                    for i in into.get(key, []):
                        row[i] = row.get(i, 0) + c
                elif kind == "counter":
                    counter(key, c, row)
                else:
                    row[n + key] = row.get(n + key, 0) + c
            rows.append((row, -np.inf, hi))
    if cap is not None:
        row = {}
        counter(cap[0], 1, row)
        rows.append((row, -np.inf, cap[1]))
    return rows


def counter_objective(region, paths, choices, name):
    """Objective vector (per _layout) of counter `name` (its blocks' executions in the region
    plus the callees' chosen values)."""
    n, _ = _layout(region, paths, choices)
    row = _rows(region, [], paths, choices, cap=(name, 0))[-1][0]
    w = [0] * n
    for i, c in row.items():
        w[i] = c
    return w


def solve(region, loops, node_cost, workdir=None, label="region", paths=None, choices=(), cap=None,
          objective=None, analyzer="builtin-avr", none_if_infeasible=False):
    """Worst-case integer edge counts and cycles: (cycles, edge counts list, info dict).

    `choices`: parametric callees ({"node", "values": cycles per counter value, "counter"}; the
    node's cost must exclude them; a value None is a counter value the callee cannot take);
    `cap` = (counter, n) adds counter <= n; `objective` (a
    weight vector per _layout) replaces the cycles as the objective (then "cycles" is its value).
    info["choice_cycles"] gives the cycles charged to each (choice node, site), info["solution"]
    (with a cap) every variable's value (per _layout). `analyzer` names the analyzer in error lines
    (builtin-thumb2 solves its regions here too). None instead of the tuple when
    `none_if_infeasible` and the rows admit no solution."""
    # here, not at the top: every step that loads an AVR board imports this module (0.4 s of scipy)
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    w = edge_weights(region, node_cost)
    rows = _rows(region, loops, paths, choices, cap)
    n_aux = paths.binaries if paths is not None else 0
    n, starts = _layout(region, paths, choices)
    w = w + [0] * n_aux
    for ch in choices:
        w += [0 if v is None else v for v in ch["values"]]
    if objective is not None:
        w = list(objective)
    a = lil_matrix((len(rows), n))
    lo, hi = np.empty(len(rows)), np.empty(len(rows))
    for r, (row, l, h) in enumerate(rows):
        for i, c in row.items():
            a[r, i] = c
        lo[r], hi[r] = l, h
    if workdir:
        write_lp(os.path.join(workdir, f"{label}.lp"), region, rows, w, n_aux)
    upper = np.full(n, np.inf)
    upper[len(region.edges):len(region.edges) + n_aux] = 1
    for ch, st in zip(choices, starts):
        for k, v in enumerate(ch["values"]):
            if v is None:
                upper[st + k] = 0
    res = milp(c=-np.asarray(w, dtype=float), constraints=LinearConstraint(a.tocsr(), lo, hi),
               integrality=np.ones(n), bounds=Bounds(0, upper))
    if res.status != 0 or res.x is None:
        if none_if_infeasible and res.status == 2:
            return None
        raise NNBuildError(f"{analyzer}: ILP for {region.name} is {_STATUS.get(res.status, res.status)}"
                           f" ({res.message})")
    counts = [int(round(v)) for v in res.x]
    if max(abs(v - c) for v, c in zip(res.x, counts)) > 1e-6:
        raise NNBuildError(f"{analyzer}: ILP for {region.name} returned a non-integer solution")
    _check(rows, counts, region, analyzer)
    if any(c > 1 for c in counts[len(region.edges):len(region.edges) + n_aux]):
        raise NNBuildError(f"{analyzer}: ILP solution for {region.name} violates a constraint")
    cycles = sum(c * wi for c, wi in zip(counts, w))
    if abs(cycles + res.fun) > 1e-6 * max(1, abs(cycles)):
        raise NNBuildError(f"{analyzer}: ILP objective mismatch for {region.name}: {cycles} vs {-res.fun}")
    chosen = {}
    for ch, st in zip(choices, starts):
        key = (ch["node"], ch.get("site"))
        chosen[key] = chosen.get(key, 0) + sum(counts[st + k] * (v or 0) for k, v in enumerate(ch["values"]))
    info = {"variables": n, "constraints": len(rows), "status": _STATUS[res.status], "choice_cycles": chosen}
    if cap is not None:
        info["solution"] = counts
    return cycles, counts[:len(region.edges)], info


def _check(rows, counts, region, analyzer="builtin-avr"):
    """Re-check every constraint with exact integers (solver tolerances must not leak into a bound)."""
    for row, lo, hi in rows:
        v = sum(c * counts[i] for i, c in row.items())
        if v < lo or v > hi:
            raise NNBuildError(f"{analyzer}: ILP solution for {region.name} violates a constraint")


def write_lp(path, region, rows, w, n_aux=None):
    """The ILP in CPLEX LP format (x<i> = edge i; comments name the edges)."""
    n_edges = len(region.edges)
    n_aux = len(w) - n_edges if n_aux is None else n_aux
    lines = ["\\ IPET for " + region.name]
    for i, e in enumerate(region.edges):
        lines.append(f"\\ x{i}: {_name(e.src)} -> {_name(e.dst)} extra {e.extra}")
    for i in range(n_edges, len(w)):
        what = "auxiliary 0/1 of a path constraint" if i < n_edges + n_aux else "parametric callee choice"
        lines.append(f"\\ x{i}: {what}")
    lines.append("Maximize")
    lines.append(" obj: " + " + ".join(f"{wi} x{i}" for i, wi in enumerate(w) if wi) or " obj: 0")
    lines.append("Subject To")
    for k, (row, lo, hi) in enumerate(rows):
        expr = " ".join(f"{'+' if c >= 0 else '-'} {abs(c)} x{i}" for i, c in sorted(row.items()))
        if lo == hi:
            lines.append(f" c{k}: {expr} = {lo:g}")
        else:
            lines.append(f" c{k}: {expr} <= {hi:g}")
    if n_aux:
        lines.append("Bounds")
        lines += [f" 0 <= x{i} <= 1" for i in range(n_edges, n_edges + n_aux)]
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
