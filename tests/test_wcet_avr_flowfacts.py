"""Which generator flow fact bounds which loop in the AVR IPET (nnbuild.wcet.avr_loops.apply_flowfacts)
when avr-gcc's line table puts a `for` line into another loop. Hand-built CFGs, solved with the real
ILP: the worst case must run the loop as often as its own `for` says, never fewer times."""

from nnbuild.wcet import avr_ilp, avr_loops
from nnbuild.wcet.cfg import ENTRY, EXIT, Block, Edge, Region
from nnbuild.wcet.avr_decode import Insn

#: loop A's `for` on line 10 (body 11-14, 12 turns), loop B's on line 20 (body 21-24, 16 turns)
FACT_A = {"function": "f", "file": "gen/t.c", "line": 10, "last_line": 14, "max_iterations": 12}
FACT_B = {"function": "f", "file": "gen/t.c", "line": 20, "last_line": 24, "max_iterations": 16}


def block(addr, *lines):
    """A block of one `ld` per line (iteration work, so no block counts as a pure loop test)."""
    return Block(addr, [Insn(addr + 2 * k, 2, "ld", ("r24", "Z"), file="t.c", line=ln) for k, ln in enumerate(lines)])


def two_loops(b_header_lines):
    """Loop A (0x10 body, 0x20 latch testing line 10) then loop B (0x30 header with
    `b_header_lines`, 0x40 latch testing line 20): bottom-tested loops, one after the other."""
    blocks = {0x10: block(0x10, 11), 0x20: block(0x20, 10), 0x30: block(0x30, *b_header_lines),
              0x40: block(0x40, 20)}
    edges = [Edge(ENTRY, 0x10), Edge(0x10, 0x20), Edge(0x20, 0x10), Edge(0x20, 0x30),
             Edge(0x30, 0x40), Edge(0x40, 0x30), Edge(0x40, EXIT)]
    return Region(0x10, "f (0x10)", blocks, {}, edges)


def header_runs(region, facts):
    """Worst-case executions of loop B's header (the ILP with cost 1 on it, 0 elsewhere)."""
    loops = avr_loops.find_loops(region)
    avr_loops.apply_flowfacts(region, loops, facts)
    cost = {n: int(n == 0x30) for n in region.blocks}
    return avr_ilp.solve(region, loops, cost)[0], {l.header: l.bounds for l in loops}


def test_a_stray_for_line_does_not_bound_another_loop():
    """avr-gcc gave loop B's address computation the line of loop A's `for` (LeNet-5 q8: a pooling
    loop of 16 channels took 12 from an earlier layer's rows, 0.07% under a measured run). B holds
    no code of A's body, so A's fact is not B's."""
    region = two_loops([10, 21])
    runs, bounds = header_runs(region, [FACT_A, FACT_B])
    assert runs == 16
    assert bounds == {0x10: [("header", 12)], 0x30: [("header", 16)]}


def test_a_loop_matched_by_two_facts_takes_the_looser():
    """When both facts' bodies are in the loop, at most one `for` is the loop's own: the loosest
    bound is the sound one."""
    region = two_loops([10, 11, 21])
    runs, bounds = header_runs(region, [FACT_A, FACT_B])
    assert runs == 16 and bounds[0x30] == [("header", 16)]
    runs, bounds = header_runs(region, [dict(FACT_A, max_iterations=20), FACT_B])
    assert runs == 20 and bounds[0x30] == [("header", 20)]


def test_a_fact_without_last_line_still_matches_by_its_for_line():
    region = two_loops([21])
    facts = [{k: v for k, v in f.items() if k != "last_line"} for f in (FACT_A, FACT_B)]
    runs, bounds = header_runs(region, facts)
    assert runs == 16 and bounds == {0x10: [("header", 12)], 0x30: [("header", 16)]}


def test_a_one_line_loop_matches_by_its_for_line():
    """An assembly loop in a macro is one line: its `for` line is its body's too."""
    region = two_loops([20])
    facts = [FACT_A, dict(FACT_B, last_line=20)]
    runs, bounds = header_runs(region, facts)
    assert runs == 16 and bounds == {0x10: [("header", 12)], 0x30: [("header", 16)]}
