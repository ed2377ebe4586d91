"""Visit facts: "this code runs at most N times per call of its function", as IPET rows.

The TPG generators know that each team is visited at most once per inference (the graph is
acyclic and walked root -> team -> ... -> action), but the switch shape runs the teams in one loop
whose bound alone lets the ILP charge the costliest team on every pass. A fact in
gen/<model>.flowfacts.json "visits" ({name, function, file, first_line, last_line, max_per_call,
parents, why}) names a team's source lines and the teams with an edge to it.

Line tables are not exact enough to bound "the team's code" as a whole: gcc merges identical
tails (a one-edge team's `state = 3` with another team's `next = 3`) and the loop latch may carry
the last team line before it. So a row bounds only the team's *anchor blocks*, where its cost is:
blocks that call something (a float operator, a libm or table helper) and whose every instruction
is on the team's lines. Each anchor executes at most max_per_call times per call of the region,
sound when an anchor runs only in passes that visit its team and at most once per pass:
* no pass can run anchors of two teams (no path between them without a loop back edge: code
  shared by teams, hoisted or merged, would put one on such a path);
* an anchor lies in no loop but the one around the teams, and some pass avoids it (it is not
  hoisted into code every pass runs).
Anchors that break a rule get no row, and the reason is reported; the bound is then the looser,
loop-bounded one for them, never unsound. With every team's `parents`, the anchors are bounded by
0/1 "visited" variables constrained to one root path of the team graph (so the ILP cannot add up the
costliest teams of different paths), else by max_per_call each.
"""

import os

from nnbuild.wcet.avr_loops import graph


def facts_for(facts, function):
    """The visit facts whose code lies in `function`."""
    return [f for f in facts.get("visits", []) if f.get("function") == function]


def _anchors(region, fact):
    """Blocks with a call whose every instruction is on the fact's lines."""
    base, lo, hi = os.path.basename(fact["file"]), int(fact["first_line"]), int(fact["last_line"])

    def mine(insn):
        return insn.file and os.path.basename(insn.file) == base and lo <= insn.line <= hi

    return {n for n, b in region.blocks.items() if b.calls and all(mine(i) for i in b.insns)}


def _reach(start, succ, without=frozenset()):
    seen, work = set(), [n for n in start if n not in without]
    while work:
        n = work.pop()
        if n not in seen:
            seen.add(n)
            work.extend(d for d in succ.get(n, ()) if d not in without)
    return seen


def _dag(region, loops):
    """Successors of the region's nodes with every loop back edge removed (one pass of each loop)."""
    backs = {i for l in loops for i in l.back_edges}
    succ, _ = graph(region)
    return {n: {d for d, i in out if i not in backs} for n, out in succ.items()}


def _skippable(region, loop, node, dag):
    """True when some pass of `loop` can go from its headers to a back edge without `node`."""
    latches = {region.edges[i].src for i in loop.back_edges}
    inside = {n: {d for d in ds if d in loop.body} for n, ds in dag.items() if n in loop.body}
    return bool(_reach(loop.headers, inside, frozenset([node])) & latches)


def visit_rows(region, loops, facts, first_aux=0):
    """(rows, notes, binaries) for the visit facts of this region's function: one row per anchor
    block, and one note per fact saying what was bounded or why not. When every fact names its
    team's `parents` (the teams with an edge to it; none for the root), the visited teams must
    also form one root path of that graph: a 0/1 variable per team (visited) and per edge (taken),
    numbered from `first_aux` ("aux" terms, avr_paths.PathRows), bound the anchors instead of the
    constant max_per_call. Without them the ILP could charge the costliest teams together even
    when no path of the graph visits them all."""
    dag = _dag(region, loops)
    back = {n: set() for n in dag}
    for n, ds in dag.items():
        for d in ds:
            back[d].add(n)
    anchors = {f["name"]: _anchors(region, f) for f in facts}
    owner = {n: name for name, ns in anchors.items() for n in ns}
    kept, notes = {}, []
    for fact in facts:
        name, mine, why = fact["name"], [], set()
        for n in sorted(anchors[name], key=lambda n: n if isinstance(n, int) else n[2]):
            around = [l for l in loops if n in l.body]
            others = sorted({owner[m] for m in _reach([n], dag) | _reach([n], back) if m in owner} - {name})
            if others:
                why.add(f"a pass can run code of both {name} and {others[0]}")
            elif len(around) > 1:
                why.add("an anchor is in a loop inside the team")
            elif around and not _skippable(region, around[0], n, dag):
                why.add("an anchor runs on every pass")
            else:
                mine.append(n)
        kept[name] = mine
        note = f"visits {name} <= {fact['max_per_call']} per call: {len(mine)} of {len(anchors[name])} anchor blocks"
        notes.append(note + (f" (not bounded: {'; '.join(sorted(why))})" if why else ""))
    graph_rows, binaries = _path_rows(facts, kept, first_aux)
    if graph_rows is not None:
        notes.append(f"visits: the visited teams form one root path ({len(facts)} teams, {binaries - len(facts)} edges)")
        return graph_rows, notes, binaries
    rows = [({("node", n): 1}, int(f["max_per_call"])) for f in facts for n in kept[f["name"]]]
    return rows, notes, 0


def _path_rows(facts, kept, first):
    """Rows tying each team's anchors to a 0/1 "visited" variable, and the visited teams to one
    root path of the team graph (visited non-root team: one taken edge into it; taken edges out of a
    team: at most one, and only if it was visited). (None, 0) when a fact has no `parents`, a
    parent is unknown, the facts do not have exactly one root, or a team may run more than once."""
    names = [f["name"] for f in facts]
    if (any("parents" not in f or int(f["max_per_call"]) != 1 for f in facts)
            or any(p not in names for f in facts for p in f["parents"])
            or sum(1 for f in facts if not f["parents"]) != 1):
        return None, 0
    visited = {name: first + k for k, name in enumerate(names)}
    edges = [(p, f["name"]) for f in facts for p in f["parents"]]
    taken = {e: first + len(names) + k for k, e in enumerate(edges)}
    rows = []
    for f in facts:
        name = f["name"]
        for n in kept[name]:
            rows.append(({("node", n): 1, ("aux", visited[name]): -1}, 0))
        if f["parents"]:
            row = {("aux", visited[name]): 1}
            row.update({("aux", taken[(p, name)]): -1 for p in f["parents"]})
            rows.append((row, 0))
        out = [taken[e] for e in edges if e[0] == name]
        if out:
            row = {("aux", k): 1 for k in out}
            row[("aux", visited[name])] = -1
            rows.append((row, 0))
    return rows, len(names) + len(edges)
