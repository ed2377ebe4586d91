"""exp's 1/r division (avr_libloops.json paths entry `exp-inverse-prenorm-or-quotient`, __divsf3_pse in
exp): a divisor with few significant bits takes many pre-normalisation doublings but has a short
quotient period, one close to a power of two has a quotient of ones and no doubling. With the
dividend 1.0 (inverse's `ldi`s, read from the linked code) the entry bounds 12 P + 3 Q, P the
doubling passes (+0x18) and Q the quotient subtractions (+0xa6, counter div-quotient-ones). Checked
here: the bound recomputed over every divisor mantissa from the algorithm, the algorithm's counts
against simavr's (avr_trace) on every small subnormal divisor, random ones and the extremes, the
maximum reached, and the rows on every division of an exp sweep.
"""

import numpy as np
import pytest

from conftest import needs_avr
from tpg_helpers import avr_libm_driver

from nnbuild.wcet import avr_decode, avr_loops

ENTRY = "exp-inverse-prenorm-or-quotient"
DIV_DRIVER = """#include <math.h>
void cg_inv(const float in[1], float out[1]) { volatile float one = 1.0f; out[0] = one / in[0]; }
"""
EXP_DRIVER = "#include <math.h>\nvoid cg_exp(const float in[1], float out[1]) { out[0] = expf(in[0]); }\n"


def entry():
    [ent] = [e for e in avr_loops.load_paths() if e.get("id") == ENTRY]
    [(row, rhs)] = ent["rows"]
    return ent, row, rhs


def prenorm_quotient(m):
    """(P, Q) of __divsf3_pse for the dividend 1.0 (split mantissa 2^23) and divisor split mantissas
    m (a normal number's with its hidden bit, a subnormal's without): P doublings of B while
    A >= B in the low 24 bits and nothing has reached r26, then 24 quotient bits of restoring
    division, Q of them 1 (a subtraction each)."""
    a0 = np.uint64(1 << 23)
    b = np.asarray(m, np.uint64)
    p = np.zeros(b.shape, np.int64)
    active = np.ones(b.shape, bool)
    while active.any():
        go = active & ~(a0 < (b & np.uint64(0xFFFFFF)))
        b = np.where(go, b << np.uint64(1), b)
        p += go
        active = go & (b < np.uint64(1 << 24))
    a = np.full(b.shape, a0, np.uint64)
    q = np.zeros(b.shape, np.int64)
    for _ in range(24):
        a = a << np.uint64(1)
        ge = a >= b
        a = np.where(ge, a - b, a)
        q += ge
    return p, q


@pytest.mark.e2e  # 2^24 divisors, 24 quotient steps each: about 45 s on a loaded machine
def test_the_row_bounds_every_divisor():
    """12 P + 3 Q over every divisor mantissa 1..2^24-1: the entry's bound, reached at m = 3."""
    ent, row, rhs = entry()
    assert ent["within"] == ["exp"] and set(row) == {"pre", "Q"}
    m = np.arange(1, 1 << 24, dtype=np.uint64)
    p, q = prenorm_quotient(m)
    cost = row["pre"] * p + row["Q"] * q
    assert int(cost.max()) == rhs
    assert int(m[np.argmax(cost)]) == 3 and p.max() == 24


@needs_avr
def test_the_dividend_is_one_in_exp(tmp_path):
    """inverse (exp's only division, its tail for a positive argument) loads 1.0 as the dividend."""
    elf = avr_libm_driver(tmp_path, "exp", EXP_DRIVER)
    prog = avr_decode.load(elf)
    start = prog.address_of("inverse")
    ldi = {i.ops[0]: int(i.ops[1], 0) for a, i in sorted(prog.insns.items())
           if start <= a < start + 0x10 and i.mnem == "ldi"}
    assert [ldi[r] for r in ("r22", "r23", "r24", "r25")] == [0x00, 0x00, 0x80, 0x3F]


def divisors(rng):
    """Every subnormal mantissa below 2^12, random subnormal and normal ones, powers of two and
    their neighbours (bits of positive floats <= 1)."""
    m = np.concatenate([np.arange(1, 1 << 12), rng.integers(1, 1 << 23, 3000),
                        (1 << np.arange(23)), (1 << np.arange(1, 23)) + 1, (1 << np.arange(2, 23)) - 1])
    normal = rng.integers(0x800000, 0x3F800001, 3000)
    return np.concatenate([m, normal, [0x800001, 0x3F000001, 0x3F7FFFFF]]).astype(np.uint32)


def split_mantissa(bits):
    e, f = bits >> 23, bits & 0x7FFFFF
    return np.where(e > 0, f | 0x800000, f).astype(np.uint64)


@pytest.mark.e2e
@needs_avr
def test_counts_match_simavr_and_reach_the_bound(tmp_path):
    from test_wcet_avr_context import Probe, build_tracer, check_path_entry, run_trace_sites
    ent, row, rhs = entry()
    elf = avr_libm_driver(tmp_path, "inv", DIV_DRIVER)
    prog = avr_decode.load(elf)
    tracer = build_tracer(tmp_path / "avr_trace")
    if tracer is None:
        pytest.skip("libsimavr not available")
    bits = divisors(np.random.default_rng(9))
    start = prog.address_of("__divsf3_pse")
    counters = avr_loops.load_counters()
    pcs = [start + off for off, _ in ent["blocks"].values()]
    pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in counters[ent["counters"]["Q"]]["points"]]
    # __divsf3 calls __divsf3x, which falls into __divsf3_pse: count inside each __divsf3 call; the
    # set of (P, Q) pairs seen must be the set the algorithm gives for these divisors
    probe = Probe(prog.address_of("__divsf3"), (), None, "sup+", pcs)
    run_trace_sites(tracer, elf, [probe], bits.view(np.float32)[:, None], set(), (), tmp_path)
    p, q = prenorm_quotient(split_mantissa(bits))
    expected = set(zip(p.tolist(), q.tolist()))
    seen = {(v[0], v[1]) for _, _, v in probe.vectors}
    assert probe.invocations == len(bits)
    assert seen == expected
    best = max(row["pre"] * a + row["Q"] * b for a, b in seen)
    print(f"\n  1/r over {len(bits)} divisors: max 12 P + 3 Q = {best} (bound {rhs}); "
          f"max P {max(a for a, _ in seen)}, max Q {max(b for _, b in seen)}")
    assert best == rhs
    # the rows on every division inside exp (inverse's 1/r) of arguments whose r spans normal,
    # subnormal and zero
    (tmp_path / "e").mkdir()
    elf = avr_libm_driver(tmp_path / "e", "exp", EXP_DRIVER)
    prog = avr_decode.load(elf)
    start = prog.address_of("__divsf3_pse")
    pcs = [start + off for off, _ in ent["blocks"].values()]
    pcs += [prog.address_of(pt["symbol"]) + pt["offset"] for pt in counters[ent["counters"]["Q"]]["points"]]
    x = np.concatenate([np.linspace(0.01, 127.9, 6000), 86 + np.arange(0, 18, 2.0 ** -9)]).astype(np.float32)
    # inverse tail-jumps to __divsf3: count inside each exp call (one division at most)
    eprobe = Probe(prog.address_of("exp"), (), None, "sup+", pcs)
    run_trace_sites(tracer, elf, [eprobe], x[:, None], set(), (), tmp_path)
    assert eprobe.invocations == len(x)
    check_path_entry(ent, counters, eprobe.vectors)
