"""The loops of nnbuild/wcet/thumb2_libloops.json driven to their bounds on qemu-system-arm: each
routine is called from a small program built for its board, every executed instruction is traced
(-singlestep), the loop header's executions per call reach the table's bound and never pass it,
and builtin-thumb2's bound of the calling function is >= the cycles the runner charges each call."""

import json
import subprocess

import pytest

from conftest import have
from nnbuild import boards
from nnbuild.runners import cortexm_timing, qemu_system
from nnbuild.runners.qemu_user import call_sites, disassembly
from nnbuild.wcet import thumb2_cfg, thumb2_decode, thumb2_ipet, thumb2_loops

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]
TABLE = {(e["symbol"], e["offset"]): e for e in thumb2_loops.load_table()}

FDIV_C = r"""
volatile float num[] = {NUM};
volatile float den[] = {DEN};
volatile float sink;
__attribute__((noinline)) float divide(float x, float y) { return x / y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof num / sizeof num[0]; ++k)
        sink = divide(num[k], den[k]);
    return 0;
}
"""
#: mantissa(x) < mantissa(y): the 27-pass way in; >=: 26 passes; subnormals, zeros, infinities and
#: NaNs take the other ways of the class dispatch (a jump table the analyzer reads from the image)
FDIV_CASES = [("1.0f", "1.5f"), ("1.5f", "1.0f"), ("1.0f", "1.99999988f"), ("3.0f", "7.0f"), ("1e-40f", "3.0f"),
              ("3.0f", "1e-40f"), ("0.0f", "2.0f"), ("2.0f", "0.0f"), ("1.0f/0.0f", "2.0f"), ("0.0f/0.0f", "1.0f"),
              ("1e38f", "1e-38f"), ("1e-38f", "1e38f")]


def build(tmp_path, board, name, source):
    src, elf = tmp_path / f"{name}.c", tmp_path / f"{name}.elf"
    src.write_text(source)
    parts = qemu_system.check_program(board)
    board.compiler.build_executable(board, [src, *parts["sources"]], elf, ldscript=parts["ldscript"])
    return elf


def traced(board, elf, log, *extra):
    subprocess.run([*qemu_system.command(board, log)[:-1], *extra, "-kernel", str(elf)], stdin=subprocess.DEVNULL,
                   check=True, timeout=300, capture_output=True)
    with open(log, errors="replace") as lines:
        yield from lines


def charged_cycles(board, elf, entry, log):
    """The clocks the qemu-system-arm runner charges each call of `entry` (its own reader)."""
    text = disassembly(board, elf)
    start, returns = call_sites(text, elf, entry)
    table, _ = cortexm_timing.cost_table(text, board["instruction_timing"])
    return qemu_system.cycles_per_call(traced(board, elf, log), start, returns, table)


def header_passes(board, elf, entry, header, log):
    """Executions of `header` during each call of `entry` (every instruction traced)."""
    text = disassembly(board, elf)
    start, _ = call_sites(text, elf, entry)
    counts = []
    for line in traced(board, elf, log, "-singlestep"):
        pc = qemu_system._traced_pc(line) if line.startswith("Trace ") else None
        if pc == start:
            counts.append(0)
        elif pc == header and counts:
            counts[-1] += 1
    return counts


def test_soft_float_division_loop_runs_27_passes_at_most_and_the_bound_holds(tmp_path):
    board = boards.load_board("rp2040")
    source = FDIV_C.replace("NUM", ", ".join(n for n, _ in FDIV_CASES)).replace("DEN", ", ".join(d for _, d in FDIV_CASES))
    elf = build(tmp_path, board, "fdiv", source)
    prog = thumb2_decode.load(str(elf), board)
    fdiv = prog.address_of("__aeabi_fdiv")
    entry = TABLE[("__aeabi_fdiv", 480)]
    assert thumb2_loops.code_hash(prog, fdiv) == entry["sha256"]   # the table's code is this build's
    passes = header_passes(board, elf, "divide", fdiv + entry["offset"], tmp_path / "step.log")
    assert len(passes) == len(FDIV_CASES)
    assert max(passes) == entry["header_max"] and passes[0] == 27 and passes[1] == 26
    measured = charged_cycles(board, elf, "divide", tmp_path / "exec.log")
    bound = thumb2_ipet.analyze(elf, "divide", {"loops": []}, board, tmp_path / "wcet")
    assert len(measured) == len(FDIV_CASES)
    assert bound.cycles >= max(measured), (bound.cycles, measured)
    loops = json.dumps(bound.details["loops"])
    assert "table __aeabi_fdiv+0x1e0 header_max=27" in loops


#: newlib's memset and memcpy named through an assembler label, so that gcc calls them even for
#: short constant sizes instead of expanding them inline (the calls the generated code makes)
STRING_C = r"""
void *copy_bytes(void *, const void *, unsigned) __asm__("memcpy");
void *set_bytes(void *, int, unsigned) __asm__("memset");
static unsigned char dst[1100] __attribute__((aligned(4)));
static unsigned char src[1100] __attribute__((aligned(4)));
WRAPPERS
int main(void)
{
CALLS
    return dst[5];
}
"""
#: each call with constant arguments: a wrapper function per case
STRING_CASES = {
    "set_unaligned_1000": "set_bytes(dst + 1, 7, 1000)",   # 3 alignment bytes, n // 16 passes of 16
    "set_aligned_1020": "set_bytes(dst, 7, 1020)",         # n // 16 passes of 16, 3 words
    "set_aligned_1023": "set_bytes(dst, 7, 1023)",         # 3 words, 3 trailing bytes
    "copy_aligned_1023": "copy_bytes(dst, src, 1023)",     # n // 64 (M4) or n // 16 (M0+) blocks, 3 words, 3 bytes
    "copy_misaligned_1000": "copy_bytes(dst + 1, src, 1000)",   # M0+: n byte copies
    "copy_misaligned_7": "copy_bytes(dst + 1, src + 2, 7)",     # M4: n - 3 byte copies
}


def string_program(tmp_path, board):
    wrappers = "\n".join(f"__attribute__((noinline)) void {name}(void) {{ {call}; }}"
                         for name, call in STRING_CASES.items())
    calls = "\n".join(f"    {name}();" for name in STRING_CASES)
    return build(tmp_path, board, "strings", STRING_C.replace("WRAPPERS", wrappers).replace("CALLS", calls))


def passes_per_wrapper(board, elf, starts, headers, log):
    """{wrapper: {header: executions}} over one run, every instruction traced."""
    counts, current = {}, None
    for line in traced(board, elf, log, "-singlestep"):
        pc = qemu_system._traced_pc(line) if line.startswith("Trace ") else None
        if pc in starts:
            current = counts.setdefault(starts[pc], dict.fromkeys(headers, 0))
        elif pc in headers and current is not None:
            current[pc] += 1
    return counts


@pytest.mark.parametrize("board_name", ["stm32f407", "rp2040"])
def test_memset_and_memcpy_loops_reach_their_table_bounds_and_the_bounds_hold(tmp_path, board_name):
    board = boards.load_board(board_name)
    elf = string_program(tmp_path, board)
    prog = thumb2_decode.load(str(elf), board)
    entries = {}
    for symbol in ("memset", "memcpy"):
        start = prog.address_of(symbol)
        mine = [e for e in TABLE.values() if e["symbol"] == symbol and e["sha256"] == thumb2_loops.code_hash(prog, start)]
        assert mine, f"no table entry pins this build's {symbol}"
        entries.update({start + e["offset"]: e for e in mine})
    starts = {prog.address_of(name): name for name in STRING_CASES}
    counts = passes_per_wrapper(board, elf, starts, set(entries), tmp_path / "step.log")
    reached = set()
    for name, call in STRING_CASES.items():
        n = int(call.rsplit(",", 1)[1].strip(" )"))
        for header, entry in entries.items():
            limit = thumb2_loops.eval_expr(str(entry["header_max"]), {"n": n})
            assert counts[name][header] <= limit, (name, entry["symbol"], hex(entry["offset"]))
            if counts[name][header] == limit and limit > 0:
                reached.add(header)
    assert reached == set(entries), [f"{e['symbol']}+{e['offset']:#x}" for h, e in entries.items() if h not in reached]
    text = disassembly(board, elf)
    table, _ = cortexm_timing.cost_table(text, board["instruction_timing"])
    for name in STRING_CASES:
        start, returns = call_sites(text, elf, name)
        measured = qemu_system.cycles_per_call(traced(board, elf, tmp_path / f"{name}.log"), start, returns, table)
        bound = thumb2_ipet.analyze(elf, name, {"loops": []}, board, tmp_path / "wcet" / name)
        assert len(measured) == 1 and bound.cycles >= measured[0], (name, bound.cycles, measured)


def test_a_rebuilt_elf_is_read_again(tmp_path):
    """Literals (memset's size in r2) come from the image: an ELF rebuilt at the same path is read
    anew, not from the copy of the first build."""
    from elftools.elf.elffile import ELFFile
    elf = None
    for name, size in (("stm32f407", 1000), ("rp2040", 1023)):
        board = boards.load_board(name)
        source = STRING_C.replace("WRAPPERS", f"__attribute__((noinline)) void fill(void) {{ set_bytes(dst, src[0], {size}); }}")
        elf = build(tmp_path, board, "rebuilt", source.replace("CALLS", "    fill();"))
        with open(elf, "rb") as stream:
            text = ELFFile(stream).get_section_by_name(".text")
            first = int.from_bytes(text.data()[:4], "little")
            assert thumb2_decode.read_words(str(elf), text["sh_addr"], 1) == [first]
        prog = thumb2_decode.load(str(elf), board)
        fill = thumb2_cfg.build_region(prog, prog.address_of("fill"))
        sites = [(b, i) for b in fill.blocks.values() for i, _ in b.calls]          # bl memset (M0+)
        sites += [(fill.blocks[key[1]], t.insn) for key, t in fill.tails.items()]  # b.w memset (M4)
        assert [thumb2_ipet.call_constants(prog, block, call)["r2"] for block, call in sites] == [size]


DIVIDE_C = r"""
volatile unsigned unum[] = {UNUM};
volatile unsigned uden[] = {UDEN};
volatile int snum[] = {SNUM};
volatile int sden[] = {SDEN};
volatile unsigned usink;
volatile int ssink;
__attribute__((noinline)) unsigned udivide(unsigned x, unsigned y) { return x / y; }
__attribute__((noinline)) int sdivide(int x, int y) { return x / y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof unum / sizeof unum[0]; ++k)
        usink = udivide(unum[k], uden[k]);
    for (k = 0; k < sizeof snum / sizeof snum[0]; ++k)
        ssink = sdivide(snum[k], sden[k]);
    return 0;
}
"""
#: ARMv6-M integer division: the divisor shifted left by 0, 8 or 16 (by 0, 6, 12, 18 or 24 for a
#: negative operand), entered at either header; 0xffffffff / 3 and INT_MIN / 1 take the most passes
UDIV_CASES = [("0xffffffffu", "3u"), ("0xffffffffu", "0x10000u"), ("1000000u", "7u"), ("5u", "3u"), ("0x12345u", "0x100u"),
              ("0xffffffffu", "0xffffffffu"), ("70000u", "300u"), ("0x80000000u", "1u"), ("3u", "5u")]
SDIV_CASES = [("2147483647", "3"), ("-2147483647", "3"), ("(-2147483647 - 1)", "1"), ("-1000000", "7"), ("-7", "-3"),
              ("123456", "-100"), ("-5", "1000000"), ("-100000", "5"), ("-30000000", "2"), ("5", "3")]


def passes_per_call(board, elf, entry, header_sets, log):
    """Executions of each set of headers during each call of `entry`, from its entry to its return
    (every instruction traced)."""
    text = disassembly(board, elf)
    start, returns = call_sites(text, elf, entry)
    counts, inside = [], False
    for line in traced(board, elf, log, "-singlestep"):
        pc = qemu_system._traced_pc(line) if line.startswith("Trace ") else None
        if pc == start:
            counts.append([0] * len(header_sets))
            inside = True
        elif pc in returns:
            inside = False
        elif inside:
            for k, headers in enumerate(header_sets):
                counts[-1][k] += pc in headers
    return counts


def test_integer_division_loops_of_the_m0plus_reach_their_table_bounds_and_the_bounds_hold(tmp_path):
    """libgcc's __udivsi3 and __divsi3 (no divide instruction on ARMv6-M): each loop, irreducible
    with two headers counted together, reaches the table's bound on some operands and never passes it."""
    board = boards.load_board("rp2040")
    source = DIVIDE_C
    for key, cases, k in (("UNUM", UDIV_CASES, 0), ("UDEN", UDIV_CASES, 1), ("SNUM", SDIV_CASES, 0), ("SDEN", SDIV_CASES, 1)):
        source = source.replace(key, ", ".join(case[k] for case in cases))
    elf = build(tmp_path, board, "divide", source)
    prog = thumb2_decode.load(str(elf), board)
    for entry, symbol, cases in (("udivide", "__udivsi3", UDIV_CASES), ("sdivide", "__divsi3", SDIV_CASES)):
        start = prog.address_of(symbol)
        mine = [e for e in TABLE.values() if e["symbol"] == symbol]
        assert mine and all(thumb2_loops.code_hash(prog, start) == e["sha256"] for e in mine)
        region = thumb2_cfg.build_region(prog, start)
        loops = {l.header - start: l.headers for l in thumb2_loops.find_loops(region)}
        assert sorted(loops) == sorted(e["offset"] for e in mine)
        counts = passes_per_call(board, elf, entry, [loops[e["offset"]] for e in mine], tmp_path / f"{entry}.log")
        assert len(counts) == len(cases)
        for k, e in enumerate(mine):
            assert max(c[k] for c in counts) == e["header_max"], (symbol, hex(e["offset"]), counts)
        measured = charged_cycles(board, elf, entry, tmp_path / f"{entry}.exec.log")
        bound = thumb2_ipet.analyze(elf, entry, {"loops": []}, board, tmp_path / "wcet" / entry)
        assert len(measured) == len(cases) and bound.cycles >= max(measured), (entry, bound.cycles, measured)
        print(f"\n{symbol}: bound {bound.cycles}, executed-path worst {max(measured)} of {len(cases)} divisions")


DIVIDE64_C = r"""
unsigned long long __udivmoddi4(unsigned long long, unsigned long long, unsigned long long *);
long long __divdi3(long long, long long);
volatile unsigned long long unum[] = {UNUM};
volatile unsigned long long uden[] = {UDEN};
volatile long long snum[] = {SNUM};
volatile long long sden[] = {SDEN};
volatile unsigned long long usink;
volatile long long ssink;
__attribute__((noinline)) unsigned long long udivide64(unsigned long long x, unsigned long long y) { return __udivmoddi4(x, y, 0); }
__attribute__((noinline)) long long sdivide64(long long x, long long y) { return __divdi3(x, y); }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof unum / sizeof unum[0]; ++k)
        usink = udivide64(unum[k], uden[k]);
    for (k = 0; k < sizeof snum / sizeof snum[0]; ++k)
        ssink = sdivide64(snum[k], sden[k]);
    return 0;
}
"""
#: 64-bit division: one pass per bit of clz(d) - clz(n); the 64th only with d = 0, which the
#: __aeabi_ entries refuse but a direct call of the routine does not
UDIV64_CASES = [("0x8000000000000000ull", "0ull"), ("0x8000000000000000ull", "1ull"), ("0xffffffffffffffffull", "3ull"),
                ("1000000ull", "7ull"), ("5ull", "7ull"), ("0x123456789ull", "0x10000ull")]
SDIV64_CASES = [("(-0x7fffffffffffffffll - 1)", "0ll"), ("(-0x7fffffffffffffffll - 1)", "1ll"), ("0x7fffffffffffffffll", "-3ll"),
                ("-1000000ll", "7ll"), ("5ll", "-7ll")]


def test_64_bit_division_loops_of_the_m0plus_reach_their_table_bounds_and_the_bounds_hold(tmp_path):
    board = boards.load_board("rp2040")
    source = DIVIDE64_C
    for key, cases, k in (("UNUM", UDIV64_CASES, 0), ("UDEN", UDIV64_CASES, 1), ("SNUM", SDIV64_CASES, 0),
                          ("SDEN", SDIV64_CASES, 1)):
        source = source.replace(key, ", ".join(case[k] for case in cases))
    elf = build(tmp_path, board, "divide64", source)
    prog = thumb2_decode.load(str(elf), board)
    for entry, symbol, cases in (("udivide64", "__udivmoddi4", UDIV64_CASES), ("sdivide64", "__divdi3", SDIV64_CASES)):
        start = prog.address_of(symbol)
        (e,) = [e for e in TABLE.values() if e["symbol"] == symbol]
        assert thumb2_loops.code_hash(prog, start) == e["sha256"]
        counts = passes_per_call(board, elf, entry, [{start + e["offset"]}], tmp_path / f"{entry}.log")
        assert len(counts) == len(cases) and max(c[0] for c in counts) == e["header_max"], (symbol, counts)
        assert [c[0] for c in counts][:2] == [e["header_max"], e["header_max"] - 1]   # d = 0, then d = 1
        measured = charged_cycles(board, elf, entry, tmp_path / f"{entry}.exec.log")
        bound = thumb2_ipet.analyze(elf, entry, {"loops": []}, board, tmp_path / "wcet" / entry)
        assert len(measured) == len(cases) and bound.cycles >= max(measured), (entry, bound.cycles, measured)
        print(f"\n{symbol}: bound {bound.cycles}, executed-path worst {max(measured)} of {len(cases)} divisions")


DOUBLE_C = r"""
volatile double xs[] = {X};
volatile double ys[] = {Y};
volatile double sink;
__attribute__((noinline)) double multiply(double x, double y) { return x * y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof xs / sizeof xs[0]; ++k)
        sink = multiply(xs[k], ys[k]);
    return 0;
}
"""
#: subnormal operands (the smallest, 2^-1074, takes 52 normalising shifts), either side, both, and normal ones
DOUBLE_CASES = [("4.9406564584124654e-324", "3.0"), ("3.0", "4.9406564584124654e-324"), ("1e-310", "1e-320"),
                ("4.9406564584124654e-324", "4.9406564584124654e-324"), ("1.5", "2.5"), ("2.2250738585072014e-308", "7.0")]


def test_double_normalisation_loops_of_the_m4_reach_their_table_bounds_and_the_bounds_hold(tmp_path):
    """The Cortex-M4F has a single-precision FPU: double arithmetic is libgcc's ieee754-df.S, whose
    subnormal operands are normalised one bit a pass (Lml_d, reached from __aeabi_dmul and __aeabi_ddiv;
    __aeabi_ddiv's own quotient loop has no entry yet)."""
    board = boards.load_board("stm32f407")
    source = DOUBLE_C.replace("X", ", ".join(x for x, _ in DOUBLE_CASES)).replace("Y", ", ".join(y for _, y in DOUBLE_CASES))
    elf = build(tmp_path, board, "double", source)
    prog = thumb2_decode.load(str(elf), board)
    start = prog.address_of("__aeabi_dmul")
    mine = [e for e in TABLE.values() if e["symbol"] == "__aeabi_dmul"]
    assert len(mine) == 2 and all(thumb2_loops.code_hash(prog, start) == e["sha256"] for e in mine)
    for entry in ("multiply",):
        counts = passes_per_call(board, elf, entry, [{start + e["offset"]} for e in mine], tmp_path / f"{entry}.log")
        assert len(counts) == len(DOUBLE_CASES)
        for k, e in enumerate(mine):
            assert max(c[k] for c in counts) == e["header_max"], (entry, hex(e["offset"]), counts)
        measured = charged_cycles(board, elf, entry, tmp_path / f"{entry}.exec.log")
        bound = thumb2_ipet.analyze(elf, entry, {"loops": []}, board, tmp_path / "wcet" / entry)
        assert len(measured) == len(DOUBLE_CASES) and bound.cycles >= max(measured), (entry, bound.cycles, measured)
        print(f"\n{entry}: bound {bound.cycles}, executed-path worst {max(measured)} of {len(DOUBLE_CASES)} operations")
