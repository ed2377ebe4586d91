"""Visit facts in the AVR IPET (nnbuild.wcet.avr_visits): which blocks get an "at most once per
call" row, and which do not because the binary shares code between teams. Hand-built CFGs of a
team loop (header -> dispatch -> team cases -> latch -> header), solved with the real ILP."""

from nnbuild.wcet import avr_ilp, avr_loops, avr_visits
from nnbuild.wcet.cfg import ENTRY, EXIT, Block, Edge, Region
from nnbuild.wcet.avr_decode import Insn
from nnbuild.wcet.avr_paths import PathRows

#: team lines in t.c: A on 10-19, B on 20-29; the loop and dispatch on lines 1-9
FACTS = [{"name": "A", "function": "f", "file": "gen/t.c", "first_line": 10, "last_line": 19, "max_per_call": 1},
         {"name": "B", "function": "f", "file": "gen/t.c", "first_line": 20, "last_line": 29, "max_per_call": 1}]


def block(addr, line, call=False):
    insns = [Insn(addr, 2, "nop", (), file="t.c", line=line)]
    if call:
        insns.append(Insn(addr + 2, 4, "call", (), target=0x900, file="t.c", line=line))
    return Block(addr, insns, [(insns[-1], 0x900)] if call else [])


def team_loop(a_lines, b_lines, shared=None):
    """header 0x10 -> dispatch 0x20 -> A (0x30, call) | B (0x40, call) -> latch 0x50 -> header;
    header exits. `shared`: line of a call block 0x60 both teams run before the latch."""
    blocks = {0x10: block(0x10, 1), 0x20: block(0x20, 2), 0x30: block(0x30, a_lines, True),
              0x40: block(0x40, b_lines, True), 0x50: block(0x50, 3)}
    edges = [Edge(ENTRY, 0x10), Edge(0x10, 0x20), Edge(0x10, EXIT), Edge(0x20, 0x30), Edge(0x20, 0x40)]
    after = 0x50
    if shared is not None:
        blocks[0x60] = block(0x60, shared, True)
        edges.append(Edge(0x60, 0x50))
        after = 0x60
    edges += [Edge(0x30, after), Edge(0x40, after), Edge(0x50, 0x10)]
    return Region(0x10, "f (0x10)", blocks, {}, edges)


def bound(region, rows, passes=3, binaries=0):
    """Worst case of the loop (at most `passes` passes) with calls costing 100 and the given rows."""
    loops = avr_loops.find_loops(region)
    loops[0].bounds.append(("back", passes))
    cost = {n: (100 if b.calls else 1) for n, b in region.blocks.items()}
    return avr_ilp.solve(region, loops, cost, paths=PathRows(rows=list(rows), binaries=binaries))[0]


def rows_of(region, facts=FACTS):
    rows, notes, binaries = avr_visits.visit_rows(region, avr_loops.find_loops(region), facts)
    return rows, notes, binaries


def test_each_team_anchor_is_bounded_once_per_call():
    region = team_loop(11, 21)
    rows, notes, _ = rows_of(region)
    assert sorted(next(iter(r)) for r, _ in rows) == [("node", 0x30), ("node", 0x40)]
    assert all(hi == 1 for _, hi in rows)
    assert notes == ["visits A <= 1 per call: 1 of 1 anchor blocks", "visits B <= 1 per call: 1 of 1 anchor blocks"]
    # three passes of 103 cycles (+1 for the last header): without the rows every pass runs a
    # team's call; with them at most two passes can run (each must run A's or B's anchor)
    assert bound(region, []) == 3 * 103 + 1
    assert bound(region, rows) == 2 * 103 + 1


def test_code_both_teams_run_gets_no_row():
    """gcc merged a call both teams make and kept team A's line on it: a pass through B runs it
    too, so neither it nor B's call (on a path with it) is bounded; A's own call still is."""
    region = team_loop(11, 21, shared=12)
    rows, notes, _ = rows_of(region)
    assert [next(iter(r)) for r, _ in rows] == [("node", 0x30)]
    assert notes[0] == "visits A <= 1 per call: 1 of 2 anchor blocks (not bounded: a pass can run code of both A and B)"
    assert notes[1] == "visits B <= 1 per call: 0 of 1 anchor blocks (not bounded: a pass can run code of both B and A)"
    # B's passes still run the shared call every time: 3 passes through B and the shared call
    assert bound(region, rows) == bound(region, []) == 3 * 203 + 1


def test_a_call_on_every_pass_gets_no_row():
    """A team's call hoisted into code every pass runs (here: the dispatch) is not bounded."""
    region = team_loop(11, 21)
    region.blocks[0x20] = block(0x20, 13, call=True)
    rows, notes, _ = rows_of(region)
    assert ("node", 0x20) not in {k for r, _ in rows for k in r}
    assert "a pass can run code of both A and B" in notes[0]


def test_blocks_mixing_lines_of_two_teams_are_not_anchors():
    region = team_loop(11, 21)
    region.blocks[0x30].insns[0].line = 25  # the call block holds a B line too
    rows, notes, _ = rows_of(region)
    assert [next(iter(r)) for r, _ in rows] == [("node", 0x40)]
    assert notes[0] == "visits A <= 1 per call: 0 of 0 anchor blocks"


def test_facts_of_other_functions_do_not_apply():
    assert avr_visits.facts_for({"visits": FACTS}, "g") == []
    assert avr_visits.facts_for({}, "f") == []


def test_visited_teams_form_one_root_path_of_the_graph():
    """A and B are both children of the root R (whose code has no call): an inference visits one
    of them, never both. With the parents in the facts, one pass can run a team's call, and as
    every pass of this loop runs A's or B's, one pass is all there is; without them, two."""
    region = team_loop(11, 21)
    facts = [dict(FACTS[0], parents=["R"]), dict(FACTS[1], parents=["R"]),
             {"name": "R", "function": "f", "file": "t.c", "first_line": 4, "last_line": 9, "max_per_call": 1,
              "parents": []}]
    rows, notes, binaries = rows_of(region, facts)
    assert binaries == 3 + 2 and notes[-1] == "visits: the visited teams form one root path (3 teams, 2 edges)"
    assert bound(region, rows, binaries=binaries) == 103 + 1
    assert bound(region, rows_of(region)[0]) == 2 * 103 + 1


def test_path_rows_need_every_parent_and_one_root():
    region = team_loop(11, 21)
    orphan = [dict(FACTS[0], parents=["X"]), dict(FACTS[1], parents=[])]
    rows, notes, binaries = rows_of(region, orphan)
    assert binaries == 0 and len(rows) == 2 and not any("root path" in n for n in notes)
    two_roots = [dict(FACTS[0], parents=[]), dict(FACTS[1], parents=[])]
    assert rows_of(region, two_roots)[2] == 0
