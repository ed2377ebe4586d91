"""The float value facts of the ARM analyzers driven to their limits: the `paths` and `caller_tags`
entries of nnbuild/wcet/arm_libloops.json (OTAWA, ARM7TDMI) and thumb2_libloops.json (builtin-thumb2,
Cortex-M0+) run under qemu with every instruction traced.

* libgcc's __aeabi_fmul (ARM state) per call: the subnormal block runs only when a factor is
  subnormal, and the two normalisation headers reach 24 executions with one factor normal (the
  tagged row's limit) and 46 = 24 + 22 with both subnormal (the untagged limit), never more;
* newlib's __ieee754_expf, over a sweep of arguments (subnormals, the 2^-28 and 0.5 ln2 edges,
  the floats nearest k ln2, the overflow and underflow edges, NaN, infinities, random values):
  no multiply or division it makes reaches the subnormal blocks (the caller tags' claim);
* the Thumb-1 __aeabi_fmul/__aeabi_fdiv subnormal blocks run once, and only for a subnormal operand;
* libgcc's __aeabi_fadd/__aeabi_fsub (ARM state and Thumb-1) per call: the block that starts a
  cancellation runs at most once, never for two operands of the same sign that are not both
  subnormal (fadd:same-sign, a split layer's pos += p and neg -= p), and once for operands of
  opposite signs (the untagged row's limit).

The unit tests check the row building of nnbuild/wcet/otawa_paths.py on a small block map."""

import math
import struct

import numpy as np
import pytest

from arm_helpers import arm7tdmi_elf, executed_pcs
from conftest import have
from nnbuild.errors import NNBuildError
from nnbuild.numerics import float_facts
from nnbuild.wcet import otawa, otawa_ilp, otawa_paths
from nnbuild.wcet.thumb2_decode import object_at

ARM_TABLE = otawa.LIBLOOPS_PATH
needs_qemu_arm = pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-arm"),
                                    reason="arm-none-eabi-gcc or qemu-arm not installed")


def arm_table():
    import json
    return json.loads(ARM_TABLE.read_text())


# ------------------------------------------------------------------ unit: row building


def test_zero_or_normal_and_the_activations_without_subnormal_outputs():
    assert float_facts.zero_or_normal([[0.5, -0.0], [1e-30, 3.0]])
    assert not float_facts.zero_or_normal([1e-40])
    assert not float_facts.zero_or_normal([np.inf])
    assert float_facts.not_subnormal_output("tanh") == "tanh"
    assert float_facts.not_subnormal_output("sigmoid") == "sigmoid"
    assert float_facts.not_subnormal_output("relu") is None
    assert float_facts.not_subnormal_output(None) is None


def _function(name, start, n):
    func = otawa.Function(name, start)
    func.insns = [otawa.Insn(start + 4 * k, "mov", f"r0, #{k}", "m.c", 10 + k) for k in range(n)]
    return func


ENTRY = {"about": "test", "symbols": ["f"], "sha256": None, "op": "mul",
         "blocks": {"d": 8, "a": 12}, "row": {"a": 1, "d": -24},
         "calls": {"t1": 0, "t2+t3": -1, "other": -22}, "at_most": 0, "why": "test"}


def test_a_row_charges_each_call_site_by_its_tags(tmp_path):
    callee = _function("f", 0x100, 8)
    caller = _function("main", 0x200, 6)
    functions = {"f": [callee], "main": [caller]}
    entry = dict(ENTRY, sha256=otawa.routine_digest(callee))
    blocks = tmp_path / "m.blocks"
    blocks.write_text("B f 1 100\nB f 2 108\nB f 3 10c\nB main 1 200\n"
                      "S main 4 200 f\nS main 5 204 f\nS main 6 208 f\nS main 7 20c g\n")
    facts = {"values": [{"file": "m.c", "line": 10, "op": "mul", "tags": ["t1"]},
                        {"file": "m.c", "line": 11, "op": "mul", "tags": ["t2", "t3"]},
                        {"file": "m.c", "line": 12, "op": "add", "tags": ["t1"]}]}
    lines = {i.addr: (i.file, i.line) for i in caller.insns}
    rows = otawa_paths.path_rows(functions, otawa_paths.read_block_map(blocks), facts, [entry],
                                 otawa.routine_digest, otawa.same_file, lines.get)
    assert len(rows) == 1
    row = rows[0]
    # line 10: t1 (0); line 11: t2+t3 (-1); line 12 carries an "add" tag only: other (-22); g is not f
    assert row.coefs == {"x3_f": 1.0, "x2_f": -24.0, "x5_main": -1.0, "x6_main": -22.0}
    assert row.calls == {"t1": 1, "t2+t3": 1, "other": 1}
    lp = otawa_ilp.LinearProgram({"x3_f": 5.0}, [({"x2_f": 1.0, "x4_main": 1.0, "x5_main": 1.0, "x6_main": 1.0},
                                                  "<=", 3.0)])
    assert otawa_paths.add_rows(lp, rows).rows[-1] == (row.coefs, "<=", 0.0)
    with pytest.raises(NNBuildError, match="no variable x9_f"):
        otawa_paths.add_rows(otawa_ilp.LinearProgram({"x3_f": 1.0}, []), [otawa_paths.PathRow(
            {"x9_f": 1.0}, 0.0, "f", {}, "why")])


def test_a_row_needs_the_pinned_code_and_every_block_once(tmp_path):
    callee = _function("f", 0x100, 8)
    functions = {"f": [callee]}
    blocks = tmp_path / "m.blocks"
    blocks.write_text("B f 1 100\nB f 2 108\nB f 3 10c\nB g 1 10c\n")
    block_map = otawa_paths.read_block_map(blocks)
    pinned = dict(ENTRY, sha256=otawa.routine_digest(callee))
    assert otawa_paths.path_rows(functions, block_map, {}, [dict(ENTRY, sha256="0" * 64)], otawa.routine_digest,
                                 otawa.same_file, lambda a: None) == []
    # the header at +12 is also in g's CFG (g branches into f's code): f's own count is the one
    rows = otawa_paths.path_rows(functions, block_map, {}, [pinned], otawa.routine_digest,
                                 otawa.same_file, lambda a: None)
    assert [r.coefs for r in rows] == [{"x3_f": 1.0, "x2_f": -24.0}]
    # no CFG starts at f, or f's CFG lacks a named block: no row (the loop bounds alone stay)
    for text in ("B g 1 100\nB f 2 108\nB f 3 10c\n", "B f 1 100\nB f 2 108\nB g 3 10c\n"):
        blocks.write_text(text)
        assert otawa_paths.path_rows(functions, otawa_paths.read_block_map(blocks), {}, [pinned],
                                     otawa.routine_digest, otawa.same_file, lambda a: None) == []


def test_a_falls_into_entry_needs_the_pinned_routine_right_after_it(tmp_path):
    """libgcc's __aeabi_fsub is one instruction falling into __aeabi_fadd: its row names fadd's
    blocks from fsub's start, so it applies only when the routine at fsub's end has fadd's digest."""
    entry_fn, body = _function("s", 0x100, 1), _function("a", 0x104, 8)
    functions = {"s": [entry_fn], "a": [body]}
    blocks = tmp_path / "m.blocks"
    blocks.write_text("B s 1 100\nB s 2 108\nB s 3 10c\n")
    entry = dict(ENTRY, symbols=["s"], sha256=otawa.routine_digest(entry_fn),
                 falls_into={"symbols": ["a"], "sha256": otawa.routine_digest(body)})
    rows = otawa_paths.path_rows(functions, otawa_paths.read_block_map(blocks), {}, [entry], otawa.routine_digest,
                                 otawa.same_file, lambda a: None)
    assert [r.coefs for r in rows] == [{"x3_s": 1.0, "x2_s": -24.0}]
    for other in ({"a": [_function("a", 0x108, 8)]}, {"a": [_function("a", 0x104, 7)]}, {}):   # moved, changed, absent
        assert otawa_paths.path_rows(dict(functions, **other) if other else {"s": [entry_fn]},
                                     otawa_paths.read_block_map(blocks), {}, [entry], otawa.routine_digest,
                                     otawa.same_file, lambda a: None) == []


def _call_function(name, start, calls):
    """A routine of `calls` instructions, `bl <target>` at the given offsets (a dict offset -> target)
    and movs elsewhere, ending in `bx lr`."""
    func = otawa.Function(name, start)
    for k in range(max(calls) // 4 + 2):
        addr = start + 4 * k
        if 4 * k in calls:
            func.insns.append(otawa.Insn(addr, "bl", f"{calls[4 * k]:x} <callee>", "lib.c", 100 + k))
        else:
            func.insns.append(otawa.Insn(addr, "mov", f"r0, #{k}", "lib.c", 100 + k))
    func.insns.append(otawa.Insn(start + 4 * len(func.insns), "bx", "lr", "lib.c", 99))
    return func


def test_caller_tags_of_one_call_site_reach_that_call_only(tmp_path):
    """A `caller_tags` entry's `sites` tag the calls at their offsets only (newlib expf's
    fmul:normal.product: every multiply but y * twom100 and huge * huge); the routine-wide tags
    reach every call; an offset that is not a call is refused."""
    lib = _call_function("lib", 0x300, {0: 0x100, 8: 0x100})
    callee = _function("f", 0x100, 8)
    functions = {"f": [callee], "lib": [lib]}
    digest = otawa.routine_digest
    table = [{"symbols": ["lib"], "sha256": digest(lib), "tags": {"mul": ["t2"]},
              "sites": {"mul": [{"offsets": [8], "tags": ["t1"], "why": "test"}]}}]
    callers = otawa_paths.caller_tags(functions, table, digest)
    assert callers[0].of_call("mul", 0x308) == {"t1", "t2"} and callers[0].of_call("mul", 0x300) == {"t2"}
    blocks = tmp_path / "m.blocks"
    blocks.write_text("B f 1 100\nB f 2 108\nB f 3 10c\nB lib 1 300\nS lib 2 300 f\nS lib 3 308 f\n")
    entry = dict(ENTRY, sha256=digest(callee), calls={"t1": 0, "other": -22})
    (row,) = otawa_paths.path_rows(functions, otawa_paths.read_block_map(blocks), {}, [entry], digest,
                                   otawa.same_file, lambda a: None, callers)
    assert row.coefs == {"x3_f": 1.0, "x2_f": -24.0, "x2_lib": -22.0} and row.calls == {"t1": 1, "other": 1}
    table[0]["sites"]["mul"][0]["offsets"] = [4]
    with pytest.raises(NNBuildError, match="offset 4 .* is not a call"):
        otawa_paths.caller_tags(functions, table, digest)


def test_a_through_entry_counts_the_only_callers_calls(tmp_path):
    """A `through` entry (newlib's __ieee754_expf through expf's wrapper) charges the wrapper's
    call sites by their lines' tags, only when the wrapper is the routine's one caller, calls it from
    one site, cannot run that call twice, and has the pinned literal words; else no row."""
    callee = _function("f", 0x100, 8)
    wrapper = _call_function("w", 0x300, {4: 0x100})
    wrapper.words[0x330] = 0x42b17180
    caller = _function("main", 0x200, 6)
    functions = {"f": [callee], "w": [wrapper], "main": [caller]}
    digest = otawa.routine_digest
    through = {"symbols": ["w"], "sha256": digest(wrapper), "words": {"48": "42b17180"}}
    entry = dict(ENTRY, sha256=digest(callee), op="exp", calls={"t1": 0, "other": -22}, through=through)
    blocks = tmp_path / "m.blocks"
    text = "B f 1 100\nB f 2 108\nB f 3 10c\nB w 1 300\nS w 2 304 f\nS main 4 200 w\nS main 5 204 w\n"
    blocks.write_text(text)
    facts = {"values": [{"file": "m.c", "line": 10, "op": "exp", "tags": ["t1"]}]}
    lines = {i.addr: (i.file, i.line) for i in caller.insns}

    def rows(functions=functions, entry=entry):
        return otawa_paths.path_rows(functions, otawa_paths.read_block_map(blocks), facts, [entry], digest,
                                     otawa.same_file, lines.get)
    (row,) = rows()
    assert row.coefs == {"x3_f": 1.0, "x2_f": -24.0, "x5_main": -22.0} and row.calls == {"t1": 1, "other": 1}
    # another caller of f, other literal words, a branch back to the call: no row
    blocks.write_text(text + "S main 6 208 f\n")
    assert rows() == []
    blocks.write_text(text)
    assert rows(entry=dict(entry, through=dict(through, words={"48": "42b17181"}))) == []
    looped = _call_function("w", 0x300, {4: 0x100, 12: 0x304})
    looped.insns[3] = otawa.Insn(0x30c, "bne", "304 <w+0x4>", "lib.c", 103)
    looped.words[0x330] = 0x42b17180
    assert rows(functions=dict(functions, w=[looped]),
                entry=dict(entry, through=dict(through, sha256=digest(looped)))) == []


def test_named_variables_read_back():
    lp = otawa_ilp.parse_lp("/* IPET system */\nmax: 12 e3_5___aeabi_i2f + 4 x2_f.part.0;\n"
                            "x0_main = 1;\ne3_5___aeabi_i2f - 2 x2_f.part.0 <= 0;\nint x0_main;\n")
    assert lp.objective == {"e3_5___aeabi_i2f": 12.0, "x2_f.part.0": 4.0}
    assert lp.rows[1] == ({"e3_5___aeabi_i2f": 1.0, "x2_f.part.0": -2.0}, "<=", 0.0)
    # a routine OTAWA has no label for: x<index>_ in the system, "-" in the block map
    assert otawa_ilp.linear_form("3 x3_ + e1_2_")[0] == {"x3_": 3.0, "e1_2_": 1.0}
    assert otawa_paths.count_variable("-", 3) == "x3_"


# ------------------------------------------------------------------ qemu-arm: libgcc's __aeabi_fmul


FMUL_C = r"""
volatile float a[] = {@A@};
volatile float b[] = {@B@};
volatile float sink;
__attribute__((noinline)) float multiply(float x, float y) { return x * y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof a / sizeof a[0]; ++k)
        sink = multiply(a[k], b[k]);
    return 0;
}
"""
#: (first factor, second factor, one of them zero or normal)
FMUL_CASES = [("0.75f", "1.4e-45f", True), ("1.4e-45f", "0.75f", True), ("1.4e-45f", "1.4e-45f", False),
              ("1.5f", "2.5f", True), ("0.0f", "1.4e-45f", True), ("1e-40f", "3e-39f", False),
              ("-3.0f", "-1.1754942e-38f", True), ("1.0f/0.0f", "1e-40f", True), ("1e38f", "1e38f", True),
              ("1e-30f", "1e-30f", True)]


def fmul_elf(tmp_path):
    """The ARM7TDMI program multiplying each pair of FMUL_CASES through libgcc's __aeabi_fmul."""
    source = FMUL_C.replace("@A@", ", ".join(a for a, _, _ in FMUL_CASES)).replace(
        "@B@", ", ".join(b for _, b, _ in FMUL_CASES))
    return arm7tdmi_elf(tmp_path, "fmul", source)


def per_call(pcs, start, watched):
    """{address: executions} of `watched` for each call that enters `start`."""
    calls = []
    for pc in pcs:
        if pc == start:
            calls.append(dict.fromkeys(watched, 0))
        elif pc in watched and calls:
            calls[-1][pc] += 1
    return calls


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fmul_normalises_at_most_one_subnormal_factor_per_tagged_call(tmp_path):
    elf = fmul_elf(tmp_path)
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    fmul = functions["__aeabi_fmul"][0]
    rows = [e for e in arm_table()["paths"] if "__aeabi_fmul" in e["symbols"]]
    assert rows and all(otawa.routine_digest(fmul) == e["sha256"] for e in rows)   # the table's code is this build's
    one = next(e for e in rows if "loop_a" in e["blocks"])
    d, a, b = (fmul.start + one["blocks"][k] for k in ("subnormal", "loop_a", "loop_b"))
    calls = per_call(executed_pcs(elf, tmp_path / "step.log"), fmul.start, {d, a, b})
    assert len(calls) == len(FMUL_CASES)
    for (x, y, tagged), c in zip(FMUL_CASES, calls):
        headers = c[a] + c[b]
        assert c[d] <= 1
        assert headers <= 24 * c[d] + (0 if tagged else 22), (x, y, c)
    assert calls[0][a] + calls[0][b] == 24 and calls[1][a] + calls[1][b] == 24   # the tagged row's limit
    assert calls[2][a] + calls[2][b] == 46                                       # the untagged limit
    assert [c[d] for c in calls] == [1, 1, 1, 0, 0, 1, 1, 0, 0, 0]                # subnormal and both non-zero finite


def otawa_arm_board():
    from arm_helpers import ARM
    return ARM


# ------------------------------------------------------------------ newlib's expf: every call untouched


EXPF_C = r"""
#include <math.h>
volatile unsigned bits[] = {@ARGS@};
volatile float sink;
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof bits / sizeof bits[0]; ++k) {
        union { unsigned u; float f; } v;
        v.u = bits[k];
        sink = expf(v.f);
    }
    return 0;
}
"""


def f32_bits(value):
    return struct.unpack("<I", struct.pack("<f", value))[0]


def expf_arguments():
    """float32 bit patterns: subnormals, zeros, the 2^-28 and 0.5 ln 2 / 1.5 ln 2 edges and their
    neighbours, the floats nearest k ln 2 for every k of the range (the hardest reductions), the
    overflow and underflow thresholds, NaN, infinities and random values over the whole range."""
    out = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x807fffff, 0x00400000,
           0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f7fffff, 0xff7fffff}
    for edge in (0x31800000, 0x3eb17218, 0x3f851592, 0x42b17217, 0x42cff1b5):
        for sign in (0, 0x80000000):
            out.update(sign | (edge + d) for d in range(-2, 3))
    for k in range(-150, 129):
        centre = f32_bits(k * math.log(2))
        out.update(centre + d for d in range(-3, 4) if 0 <= centre + d < 0x100000000)
    rng = np.random.default_rng(27)
    out.update(int(v) for v in rng.integers(0, 1 << 32, 400, dtype=np.uint64))
    out.update(f32_bits(v) for v in rng.uniform(-104, 89, 300))
    out.update(f32_bits(v) for v in rng.uniform(-1, 1, 100) * 2.0 ** rng.integers(-40, 0, 100))
    return sorted(out)


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_expf_never_hands_a_subnormal_to_fmul_or_fdiv(tmp_path):
    args = expf_arguments()
    source = EXPF_C.replace("@ARGS@", ", ".join(f"0x{a:08x}u" for a in args))
    elf = arm7tdmi_elf(tmp_path, "expf", source, libs=("m",))
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    table = arm_table()
    expf = functions["__ieee754_expf"][0]
    assert otawa.routine_data_digest(expf, elf) == table["caller_tags"][0]["sha256"]
    # the digest holds ef_exp.c's static tables, reached from one anchor address of the literal pool
    (anchor,) = [w for w in expf.words.values() if w < otawa.ADDRESS_WORD_LIMIT]
    assert object_at(elf, anchor) == struct.pack("<6I", 0x3f317180, 0xbf317180, 0x3717f7d1, 0xb717f7d1,
                                                 0x3f000000, 0xbf000000)
    assert otawa.routine_data_digest(expf) != otawa.routine_data_digest(expf, elf)
    fmul, fdiv = functions["__aeabi_fmul"][0], functions["__aeabi_fdiv"][0]
    entries = {e["symbols"][0]: e for e in table["paths"] if e["row"] == {"subnormal": 1}}
    blocks = {fmul.start + entries["__aeabi_fmul"]["blocks"]["subnormal"],
              fdiv.start + entries["__aeabi_fdiv"]["blocks"]["subnormal"]}
    pcs = executed_pcs(elf, tmp_path / "step.log", timeout=600)
    assert pcs.count(expf.start) == len(args)
    assert pcs.count(fmul.start) > len(args)   # the multiplies did run
    assert not blocks & set(pcs)


EXPF_POSIX_C = EXPF_C.replace("    unsigned k;\n", "    unsigned k;\n    _LIB_VERSION = _POSIX_; /* the wrapper's range tests run */\n")


def calls_into(pcs, start, end, entries=None):
    """(call address, set of executed addresses inside [start, end)) of each call entering the
    routine at `start` (or at any of `entries`): a call ends when the trace leaves the range."""
    entries = entries or {start}
    calls, inside, previous = [], False, None
    for pc in pcs:
        if pc in entries and not inside:
            calls.append((previous, set()))
            inside = True
        if inside:
            if start <= pc < end:
                calls[-1][1].add(pc)
            else:
                inside = False
        previous = pc
    return calls


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_expf_calls_meet_their_site_tags_and_the_sigmoid_range_rows(tmp_path):
    """Over the expf sweep (and -90, 100, -110: the scaled, overflowing and underflowing results),
    with the wrapper's range tests on (_LIB_VERSION = _POSIX_): no addition reaches __aeabi_fadd's
    denormal block (fadd:no.subnormal), no multiply the inf/NaN cases (fmul:finite), the multiplies
    at the tagged sites never the out-of-range block (fmul:normal.product) while the two untagged
    sites do; for |x| < 40 or NaN neither the wrapper's range-error blocks nor __ieee754_expf's
    scaling and overflow blocks run, and each of them runs for some argument (the untagged limit)."""
    args = sorted(set(expf_arguments()) | {f32_bits(-90.0), f32_bits(100.0), f32_bits(-110.0)})
    source = EXPF_POSIX_C.replace("@ARGS@", ", ".join(f"0x{a:08x}u" for a in args))
    elf = arm7tdmi_elf(tmp_path, "expf", source, libs=("m",))
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    table = arm_table()
    expf, wrapper = functions["__ieee754_expf"][0], functions["expf"][0]
    fmul, fadd, fsub = functions["__aeabi_fmul"][0], functions["__addsf3"][0], functions["__aeabi_fsub"][0]
    paths = {e["about"]: e for e in table["paths"]}
    for about, func in (("finite factors", fmul), ("no denormal operand", fadd), ("no scaling for |x| < 40", expf),
                        ("no range error for |x| < 40", wrapper)):
        assert otawa.routine_digest(func) == paths[about]["sha256"], about
    assert otawa_paths.words_match(wrapper, paths["no range error for |x| < 40"])
    denormal = fadd.start + paths["no denormal operand"]["blocks"]["denormal"]
    assert fsub.start + paths["no denormal operand (subtraction)"]["blocks"]["denormal"] == denormal
    special = fmul.start + paths["finite factors"]["blocks"]["special"]
    out_of_range = fmul.start + paths["product normal"]["blocks"]["out_of_range"]
    (sites,) = table["caller_tags"][0]["sites"]["mul"]
    tagged = {expf.start + o for o in sites["offsets"]}
    pcs = executed_pcs(elf, tmp_path / "step.log", timeout=900)
    executed = set(pcs)
    assert fadd.start in executed and denormal not in executed and special not in executed
    multiplies = calls_into(pcs, fmul.start, fmul.end)
    assert {site for site, _ in multiplies} - {expf.start + o for o in (0x168, 0x188)} <= tagged
    assert not [site for site, inside in multiplies if site in tagged and out_of_range in inside]
    assert {site for site, inside in multiplies if out_of_range in inside} == {expf.start + 0x168, expf.start + 0x188}
    rows = (paths["no range error for |x| < 40"], wrapper), (paths["no scaling for |x| < 40"], expf)
    watched = {func.start + o for entry, func in rows for o in entry["blocks"].values()}
    per_arg = [{pc for pc, n in c.items() if n} for c in per_call(pcs, wrapper.start, watched)]
    assert len(per_arg) == len(args)
    for a, hit in zip(args, per_arg):
        x = struct.unpack("<f", struct.pack("<I", a))[0]
        if math.isnan(x) or abs(x) < 40:
            assert not hit, (hex(a), hit)
        for entry, func in rows:
            assert len(hit & {func.start + o for o in entry["blocks"].values()}) <= 1
    assert set().union(*per_arg) == watched   # every block runs for some argument


# ------------------------------------------------------------------ qemu-system-arm: the M0+'s soft float

needs_qemu_system = pytest.mark.skipif(not have("arm-none-eabi-gcc", "qemu-system-arm"),
                                       reason="arm-none-eabi-gcc or qemu-system-arm not installed")


def m0plus_trace(tmp_path, name, source):
    """(decoded program, every executed address in order) of `source` built for the rp2040 and run
    on qemu-system-arm with each instruction traced."""
    from nnbuild import boards
    from nnbuild.runners import qemu_system
    from nnbuild.wcet import thumb2_decode
    from test_thumb2_libloops import build, traced
    board = boards.load_board("rp2040")
    elf = build(tmp_path, board, name, source)
    pcs = [qemu_system._traced_pc(line) for line in traced(board, elf, tmp_path / f"{name}.log", "-singlestep")
           if line.startswith("Trace ")]
    return thumb2_decode.load(str(elf), board), pcs


def m0plus_traced_calls(tmp_path, name, source, entry_symbol, watched_offsets):
    """(program, entry address, {address: executions} of the watched offsets per call of the entry)."""
    prog, pcs = m0plus_trace(tmp_path, name, source)
    start = prog.address_of(entry_symbol)
    return prog, start, per_call(pcs, start, {start + off for off in watched_offsets})


def thumb_entries(symbol):
    from nnbuild.wcet import thumb2_loops
    paths, _ = thumb2_loops.load_value_entries()
    return [e for e in paths if e["symbol"] == symbol]


@pytest.mark.e2e
@needs_qemu_system
def test_m0plus_fmul_and_fdiv_subnormal_blocks_run_once_and_only_for_a_subnormal_operand(tmp_path):
    from nnbuild.wcet import thumb2_loops
    for symbol, op in (("__aeabi_fmul", "*"), ("__aeabi_fdiv", "/")):
        entries = thumb_entries(symbol)
        offsets = sorted({int(o, 0) for e in entries if e["when"].endswith(("no.subnormal", "one.normal"))
                          for r in e["rows"] for o in r["blocks"]})
        assert len(offsets) == 2
        cases = [(a, b) for a, b, _ in FMUL_CASES]
        source = FMUL_C.replace("x * y", f"x {op} y").replace("@A@", ", ".join(a for a, _ in cases)).replace(
            "@B@", ", ".join(b for _, b in cases))
        prog, start, calls = m0plus_traced_calls(tmp_path, symbol, source, symbol, offsets)
        assert all(thumb2_loops.code_hash(prog, start) == e["sha256"] for e in entries)
        assert len(calls) == len(cases)
        for (a, b), c in zip(cases, calls):
            first, second = (c[start + off] for off in offsets)
            subnormal = [0.0 < abs(np.float32(eval_float(v))) < 1.1754944e-38 for v in (a, b)]
            assert (first, second) == (int(subnormal[0]), int(subnormal[1])), (symbol, a, b, c)


def eval_float(text):
    """A C float literal of FMUL_CASES as a Python float ("1.0f/0.0f" is infinity, "0.0f/0.0f" NaN)."""
    special = {"1.0f/0.0f": math.inf, "-1.0f/0.0f": -math.inf, "0.0f/0.0f": math.nan}
    if text in special:
        return special[text]
    number = text[:-1] if text.endswith("f") else text
    return float(np.float32(float.fromhex(number) if "0x" in number else float(number)))


@pytest.mark.e2e
@needs_qemu_system
def test_m0plus_expf_never_hands_a_subnormal_to_fmul_or_fdiv(tmp_path):
    from nnbuild.wcet import thumb2_loops
    _, callers = thumb2_loops.load_value_entries()
    args = expf_arguments()[::3]   # every third: the M0+ trace is slower
    source = "#include <math.h>\n" + EXPF_C.replace("@ARGS@", ", ".join(f"0x{a:08x}u" for a in args))
    watched = []
    for symbol in ("__aeabi_fmul", "__aeabi_fdiv"):
        watched += [(symbol, int(o, 0)) for e in thumb_entries(symbol) if e["when"].endswith("no.subnormal")
                    for r in e["rows"] for o in r["blocks"]]
    prog, pcs = m0plus_trace(tmp_path, "expf", source)
    expf = prog.address_of("__ieee754_expf")
    assert thumb2_loops.data_hash(prog, expf) == callers[0]["sha256"]
    assert pcs.count(expf) == len(args)
    assert pcs.count(prog.address_of("__aeabi_fmul")) > len(args)   # the multiplies did run
    blocks = {prog.address_of(symbol) + off for symbol, off in watched}
    assert len(blocks) == 4
    assert not blocks & set(pcs)


def xor_rp2040_check_program(tmp_path):
    """(board, ELF, flow facts) of the xor example's float32 check program built for the rp2040."""
    import json
    from conftest import REPO
    from nnbuild import pipeline
    meta = json.loads((REPO / "firmware_examples" / "xor" / "example.json").read_text())
    model = pipeline.load_model(REPO / "firmware_examples" / "xor" / meta["model"], "xor")[0]
    board = pipeline.load_board("rp2040")
    elf, _ = pipeline.build_check_program(model, board, tmp_path, name="xor", precision="float32",
                                          input_range=tuple(meta["input_range"]))
    return board, elf, json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())


@pytest.mark.e2e
@needs_qemu_system
def test_builtin_thumb2_solves_tagged_soft_float_calls_in_their_own_context(tmp_path):
    from nnbuild import wcet
    board, elf, facts = xor_rp2040_check_program(tmp_path)
    tagged = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "wcet")
    plain = wcet.analyze(board, elf, "xor_infer", dict(facts, values=[]), tmp_path / "plain")
    callees = tagged.details["callee_wcet"]
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
    assert tagged.cycles < plain.cycles


@pytest.mark.e2e
@needs_qemu_system
def test_m0plus_fmul_underflow_block_runs_only_for_a_product_below_the_smallest_normal(tmp_path):
    entry = next(e for e in thumb_entries("__aeabi_fmul") if e["when"] == "fmul:normal.product")
    (offset,) = [int(o, 0) for r in entry["rows"] for o in r["blocks"]]
    cases = [(a, b) for a, b, _ in FMUL_CASES]
    source = FMUL_C.replace("@A@", ", ".join(a for a, _ in cases)).replace("@B@", ", ".join(b for _, b in cases))
    _, start, calls = m0plus_traced_calls(tmp_path, "fmul", source, "__aeabi_fmul", [offset])
    assert len(calls) == len(cases)
    for (a, b), c in zip(cases, calls):
        x, y = eval_float(a), eval_float(b)
        exact = abs(x * y) if math.isfinite(x) and math.isfinite(y) else math.inf
        assert c[start + offset] == int(0.0 < exact < 2.0 ** -126), (a, b, c)


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fmul_out_of_range_block_runs_only_for_an_underflowing_or_overflowing_product(tmp_path):
    elf = fmul_elf(tmp_path)
    fmul = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))["__aeabi_fmul"][0]
    entry = next(e for e in arm_table()["paths"] if "out_of_range" in e["blocks"])
    assert otawa.routine_digest(fmul) == entry["sha256"]
    block = fmul.start + entry["blocks"]["out_of_range"]
    calls = per_call(executed_pcs(elf, tmp_path / "step.log"), fmul.start, {block})
    assert len(calls) == len(FMUL_CASES)
    for (a, b, _), c in zip(FMUL_CASES, calls):
        x, y = eval_float(a), eval_float(b)
        if not (math.isfinite(x) and math.isfinite(y)) or x == 0 or y == 0:
            assert c[block] == 0, (a, b, c)
        else:
            assert c[block] == int(abs(x * y) < 2.0 ** -126 or abs(x * y) >= 2.0 ** 128), (a, b, c)


def test_split_layer_products_are_in_range_when_every_weight_is_below_one():
    """fmul:in.range (a soft-float split layer, mac_facts(normal_products=True)): weights zero or
    normal below 1 (biased exponent <= 126) and the flush's eW + eX >= 128 keep every product of
    non-zero finite factors in 2^-126 .. 2^128; a weight of 1 or more, a subnormal weight, or AVR's
    plain threshold (exp_sum_min 127) claims nothing."""
    facts = float_facts.mac_facts(np.array([[0.75, -2.0 ** -20], [0.0, 0.99999994]], np.float32), normal_products=True)
    assert facts.in_range and facts.weight_exp_max == 126 and "eW + eX <= 380" in facts.why()
    assert not float_facts.mac_facts(np.array([[0.5, 1.0]], np.float32), normal_products=True).in_range
    assert not float_facts.mac_facts(np.array([[0.5, 1e-40]], np.float32), normal_products=True).in_range
    plain = float_facts.mac_facts(np.array([[0.5, 0.25]], np.float32))
    assert not plain.in_range and "380" not in plain.why()
    assert float_facts.mac_facts(np.zeros((2, 2), np.float32), normal_products=True).in_range


#: (weight, input): the corners fmul:in.range allows (eW + eX = 380 with the largest significands,
#: eW + eX = 128 exactly 2^-126, both through the power-of-two shortcut and the full multiply), then
#: a weight just above 1 (eW = 127: the product overflows) and an input one binade below the flush (eW + eX = 127)
IN_RANGE_CASES = [("0x1.fffffep-1f", "0x1.fffffep+127f"), ("-0x1.fffffep-1f", "0x1.fffffep+127f"),
                  ("0x1p-1f", "0x1p+127f"), ("0x1p-20f", "0x1p-106f"), ("0x1.000002p-20f", "-0x1p-106f"),
                  ("0x1.fffffep-20f", "0x1.fffffep-106f")]
OUT_OF_RANGE_CASES = [("0x1.000002p+0f", "0x1.fffffep+127f"), ("0x1p-20f", "0x1.fffffep-107f")]


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fmul_never_leaves_the_range_for_the_in_range_tag_and_does_just_beyond_it(tmp_path):
    """Each pair's weight gives the MacFacts of a one-weight layer with the ARM threshold: the pairs the
    flush keeps with fmul:in.range never reach __aeabi_fmul's out-of-range block (the `paths` row's claim);
    the two just beyond the premises (|w| just above 1, an input the flush would zero) reach it once."""
    cases = IN_RANGE_CASES + OUT_OF_RANGE_CASES
    for k, (w, x) in enumerate(cases):
        facts = float_facts.mac_facts(np.array([[eval_float(w)]], np.float32), normal_products=True)
        kept = float_facts.biased_exponents(np.float32(eval_float(x)))[()] >= facts.keep_exp
        assert (facts.in_range and kept) == (k < len(IN_RANGE_CASES)), (w, x)
    source = FMUL_C.replace("@A@", ", ".join(w for w, _ in cases)).replace("@B@", ", ".join(x for _, x in cases))
    elf = arm7tdmi_elf(tmp_path, "fmul_range", source)
    fmul = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))["__aeabi_fmul"][0]
    entry = next(e for e in arm_table()["paths"] if "fmul:in.range" in e["calls"])
    assert otawa.routine_digest(fmul) == entry["sha256"] and entry["calls"]["fmul:in.range"] == 0
    block = fmul.start + entry["blocks"]["out_of_range"]
    calls = per_call(executed_pcs(elf, tmp_path / "step.log"), fmul.start, {block})
    assert [c[block] for c in calls] == [0] * len(IN_RANGE_CASES) + [1] * len(OUT_OF_RANGE_CASES)

# ------------------------------------------------------------------ __aeabi_fadd / __aeabi_fsub: same-sign calls

FADD_C = r"""
volatile float a[] = {@A@};
volatile float b[] = {@B@};
volatile float sink;
__attribute__((noinline)) float add(float x, float y) { return x + y; }
__attribute__((noinline)) float sub(float x, float y) { return x - y; }
int main(void)
{
    unsigned k;
    for (k = 0; k < sizeof a / sizeof a[0]; ++k) {
        sink = add(a[k], b[k]);
        sink = sub(a[k], -b[k]);
    }
    return 0;
}
"""
#: (a, b): add(a, b) and sub(a, -b) (both an addition of a and b); the first four pairs have
#: clear sign bits and are not both subnormal (fadd:same-sign), the rest are other calls
FADD_CASES = [("1.5f", "1e-30f"), ("1.2e-38f", "1e-39f"), ("16777215.0f", "1.0f"), ("0.0f", "1e-40f"),
              ("1.0f", "-0.99999994f"), ("-2.5f", "2.5000002f"), ("1e-40f", "2e-40f"), ("3.0f", "-1e-40f"),
              ("1.0f/0.0f", "-1.0f")]
SAME_SIGN_CASES = 4


def fadd_source():
    return FADD_C.replace("@A@", ", ".join(a for a, _ in FADD_CASES)).replace(
        "@B@", ", ".join(b for _, b in FADD_CASES))


def check_same_sign_limits(counts):
    """Per call, the cancellation block's executions: at most once, never for a same-sign case,
    once for the opposite-sign cases of normal operands (the untagged limit reached)."""
    assert len(counts) == len(FADD_CASES)
    for (a, b), n in zip(FADD_CASES, counts):
        assert n <= 1, (a, b, n)
    assert counts[:SAME_SIGN_CASES] == [0] * SAME_SIGN_CASES
    assert counts[4] == counts[5] == 1


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fadd_and_fsub_never_cancel_for_same_sign_operands(tmp_path):
    elf = arm7tdmi_elf(tmp_path, "fadd", fadd_source())
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    entries = {e["symbols"][0]: e for e in arm_table()["paths"] if e["op"] == "add" and "normalise" in e["blocks"]}
    fadd, fsub = functions["__addsf3"][0], functions["__aeabi_fsub"][0]
    assert otawa.routine_digest(fadd) == entries["__aeabi_fadd"]["sha256"]
    assert otawa.routine_digest(fsub) == entries["__aeabi_fsub"]["sha256"]
    assert otawa_paths.falls_into_pinned(functions, fsub, entries["__aeabi_fsub"], otawa.routine_digest)
    block = fadd.start + entries["__aeabi_fadd"]["blocks"]["normalise"]
    assert fsub.start + entries["__aeabi_fsub"]["blocks"]["normalise"] == block   # the same code
    pcs = executed_pcs(elf, tmp_path / "step.log")
    # a call enters at __addsf3 (add) or at __aeabi_fsub, which falls into it: one count per call
    calls = [c[block] for c in per_call(entry_marks(pcs, fadd.start, fsub.start), "call", {block})]
    added, subtracted = calls[0::2], calls[1::2]
    check_same_sign_limits(added)
    check_same_sign_limits(subtracted)
    assert added[6] == 1   # two subnormals of one sign do cancel-normalise: why the tag excludes them


#: (a, b): add(a, b) and sub(a, -b); fadd:no.subnormal holds for the first five (no subnormal
#: operand, or the other at least 2^-101), not for the rest (a subnormal beside a tiny value)
DENORMAL_CASES = [("1.5f", "-1e-30f"), ("2e-38f", "-3e-38f"), ("1.0f", "1e-40f"), ("-3.0f", "1e-45f"),
                  ("4e-31f", "-1e-40f"), ("1e-40f", "2e-40f"), ("1.2e-38f", "-1e-39f"), ("3e-31f", "1e-45f"),
                  ("-1e-45f", "3e-45f")]
NO_SUBNORMAL_CASES = 5


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fadd_and_fsub_rescale_a_denormal_only_beside_a_value_below_2_to_the_minus_101(tmp_path):
    """__aeabi_fadd's denormal block (+0x120, fsub's +0x124) per call: never for the tagged cases
    (fadd:no.subnormal: a subnormal beside 1.0 or 4e-31 > 2^-101 returns at the exponent-difference
    test), once for a subnormal beside a value below 2^-101 (the untagged limit), never twice."""
    source = FADD_C.replace("@A@", ", ".join(a for a, _ in DENORMAL_CASES)).replace(
        "@B@", ", ".join(b for _, b in DENORMAL_CASES))
    elf = arm7tdmi_elf(tmp_path, "fadd", source)
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    entries = {e["symbols"][0]: e for e in arm_table()["paths"] if e["op"] == "add" and "denormal" in e["blocks"]}
    fadd, fsub = functions["__addsf3"][0], functions["__aeabi_fsub"][0]
    assert otawa.routine_digest(fadd) == entries["__aeabi_fadd"]["sha256"]
    assert otawa.routine_digest(fsub) == entries["__aeabi_fsub"]["sha256"]
    block = fadd.start + entries["__aeabi_fadd"]["blocks"]["denormal"]
    assert fsub.start + entries["__aeabi_fsub"]["blocks"]["denormal"] == block
    pcs = executed_pcs(elf, tmp_path / "step.log")
    calls = [c[block] for c in per_call(entry_marks(pcs, fadd.start, fsub.start), "call", {block})]
    assert len(calls) == 2 * len(DENORMAL_CASES)
    for k in range(len(DENORMAL_CASES)):
        expected = 0 if k < NO_SUBNORMAL_CASES else 1
        assert calls[2 * k] == calls[2 * k + 1] == expected, (DENORMAL_CASES[k], calls[2 * k:2 * k + 2])


#: (a, b): add(a, b) and sub(a, -b); both clear sign bits for the first six (fadd:same-sign: a carry
#: out of bit 24, one subnormal operand, equal exponents, a zero), then the larger magnitude negative
NEGATE_CASES = [("1.5f", "1e-30f"), ("16777215.0f", "1.0f"), ("3.0f", "1e-40f"), ("2.5f", "2.5000002f"),
                ("0.0f", "1.0f"), ("1.9999999f", "1.9999998f"), ("-3.0f", "1.0f"), ("1.0f", "-3.0f"),
                ("-2.5000002f", "2.5f")]
POSITIVE_CASES = 6


@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fadd_and_fsub_never_negate_the_sum_of_same_sign_operands(tmp_path):
    """__aeabi_fadd's negation block (+0x7c, fsub's +0x80) per call: never for two operands with
    clear sign bits (fadd:same-sign), once when the larger magnitude is negative (the untagged limit)."""
    source = FADD_C.replace("@A@", ", ".join(a for a, _ in NEGATE_CASES)).replace(
        "@B@", ", ".join(b for _, b in NEGATE_CASES))
    elf = arm7tdmi_elf(tmp_path, "fadd", source)
    functions = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))
    entries = {e["symbols"][0]: e for e in arm_table()["paths"] if e["op"] == "add" and "negate" in e["blocks"]}
    fadd, fsub = functions["__addsf3"][0], functions["__aeabi_fsub"][0]
    assert otawa.routine_digest(fadd) == entries["__aeabi_fadd"]["sha256"]
    assert otawa.routine_digest(fsub) == entries["__aeabi_fsub"]["sha256"]
    assert all(e["calls"] == {"fadd:same-sign": 0, "other": -1} for e in entries.values())
    block = fadd.start + entries["__aeabi_fadd"]["blocks"]["negate"]
    assert fsub.start + entries["__aeabi_fsub"]["blocks"]["negate"] == block
    pcs = executed_pcs(elf, tmp_path / "step.log")
    calls = [c[block] for c in per_call(entry_marks(pcs, fadd.start, fsub.start), "call", {block})]
    assert calls == [0] * 2 * POSITIVE_CASES + [1] * 2 * (len(NEGATE_CASES) - POSITIVE_CASES)

@pytest.mark.e2e
@needs_qemu_arm
def test_arm_fmul_inf_nan_block_runs_only_for_an_infinite_or_nan_factor(tmp_path):
    source = FMUL_C.replace("@A@", ", ".join(a for a, _, _ in FMUL_CASES + NAN_CASES)).replace(
        "@B@", ", ".join(b for _, b, _ in FMUL_CASES + NAN_CASES))
    elf = arm7tdmi_elf(tmp_path, "fmul", source)
    fmul = otawa.parse_objdump(otawa.disassembly(elf, otawa_arm_board()))["__aeabi_fmul"][0]
    entry = next(e for e in arm_table()["paths"] if "special" in e["blocks"])
    assert otawa.routine_digest(fmul) == entry["sha256"]
    block = fmul.start + entry["blocks"]["special"]
    calls = per_call(executed_pcs(elf, tmp_path / "step.log"), fmul.start, {block})
    assert len(calls) == len(FMUL_CASES + NAN_CASES)
    for (a, b, _), c in zip(FMUL_CASES + NAN_CASES, calls):
        assert c[block] == int(not (math.isfinite(eval_float(a)) and math.isfinite(eval_float(b)))), (a, b, c)


#: factors with NaN or infinity beside zero, a subnormal and a normal value
NAN_CASES = [("0.0f/0.0f", "2.0f", False), ("0.0f", "-1.0f/0.0f", False), ("1e-40f", "0.0f/0.0f", False)]


def entry_marks(pcs, fadd_start, fsub_start):
    """The executed addresses with each call's entry (fsub's, or fadd's not reached from fsub) as 'call'."""
    out = []
    for k, pc in enumerate(pcs):
        if pc == fsub_start or (pc == fadd_start and (k == 0 or pcs[k - 1] != fsub_start)):
            out.append("call")
        else:
            out.append(pc)
    return out


@pytest.mark.e2e
@needs_qemu_system
def test_m0plus_fadd_and_fsub_never_subtract_for_same_sign_operands(tmp_path):
    from nnbuild.wcet import thumb2_loops
    prog, pcs = m0plus_trace(tmp_path, "fadd", fadd_source())
    for symbol, parity in (("__aeabi_fadd", 0), ("__aeabi_fsub", 1)):
        (entry,) = [e for e in thumb_entries(symbol) if e["when"] == "fadd:same-sign"]
        start = prog.address_of(symbol)
        assert thumb2_loops.code_hash(prog, start) == entry["sha256"]
        (offset,) = [int(o, 0) for r in entry["rows"] for o in r["blocks"]]
        counts = [c[start + offset] for c in per_call(pcs, start, {start + offset})]
        check_same_sign_limits(counts)
        assert counts[6] == 0   # Thumb-1 soft-fp decides by the signs alone
