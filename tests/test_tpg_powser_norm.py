"""The Horner additions of avr-libc's exp and cos polynomials (__fp_powser) normalise at most once:
avr_libloops.json bounds __addsf3x's normalisation loop (header +0x6e, one pass per left shift) by 1
in the contexts (exp, __fp_powser) and (cos, __fp_powser).

Why: an addition acc_k*t + c_k whose result keeps more than half the larger operand's magnitude
leaves the 40-bit difference (larger operand, bit 39 set, less the aligned and truncated smaller one,
less one for the sticky bits) at or above 2^38, so one shift restores bit 39. Checked here: the
ratio |acc_k*t + c_k| / max(|acc_k*t|, |c_k|) stays above 1/2 by interval arithmetic over the
polynomial's argument, with the coefficient tables read from the linked flash image (every step
widened by 2^-18 relative, far more than the soft-float truncation). exp's last addition,
P(f) = acc_6*f + 1 ~ 2^-f, tends to 1/2 as f -> 1: the intervals stop at f = 1 - 2^-11 and every
argument whose f lies above runs under simavr (tests/wcet_fixtures/avr_trace.c counting the header
passes per addition); sweeps of both functions drive the count to its bound, 1, and never above.
The same intervals show each partial sum keeping its coefficient's sign, the next coefficient having
the other one: every addition subtracts (the opposite-signs paths entries of exp and cos), and the
sweeps never run __addsf3x's same-sign addition block.
"""


import numpy as np
import pytest

from conftest import needs_avr
from tpg_helpers import avr_libm_driver, powser_table, trace_calls

from nnbuild.wcet import avr_decode, avr_loops

#: per-step relative widening of the intervals (the soft-float steps truncate to >= 24 bits)
EPS = 2.0 ** -18
LOG2E = float(np.log2(np.e))
#: exp's intervals end here; above, every argument runs under simavr
F_EXHAUSTIVE = 1.0 - 2.0 ** -11
#: cos: __fp_sinus's t = y*y with 2^-31 <= |y| <= pi/2 (the __mulsf3_pse entries in cos, __fp_sinus)
T_RANGE = (2.0 ** -62, (np.pi / 2) ** 2 * (1 + 2.0 ** -20))
EXP_DRIVER = "#include <math.h>\nvoid cg_exp(const float in[1], float out[1]) { out[0] = expf(in[0]); }\n"
COS_DRIVER = "#include <math.h>\nvoid cg_cos(const float in[1], float out[1]) { out[0] = (float)cos(in[0]); }\n"
NORM_HEADER = 0x6E


def norm_entry(context):
    [ent] = [e for e in avr_loops.load_table() if e["symbol"] == "__addsf3x" and e["offset"] == NORM_HEADER
             and e.get("within") == list(context)]
    return ent


def ratio_bounds(coef, lo_t, hi_t):
    """Per addition k = 1..count: the least |acc_k*t + c_k| / max(|acc_k*t|, |c_k|) over the
    intervals [lo_t, hi_t] of the argument (interval arithmetic, every step widened by EPS)."""
    lo, hi = np.full_like(lo_t, coef[0]), np.full_like(lo_t, coef[0])
    out = []
    for k, c in enumerate(coef[1:]):
        # the opposite-signs entries: acc_k keeps c_k's sign, c_(k+1) has the other one (t > 0)
        assert np.all(lo * np.sign(coef[k]) > 0) and np.all(hi * np.sign(coef[k]) > 0) and np.sign(c) == -np.sign(coef[k])
        cand = np.stack([lo * lo_t, lo * hi_t, hi * lo_t, hi * hi_t])
        plo, phi = cand.min(axis=0), cand.max(axis=0)
        plo, phi = plo - np.abs(plo) * EPS, phi + np.abs(phi) * EPS
        slo, shi = plo + c, phi + c
        slo, shi = slo - np.abs(slo) * EPS, shi + np.abs(shi) * EPS
        assert np.all((slo > 0) | (shi < 0)), "sum sign not known"
        least = np.minimum(np.abs(slo), np.abs(shi))
        larger = np.maximum(np.maximum(np.abs(plo), np.abs(phi)), abs(c))
        out.append(float((least / larger).min()))
        lo, hi = slo, shi
    return out


def binades(first, last, parts=2048):
    """[2^-j, 2^(1-j)) for j = first..last, each in `parts` equal intervals: (lows, highs)."""
    j = np.arange(first, last + 1, dtype=float)[:, None]
    edges = 2.0 ** -j * (1 + np.arange(parts + 1) / parts)
    return edges[:, :-1].ravel(), edges[:, 1:].ravel()


def exp_ratios(coef):
    """exp: f in [0, 1): every binade 2^-60..2^0, the top one up to F_EXHAUSTIVE. Below 2^-60 every
    |acc_k*f| < 2^-59 (|acc_k| < 2) against |c_k| >= 2^-17: the sum keeps c_k to 2^-42; f = 0 adds
    zero products (no subtraction)."""
    lo, hi = binades(1, 60)
    keep = lo < F_EXHAUSTIVE
    return ratio_bounds(coef, lo[keep], np.minimum(hi[keep], F_EXHAUSTIVE))


def cos_ratios(coef):
    """cos: t in T_RANGE, every binade from 2^1 down to 2^-62."""
    lo, hi = binades(-1, 62)
    keep = (hi > T_RANGE[0]) & (lo < T_RANGE[1])
    return ratio_bounds(coef, np.maximum(lo[keep], T_RANGE[0]), np.minimum(hi[keep], T_RANGE[1]))


@pytest.fixture(scope="module")
def drivers(tmp_path_factory):
    out = {}
    for name, text in (("exp", EXP_DRIVER), ("cos", COS_DRIVER)):
        d = tmp_path_factory.mktemp(f"{name}drv")
        elf = avr_libm_driver(d, name, text)
        out[name] = (elf, avr_decode.load(elf), d)
    return out


@needs_avr
def test_additions_keep_more_than_half_the_larger_operand(drivers):
    """The interval bounds, from the tables in the linked image, stay above 1/2 (with margin for
    the sticky borrow): one normalisation shift at most, the entries' bound."""
    assert norm_entry(("exp", "__fp_powser"))["header_max"] == 1
    assert norm_entry(("cos", "__fp_powser"))["header_max"] == 1
    print()
    for routine, table, terms, ratios_of in (("exp", "exp", 7, exp_ratios), ("cos", "__fp_sinus", 5, cos_ratios)):
        elf, prog, _ = drivers[routine]
        count, coef = powser_table(elf, prog, table)
        assert count == terms and coef[-1] == 1.0
        ratios = ratios_of(coef)
        print(f"  {routine}: least ratio per addition {[round(r, 5) for r in ratios]}")
        assert min(ratios) > 0.5 + 2.0 ** -20


def floats_between(lo, hi):
    """Every float32 in [lo, hi] (0 < lo < hi)."""
    a, b = np.float32([lo, hi]).view(np.uint32)
    assert a <= b
    return np.arange(a, b + 1, dtype=np.uint32).view(np.float32)


def exp_near_one():
    """Every positive x whose f = frac(x*log2 e) can lie above F_EXHAUSTIVE: z just below 1, and
    just below n + 1 for n = 1..184 (|x| < 128; exp uses |x|, so the sign does not matter)."""
    width = (1 - F_EXHAUSTIVE) / LOG2E
    parts = [floats_between((n + 1) / LOG2E - 1.25 * width, min((n + 1) / LOG2E * (1 + 2.0 ** -20), 127.99))
             for n in range(0, 185) if (n + 1) / LOG2E - 1.25 * width < 127.99]
    return np.concatenate(parts)


def same_sign_block(context):
    """Offset of the same-sign addition block of __addsf3x that the context's opposite-signs entry
    says never runs."""
    [ent] = [e for e in avr_loops.load_paths() if e["symbol"] == "__addsf3x" and e.get("within") == list(context)
             and e.get("id", "").endswith("opposite-signs")]
    assert ent["rows"] == [[{"same": 1}, 0]]
    return ent["blocks"]["same"][0]


def count_norm_passes(drv, context, x, tmp_path):
    """Per __addsf3x invocation inside `context` (the functions active around the call): the
    normalisation header's passes, as (invocations, {passes: invocations}, executions of the
    same-sign addition block)."""
    from test_wcet_avr_context import Probe
    elf, prog, _ = drv
    start = prog.address_of("__addsf3x")
    probe = Probe(start, context, None, "sup", [start + NORM_HEADER, start + same_sign_block(context)])
    trace_calls(elf, [probe], x, tmp_path, context)
    seen = {}
    for mult, _, (passes, _) in probe.vectors:
        seen[passes] = seen.get(passes, 0) + mult
    return probe.invocations, seen, sum(mult * same for mult, _, (_, same) in probe.vectors)


def exp_arguments():
    """Every argument whose f lies above the intervals' end, and the exp-path sweep (every binade
    of f, z near integers, subnormal z, the integer parts of ldexp's slow paths)."""
    from test_tpg_exp_paths import sweep
    return np.concatenate([exp_near_one(), sweep()])


def cos_arguments():
    """Arguments below 1 (y = pi/2 - |x|), below 1024 and huge (remainders near pi/2, so small y),
    random bit patterns."""
    from test_tpg_cos_guard import huge_arguments, small_arguments
    rng = np.random.default_rng(17)
    bits = rng.integers(0, 0x7F800000, 4000, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([small_arguments(rng), huge_arguments(rng), bits.view(np.float32),
                           rng.uniform(-1, 1, 2000).astype(np.float32), floats_between(0.99, 1.0)[::32],
                           floats_between(1.0, 1.0001), floats_between(2.0 ** -40, 2.0 ** -39)[::4096]])


#: per routine: its arguments, the Horner additions one call makes (exp: 7 when |x| < 128, else none)
SWEEPS = {"exp": (exp_arguments, lambda x: 7 * np.sum(np.abs(x) < 128)),
          "cos": (cos_arguments, lambda x: 5 * len(x))}


@pytest.mark.e2e
@needs_avr
@pytest.mark.parametrize("name", sorted(SWEEPS))
def test_additions_normalise_once_under_simavr(drivers, tmp_path, name):
    """At most one normalisation pass per Horner addition of the routine's polynomial, and one is
    reached, and never the same-sign addition block, on its sweep (SWEEPS)."""
    arguments, additions = SWEEPS[name]
    x = arguments()
    context = (name, "__fp_powser")
    calls, seen, same = count_norm_passes(drivers[name], context, x, tmp_path)
    print(f"\n  {name}: {len(x)} arguments, {calls} Horner additions, normalisation passes {dict(sorted(seen.items()))}")
    assert calls == additions(x)
    assert same == 0  # the opposite-signs entry: every addition subtracts
    assert max(seen) == norm_entry(context)["header_max"] == 1
