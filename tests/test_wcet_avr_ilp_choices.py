"""Parametric callees in the AVR IPET (nnbuild.wcet.avr_ilp): a callee charged per value of a
counter may be unable to take the low values (its first block holds the counted instruction), and
then those values are left out instead of costing nothing. Hand-built CFG, real ILP."""

from nnbuild.wcet import avr_ilp
from nnbuild.wcet.cfg import ENTRY, EXIT, Block, Edge, Region
from nnbuild.wcet.avr_decode import Insn
from nnbuild.wcet.avr_paths import PathRows


def one_call():
    """ENTRY -> 0x10 (a call) -> EXIT."""
    insns = [Insn(0x10, 4, "call", (), target=0x900, file="t.c", line=1)]
    region = Region(0x10, "f (0x10)", {0x10: Block(0x10, insns, [(insns[0], 0x900)])}, {},
                    [Edge(ENTRY, 0x10), Edge(0x10, EXIT)])
    return region, {0x10: 4}


def choice(values):
    return {"node": 0x10, "values": values, "counter": "c", "site": 0x10}


def test_a_value_the_callee_cannot_take_is_never_chosen():
    region, cost = one_call()
    rows = PathRows(rows=[({("counter", "c"): 1}, 1)], counters={"c"})
    cycles, _, info = avr_ilp.solve(region, [], cost, paths=rows, choices=[choice([None, 50, 80])])
    assert cycles == 4 + 50 and info["choice_cycles"] == {(0x10, 0x10): 50}
    # without the row the costliest value wins; a 0 in place of None would change neither
    assert avr_ilp.solve(region, [], cost, paths=PathRows(), choices=[choice([None, 50, 80])])[0] == 84


def test_an_infeasible_cap_is_none_only_when_asked():
    region, cost = one_call()
    rows = PathRows(counters={"c"})
    got = avr_ilp.solve(region, [], cost, paths=rows, choices=[choice([None, 50])], cap=("c", 0),
                        none_if_infeasible=True)
    assert got is None
    capped, _, info = avr_ilp.solve(region, [], cost, paths=rows, choices=[choice([None, 50])], cap=("c", 1))
    assert capped == 54 and info["solution"][-2:] == [0, 1]
