"""ARM7TDMI clocks per instruction (TRM DDI 0210C ch. 6, zero wait states): the one table the qemu-arm
measurement and the OTAWA bound both charge."""

import pytest

from nnbuild.runners import arm7tdmi_timing as timing


@pytest.mark.parametrize("mnemonic, operands, clocks", [
    ("mov", "r0, r1", 1),                         # data processing: 1S
    ("addeq", "r3, r3, r1, lsl #2", 1),           # immediate shift: free
    ("add", "r3, r3, r1, lsl r2", 2),             # register-specified shift: +1I
    ("lsl", "r3, r2, r3", 2),                     # UAL alias of mov r3, r2, lsl r3
    ("lsls", "r0, r0, #9", 1),
    ("mov", "pc, lr", 3),                         # PC written: +1S+1N
    ("cmp", "r3, #99", 1),
    ("mul", "r8, r7, r4", 5),                     # 1S + mI, m = 4 (worst early termination)
    ("mla", "r1, r8, r3, r1", 6),                 # 1S + (m+1)I
    ("smull", "r2, ip, r3, ip", 6),
    ("umlal", "r0, r1, r2, r3", 7),
    ("ldr", "r3, [fp, #-12]", 3),                 # 1S+1N+1I
    ("ldrsh", "r5, [r4, #12]", 3),
    ("ldrls", "pc, [pc, r3, lsl #2]", 5),         # load into the PC: +1S+1N
    ("str", "r3, [fp, #-8]", 2),                  # 2N
    ("strbne", "r3, [sp, #199]", 2),
    ("push", "{r4, fp, lr}", 4),                  # STM: (n-1)S + 2N
    ("stmib", "sp, {r0, r1, r2}", 4),
    ("pop", "{r4, fp, lr}", 5),                   # LDM: nS+1N+1I
    ("pop", "{r4, r5, pc}", 7),                   # with the PC: +1S+1N
    ("ldm", "r0, {r4-r7}", 6),
    ("b", "8350 <f+0x50>", 3),                    # 2S+1N
    ("bl", "92dc <atexit>", 3),
    ("bxeq", "lr", 3),
    ("svc", "0x00123456", 3),
    ("swp", "r0, r1, [r2]", 4),
    ("mrs", "r4, CPSR", 1),
])
def test_trm_clocks_per_class(mnemonic, operands, clocks):
    assert timing.cycles(mnemonic, operands) == clocks


def test_unknown_instruction_has_no_cost():
    assert timing.cycles("vadd.f32", "s0, s1, s2") is None
    assert timing.cycles("bics", "ip, r0, #1") == 1   # starts with b, is data processing


def test_cost_table_skips_data_and_lists_unknown_instructions():
    text = ("00008300 <f>:\n"
            "    8300:\tpush\t{fp}\t\t@ (str fp, [sp, #-4]!)\n"
            "    8304:\taddcc\tr0, r0, #8388608\n"
            "    8308:\tvmul.f32\ts0, s0, s1\n"
            "    830c:\t.word\t0x00001234\n"
            "/src/f.c:3\n")
    table, unknown = timing.cost_table(text)
    assert table == {0x8300: 2, 0x8304: 1}
    assert unknown == [(0x8308, "vmul.f32\ts0, s0, s1")]
    assert timing.render_table(table) == "8300 2\n8304 1\n"
