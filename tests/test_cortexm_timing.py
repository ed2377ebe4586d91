"""The Cortex-M4 / Cortex-M0+ cost tables (nnbuild/runners/cortexm_timing.py) and the
qemu-system-arm runner's exec-log reader: objdump text to per-address costs, taken and not-taken
branches, an executed instruction without a cost refused in one line."""

import pytest

from nnbuild import boards, wcet
from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing as timing
from nnbuild.runners import qemu_system


@pytest.mark.parametrize("mnemonic, expected", [
    ("bne", ("b", "ne")), ("bls", ("b", "ls")), ("bl", ("bl", None)), ("bleq", ("bl", "eq")),
    ("movs", ("mov", None)), ("lsls", ("lsl", None)), ("muls", ("mul", None)), ("bics", ("bic", None)),
    ("addseq.w", ("add", "eq")), ("mov.w", ("mov", None)), ("vadd.f32", ("vadd", None)),
    ("vcvt.s32.f32", ("vcvt", None)), ("ldrbeq", ("ldrb", "eq")), ("bxeq", ("bx", "eq")), ("itte", ("itte", None)),
])
def test_mnemonics_split_into_base_and_condition(mnemonic, expected):
    assert timing.split_mnemonic(mnemonic) == expected


@pytest.mark.parametrize("mnemonic, operands, m4, m0plus", [
    ("adds", "r0, r1, r2", (1, 1), (1, 1)),
    ("mov", "pc, lr", (4, 4), (2, 2)),                       # 1+P / 2 writing the PC
    ("muls", "r0, r1, r0", (1, 1), (1, 1)),
    ("smlad", "r0, r1, r2, r3", (1, 1), None),                # DSP: M4 only
    ("sdiv", "r0, r1, r2", (12, 12), None),
    ("ldr", "r3, [pc, #20]", (2, 2), (2, 2)),
    ("ldr.w", "pc, [sp], #4", (5, 5), (2, 2)),
    ("ldrd", "r0, r1, [r2]", (3, 3), None),
    ("str", "r0, [r1, #4]", (2, 2), (2, 2)),
    ("push", "{r4, r5, r6, lr}", (5, 5), (5, 5)),
    ("pop", "{r4, r5, pc}", (7, 7), (6, 6)),                  # M4 1+N+P, M0+ 3+N
    ("ldmia", "r0!, {r1-r4}", (5, 5), (5, 5)),
    ("b.n", "1c <f+0x1c>", (4, 4), (2, 2)),
    ("bne.n", "1c <f+0x1c>", (1, 4), (1, 2)),                 # (not taken, taken)
    ("bl", "100 <g>", (4, 4), (3, 3)),
    ("bx", "lr", (4, 4), (2, 2)),
    ("cbz", "r0, 1c <f+0x1c>", (1, 4), None),
    ("tbb", "[pc, r3]", (5, 5), None),
    ("vmul.f32", "s0, s1, s2", (1, 1), None),
    ("vmla.f32", "s0, s1, s2", (3, 3), None),
    ("vfma.f32", "s0, s1, s2", (3, 3), None),
    ("vdiv.f32", "s0, s1, s2", (14, 14), None),
    ("vsqrt.f32", "s0, s1", (14, 14), None),
    ("vldr", "s0, [r0, #4]", (2, 2), None),
    ("vldr", "d8, [r0]", (3, 3), None),
    ("vmov", "r0, r1, d0", (2, 2), None),
    ("vmov", "s0, r1", (1, 1), None),
    ("vpush", "{d8-d9}", (5, 5), None),                       # 1+N, N in 32-bit words
    ("vpop", "{s16-s18}", (4, 4), None),
    ("svc", "0", None, None), ("bkpt", "0x00ab", None, None), ("udf", "#255", None, None), ("wfi", "", None, None),
])
def test_each_instruction_costs_its_trm_row(mnemonic, operands, m4, m0plus):
    assert timing.m4_cycles(mnemonic, operands) == m4
    assert timing.m0plus_cycles(mnemonic, operands) == m0plus


def test_the_small_multiplier_option_costs_32_cycles():
    assert timing.MODELS["cortex-m0plus-smallmul"]("muls", "r0, r1, r0") == (32, 32)
    assert timing.MODELS["cortex-m0plus"]("muls", "r0, r1, r0") == (1, 1)


OBJDUMP = """
00000100 <f>:
     100:\tpush\t{r4, lr}
     102:\tcmp\tr0, #0
     104:\tbeq.n\t10a <f+0xa>
     106:\tadds\tr0, #1
     108:\tsvc\t0
     10a:\tpop\t{r4, pc}
     10c:\t.word\t0x00000010

00000200 <main>:
     200:\tbl\t100 <f>
     204:\tb.n\t204 <main+0x4>
"""


def test_cost_table_reads_objdump_text_and_lists_what_it_cannot_cost():
    table, unknown = timing.cost_table(OBJDUMP, "cortex-m4")
    assert table[0x100] == (3, 3, 0x102) and table[0x104] == (1, 4, 0x106) and table[0x10a] == (6, 6, 0x10c)
    assert 0x10c not in table and 0x108 not in table and unknown == [(0x108, "svc\t0")]
    m0, _ = timing.cost_table(OBJDUMP, "cortex-m0plus")
    assert m0[0x104] == (1, 2, 0x106) and m0[0x10a] == (5, 5, 0x10c) and m0[0x200] == (3, 3, 0x204)


def log_of(*events):
    """A `-d in_asm,exec,nochain` log: ("IN", [addresses]) translates a block, an int executes one."""
    lines = []
    for event in events:
        if isinstance(event, tuple):
            lines += ["IN: f"] + [f"0x{a:08x}:  bf00       nop" for a in event[1]] + [""]
        else:
            lines.append(f"Trace 0: 0x7f00 [00800400/{event:08x}/00000510/ff000200] f")
    return [line + "\n" for line in lines]


def test_a_call_is_charged_from_entry_to_return_with_each_branch_taken_or_not():
    table, _ = timing.cost_table(OBJDUMP, "cortex-m4")
    start, returns = qemu_system.call_sites(OBJDUMP, "p.elf", "f")
    assert (start, returns) == (0x100, {0x204})
    blocks = [("IN", [0x100, 0x102, 0x104]), ("IN", [0x10a]), ("IN", [0x204])]
    taken = log_of(*blocks, 0x100, 0x10a, 0x204)               # beq taken: 3 + 1 + 4, then pop {r4, pc}: 6
    assert qemu_system.cycles_per_call(taken, start, returns, table) == [3 + 1 + 4 + 6]
    not_taken = log_of(("IN", [0x100, 0x102, 0x104]), ("IN", [0x106]), ("IN", [0x10a]), ("IN", [0x204]),
                       0x204, 0x100, 0x106, 0x10a, 0x204, 0x100, 0x10a, 0x204)
    assert qemu_system.cycles_per_call(not_taken, start, returns, table) == [3 + 1 + 1 + 1 + 6, 3 + 1 + 4 + 6]


def test_an_executed_instruction_without_a_cost_stops_the_count_in_one_line():
    table, _ = timing.cost_table(OBJDUMP, "cortex-m4")
    log = log_of(("IN", [0x100, 0x102, 0x104]), ("IN", [0x106, 0x108]), ("IN", [0x10a]), 0x100, 0x106, 0x10a, 0x204)
    with pytest.raises(NNBuildError) as error:
        qemu_system.cycles_per_call(log, 0x100, {0x204}, table, "cortex-m4", "p.elf")
    assert str(error.value) == "p.elf: qemu-system-arm executed 0x108, which has no cortex-m4 cost"
    # outside the call nothing is charged: semihosting's BKPT in main costs nothing
    outside = log_of(("IN", [0x108]), ("IN", [0x100, 0x102, 0x104]), ("IN", [0x10a]), 0x108, 0x100, 0x10a, 0x204)
    assert qemu_system.cycles_per_call(outside, 0x100, {0x204}, table) == [3 + 1 + 4 + 6]


def test_the_log_read_in_any_pieces_and_in_either_form_gives_the_same_cycles(monkeypatch):
    """The runner reads the exec log in FIFO chunks, exec lines by their slashes: a chunk boundary
    anywhere (inside a listing, inside a line) and a log that is not of QEMU's usual form (read by
    the regex instead) give the cycles of the line-by-line reading."""
    table, _ = timing.cost_table(OBJDUMP, "cortex-m4")
    events = [("IN", [0x100, 0x102, 0x104]), ("IN", [0x106]), ("IN", [0x10a]), ("IN", [0x204]),
              0x204, 0x100, 0x106, 0x10a, 0x204, 0x100, 0x10a, 0x204, 0x100, 0x106, ("IN", [0x10a]), 0x10a, 0x204]
    usual = "".join(log_of(*events)).encode()
    expected = [3 + 1 + 1 + 1 + 6, 3 + 1 + 4 + 6, 3 + 1 + 1 + 1 + 6]
    assert qemu_system.cycles_per_call(log_of(*events), 0x100, {0x204}, table) == expected
    odd = usual.replace(b"IN: f\n", b"IN: f/odd\n", 1)   # a slash outside the exec lines: the regex reads it
    monkeypatch.setattr(qemu_system, "_PIECE", 1)   # each chunk read on its own
    for log in (usual, odd):
        for cut in range(1, len(log), 23):
            pieces = iter([log[:cut], log[cut:]])
            assert qemu_system.cycles_per_call_in_log(pieces, 0x100, {0x204}, table) == expected, (log, cut)


def test_boards_name_machines_and_cost_models_the_runner_has():
    schema = boards.schema()["properties"]
    assert set(schema["qemu_machine"]["enum"]) == set(qemu_system.MACHINES)
    assert set(timing.MODELS) <= set(schema["instruction_timing"]["enum"])
    for name, machine, model in (("stm32f407", "mps2-an386", "cortex-m4-flash-dcode"),
                                 ("rp2040", "microbit", "cortex-m0plus")):
        board = boards.load_board(name)
        assert board.runner is qemu_system and board.measures_cycles() and board.run_label() == "qemu-system-arm"
        assert board["qemu_machine"] == machine and board["instruction_timing"] == model
        assert board["wcet_tool"] == "builtin-thumb2" and board.get("clock_define") is None
        cited = {"stm32f407": ("RM0090 section 3.5.1", "RM0090 section 3.5.2"), "rp2040": ("RP2040 datasheet, section 2.6.2",)}
        assert all(clause in board["assumptions"] for clause in cited[name])
        assert "Zero-wait-state memory" in board["assumptions"] and "Open point" not in board["assumptions"]
        assert wcet.unavailable_reason(board) is None
        parts = qemu_system.check_program(board)
        assert parts["ldscript"].endswith(f"{machine}.ld") and all(p for p in parts["sources"])
        assert not any("F_CPU" in flag or "-T" in flag for flag in board["cflags"] + board["ldflags"])
    with pytest.raises(NNBuildError, match="qemu_machine 'virt' has no linker script"):
        qemu_system.machine({"name": "b", "qemu_machine": "virt"})
