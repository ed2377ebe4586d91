"""The Cortex-M0+ value facts of nnbuild/wcet/thumb2_libloops.json that newlib's expf leans on,
driven to their limits on qemu-system-arm with every instruction traced:

* `fadd:no.subnormal.operand`: the blocks of libgcc's Thumb-1 __aeabi_fadd and __aeabi_fsub that
  handle a subnormal operand run, over a sweep of operand pairs (every class, sign and exponent
  difference around the alignment limits), only for a pair with a subnormal operand, at most once
  a call, and each runs for some pair (the untagged limit);
* `fmul:finite`: __aeabi_fmul's inf/NaN unpacking blocks and the class dispatch's way to the
  multiply run only for a call with an infinite or NaN factor, and each runs for one;
* `exp:|x|<40` and expf's call-site tags: over a sweep of arguments (the floats nearest k ln 2, the
  2^-28 and 0.5 ln 2 / 1.5 ln 2 edges, random values, NaN, infinities, the overflow and underflow
  range), with the wrapper's range tests on (_LIB_VERSION = _POSIX_), neither the wrapper's
  range-error blocks nor __ieee754_expf's overflow and scaling blocks run for |x| < 40 or NaN (each
  runs for some other argument); no call at a `fadd:no.subnormal.operand` site reaches a subnormal
  block, no multiply the inf/NaN blocks, no call at a `fmul:normal.product` site the underflow block;
* builtin-thumb2 applies them to the xor build: expf in the `exp:|x|<40` context, its calls with
  their site tags, every tagged soft-float callee solved in its own context (the MLP's
  fmul:no.subnormal and fadd:same-sign too), and an entry whose pinned literal words differ from the
  image's is not applied.

The rows' arguments are in each entry's `why`."""

import json
import math
import struct

import pytest

from conftest import REPO, have
from test_arm_float_facts import EXPF_POSIX_C, calls_into, expf_arguments, f32_bits, m0plus_trace

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                 reason="arm-none-eabi-gcc or qemu-system-arm not installed")]


def entries(symbol, when):
    from nnbuild.wcet import thumb2_loops
    paths, _ = thumb2_loops.load_value_entries()
    return [e for e in paths if e["symbol"] == symbol and e["when"] == when]


def row_blocks(entry):
    return sorted({int(off, 0) for row in entry["rows"] for off in row["blocks"]})


def expf_entry():
    from nnbuild.wcet import thumb2_loops
    _, callers = thumb2_loops.load_value_entries()
    (entry,) = [e for e in callers if e["symbol"] == "__ieee754_expf"]
    return entry


# ------------------------------------------------------------------ __aeabi_fadd / __aeabi_fsub

PAIRS_C = r"""
static const unsigned A[] = {@A@};
static const unsigned B[] = {@B@};
volatile float sink;
__attribute__((noinline)) float add(float x, float y) { return x + y; }
__attribute__((noinline)) float sub(float x, float y) { return x - y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof A / sizeof A[0]; ++k) {
        union { unsigned u; float f; } a, b;
        a.u = A[k];
        b.u = B[k];
        sink = add(a.f, b.f);
        sink = sub(a.f, b.f);
    }
    return 0;
}
"""
#: float32 bit patterns without sign: zero, inf, NaN, normals at the exponents where the alignment
#: shift changes its way (a difference of 0, 1, 25..28, and large), subnormals
NORMALS = [(e << 23) | f for e in (1, 2, 26, 27, 28, 29, 30, 127, 128, 253, 254) for f in (0, 0x7fffff, 0x2aaaab)]
SUBNORMALS = [0x000001, 0x400000, 0x7fffff]
VALUES = [0, 0x7f800000, 0x7fc00000] + NORMALS + SUBNORMALS


def operand_pairs():
    return [(a | sa, b | sb) for a in VALUES for b in VALUES for sa, sb in ((0, 0), (0, 1 << 31), (1 << 31, 0))]


def subnormal(bits):
    return 0 < bits & 0x7fffffff < 0x800000


def test_fadd_and_fsub_subnormal_blocks_run_only_for_a_subnormal_operand(tmp_path):
    from nnbuild.wcet import thumb2_loops
    pairs = operand_pairs()
    source = PAIRS_C.replace("@A@", ", ".join(f"0x{a:08x}u" for a, _ in pairs)).replace(
        "@B@", ", ".join(f"0x{b:08x}u" for _, b in pairs))
    prog, pcs = m0plus_trace(tmp_path, "pairs", source)
    for parity, symbol in enumerate(("__aeabi_fadd", "__aeabi_fsub")):
        (entry,) = entries(symbol, "fadd:no.subnormal.operand")
        start = prog.address_of(symbol)
        assert thumb2_loops.code_hash(prog, start) == entry["sha256"]
        watched = {start + off for off in row_blocks(entry)}
        assert len(watched) == 7
        lo, hi = prog.interval(start)
        calls = calls_into(pcs, start, hi)
        assert len(calls) == len(pairs)   # add calls __aeabi_fadd, sub __aeabi_fsub, once a pair each
        reached = set()
        for (a, b), (_, inside) in zip(pairs, calls):
            hit = inside & watched
            if not (subnormal(a) or subnormal(b)):
                assert not hit, (symbol, hex(a), hex(b), sorted(hex(h - start) for h in hit))
            assert len(hit) <= 1, (symbol, hex(a), hex(b))
            reached |= hit
        assert reached == watched, (symbol, sorted(hex(w - start) for w in watched - reached))


# ------------------------------------------------------------------ __aeabi_fmul: finite factors

FACTORS = [0, 0x3f800000, 0x3fc00001, 0x00000001, 0x7f7fffff, 0x7f800000, 0x7fc00000, 0x7fa00000, 0x0c000000]


def test_fmul_inf_nan_blocks_and_the_dispatch_to_the_multiply_run_only_for_a_non_finite_factor(tmp_path):
    from nnbuild.wcet import thumb2_loops
    pairs = [(a | s, b) for a in FACTORS for b in FACTORS for s in (0, 1 << 31)]
    source = PAIRS_C.replace("x + y", "x * y").replace("x - y", "y * x").replace(
        "@A@", ", ".join(f"0x{a:08x}u" for a, _ in pairs)).replace("@B@", ", ".join(f"0x{b:08x}u" for _, b in pairs))
    prog, pcs = m0plus_trace(tmp_path, "fmul", source)
    (entry,) = entries("__aeabi_fmul", "fmul:finite")
    start = prog.address_of("__aeabi_fmul")
    assert thumb2_loops.code_hash(prog, start) == entry["sha256"]
    watched = {start + off for off in row_blocks(entry)}
    calls = calls_into(pcs, start, prog.interval(start)[1])
    assert len(calls) == 2 * len(pairs)
    reached = set()
    for (a, b), (_, inside) in zip([p for p in pairs for _ in (0, 1)], calls):
        finite = all(v & 0x7f800000 != 0x7f800000 for v in (a, b))
        hit = inside & watched
        if finite:
            assert not hit, (hex(a), hex(b), sorted(hex(h - start) for h in hit))
        reached |= hit
    assert reached == watched


# ------------------------------------------------------------------ newlib's expf

def test_expf_range_rows_and_call_site_tags_hold_over_the_argument_sweep(tmp_path):
    from nnbuild.wcet import thumb2_loops
    args = sorted(set(expf_arguments()[::3]) | {f32_bits(v) for v in (-90.0, 100.0, -110.0, 39.99, -39.99, 40.0)})
    source = "#define _DEFAULT_SOURCE 1\n#include <math.h>\n" + EXPF_POSIX_C.replace("@ARGS@", ", ".join(f"0x{a:08x}u" for a in args))
    prog, pcs = m0plus_trace(tmp_path, "expf", source)
    wrapper, expf = prog.address_of("expf"), prog.address_of("__ieee754_expf")
    (wrap_row,) = entries("expf", "exp:|x|<40")
    (expf_row,) = entries("__ieee754_expf", "exp:|x|<40")
    for narrower in entries("expf", "exp:|x|<18") + entries("__ieee754_expf", "exp:|x|<18"):   # nn_tanh's
        wider = wrap_row if narrower["symbol"] == "expf" else expf_row
        assert {k: v for k, v in narrower.items() if k not in ("when", "why")} == \
            {k: v for k, v in wider.items() if k not in ("when", "why")}
    assert thumb2_loops.code_hash(prog, wrapper) == wrap_row["sha256"] == expf_row["through"]["sha256"]
    assert all(prog.word(wrapper + int(o, 0)) == int(w, 16) for o, w in wrap_row["words"].items())
    assert thumb2_loops.code_hash(prog, expf) == expf_row["sha256"]
    caller = expf_entry()
    assert thumb2_loops.data_hash(prog, expf) == caller["sha256"]
    assert pcs.count(wrapper) == len(args)
    # the range rows: per call of the wrapper, none for |x| < 40 or NaN, each block for some other x
    watched = {wrapper + o for o in row_blocks(wrap_row)} | {expf + o for o in row_blocks(expf_row)}
    per_arg, current = [], None
    for pc in pcs:
        if pc == wrapper:
            current = set()
            per_arg.append(current)
        elif current is not None and pc in watched:
            current.add(pc)
    assert len(per_arg) == len(args)
    for a, hit in zip(args, per_arg):
        x = struct.unpack("<f", struct.pack("<I", a))[0]
        if math.isnan(x) or abs(x) < 40:
            assert not hit, (hex(a), sorted(hex(h) for h in hit))
    assert set().union(*per_arg) == watched
    # the caller tags: each call from __ieee754_expf keeps off the blocks of every entry its tags select
    expf_end = prog.interval(expf)[1]
    site_tags = {}
    for op, groups in caller["sites"].items():
        for group in groups:
            for off in group["offsets"]:
                site_tags.setdefault((expf + off, op), set()).update(group["tags"])
    applied = {}
    for symbol, op in (("__aeabi_fadd", "add"), ("__aeabi_fsub", "add"), ("__aeabi_fmul", "mul"), ("__aeabi_fdiv", "div")):
        start = prog.address_of(symbol)
        mine = [e for e in thumb2_loops.load_value_entries()[0] if e["symbol"] == symbol]
        for site, inside in calls_into(pcs, start, prog.interval(start)[1]):
            if not expf <= site < expf_end:
                continue
            tags = set(caller["tags"].get(op, ())) | site_tags.get((site, op), set())
            for ent in mine:
                if set(ent["when"].split("+")) <= tags:
                    blocks = {start + o for o in row_blocks(ent)}
                    assert not inside & blocks, (symbol, ent["when"], hex(site - expf))
                    applied[(symbol, ent["when"])] = applied.get((symbol, ent["when"]), 0) + 1
    assert {k for k in applied} >= {("__aeabi_fadd", "fadd:no.subnormal.operand"),
                                    ("__aeabi_fsub", "fadd:no.subnormal.operand"),
                                    ("__aeabi_fmul", "fmul:finite"), ("__aeabi_fmul", "fmul:normal.product")}, applied
    # the multiplies left without fmul:normal.product (y * twom100 for x < -125 ln 2) do underflow
    fmul = prog.address_of("__aeabi_fmul")
    (under,) = [fmul + o for o in row_blocks(entries("__aeabi_fmul", "fmul:normal.product")[0])]
    untagged = {site for site, inside in calls_into(pcs, fmul, prog.interval(fmul)[1]) if under in inside}
    assert untagged == {expf + 0x1ba}, sorted(hex(s - expf) for s in untagged)


def xor_rp2040_check_program(tmp_path):
    """(board, ELF, flow facts) of the xor example's float32 check program built for the rp2040."""
    from nnbuild import pipeline
    meta = json.loads((REPO / "firmware_examples" / "xor" / "example.json").read_text())
    model = pipeline.load_model(REPO / "firmware_examples" / "xor" / meta["model"], "xor")[0]
    board = pipeline.load_board("rp2040")
    elf, _ = pipeline.build_check_program(model, board, tmp_path, name="xor", precision="float32",
                                          input_range=tuple(meta["input_range"]))
    return board, elf, json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())


def test_builtin_thumb2_solves_tagged_calls_in_their_own_context_and_applies_the_expf_facts(tmp_path):
    """The rp2040 xor build analysed with the generator's facts and without: the MLP's flush and sign
    split (fmul:no.subnormal, fadd:same-sign) and newlib's expf in its `exp:|x|<40` context with its
    site tags, each callee solved in its own tag context; an entry whose pinned words differ is not
    applied."""
    from nnbuild import wcet
    from nnbuild.wcet import thumb2_loops
    board, elf, facts = xor_rp2040_check_program(tmp_path)
    tagged = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "wcet")
    callees = tagged.details["callee_wcet"]
    ranged = [k for k in callees if k.startswith(("expf ", "__ieee754_expf ")) and "[exp:|x|<40]" in k]
    assert len(ranged) == 2, sorted(callees)
    assert any(k.startswith("__aeabi_fsub") and "[fadd:no.subnormal.operand]" in k for k in callees)
    assert any(k.startswith("__aeabi_fmul") and "[fmul:finite] [fmul:no.subnormal] [fmul:normal.product]" in k
               for k in callees)
    # without the generator's facts expf is analysed without its range: the bound is higher
    plain = wcet.analyze(board, elf, "xor_infer", dict(facts, values=[]), tmp_path / "plain")
    assert not any("[exp:|x|<40]" in k for k in plain.details["callee_wcet"])
    assert tagged.cycles < plain.cycles
    # the rp2040 has no FPU: the MLP flushes and sign-splits (fmul:no.subnormal, fadd:same-sign)
    assert not any("[fmul:one.normal]" in k for k in callees)
    none = next(v for k, v in callees.items() if k.startswith("__aeabi_fmul") and "[fmul:no.subnormal]" in k)
    untagged = next(v for k, v in plain.details["callee_wcet"].items() if k.startswith("__aeabi_fmul"))
    assert none < untagged
    same_sign = next(v for k, v in callees.items() if k.startswith("__aeabi_fadd") and "[fadd:same-sign]" in k)
    assert same_sign < max(v for k, v in callees.items() if k.startswith("__aeabi_fadd") and "[" not in k)
    assert any("fdiv:no.subnormal" in k for k in tagged.details["value_facts"])
    # newlib's expf is tagged by its caller entry even without the generator's facts
    assert any("[fmul:no.subnormal]" in k for k in plain.details["callee_wcet"])
    # a wrapper whose literal words differ from the pinned ones gets no range rows
    paths, callers = thumb2_loops.load_value_entries()
    changed = [dict(e, words={"0x58": "42b17181"}) if e["symbol"] == "expf" else e for e in paths]
    original = thumb2_loops.load_value_entries
    try:
        thumb2_loops.load_value_entries = lambda path=None: (changed, callers)
        other = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "words")
    finally:
        thumb2_loops.load_value_entries = original
    assert not any(k.startswith("expf ") and "value_facts" for k in other.details["value_facts"])
    assert other.cycles > tagged.cycles


def test_a_caller_site_that_is_not_a_call_is_refused(tmp_path):
    from nnbuild import pipeline
    from nnbuild.errors import NNBuildError
    from nnbuild.wcet import thumb2_decode, thumb2_ipet, thumb2_loops
    from test_thumb2_libloops import build
    board = pipeline.load_board("rp2040")
    elf = build(tmp_path, board, "expf", "#include <math.h>\nvolatile float x = 1.5f, sink;\n"
                "int main(void) { sink = expf(x); return 0; }\n")
    prog = thumb2_decode.load(str(elf), board)
    paths, callers = thumb2_loops.load_value_entries()
    bad = [dict(c, sites={"add": [{"offsets": [2], "tags": ["fadd:no.subnormal.operand"], "why": "-"}]}) for c in callers]
    with pytest.raises(NNBuildError, match=r"caller_tags __ieee754_expf: offset 2 \(0x2\) is not a call of the routine"):
        thumb2_ipet.ValueFacts(prog, {}, paths, bad)
