"""builtin-thumb2 (nnbuild/wcet/thumb2_*.py) on hand-written objdump listings: decoding and costs
from the one Cortex-M table, the STM32F4 flash-read charge, control kinds, CFG edges with their
taken extras, flow facts through line numbers, the pinned library table, call constants, and the
one-line stops (no cost, unbounded loop, unknown indirect jump)."""

import pytest

from nnbuild import wcet
from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing as timing
from nnbuild.wcet import thumb2_cfg as C
from nnbuild.wcet import thumb2_decode as D
from nnbuild.wcet import thumb2_ipet as T
from nnbuild.wcet import thumb2_loops as L
from nnbuild.wcet.cfg import EXIT

LISTING = """
check.elf:     file format elf32-littlearm

Disassembly of section .text:

00000100 <f>:
     100:\tb510      \tpush\t{r4, lr}
     102:\t2300      \tmovs\tr3, #0
     104:\t3301      \tadds\tr3, #1
     106:\t2b0a      \tcmp\tr3, #10
     108:\td1fc      \tbne.n\t104 <f+0x4>
     10a:\tf000 f801 \tbl\t110 <g>
     10e:\tbd10      \tpop\t{r4, pc}

00000110 <g>:
     110:\t4a01      \tldr\tr2, [pc, #4]\t@ (118 <g+0x8>)
     112:\t6810      \tldr\tr0, [r2, #0]
     114:\t4770      \tbx\tlr
     116:\tbf00      \tnop
     118:\t00001234 \t.word\t0x00001234
"""

FACTS = {"loops": [{"function": "f", "file": "f.c", "line": 5, "last_line": 6, "max_iterations": 10}],
         "layers": [{"name": "dense", "file": "f.c", "first_line": 4, "last_line": 7}]}


def program(listing=LISTING, model="cortex-m4", symbols=(("f", 0x100), ("g", 0x110)), lines=None):
    insns = D.parse_listing(listing, model)
    syms = [D.Symbol(name, addr, None, "T") for name, addr in symbols]
    prog = D.Program("synthetic.elf", insns, syms)
    prog.names = {s.addr: [s.name] for s in syms}
    prog.starts = sorted(prog.names)
    for addr, (file, line) in (lines if lines is not None else {0x104: ("f.c", 5), 0x106: ("f.c", 5), 0x108: ("f.c", 5)}).items():
        insns[addr].file, insns[addr].line = file, line
    return prog


def test_the_listing_decodes_with_sizes_targets_and_the_boards_costs():
    prog = program()
    assert sorted(prog.insns) == [0x100, 0x102, 0x104, 0x106, 0x108, 0x10a, 0x10e, 0x110, 0x112, 0x114, 0x116]
    bl, bne, pop = prog.insns[0x10a], prog.insns[0x108], prog.insns[0x10e]
    assert (bl.size, bl.target, bl.cost) == (4, 0x110, (4, 4))
    assert (bne.base, bne.cond, bne.target, bne.cost) == ("b", "ne", 0x104, (1, 4))
    assert pop.cost == (6, 6)                                   # 1 + N + P
    assert prog.insns[0x110].ops == ("r2", "[pc, #4]")
    m0 = program(model="cortex-m0plus")
    assert m0.insns[0x108].cost == (1, 2) and m0.insns[0x10a].cost == (3, 3)


def test_the_listing_decodes_and_costs_only_the_instructions_asked_for(monkeypatch):
    costed = []
    model = timing.MODELS["cortex-m4"]
    monkeypatch.setitem(timing.MODELS, "cortex-m4", lambda m, o: costed.append(m) or model(m, o))
    listing = D.Listing(LISTING, "cortex-m4", lines=lambda addr: ("f.c", addr))
    assert len(listing) == 11 and 0x118 not in listing and costed == []     # the .word is no instruction
    assert listing[0x108].cost == (1, 4) and listing[0x108].line == 0x108 and costed == ["bne.n"]
    assert [i.addr for i in listing.between(0x104, 0x10a)] == [0x104, 0x106, 0x108]
    assert len(costed) == 3                                     # 0x108 was not costed twice
    monkeypatch.undo()
    assert {a: (i.mnem, i.cost) for a, i in D.Listing(LISTING, "cortex-m4").items()} == \
        {a: (i.mnem, i.cost) for a, i in D.parse_listing(LISTING, "cortex-m4").items()}


@pytest.mark.parametrize("mnemonic, operands, words", [
    ("ldr", "r3, [pc, #20]", 1), ("ldr", "r3, [sp, #4]", 0), ("ldrsh.w", "r0, [r3], #2", 1),
    ("ldrd", "r0, r1, [r2]", 2), ("ldmia", "r0!, {r1-r4}", 4), ("ldmia.w", "sp!, {r4, pc}", 0),
    ("pop", "{r4, pc}", 0), ("vldr", "d8, [r0]", 2), ("vldmia", "r6!, {s0}", 1), ("vpop", "{d8}", 0),
    ("str", "r0, [r1]", 0), ("smlad", "r0, r1, r2, r0", 0),
])
def test_the_stm32f4_table_charges_one_clock_per_word_a_load_may_read_from_flash(mnemonic, operands, words):
    assert timing.flash_read_words(mnemonic, operands) == words
    plain, flash = timing.MODELS["cortex-m4"](mnemonic, operands), timing.MODELS["cortex-m4-flash-dcode"](mnemonic, operands)
    assert flash == (plain[0] + words, plain[1] + words)


@pytest.mark.parametrize("text, kind", [
    ("bx\tlr", C.RETURN), ("pop\t{r4, pc}", C.RETURN), ("ldmia.w\tsp!, {r4, r5, pc}", C.RETURN),
    ("ldr.w\tpc, [sp], #4", C.RETURN), ("mov\tpc, lr", C.RETURN), ("blx\tr3", C.INDIRECT_CALL),
    ("bx\tr3", C.INDIRECT_JUMP), ("mov\tpc, r3", C.INDIRECT_JUMP), ("tbb\t[pc, r3]", C.INDIRECT_JUMP),
    ("ldr\tpc, [r3, #4]", C.INDIRECT_JUMP), ("b.n\t104 <f+0x4>", C.JUMP), ("bne.n\t104 <f+0x4>", C.BRANCH),
    ("cbz\tr0, 104 <f+0x4>", C.BRANCH), ("bl\t110 <g>", C.CALL), ("smlad\tr0, r1, r2, r0", C.NEXT),
    ("popne\t{r4, pc}", C.RETURN),
])
def test_control_kinds(text, kind):
    insn = D.parse_listing(f"     200:\tbf00      \t{text}\n", "cortex-m4")[0x200]
    assert C.control(insn) == kind


def test_the_cfg_charges_the_taken_way_on_its_edge():
    prog = program()
    region = C.build_region(prog, 0x100)
    assert sorted(region.blocks) == [0x100, 0x104, 0x10a]
    edges = {(e.src, e.dst): e.extra for e in region.edges}
    assert edges[(0x104, 0x104)] == 3 and edges[(0x104, 0x10a)] == 0 and edges[(0x10a, EXIT)] == 0
    assert region.blocks[0x10a].calls == [(prog.insns[0x10a], 0x110)]
    assert C.block_cycles(prog, region.blocks[0x10a]) == 4 + 6


def test_the_bound_is_the_ipet_maximum_with_the_flow_fact(tmp_path):
    prog = program()
    an = T.Analyzer(prog, FACTS, [], str(tmp_path))
    top = an.region(0x100)
    # push + movs, 10 passes of 3 clocks + 9 taken back edges (+3), bl + pop, g: ldr ldr bx
    assert top.cycles == 4 + 30 + 27 + 10 + (2 + 2 + 4)
    assert top.breakdown["dense"] == 57 and top.breakdown[None] == top.cycles - 57
    assert an.used == {0}
    assert (tmp_path / "f_100.lp").exists()
    flash = program(model="cortex-m4-flash-dcode")
    assert T.Analyzer(flash, FACTS, [], None).region(0x100).cycles == top.cycles + 2   # two loads off SP


def test_a_loop_without_a_bound_stops_in_one_line_naming_function_and_address():
    prog = program(lines={})
    with pytest.raises(NNBuildError) as error:
        T.Analyzer(prog, FACTS, [], None).region(0x100)
    assert str(error.value) == ("builtin-thumb2: unbounded loop in f at f+0x4 (0x104): no flow fact or table entry")


def test_both_builtin_analyzers_word_a_missing_instruction_and_an_unbounded_loop_alike():
    """cfg.fetch and cfg.require_bounds serve builtin-avr and builtin-thumb2: one wording, the
    analyzer's name and what could bound a loop differ."""
    from nnbuild.wcet import avr_loops, cfg
    prog = program(lines={})
    with pytest.raises(NNBuildError) as error:
        cfg.fetch(prog, 0x10c, 0x100, "builtin-thumb2")
    assert str(error.value) == "synthetic.elf: builtin-thumb2: no instruction at 0x10c in f (reached from the region at f (0x100))"
    loops = L.find_loops(C.build_region(prog, 0x100))
    with pytest.raises(NNBuildError) as thumb:
        L.require_bounds(loops, prog)
    with pytest.raises(NNBuildError) as avr:
        avr_loops.require_bounds(None, loops, prog)
    assert str(avr.value) == str(thumb.value).replace("builtin-thumb2", "builtin-avr").replace(
        "flow fact or table entry", "flow fact, table entry or counter")


def test_a_table_entry_applies_only_to_the_pinned_code():
    prog = program(lines={})
    entry = {"symbol": "f", "offset": 4, "header_max": 10, "sha256": L.code_hash(prog, 0x100), "justification": "-"}
    assert T.Analyzer(prog, {}, [entry], None).region(0x100).cycles == 4 + 30 + 27 + 10 + 8
    other = dict(entry, sha256="0" * 64)
    with pytest.raises(NNBuildError, match=r"unbounded loop in f at f\+0x4 \(0x104\).*code hash differs"):
        T.Analyzer(prog, {}, [other], None).region(0x100)


def test_the_code_hash_does_not_move_with_the_callee():
    moved = LISTING.replace("bl\t110 <g>", "bl\t1110 <g>").replace("00000110 <g>", "00001110 <g>")
    for addr in ("110", "112", "114", "116", "118"):
        moved = moved.replace(f"     {addr}:", f"    1{addr}:")
    assert L.code_hash(program(), 0x100) == L.code_hash(
        program(moved, symbols=(("f", 0x100), ("g", 0x1110))), 0x100)
    changed = LISTING.replace("cmp\tr3, #10", "cmp\tr3, #11").replace("2b0a", "2b0b")
    assert L.code_hash(program(), 0x100) != L.code_hash(program(changed), 0x100)


def test_an_instruction_without_a_cost_stops_in_one_line():
    listing = LISTING.replace("2300      \tmovs\tr3, #0", "df00      \tsvc\t0")
    with pytest.raises(NNBuildError) as error:
        T.Analyzer(program(listing), FACTS, [], None).region(0x100)
    assert str(error.value) == "builtin-thumb2: no cycle cost for 'svc 0' in f at f+0x2 (0x102)"


def test_an_armv7m_instruction_has_no_cortex_m0plus_cost():
    listing = LISTING.replace("b510      \tpush\t{r4, lr}", "fb01 f202 \tsmlad\tr2, r1, r2, r3")
    with pytest.raises(NNBuildError, match=r"no cycle cost for 'smlad r2, r1, r2, r3' in f at f \(0x100\)"):
        T.Analyzer(program(listing, model="cortex-m0plus"), FACTS, [], None).region(0x100)


def test_an_indirect_jump_without_targets_stops_in_one_line():
    listing = LISTING.replace("4770      \tbx\tlr", "4718      \tbx\tr3")
    with pytest.raises(NNBuildError, match=r"^builtin-thumb2: indirect bx r3 in g at g\+0x4 \(0x114\): targets unknown"):
        T.Analyzer(program(listing), FACTS, [], None).region(0x100)


def test_constants_reaching_a_call_are_its_context():
    listing = """
00000100 <f>:
     100:\t2280      \tmovs\tr2, #128
     102:\t00d2      \tlsls\tr2, r2, #3
     104:\t2100      \tmovs\tr1, #0
     106:\t0020      \tmovs\tr0, r4
     108:\t3101      \tadds\tr1, #1
     10a:\tf000 f801 \tbl\t110 <g>
     10e:\t4770      \tbx\tlr

00000110 <g>:
     110:\t4770      \tbx\tlr
"""
    prog = program(listing, model="cortex-m0plus", lines={})
    block = C.build_region(prog, 0x100).blocks[0x100]
    assert T.call_constants(prog, block, prog.insns[0x10a]) == {"r2": 1024, "r1": 1}
    clobbered = listing.replace("0020      \tmovs\tr0, r4", "c80e      \tldmia\tr0!, {r1-r3}")
    prog = program(clobbered, model="cortex-m0plus", lines={})
    block = C.build_region(prog, 0x100).blocks[0x100]
    assert T.call_constants(prog, block, prog.insns[0x10a]) == {}    # the list's range wrote r2 and r1
    stored = listing.replace("0020      \tmovs\tr0, r4", "c204      \tstmia\tr2!, {r2}")
    prog = program(stored, model="cortex-m0plus", lines={})
    block = C.build_region(prog, 0x100).blocks[0x100]
    assert T.call_constants(prog, block, prog.insns[0x10a]) == {"r1": 1}   # the written-back base


def test_builtin_thumb2_is_a_registered_analyzer():
    assert wcet.analyzer_module("builtin-thumb2") is T


def test_a_top_tested_loop_runs_its_header_once_more_than_its_body():
    listing = """
00000100 <f>:
     100:\t2300      \tmovs\tr3, #0
     102:\t2b0a      \tcmp\tr3, #10
     104:\tda02      \tbge.n\t10c <f+0xc>
     106:\t3301      \tadds\tr3, #1
     108:\te7fb      \tb.n\t102 <f+0x2>
     10a:\tbf00      \tnop
     10c:\t4770      \tbx\tlr
"""
    prog = program(listing, symbols=(("f", 0x100),), lines={0x102: ("f.c", 5), 0x104: ("f.c", 5),
                                                           0x106: ("f.c", 6), 0x108: ("f.c", 6)})
    top = T.Analyzer(prog, FACTS, [], None).region(0x100)
    assert top.info["loops"][0]["bounds"] == [("back", 10)]
    # movs, 11 tests (cmp + bge not taken), 10 passes (adds + b), the exit taken (+3), bx lr
    assert top.cycles == 1 + 11 * 2 + 10 * 5 + 3 + 4


def test_an_indirect_call_takes_its_targets_from_the_flow_facts():
    listing = """
00000100 <f>:
     100:\tb510      \tpush\t{r4, lr}
     102:\t4798      \tblx\tr3
     104:\tbd10      \tpop\t{r4, pc}

00000106 <h>:
     106:\t2001      \tmovs\tr0, #1
     108:\t4770      \tbx\tlr
"""
    prog = program(listing, symbols=(("f", 0x100), ("h", 0x106)), lines={0x102: ("f.c", 9)})
    with pytest.raises(NNBuildError, match=r"^builtin-thumb2: indirect blx r3 in f at f\+0x2 \(0x102\): targets unknown"):
        T.Analyzer(prog, {}, [], None).region(0x100)
    for site in ({"function": "f", "offset": 2}, {"file": "src/f.c", "line": 9}, {"address": "0x102"}):
        facts = {"indirect": [{**site, "targets": ["h"]}]}
        assert T.Analyzer(prog, facts, [], None).region(0x100).cycles == 3 + 4 + 6 + (1 + 4)


def test_a_bl_into_its_own_function_is_a_far_jump_not_a_recursion():
    """ARMv6-M code branches beyond B's 2 KB reach with BL to a label of the same function (gcc's
    far jump, as in the rp2040's CifarNet): a jump inside the region; a BL to the function's own
    start stays a call (a recursion)."""
    listing = """
00000100 <f>:
     100:\tb500      \tpush\t{lr}
     102:\t2300      \tmovs\tr3, #0
     104:\t3301      \tadds\tr3, #1
     106:\t2b0a      \tcmp\tr3, #10
     108:\td001      \tbeq.n\t10e <f+0xe>
     10a:\tf7ff fffb \tbl\t104 <f+0x4>
     10e:\tbd00      \tpop\t{pc}
"""
    prog = program(listing, symbols=(("f", 0x100),), model="cortex-m0plus",
                   lines={0x104: ("f.c", 5), 0x106: ("f.c", 5), 0x108: ("f.c", 5), 0x10a: ("f.c", 5)})
    assert C.control(prog.insns[0x10a], prog) == C.JUMP and C.control(prog.insns[0x10a]) == C.CALL
    region = C.build_region(prog, 0x100)
    assert region.blocks[0x10a].calls == [] and (0x10a, 0x104) in {(e.src, e.dst) for e in region.edges}
    top = T.Analyzer(prog, FACTS, [], None).region(0x100)
    # the header leaves the loop: 10 back edges (far jumps, bl: 3) bound it, 11 header passes of adds +
    # cmp + beq, the last taken (+1); push {lr} 2, movs 1, pop {pc} 4
    assert top.info["loops"][0]["bounds"] == [("back", 10)]
    assert top.cycles == 2 + 1 + 11 * 3 + 1 + 10 * 3 + 4
    recursive = program(listing.replace("bl\t104 <f+0x4>", "bl\t100 <f>"), symbols=(("f", 0x100),), model="cortex-m0plus")
    with pytest.raises(NNBuildError, match="recursion in f"):
        T.Analyzer(recursive, FACTS, [], None).region(0x100)
