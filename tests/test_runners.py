"""Runners with the real tools: gcc on the host, avr-gcc + libsimavr for cycle-exact AVR runs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnbuild.errors import NNBuildError
from nnbuild.runners import CHECK_MAIN, check_main_defines, native, simavr

ROOT = Path(__file__).resolve().parents[1]
BOARD = json.loads((ROOT / "toolchains" / "avr.json").read_text())
HOST_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2", "-ffp-contract=off"]

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
needs_avr = pytest.mark.skipif(
    not (shutil.which(BOARD["cc"]) and shutil.which(BOARD["nm"])),
    reason=f"{BOARD['cc']}/{BOARD['nm']} not installed: {BOARD['install_hint']}")

TINY_H = """\
#ifndef TINY_H
#define TINY_H
void tiny_infer(const float in[3], float out[2]);
#endif
"""

# The branch on s makes the cycle count data dependent.
TINY_C = """\
#include "tiny.h"
void tiny_infer(const float in[3], float out[2])
{
    float s = in[0] + in[1];
    float p = in[0] * in[2];
    if (s > 0.0f) {
        int i;
        for (i = 0; i < 4; ++i)
            p = p * 0.5f + s;
    }
    out[0] = s;
    out[1] = p - in[2];
}
"""


def tiny_expected(x):
    """The tiny model in numpy float32, one rounding per C operation, as C99 does it."""
    out = np.empty((len(x), 2), np.float32)
    for k, (a, b, c) in enumerate(x):
        s = np.float32(a + b)
        p = np.float32(a * c)
        if s > 0:
            for _ in range(4):
                p = np.float32(np.float32(p * np.float32(0.5)) + s)
        out[k] = (s, np.float32(p - c))
    return out


def tiny_inputs():
    """Seeded random cases plus fixed ones: repeats, and a pair that differs only in the branch."""
    rng = np.random.default_rng(1234)
    rand = rng.uniform(-4, 4, size=(12, 3)).astype(np.float32)
    fixed = np.array([[1.5, 2.25, -3.0], [1.5, 2.25, -3.0],     # identical: same cycles
                      [-1.5, -2.25, -3.0],                       # s < 0: loop skipped
                      [0.1, 0.2, 0.3], [0.0, 0.0, 7.0]], np.float32)
    return np.concatenate([fixed, rand])


def write_model(d, name="tiny", body=TINY_C):
    (d / f"{name}.h").write_text(TINY_H.replace("tiny", name))
    (d / f"{name}.c").write_text(body.replace("tiny", name))
    return d / f"{name}.c"


def compile_host(d, name="tiny", body=TINY_C):
    src = write_model(d, name, body)
    exe = d / f"{name}_host"
    subprocess.run(["gcc", *HOST_FLAGS, *check_main_defines(f"{name}.h", f"{name}_infer", 3, 2),
                    f"-I{d}", str(CHECK_MAIN), str(src), "-o", str(exe)], check=True)
    return exe


def compile_avr(d, sources, defines=(), out="fw.elf"):
    """Compile and link with the board's own flags from toolchains/avr.json."""
    elf = d / out
    cmd = [BOARD["cc"], *BOARD["cflags"], BOARD["opt"], *defines, f"-I{d}",
           *[str(s) for s in sources], *BOARD["ldflags"], *[f"-l{lib}" for lib in BOARD["libs"]],
           "-o", str(elf)]
    subprocess.run(cmd, check=True)
    return elf


def compile_avr_model(d, name="tiny", body=TINY_C):
    src = write_model(d, name, body)
    return compile_avr(d, [CHECK_MAIN, src],
                       check_main_defines(f"{name}.h", f"{name}_infer", 3, 2), f"{name}.elf")


def sim(elf, x, harness, **kw):
    return simavr.run_cases(elf, x, 2, entry_symbol=elf.stem + "_infer", mcu=BOARD["mcu"],
                            freq=BOARD["clock_hz"], harness=harness, nm=BOARD["nm"], **kw)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    try:
        return simavr.build_harness(tmp_path_factory.mktemp("harness") / "simavr_run")
    except NNBuildError as exc:
        if simavr.INSTALL_HINT in str(exc):
            pytest.skip(str(exc))
        raise


# --- host -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_host(tmp_path_factory):
    """The tiny model's host program, compiled once for the tests that run it unchanged."""
    return compile_host(tmp_path_factory.mktemp("tiny_host"))


@needs_gcc
def test_native_bit_exact(tiny_host):
    x = tiny_inputs()
    y = native.run_cases(tiny_host, x, 2)
    assert y.dtype == np.float32 and y.shape == (len(x), 2)
    assert y.tobytes() == tiny_expected(x).tobytes()


@needs_gcc
def test_native_empty_batch(tiny_host):
    y = native.run_cases(tiny_host, np.zeros((0, 3), np.float32), 2)
    assert y.shape == (0, 2)


@needs_gcc
def test_native_crash_is_one_line_naming_executable(tmp_path):
    body = "#include <stdlib.h>\n" + TINY_C.replace("out[0] = s;", "if (s > 100.0f) abort();\n    out[0] = s;")
    exe = compile_host(tmp_path, "boom", body)
    with pytest.raises(NNBuildError) as err:
        native.run_cases(exe, np.array([[1, 2, 3], [200, 0, 0]], np.float32), 2)
    msg = str(err.value)
    assert str(exe) in msg and "SIGABRT" in msg and "\n" not in msg


def test_native_missing_executable(tmp_path):
    with pytest.raises(NNBuildError, match="not found"):
        native.run_cases(tmp_path / "nope", np.zeros((1, 3), np.float32), 2)


def test_native_rejects_float64(tmp_path):
    with pytest.raises(NNBuildError, match="float32"):
        native.run_cases(tmp_path / "nope", np.zeros((1, 3)), 2)


# --- AVR ------------------------------------------------------------------------------

@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_bit_exact_and_cycles(tmp_path, harness):
    x = tiny_inputs()
    y, cycles = sim(compile_avr_model(tmp_path), x, harness)
    assert y.dtype == np.float32 and cycles.dtype == np.int64
    assert y.tobytes() == tiny_expected(x).tobytes()
    assert (cycles > 0).all()
    assert cycles[0] == cycles[1]                  # identical inputs, identical count
    assert cycles[2] < cycles[0] - 100             # branch not taken: no 4 float mul+add


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
@needs_gcc
def test_avr_matches_host(tmp_path, harness):
    x = tiny_inputs()
    y_avr, _ = sim(compile_avr_model(tmp_path), x, harness)
    assert y_avr.tobytes() == native.run_cases(compile_host(tmp_path), x, 2).tobytes()


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_runs_are_reproducible(tmp_path, harness):
    elf, x = compile_avr_model(tmp_path), tiny_inputs()
    _, c1 = sim(elf, x, harness)
    _, c2 = sim(elf, x[::-1].copy(), harness)
    assert (c1 == c2[::-1]).all()                  # no state leaks between cases


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_cycle_limit(tmp_path, harness):
    body = TINY_C.replace("out[0] = s;", "while (s > 100.0f) { __asm__ __volatile__(\"\"); }\n    out[0] = s;")
    elf = compile_avr_model(tmp_path, "spin", body)
    with pytest.raises(NNBuildError, match=r"cycle limit 100000 exceeded .*case 1\)") as err:
        sim(elf, np.array([[1, 2, 3], [200, 0, 0]], np.float32), harness, max_cycles=100000)
    assert str(elf) in str(err.value)


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_crash(tmp_path, harness):
    body = TINY_C.replace("out[0] = s;", "if (s > 100.0f) { void (*volatile f)(void) = 0; f(); }\n    out[0] = s;")
    elf = compile_avr_model(tmp_path, "crash", body)
    with pytest.raises(NNBuildError, match="crashed"):
        sim(elf, np.array([[200, 0, 0]], np.float32), harness)


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_wrong_model_size(tmp_path, harness):
    with pytest.raises(NNBuildError, match="nnbuild_in holds 3 floats, expected 4"):
        sim(compile_avr_model(tmp_path), np.zeros((1, 4), np.float32), harness)


@pytest.mark.e2e  # avr-gcc
@needs_avr
def test_symbol_addresses(tmp_path):
    elf = compile_avr_model(tmp_path)
    addr = simavr.symbol_addresses(elf, ["nnbuild_in", "nnbuild_ready"], nm=BOARD["nm"])
    assert addr["nnbuild_in"] >= simavr.RAM_OFFSET and addr["nnbuild_ready"] < simavr.RAM_OFFSET
    with pytest.raises(NNBuildError, match="symbol.*not found: nosuch"):
        simavr.symbol_addresses(elf, ["nosuch"], nm=BOARD["nm"])


# --- the cycle-count method against a hand count (wcet.md section 3, AVRe) ------------

HAND_S = r"""
    .section .text.handfn,"ax",@progbits
    .global handfn
    .type handfn, @function
handfn:                     ; x in r24         x=0   x!=0
    mov  r18, r24           ; 1
    ldi  r19, 3             ; 1
1:  dec  r19                ; 1 x3
    brne 1b                 ; 2 taken x2, 1 not taken
    push r18                ; 2
    pop  r18                ; 2
    adiw r26, 1             ; 2
    mul  r18, r19           ; 2
    clr  r1                 ; 1
    lds  r20, handvar       ; 2
    tst  r24                ; 1
    breq 2f                 ;                   2     1
    rjmp 3f                 ;                   -     2
2:  nop                     ;                   1     -
    nop                     ;                   1     -
3:  sbrc r24, 1             ; x=0,1: skip 1-word inc = 2; x=2: 1 + inc 1
    inc  r24
    sbrs r24, 0             ; bit 0 set: skip 2-word lds = 3; clear: 1 + lds 2
    lds  r21, handvar
    ldi  r30, lo8(handtab)  ; 1
    ldi  r31, hi8(handtab)  ; 1
    lpm  r0, Z              ; 3
    ret                     ; 4
    .size handfn, .-handfn

    .global handret
    .type handret, @function
handret:
    ret                     ; 4
    .size handret, .-handret

    .section .progmem.data,"a",@progbits
handtab: .byte 1
    .data
handvar: .byte 7
"""

HAND_MAIN = """\
extern unsigned char handfn(unsigned char x);
extern void handret(void);
volatile unsigned char arg[3] = {0, 2, 1};
volatile unsigned char sink;
int main(void)
{
    int i;
    for (i = 0; i < 3; ++i)
        sink = handfn(arg[i]);
    handret();
    return 0;
}
"""


def hand_count(x):
    """handfn's cycles by the AVRe table: prologue and loop, then the x-dependent tail."""
    head = 1 + 1 + 3 * 1 + (2 + 2 + 1) + 2 + 2 + 2 + 2 + 1 + 2 + 1       # = 22
    branch = (2 + 1 + 1) if x == 0 else (1 + 2)                          # breq/nops or rjmp
    after_inc = x + 1 if x & 2 else x
    skip1 = (1 + 1) if x & 2 else 2                                      # sbrc over inc
    skip2 = 3 if after_inc & 1 else (1 + 2)                              # sbrs over lds
    return head + branch + skip1 + skip2 + 1 + 1 + 3 + 4


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_measured_cycles_equal_hand_count(tmp_path, harness):
    (tmp_path / "hand.S").write_text(HAND_S)
    (tmp_path / "main.c").write_text(HAND_MAIN)
    elf = compile_avr(tmp_path, [tmp_path / "main.c", tmp_path / "hand.S"])
    kw = dict(mcu=BOARD["mcu"], freq=BOARD["clock_hz"], harness=harness, nm=BOARD["nm"])
    cycles = simavr.measure_calls(elf, "handfn", **kw)
    assert [hand_count(x) for x in (0, 2, 1)] == [40, 39, 39]
    assert cycles.tolist() == [40, 39, 39]
    assert simavr.measure_calls(elf, "handret", **kw).tolist() == [4]   # RET only, CALL excluded


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_measured_stack_equals_hand_count_and_bound(tmp_path, harness):
    """stack = return address (2) + pushes: handfn pushes one byte, handret none."""
    from nnbuild.wcet.avr_stack import stack_bound
    (tmp_path / "hand.S").write_text(HAND_S)
    (tmp_path / "main.c").write_text(HAND_MAIN)
    elf = compile_avr(tmp_path, [tmp_path / "main.c", tmp_path / "hand.S"])
    kw = dict(mcu=BOARD["mcu"], freq=BOARD["clock_hz"], harness=harness, nm=BOARD["nm"], with_stack=True)
    for fn, expected in (("handfn", 3), ("handret", 2)):
        cycles, stack = simavr.measure_calls(elf, fn, **kw)
        assert stack.dtype == np.int64 and stack.tolist() == [expected] * len(cycles)
        assert stack_bound(elf, fn, BOARD)["bytes"] == expected


@pytest.mark.e2e  # avr-gcc and simavr
@needs_avr
def test_avr_run_cases_with_stack(tmp_path, harness):
    elf, x = compile_avr_model(tmp_path), tiny_inputs()
    y, cycles, stack = sim(elf, x, harness, with_stack=True)
    y0, cycles0 = sim(elf, x, harness)                      # default return is unchanged
    assert y.tobytes() == y0.tobytes() and (cycles == cycles0).all()
    assert stack.dtype == np.int64 and stack.shape == (len(x),) and (stack > 2).all()
    empty = sim(elf, np.zeros((0, 3), np.float32), harness, with_stack=True)
    assert [a.shape for a in empty] == [(0, 2), (0,), (0,)]


# --- harness build, output format and CLI --------------------------------------------

def test_parse_records_exact():
    recs = simavr.parse_records("cycles=12 calls=1 out=0000803f\ncycles=3 calls=2 out=\n")
    assert recs == [simavr.Record(12, 1, bytes.fromhex("0000803f")), simavr.Record(3, 2, b"")]
    recs = simavr.parse_records("cycles=12 calls=1 stack=1088 out=0000803f\ncycles=0 calls=0 stack=0 out=\n")
    assert recs == [simavr.Record(12, 1, bytes.fromhex("0000803f"), 1088), simavr.Record(0, 0, b"", 0)]
    with pytest.raises(NNBuildError, match="unexpected harness output"):
        simavr.parse_records("cycles=12 calls=1 stack= out=\n")
    with pytest.raises(NNBuildError, match="does not report stack"):
        simavr._stack_column(simavr.parse_records("cycles=1 calls=1 out=\n"), "fw.elf")
    with pytest.raises(NNBuildError, match="unexpected harness output"):
        simavr.parse_records("Loaded 1234 .text\n")


def test_missing_libsimavr_is_recognised():
    assert simavr._missing_simavr(
        "simavr_run.c:38:10: fatal error: sim_avr.h: No such file or directory")
    assert simavr._missing_simavr("/usr/bin/ld: cannot find -lsimavr: No such file or directory")
    assert not simavr._missing_simavr("simavr_run.c:40:5: error: expected ';' before '}' token")


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
@needs_gcc
def test_cli_build_harness(tmp_path, harness):
    out = tmp_path / "sub" / "simavr_run"
    proc = subprocess.run([sys.executable, "-m", "nnbuild.runners.simavr", "build-harness",
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and out.exists()
    usage = subprocess.run([str(out)], capture_output=True, text=True)
    assert usage.returncode == 1 and usage.stderr.startswith("simavr_run: usage:")


def test_check_main_define_spelling():
    assert check_main_defines("f1tenth.h", "f1tenth_infer", 61, 1) == [
        '-DNN_HEADER="f1tenth.h"', "-DNN_INFER=f1tenth_infer", "-DNN_IN=61", "-DNN_OUT=1"]


@pytest.mark.e2e  # avr-gcc
@needs_avr
@needs_gcc
def test_check_main_compiles_clean_both_targets(tmp_path):
    """-Werror -pedantic on the host and with the AVR board flags, at -Os and -O2."""
    write_model(tmp_path)
    d = check_main_defines("tiny.h", "tiny_infer", 3, 2)
    for cmd in (["gcc", *HOST_FLAGS, "-Os"], [BOARD["cc"], *BOARD["cflags"], "-Os"],
                [BOARD["cc"], *BOARD["cflags"], "-O2"]):
        subprocess.run([*cmd, *d, f"-I{tmp_path}", "-c", str(CHECK_MAIN), "-o",
                        str(tmp_path / "m.o")], check=True)


def test_qemu_instruction_count_follows_blocks_from_entry_to_return(tmp_path):
    """The exec-log reader: block sizes from `in_asm`, executions from `exec`, one count per call."""
    from nnbuild.runners import qemu_user
    log = tmp_path / "exec.log"
    log.write_text("IN: f\n0x00001000:  e1a00000  mov r0, r0\n0x00001004:  e12fff1e  bx lr\n\n"
                   "Trace 0: 0x7f00 [00000480/00001000/00000000/00000200] f\n"
                   "IN: main\n0x00002004:  e1a00000  mov r0, r0\n\n"
                   "Trace 0: 0x7f01 [00000480/00002004/00000000/00000200] main\n"
                   "Trace 0: 0x7f00 [00000480/00001000/00000000/00000200] f\n"
                   "IN: g\n0x00003000:  e1a00000  mov r0, r0\n0x00003004:  e1a00000  mov r0, r0\n"
                   "0x00003008:  e12fff1e  bx lr\n\n"
                   "Trace 0: 0x7f02 [00000480/00003000/00000000/00000200] g\n"
                   "Trace 0: 0x7f01 [00000480/00002004/00000000/00000200] main\n")
    assert qemu_user.instructions_per_call(log, 0x1000, {0x2004}) == [2, 5]
    assert list(qemu_user.traced_pcs(log.read_text().splitlines())) == [0x1000, 0x2004, 0x1000, 0x3000, 0x2004]


def test_qemu_charges_each_executed_instruction_its_timing_cost(tmp_path):
    """instruction_timing: every executed instruction of a call costs its ARM7TDMI clocks; an executed
    address without a cost stops the count (no default)."""
    from nnbuild.errors import NNBuildError
    from nnbuild.runners import qemu_user
    text = ("00001000 <f>:\n    1000:\tmul\tr0, r1, r2\n    1004:\tbx\tlr\n"
            "00002000 <main>:\n    2000:\tbl\t1000 <f>\n    2004:\tmov\tr0, r0\n")
    board = {"name": "arm", "instruction_timing": "arm7tdmi"}
    cost = qemu_user.instruction_cost(board, text, "p.elf")
    assert qemu_user.call_sites(text, "p.elf", "f") == (0x1000, {0x2004})
    log = tmp_path / "exec.log"
    log.write_text("IN: f\n0x00001000:  e0000291  mul r0, r1, r2\n0x00001004:  e12fff1e  bx lr\n\n"
                   "Trace 0: 0x7f00 [00000480/00001000/00000000/00000200] f\n"
                   "IN: main\n0x00002004:  e1a00000  mov r0, r0\n\n"
                   "Trace 0: 0x7f01 [00000480/00002004/00000000/00000200] main\n")
    assert qemu_user.instructions_per_call(log, 0x1000, {0x2004}, cost) == [5 + 3]
    with pytest.raises(NNBuildError, match="executed 0x3000, which has no arm7tdmi cost"):
        cost(0x3000)
    with pytest.raises(NNBuildError, match="unknown instruction_timing 'arm9'"):
        qemu_user.instruction_cost({**board, "instruction_timing": "arm9"}, text, "p.elf")
    assert qemu_user.instruction_cost({"instruction_cycles": 5}, text, "p.elf")(0x3000) == 5
