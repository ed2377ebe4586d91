"""The `routines` of nnbuild/wcet/arm_libloops.json (newlib's double argument reduction and libgcc's
double division): the number behind __kernel_rem_pio2's bounds, and OTAWA's bound of cos() against
qemu-arm on the double that comes closest to a multiple of pi/2; newlib's memset, bounded per call
site from its constant size, driven to each loop's bound under qemu-arm."""

import json
import shutil
from fractions import Fraction
from math import log2
from pathlib import Path

import pytest

from arm_helpers import ARM, arm7tdmi_elf, clocks_per_call, executed_pcs
from conftest import needs_otawa
from nnbuild.errors import NNBuildError
from nnbuild.wcet import otawa

ROOT = Path(__file__).resolve().parents[1]
TABLE = json.loads(otawa.LIBLOOPS_PATH.read_text())
#: the double nearest to a multiple of pi/2 (Kahan, McDonald; found again below): 6381956970095103 * 2^797
WORST_MANTISSA, WORST_EXPONENT = 6381956970095103, 797


def two_over_pi(bits):
    """floor(2/pi * 2^bits), from Machin's pi = 16 atan(1/5) - 4 atan(1/239) in integers."""
    scale = 1 << (bits + 64)

    def atan_inv(n):
        total, term, k = 0, scale // n, 1
        while term:
            total += term // k if k % 4 == 1 else -(term // k)
            term //= n * n
            k += 2
        return total
    pi = 16 * atan_inv(5) - 4 * atan_inv(239)
    return (2 * scale << bits) // pi


def closest_to_integer(alpha, limit):
    """(q, ||q alpha||): the last convergent denominator q < limit of alpha, whose distance to an
    integer no 0 < m < limit beats (best approximation by continued fractions)."""
    p0, q0, p1, q1, x = 0, 1, 1, 0, alpha
    while True:
        a = x.numerator // x.denominator
        p, q = a * p1 + p0, a * q1 + q0
        if q >= limit:
            break
        p0, q0, p1, q1 = p1, q1, p, q
        if x == a:
            break
        x = 1 / (x - a)
    return q1, abs(q1 * alpha - p1)


def smallest_distance_to_a_multiple_of_half_pi():
    """min over every double x = m * 2^(e-52), 2^52 <= m < 2^53, e in 20..1023 (the exponents that
    reach __kernel_rem_pio2) of ||x * 2/pi||, bounded below over 0 < m < 2^53: (distance, e, m)."""
    bits = 1400
    frac_two_over_pi = Fraction(two_over_pi(bits), 1 << bits)
    worst = (Fraction(1), None, None)
    for e in range(20, 1024):
        alpha = frac_two_over_pi * Fraction(2) ** (e - 52)
        alpha -= alpha.numerator // alpha.denominator
        q, dist = closest_to_integer(alpha, 1 << 53)
        worst = min(worst, (dist, e, q))
    return worst


def test_no_double_reaching_kernel_rem_pio2_forces_jz_above_7():
    """The table's __kernel_rem_pio2 bounds rest on jz <= 7: a recomputation to J needs
    ||x 2/pi|| < 4.0001 * 2^(q0 - 24 (J - 5)) with q0 <= 2, and no double comes closer than 2^-61.54."""
    dist, e, m = smallest_distance_to_a_multiple_of_half_pi()
    assert (m, e - 52) == (WORST_MANTISSA, WORST_EXPONENT)
    lost_bits = -log2(dist)
    assert 61.5 < lost_bits < 61.6
    deepest = max(j for j in range(5, 20) if 24 * (j - 5) < 2 + log2(4.0001) + lost_bits)
    assert deepest == 7
    kernel = next(r for r in TABLE["routines"] if r["symbols"] == ["__kernel_rem_pio2"])
    distil = next(loop for loop in kernel["loops"] if loop["why"].startswith("distil"))
    assert distil["max"] == deepest


needs_arm = pytest.mark.skipif(shutil.which(ARM["cc"]) is None or shutil.which("qemu-arm") is None,
                               reason="arm-none-eabi-gcc or qemu-arm not installed")
COS_C = r"""
#include <math.h>
volatile double sink;
volatile double inputs[] = {ARGS};
__attribute__((noinline)) double reduce(double x) { return cos(x); }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof inputs / sizeof inputs[0]; ++k)
        sink = reduce(inputs[k]);
    return 0;
}
"""
#: the worst double, its neighbours, the largest double, a 2^30-scale argument, 1/3 (division) and 0.5
COS_ARGS = [f"ldexp({WORST_MANTISSA}.0, {WORST_EXPONENT})", f"ldexp({WORST_MANTISSA + 1}.0, {WORST_EXPONENT})",
            f"-ldexp({WORST_MANTISSA}.0, {WORST_EXPONENT})", "1.7976931348623157e308", "1.0e9", "1e22", "0.5"]


@pytest.mark.e2e
@needs_arm
@needs_otawa
def test_otawa_bounds_cos_over_the_worst_double(tmp_path):
    """With the routines' bounds OTAWA bounds cos() (arm7tdmi clocks), and the bound is >= qemu-arm's
    charged run on the double closest to a multiple of pi/2 and the others."""
    elf = arm7tdmi_elf(tmp_path, "cos", COS_C.replace("ARGS", ", ".join(COS_ARGS)), libs=["m"])
    functions = otawa.disassemble(elf, ARM)
    bounded = {b.function for b in otawa.library_bounds(functions)}
    assert {"__kernel_rem_pio2", "__ieee754_rem_pio2"} <= bounded
    bound = otawa.analyze(elf, "reduce", {"entry": "reduce", "loops": []}, ARM, tmp_path / "w")
    measured = clocks_per_call(elf, "reduce", tmp_path / "exec.log")
    assert len(measured) == len(COS_ARGS)
    assert bound.cycles >= max(measured), (bound.cycles, measured)


SIPS22 = ROOT.parent / "shared" / "data" / "tpg" / "sips22"
FISHING_DERBY = SIPS22 / "cleaned" / "out_best_cleaned.fishing_derby.9.t48.dot"


@pytest.mark.e2e
@needs_arm
@needs_otawa
@pytest.mark.skipif(not FISHING_DERBY.is_file(), reason="../shared/data/tpg/sips22 not beside this checkout")
def test_tpg_example_on_arm_is_bounded_above_huge_cos_arguments(tmp_path):
    """The TPG example (switch shape) gets an OTAWA bound now that newlib's double loops are in the
    table, and it holds on screens that send huge arguments to cos() and exp()."""
    import numpy as np

    from nnbuild import pipeline, wcet
    board = pipeline.load_board("arm")
    program, harness = pipeline.build_check_program(str(FISHING_DERBY), board, tmp_path, name="fd",
                                                    environment="sips22-atari")
    facts = json.loads((tmp_path / "gen" / "fd.flowfacts.json").read_text())
    bound = wcet.analyze(board, program, "fd_infer", facts, tmp_path / "wcet")
    cells = [150, 373, 345, 566, 701, 754, 768, 815, 1251, 1278]   # the cells cos/exp/division read
    screens = np.full((6, 1344), 7.0)
    for k, value in enumerate([0.5, 1.5, 5.5e110, 1e300, 6381956970095103 * 2.0 ** 797, 88.7]):
        screens[k, cells] = value
    _, cycles = pipeline.run_cases(board, program, screens, 1, harness=harness, kind="tpg", entry="fd_infer")
    assert 0 < cycles.max() <= bound.cycles


# ---------------------------------------------------------------- newlib memset, bounded by its size

MEMSET = next(r for r in TABLE["routines"] if r["symbols"] == ["memset"])
MEMSET_SWEEP_C = r"""
#include <string.h>
static unsigned char buf[96] __attribute__((aligned(4)));
__attribute__((noinline)) void clear(unsigned char *p, unsigned n) { memset(p, 0, n); }
int main(void)
{
    unsigned n, off;
    for (n = 0; n <= LARGEST; ++n)
        for (off = 0; off < 4; ++off)
            clear(buf + off, n);
    return 0;
}
"""
#: sizes 0..67 at the four alignments: every loop reaches its largest count (4 passes of 16 bytes)
LARGEST_SWEPT = 67


@needs_arm
def test_memset_loop_bounds_hold_and_are_reached_under_qemu(tmp_path):
    """Each memset call's loop header counts, over sizes 0..67 at every alignment, stay within the
    table's bound for that size, the 16-byte loop makes exactly size/16 passes when aligned, and
    every loop reaches its largest bound."""
    elf = arm7tdmi_elf(tmp_path, "sweep", MEMSET_SWEEP_C.replace("LARGEST", str(LARGEST_SWEPT)))
    functions = otawa.disassemble(elf, ARM)
    memset = functions["memset"][0]
    call = next(i.addr for i in functions["clear"][0].insns if i.mnemonic == "bl" and "<memset>" in i.operands)
    assert otawa.routine_digest(memset) == MEMSET["sha256"]
    assert [hex(loop.header - memset.start) for loop in otawa.natural_loops(memset)] == \
        [hex(loop["offset"]) for loop in MEMSET["loops"]]
    pcs = executed_pcs(elf, tmp_path / "exec.log")
    entries = [k for k, pc in enumerate(pcs) if pc == memset.start and pcs[k - 1] == call]   # crt0 and stdio call it too
    calls = [(n, off) for n in range(LARGEST_SWEPT + 1) for off in range(4)]
    assert len(entries) == len(calls)
    returned = call + 4
    reached = {loop["offset"]: 0 for loop in MEMSET["loops"]}
    for (n, off), begin in zip(calls, entries):
        run = pcs[begin:pcs.index(returned, begin)]
        for loop in MEMSET["loops"]:
            passes, bound = run.count(memset.start + loop["offset"]), otawa.passes_for_size(loop["max_from_size"], n)
            assert passes <= bound, (n, off, loop["offset"], passes, bound)
            if passes == bound:
                reached[loop["offset"]] = max(reached[loop["offset"]], bound)
        if off == 0:
            assert run.count(memset.start + 0x6C) == n // 16
    assert reached == {0x2C: 3, 0x6C: 4, 0xAC: 3, 0xCC: 3}


MEMSET_SITES_C = r"""
#include <string.h>
static unsigned char buf[8192] __attribute__((aligned(4)));
__attribute__((noinline)) void small(unsigned char *p) { memset(p, 0, 3); }
__attribute__((noinline)) void mid(unsigned char *p) { memset(p, 0, 63); }
__attribute__((noinline)) void big(unsigned char *p) { memset(p, 0, 4100); }
__attribute__((noinline)) void any(unsigned char *p, unsigned n) { memset(p, 0, n); }
__attribute__((noinline)) void both(unsigned char *p) { small(p + 1); mid(p); }
int main(void) { both(buf); big(buf); any(buf, 5); return 0; }
"""


@pytest.fixture(scope="module")
def memset_sites(tmp_path_factory):
    """The call-site program built at -O0 (each size a constant in r2 at its `bl memset`)."""
    if shutil.which(ARM["cc"]) is None:
        pytest.skip("arm-none-eabi-gcc not installed")
    return arm7tdmi_elf(tmp_path_factory.mktemp("memset"), "sites", MEMSET_SITES_C)


@pytest.fixture(scope="module")
def memset_functions(memset_sites):
    """The call-site program disassembled once for the tests that read it (library_bounds only reads)."""
    return otawa.disassemble(memset_sites, ARM)


@pytest.mark.parametrize("entry, passes", [("small", [3, 0, 0, 3]), ("mid", [3, 3, 3, 3]), ("both", [3, 3, 3, 3]),
                                           ("big", [3, 256, 3, 3])])
def test_memset_bounds_follow_the_largest_constant_size_reachable(memset_functions, entry, passes):
    """Each entry bounds memset's loops from the sizes of the calls it reaches: 3 bytes, 63, both
    (the larger wins) and 4100 (a literal-pool constant)."""
    functions = memset_functions
    start = functions["memset"][0].start
    bounds = [b for b in otawa.library_bounds(functions, entry) if b.function == "memset"]
    assert [b.address - start for b in bounds] == [loop["offset"] for loop in MEMSET["loops"]]
    assert [b.max for b in bounds] == passes


def test_memset_with_a_size_that_is_not_a_constant_is_refused(memset_functions):
    """`any` passes its argument: one line naming memset's loops and the call site."""
    functions = memset_functions
    call = next(i for i in functions["any"][0].insns if i.mnemonic == "bl" and "<memset>" in i.operands)
    with pytest.raises(NNBuildError) as err:
        otawa.library_bounds(functions, "main")
    message = str(err.value)
    assert "\n" not in message
    assert "memset+0x2c" in message and f"any+0x{call.addr - functions['any'][0].start:x} (0x{call.addr:x})" in message
    assert not [b for b in otawa.library_bounds(functions) if b.function == "memset"]   # no entry, no call sites


@pytest.mark.e2e
@needs_arm
@needs_otawa
def test_otawa_bounds_memset_calls_above_qemu(memset_sites, tmp_path):
    """OTAWA bounds `both` (memset of 3 bytes misaligned, then 63 aligned) with the size-derived
    bounds, and the bound is >= the same clocks charged to qemu-arm's run."""
    bound = otawa.analyze(memset_sites, "both", {"entry": "both", "loops": []}, ARM, tmp_path / "w")
    (measured,) = clocks_per_call(memset_sites, "both", tmp_path / "exec.log")
    assert measured <= bound.cycles, (measured, bound.cycles)


@pytest.mark.parametrize("mnemonic, operands, writes", [
    ("mov", "r2, #3", True), ("mov", "r1, r2", False), ("ldr", "r1, [r2], #4", True), ("ldr", "r1, [r2, #4]", False),
    ("ldr", "r1, [r2, #4]!", True), ("str", "r2, [r1]", False), ("cmp", "r2, #0", False), ("ldm", "sp, {r0-r3}", True),
    ("pop", "{r4, pc}", False), ("stmia", "r2!, {r3}", True), ("bl", "8000 <x>", True),
    ("umull", "r1, r2, r3, r4", True), ("mul", "r1, r2, r3", False), ("vmov", "s0, r2", True)])
def test_a_size_register_write_is_never_missed(mnemonic, operands, writes):
    """constant_argument reads r2 back to its last write: every way an instruction may change it
    counts (a loaded range `{r0-r3}`, a written-back base, a call), an unknown instruction naming it
    too; reads, compares and stores do not."""
    assert otawa.may_write(otawa.Insn(0, mnemonic, operands), "r2") is writes
