"""OTAWA and platin adapters: recorded outputs, real ELF loop mapping, missing tools, timeouts.

No test here invents a tool's number: outputs come from tests/recorded/ (documented formats),
the loop mapping is checked on real arm-none-eabi-gcc ELFs (and against qemu-arm execution
counts), and the real-tool tests skip when OTAWA or T-CREST is absent.
"""

import json
import os
import re
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from arm_helpers import arm7tdmi_elf, clocks_per_call, executed_pcs
from conftest import needs_otawa
from nnbuild.errors import NNBuildError
from nnbuild.wcet import otawa, platin, tools

ROOT = Path(__file__).resolve().parent.parent
RECORDED = Path(__file__).resolve().parent / "recorded"
ARM = json.loads((ROOT / "toolchains" / "arm.json").read_text())
PATMOS = json.loads((ROOT / "toolchains" / "patmos.json").read_text())
AVR = json.loads((ROOT / "toolchains" / "avr.json").read_text())

needs_arm_gcc = pytest.mark.skipif(shutil.which(ARM["cc"]) is None or shutil.which(ARM["objdump"]) is None,
                                   reason="arm-none-eabi-gcc/objdump not on PATH")
needs_qemu = pytest.mark.skipif(shutil.which("qemu-arm") is None, reason="qemu-arm not on PATH")

DOT_C = """\
#include <stdint.h>
int32_t dot(const int8_t *a, const int8_t *b);
static const int8_t A[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const int8_t B[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
#if defined(__PATMOS__)
#define NN_LOOPBOUND(n) _Pragma("loopbound min 0 max 16")
#else
#define NN_LOOPBOUND(n)
#endif
int32_t dot(const int8_t *a, const int8_t *b)
{
    int32_t acc = 0;
    NN_LOOPBOUND(16)
    for (int i = 0; i < 16; i++) {
        acc += a[i] * b[i];
    }
    return acc;
}
int main(void)
{
    return dot(A, B) == 136 ? 0 : 1;
}
"""

# Generator-shaped Dense layer: neuron loop around a weight-row loop.
DENSE_C = """\
static const float W[8][16] = {{0.5f}};
static const float Bv[8] = {0.1f};
void dense(const float *in, float *out);
void dense(const float *in, float *out)
{
    for (int i = 0; i < 8; i++) {
        float acc = Bv[i];
        for (int j = 0; j < 16; j++) {
            acc += W[i][j] * in[j];
        }
        out[i] = acc > 0.0f ? acc : 0.0f;
    }
}
int main(void)
{
    float x[16] = {0};
    float y[8];
    dense(x, y);
    return (int)y[0];
}
"""


def for_lines(source):
    """1-based line numbers of the `for (` lines, as the generator reports them."""
    return [n for n, text in enumerate(source.splitlines(), 1) if text.strip().startswith("for (")]


def build_arm(tmp, name, source, opt=None):
    """Compile and link with the arm board's own data (flags, specs, libs)."""
    c = tmp / f"{name}.c"
    c.write_text(source)
    elf = tmp / f"{name}.elf"
    cmd = [ARM["cc"], opt or ARM["opt"], *ARM["cflags"], str(c), "-o", str(elf), *ARM["ldflags"],
           *(f"-l{lib}" for lib in ARM["libs"])]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return elf


def dot_facts(line):
    return {"entry": "dot",
            "loops": [{"function": "dot", "file": "dot.c", "line": line, "max_iterations": 16, "layer": "dot"}],
            "layers": [{"name": "dot", "type": "Dense", "function": "dot", "file": "dot.c",
                        "first_line": line - 3, "last_line": line + 4}]}


def dense_facts():
    outer, inner = for_lines(DENSE_C)
    return [{"function": "dense", "file": "dense.c", "line": outer, "max_iterations": 8, "layer": "d"},
            {"function": "dense", "file": "dense.c", "line": inner, "max_iterations": 16, "layer": "d"}]


@pytest.fixture(scope="module")
def arm_builds(tmp_path_factory):
    """dot at the board's -O0, and the dense layer at -O0 and -O2 (rotated loops)."""
    if shutil.which(ARM["cc"]) is None:
        pytest.skip("arm-none-eabi-gcc not on PATH")
    tmp = tmp_path_factory.mktemp("arm")
    return {"dot": build_arm(tmp, "dot", DOT_C),
            "dense-O0": build_arm(tmp, "dense", DENSE_C),
            "dense-O2": build_arm(tmp_path_factory.mktemp("armO2"), "dense", DENSE_C, "-O2")}


CAPTURED = Path(__file__).resolve().parent / "data" / "otawa"


def recorded(case, folder=RECORDED):
    return ((folder / f"{case}.stdout").read_text(), (folder / f"{case}.stderr").read_text(),
            int((folder / f"{case}.rc").read_text()))


def captured(case):
    """Real owcet output (tests/otawa_capture.py; OTAWA version in tests/data/otawa/VERSION)."""
    return recorded(case, CAPTURED)


# ---------------------------------------------------------------- (a) recorded outputs


def test_owcet_captured_success_is_the_number():
    assert "otawa-config 2.3.0" in (CAPTURED / "VERSION").read_text()
    assert otawa.parse_output(*captured("ok_trivial"), entry="dot") == 1610
    assert otawa.parse_output(*captured("ok_arm7tdmi"), entry="dot") == 755


def assert_one_line_failure(output, entry, words):
    """owcet's (stdout, stderr, exit) `output` raises one line naming `entry` and holding each of `words`."""
    with pytest.raises(NNBuildError) as e:
        otawa.parse_output(*output, entry=entry)
    msg = str(e.value)
    assert "\n" not in msg and entry in msg
    for w in words:
        assert w in msg


@pytest.mark.parametrize("case, entry, words", [
    ("unbounded", "dot", ["unbounded", "dot + 0x68 (00008368)", "exit 2"]),
    ("missing_cost", "dot", ["failed", "exit 2", "no ARM7TDMI cost", "00008368"]),
    ("no_such_entry", "nosuch", ["failed", "exit 2", "nosuch cannot be resolved"]),
])
def test_owcet_captured_failures_raise_one_line(case, entry, words):
    assert_one_line_failure(captured(case), entry, words)


@pytest.mark.parametrize("case, entry, words", [
    ("otawa_old_minus1", "main", ["unbounded", "-1"]),
    ("otawa_old_unbounded", "main", ["unbounded", "UNBOUNDED"]),
])
def test_owcet_older_versions_failures_raise_one_line(case, entry, words):
    """Formats of OTAWA versions before 2.3 (transcribed from their documentation: not runnable here)."""
    assert_one_line_failure(recorded(case), entry, words)


def test_owcet_error_line_or_nonzero_exit_is_never_a_number():
    stdout, stderr, _ = captured("ok_trivial")
    with pytest.raises(NNBuildError, match="failed"):
        otawa.parse_output(stdout, stderr + "ERROR: cannot open dot.ff\n", 0, "dot")
    with pytest.raises(NNBuildError, match="exit 1"):
        otawa.parse_output(stdout, stderr, 1, "dot")
    with pytest.raises(NNBuildError, match="not the entry"):
        otawa.parse_output(stdout, stderr, 0, "main")
    with pytest.raises(NNBuildError, match="no 'WCET"):
        otawa.parse_output("", stderr, 0, "dot")


def test_platin_report_bound_is_non_trace_minimum():
    bound, measured, entries = platin.parse_report((RECORDED / "platin_trace_and_platin.yml").read_text(),
                                                   "gen_sort")
    assert (bound, measured) == (644867, 49089)
    assert entries[1]["cache-max-cycles-instr"] == 651


def test_platin_report_with_only_trace_has_no_bound():
    with pytest.raises(NNBuildError, match="no WCET bound.*trace measurement: 49089"):
        platin.parse_report((RECORDED / "platin_trace_only.yml").read_text(), "gen_sort")


def test_platin_report_negative_or_below_measurement_raises():
    base = "- analysis-entry: f\n  source: trace\n  cycles: 500\n- analysis-entry: f\n  source: platin\n"
    with pytest.raises(NNBuildError, match="unbounded"):
        platin.parse_report(base + "  cycles: -1\n", "f")
    with pytest.raises(NNBuildError, match="unsound"):
        platin.parse_report(base + "  cycles: 400\n", "f")
    with pytest.raises(NNBuildError, match="trace flow facts"):
        platin.parse_report(base.replace("source: platin", "source: trace/platin") + "  cycles: 900\n", "f")
    assert platin.parse_report(base + "  cycles: 900\n- analysis-entry: f\n  source: aiT\n  cycles: 800\n",
                               "f")[0] == 800


def test_tiny_yaml_reader_matches_pyyaml_and_is_strict():
    text = ("--- \n- analysis-entry: 'dot'\n  source: \"platin\"\n  cycles: 12 # bound\n"
            "  cache-hit: 0.5\n  flag: true\n  none: ~\n...\n")
    parsed = platin.parse_yaml_list(text.replace("--- \n", "---\n"))
    assert parsed == [{"analysis-entry": "dot", "source": "platin", "cycles": 12, "cache-hit": 0.5,
                       "flag": True, "none": None}]
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(text.replace("--- \n", "---\n")) == parsed
    for bad in ("- a: [1, 2]\n", "- a:\n    b: 1\n", "- a: &x 1\n", "a: 1\n", "- a: 1\n  a: 2\n"):
        with pytest.raises(NNBuildError, match="platin report line"):
            platin.parse_yaml_list(bad)


# ---------------------------------------------------------------- command lines and rendering


def test_arm7tdmi_script_requires_the_same_measured_model(tmp_path):
    mismatched = {**ARM, "instruction_timing": None, "instruction_cycles": 5}
    with pytest.raises(NNBuildError, match="needs instruction_timing 'arm7tdmi'"):
        otawa.timing_script(mismatched, "", tmp_path, "f")
    assert otawa.timing_script({**ARM, "otawa_script": "trivial"}, "", tmp_path, "f") == (None, [])


def test_owcet_command_line():
    trivial = {**ARM, "otawa_script": "trivial", "otawa_params": ["stages=1"]}
    cmd = otawa.build_command("/x/owcet", "p.elf", "dot", "p.ff", trivial)
    assert cmd == ["/x/owcet", "-s", "trivial", "-p", "stages=1", "-f", "p.ff", "p.elf", "dot"]
    assert otawa.build_command("owcet", "p.elf", "f", "p.ff", {})[1:3] == ["-s", "trivial"]
    ours = otawa.build_command("owcet", "p.elf", "f", "p.ff", ARM, "/c/arm7tdmi.osx", ["costs=/w/f.costs"])
    assert ours == ["owcet", "-s", "/c/arm7tdmi.osx", "-p", "costs=/w/f.costs", "-f", "p.ff", "p.elf", "f"]


def test_render_ff_and_ffx():
    bounds = [otawa.LoopBound(0x8094, 16, "dot", "dot.c:9", "dense_1")]
    ff = otawa.render_ff(bounds, "dot")
    assert re.search(r"^loop 0x8094 max 16; // dot, dot\.c:9, layer dense_1$", ff, re.M)
    assert all(l.startswith("//") or l.endswith(";") or "; //" in l for l in ff.splitlines())
    assert '<loop address="0x8094" maxcount="16"/>' in otawa.render_ffx(bounds)


def test_patmos_compile_and_platin_commands():
    cmd = platin.compile_command(PATMOS, ["m.c", "w.c"], "build/prog", include_dirs=["gen"],
                                 defines=["NN_N=4"], entry="m_infer")
    assert cmd[:2] == ["patmos-clang", "-O2"]
    assert "-mserialize=build/prog.pml" in cmd and "-mserialize-roots=m_infer" in cmd
    assert cmd[cmd.index("-o") + 1] == "build/prog" and {"-Igen", "-DNN_N=4", "m.c", "w.c", "-lm"} <= set(cmd)
    assert platin.pml_path("build/prog.elf") == Path("build/prog.elf.pml")
    wcet = platin.wcet_command("platin", "p.pml", "p", "dot", "r.yml", PATMOS)
    assert wcet == ["platin", "wcet", "-i", "p.pml", "-b", "p", "-e", "dot", "--disable-ait",
                    "--enable-wca", "--report", "r.yml"]
    traced = platin.wcet_command("platin", "p.pml", "p", "dot", "r.yml",
                                 {"platin_trace": True, "platin_config": "c.pml"})
    assert traced[2:6] == ["-i", "p.pml", "-i", "c.pml"] and "--enable-trace-analysis" in traced


def test_arm_classify_conditional_branches_calls_and_returns():
    def kind(m, ops=""):
        f = otawa.classify(otawa.Insn(0, m, ops))
        return f.kind, f.target, f.conditional
    assert kind("ble", "8328 <dot+0x28>") == ("branch", 0x8328, True)
    assert kind("b", "8368 <dot+0x68>") == ("branch", 0x8368, False)
    assert kind("bl", "83c8 <__aeabi_fmul>")[:1] == ("call",)
    assert kind("bx", "lr") == ("exit", None, False)
    assert kind("pop", "{r4, pc}") == ("exit", None, False)
    assert kind("popne", "{r4, pc}") == ("exit", None, True)
    assert kind("cbz", "r3, 8010 <f+0x10>") == ("branch", 0x8010, True)
    assert kind("bne.n", "8010 <f+0x10>") == ("branch", 0x8010, True)
    assert kind("ldr", "r3, [pc, #116]") == ("plain", None, False)


def loop_function(rows):
    """A Function from (address, mnemonic, operands) rows, branch targets as objdump prints them."""
    return otawa.Function("f", rows[0][0], [otawa.Insn(a, m, o, "f.c", 3) for a, m, o in rows])


def only_loop(rows):
    (loop,) = otawa.natural_loops(loop_function(rows))
    return loop


def test_loop_form_decided_by_where_the_loop_can_be_left():
    """Rotated (N - 1 back edges per entry) only when no exit leaves from the header and every exit
    leaves from a latch; a header that tests, a test after the header, a single-block loop and a
    header that may return all keep N."""
    top_tested = [(0x100, "mov", "r3, #0"), (0x104, "b", "110 <f+0x10>"), (0x108, "add", "r3, r3, #1"),
                  (0x10c, "str", "r3, [sp]"), (0x110, "cmp", "r3, #9"), (0x114, "ble", "108 <f+0x8>"),
                  (0x118, "bx", "lr")]
    rotated = [(0x100, "mov", "r3, #0"), (0x104, "bl", "200 <g>"), (0x108, "add", "r3, r3, #1"),
               (0x10c, "cmp", "r3, #9"), (0x110, "bne", "104 <f+0x4>"), (0x114, "bx", "lr")]
    test_after_header = [(0x100, "mov", "r3, #0"), (0x104, "bl", "200 <g>"), (0x108, "cmp", "r0, #0"),
                         (0x10c, "beq", "118 <f+0x18>"), (0x110, "add", "r3, r3, #1"),
                         (0x114, "b", "104 <f+0x4>"), (0x118, "bx", "lr")]
    single_block = [(0x100, "mov", "r3, #0"), (0x104, "add", "r3, r3, #1"), (0x108, "cmp", "r3, #9"),
                    (0x10c, "bne", "104 <f+0x4>"), (0x110, "bx", "lr")]
    header_exits_too = [(0x100, "mov", "r3, #0"), (0x104, "cmp", "r0, #0"), (0x108, "beq", "11c <f+0x1c>"),
                        (0x10c, "bl", "200 <g>"), (0x110, "add", "r3, r3, #1"), (0x114, "cmp", "r3, #9"),
                        (0x118, "bne", "104 <f+0x4>"), (0x11c, "bx", "lr")]
    header_may_return = [(0x100, "push", "{r4, lr}"), (0x104, "cmp", "r0, #0"), (0x108, "popeq", "{r4, pc}"),
                         (0x10c, "bl", "200 <g>"), (0x110, "subs", "r0, r0, #1"),
                         (0x114, "bne", "104 <f+0x4>"), (0x118, "pop", "{r4, pc}")]
    assert only_loop(rotated).rotated and only_loop(rotated).header == 0x104
    for rows in (top_tested, test_after_header, single_block, header_exits_too, header_may_return):
        assert not only_loop(rows).rotated, rows
    # a single-block loop is rotated for a fact when it holds a line of the body, not the test alone
    fact = {"function": "f", "file": "f.c", "line": 3, "max_iterations": 9}
    func = loop_function(single_block)
    (loop,) = otawa.loops_for_fact({"f": [func]}, fact)
    assert loop.single_block and not loop.rotated
    func.insns[1] = otawa.Insn(0x104, "add", "r3, r3, #1", "f.c", 4)
    (loop,) = otawa.loops_for_fact({"f": [func]}, fact)
    assert loop.rotated


#: gcc -O2's cifarnet conv loops on the ARM7TDMI: `for o` (line 5) > `for ky` (10) > `for kx` (14); the
#: `ky` loop's back edge is the threaded `if (iy < H)` of its body (line 12), its `for` test an exit
#: before it, its header on a stray line (7)
THREADED = [(0x100, "mov", "r6, #0", 5), (0x104, "mov", "r5, #0", 10), (0x108, "add", "r8, r5, r5", 7),
            (0x10c, "mov", "r2, #0", 14), (0x110, "bl", "200 <g>", 20), (0x114, "add", "r2, r2, #1", 14),
            (0x118, "cmp", "r2, #3", 14), (0x11c, "bne", "110 <f+0x10>", 14), (0x120, "add", "r5, r5, #1", 10),
            (0x124, "cmp", "r5, #3", 10), (0x128, "beq", "134 <f+0x34>", 10), (0x12c, "cmp", "r8, #24", 12),
            (0x130, "bne", "108 <f+0x8>", 12), (0x134, "add", "r6, r6, #1", 5), (0x138, "cmp", "r6, #8", 5),
            (0x13c, "bne", "104 <f+0x4>", 5), (0x140, "bx", "lr", 5)]
THREADED_FACTS = [{"function": "f", "file": "f.c", "line": 5, "last_line": 35, "max_iterations": 8},
                  {"function": "f", "file": "f.c", "line": 10, "last_line": 30, "max_iterations": 3},
                  {"function": "f", "file": "f.c", "line": 14, "last_line": 28, "max_iterations": 3}]


def threaded(changes=None):
    lines = {a: l for a, _, _, l in THREADED} | (changes or {})
    return {"f": [otawa.Function("f", 0x100, [otawa.Insn(a, m, o, "f.c", lines[a]) for a, m, o, _ in THREADED])]}


def test_a_loop_whose_back_edge_is_a_threaded_body_test_gets_its_for_by_the_exit_test():
    """No `for` line on the `ky` loop's latch: its fact is the one whose `for` test leaves the loop
    from its own blocks and whose body holds the latch's line outside any nested `for`; counted
    top-tested (3 back edges per entry). A latch on a nested `for`'s lines, or no exit test on the
    `for` line, leaves the loop to owcet's "no limit" error."""
    bounds, unmapped = otawa.map_loops(threaded(), THREADED_FACTS)
    got = {b.address: (b.max_back_edges, b.source) for b in bounds}
    assert unmapped == [] and got == {0x104: (7, "f.c:5"), 0x108: (3, "f.c:10"), 0x110: (2, "f.c:14")}
    for changes in ({0x12c: 20, 0x130: 20}, {0x128: 12}, {0x130: 40}):
        bounds, unmapped = otawa.map_loops(threaded(changes), THREADED_FACTS)
        assert 0x108 not in {b.address for b in bounds} and [f["line"] for f in unmapped] == [10], changes


def test_an_irreducible_cycle_gets_no_bound_by_its_exit_test():
    """gcc -O2's tiny-CNN `kx` loop: the first `ix` test before the loop jumps into its body, so the
    natural loop (header and threaded test) is not the whole cycle: no fact for it."""
    rows = [(0x100, "mov", "r7, #0", 5), (0x104, "cmp", "r7, #3", 12), (0x108, "bls", "120 <f+0x20>", 12),
            (0x10c, "add", "r7, r7, #1", 10), (0x110, "cmp", "r7, #3", 10), (0x114, "beq", "130 <f+0x30>", 10),
            (0x118, "cmp", "r7, #3", 12), (0x11c, "bhi", "10c <f+0xc>", 12), (0x120, "bl", "200 <g>", 20),
            (0x124, "b", "10c <f+0xc>", 20), (0x130, "bx", "lr", 5)]
    func = otawa.Function("f", 0x100, [otawa.Insn(a, m, o, "f.c", l) for a, m, o, l in rows])
    facts = [{"function": "f", "file": "f.c", "line": 10, "last_line": 30, "max_iterations": 3}]
    assert [hex(l.header) for l in otawa.natural_loops(func)] == ["0x10c"]
    assert otawa.loops_by_exit_test(func, facts, set()) == []
    # the whole cycle, entered at the increment (0x10c) and in the body (0x120): refused before owcet,
    # in one line that says what to do
    assert otawa.irreducible_regions(otawa.build_cfg(func), 0x100) == [({0x10c, 0x118, 0x120, 0x124}, {0x10c, 0x120})]
    with pytest.raises(NNBuildError) as error:
        otawa.require_reducible({"f": [func]}, facts, "f")
    message = str(error.value)
    assert "\n" not in message and "f+0xc, f+0x20 (C lines 10-20) is entered at 2 blocks" in message
    assert "compile with -fno-thread-jumps" in message


def test_nested_reducible_loops_have_no_irreducible_region():
    """The threaded cifarnet nest (three loops, a latch on a body line) and a top-tested loop each have
    one entry per cycle: no region, nothing refused."""
    top_tested = [(0x100, "mov", "r3, #0"), (0x104, "b", "110 <f+0x10>"), (0x108, "add", "r3, r3, #1"),
                  (0x10c, "str", "r3, [sp]"), (0x110, "cmp", "r3, #9"), (0x114, "ble", "108 <f+0x8>"),
                  (0x118, "bx", "lr")]
    for func in (threaded()["f"][0], loop_function(top_tested)):
        assert otawa.irreducible_regions(otawa.build_cfg(func), func.start) == []
    otawa.require_reducible(threaded(), THREADED_FACTS, "f")


def test_back_edge_counts_written_per_loop_form():
    """OTAWA's max and total count back edges: a top-tested loop's N passes are N of them, a rotated
    loop's N passes per entry N - 1, and T passes over the call at most T (N - 1) / N."""
    top = otawa.LoopBound(0x100, 16, "f", "f.c:5", total=128)
    rot = otawa.LoopBound(0x200, 16, "f", "f.c:6", total=128, rotated=True)
    odd = otawa.LoopBound(0x300, 3, "f", "f.c:7", total=7, rotated=True)
    once = otawa.LoopBound(0x400, 1, "f", "f.c:8", total=5, rotated=True)
    assert (top.max_back_edges, top.total_back_edges) == (16, 128)
    assert (rot.max_back_edges, rot.total_back_edges) == (15, 120)    # 8 entries of 16 passes
    assert (odd.max_back_edges, odd.total_back_edges) == (2, 4)       # 7 passes: >= 3 entries
    assert (once.max_back_edges, once.total_back_edges) == (0, 0)
    ff = otawa.render_ff([top, rot], "f")
    assert "loop 0x100 max 16 total 128; // f, f.c:5\n" in ff
    assert "loop 0x200 max 15 total 120; // f, f.c:6, rotated, N = 16\n" in ff
    assert '<loop address="0x200" maxcount="15"/>' in otawa.render_ffx([rot])


# ---------------------------------------------------------------- (b) real ELF: line -> header address


@pytest.mark.e2e  # arm-none-eabi-gcc (arm_builds)
@needs_arm_gcc
def test_ff_for_real_o0_elf_names_the_loop_header(arm_builds, tmp_path):
    elf = arm_builds["dot"]
    (line,) = for_lines(DOT_C)
    functions = otawa.disassemble(elf, ARM)
    bounds, unmapped = otawa.map_loops(functions, dot_facts(line)["loops"])
    assert unmapped == [] and len(bounds) == 1
    addr = bounds[0].address
    (dot,) = functions["dot"]
    assert dot.start < addr < dot.end
    targets = {f.target for f in map(otawa.classify, dot.insns) if f.kind == "branch"}
    assert addr in targets                      # the -O0 preheader jumps to the test block
    at = {i.addr: i for i in dot.insns}[addr]
    assert at.line == line                      # the header is on the `for` line
    ff = otawa.render_ff(bounds, "dot")
    assert f"loop 0x{addr:x} max 16;" in ff


@pytest.mark.e2e  # arm-none-eabi-gcc and qemu-arm
@needs_arm_gcc
@needs_qemu
@pytest.mark.parametrize("build", ["dense-O0", "dense-O2"])
def test_bounds_hold_on_qemu_execution_counts(arm_builds, build, tmp_path):
    """Back-edge traversals per entry = header executions - entries: at -O0 (top-tested) exactly N,
    at -O2 (rotated) exactly N - 1, the `max` the .ff gets for each. A wrong header or a wrong
    loop form would break it."""
    elf = arm_builds[build]
    bounds, unmapped = otawa.map_loops(otawa.disassemble(elf, ARM), dense_facts())
    assert unmapped == [] and [b.max for b in sorted(bounds, key=lambda b: b.max)] == [8, 16]
    pcs = executed_pcs(elf, tmp_path / "exec.log", timeout=30, check=False)
    entries = {8: 1, 16: 8}                     # outer loop entered once, inner once per neuron
    for b in bounds:
        assert b.rotated == (build == "dense-O2")
        back_edges = pcs.count(b.address) - entries[b.max]
        assert back_edges / entries[b.max] == b.max_back_edges == (b.max if build == "dense-O0" else b.max - 1)


@pytest.mark.e2e  # arm-none-eabi-gcc (arm_builds)
@needs_arm_gcc
def test_arm_board_links_and_runs_a_bare_main(arm_builds):
    if shutil.which("qemu-arm") is None:
        pytest.skip("qemu-arm not on PATH (the ELF linked)")
    assert subprocess.run(["qemu-arm", str(arm_builds["dot"])], timeout=30).returncode == 0


@pytest.mark.e2e  # arm-none-eabi-gcc (arm_builds)
@needs_arm_gcc
def test_conflicting_bounds_on_one_header_raise(arm_builds):
    (line,) = for_lines(DOT_C)
    facts = dot_facts(line)["loops"]
    with pytest.raises(NNBuildError, match="max 16.*max 17"):
        otawa.map_loops(otawa.disassemble(arm_builds["dot"], ARM), facts + [{**facts[0], "max_iterations": 17}])


# ---------------------------------------------------------------- (c) missing tools


def empty_path(monkeypatch, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    monkeypatch.setenv("NNBUILD_CACHE", str(tmp_path / "no-cache"))  # no OTAWA built by set-up either


def test_missing_owcet_names_the_tool(monkeypatch, tmp_path):
    empty_path(monkeypatch, tmp_path)
    with pytest.raises(NNBuildError) as e:
        otawa.analyze(tmp_path / "p.elf", "dot", {"loops": []}, ARM, tmp_path / "w")
    assert "'owcet' not found on PATH for target=arm" in str(e.value)
    assert "--with-otawa" in str(e.value) and "\n" not in str(e.value)


def test_missing_platin_and_patmos_clang_name_the_tool(monkeypatch, tmp_path):
    empty_path(monkeypatch, tmp_path)
    with pytest.raises(NNBuildError, match="'platin' not found on PATH for target=patmos.*t-crest"):
        platin.analyze(tmp_path / "p.elf", "dot", {"loops": []}, PATMOS, tmp_path / "w")
    with pytest.raises(NNBuildError, match="'patmos-clang' not found on PATH for target=patmos.*t-crest"):
        platin.build_executable(PATMOS, [tmp_path / "m.c"], tmp_path / "prog")


# ---------------------------------------------------------------- timeouts (process handling only)


def sleeping_tool(directory, name):
    """A stand-in that prints nothing and sleeps in a child: proves the group kill, not a number."""
    directory.mkdir(exist_ok=True)
    tool = directory / name
    tool.write_text("#!/bin/sh\nsleep 30\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return directory


@pytest.mark.e2e  # arm-none-eabi-gcc (arm_builds)
@needs_arm_gcc
def test_owcet_hang_is_killed_and_reported(monkeypatch, tmp_path, arm_builds):
    bin_dir = sleeping_tool(tmp_path / "bin", "owcet")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (line,) = for_lines(DOT_C)
    start = time.monotonic()
    with pytest.raises(NNBuildError, match="'owcet' timed out after 0.5 s"):
        otawa.analyze(arm_builds["dot"], "dot", dot_facts(line), {**ARM, "wcet_timeout_s": 0.5}, tmp_path / "w")
    assert time.monotonic() - start < 5
    assert "loop 0x" in (tmp_path / "w" / "dot.ff").read_text()


def test_platin_hang_is_killed_and_reported(monkeypatch, tmp_path):
    bin_dir = sleeping_tool(tmp_path / "bin", "platin")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    elf = tmp_path / "prog"
    elf.write_bytes(b"")
    platin.pml_path(elf).write_text("")  # only to reach the tool; the stand-in reads nothing
    start = time.monotonic()
    with pytest.raises(NNBuildError, match="'platin' timed out"):
        platin.analyze(elf, "dot", {"loops": []}, {**PATMOS, "wcet_timeout_s": 0.5}, tmp_path / "w")
    assert time.monotonic() - start < 5


def test_missing_pml_is_one_line(monkeypatch, tmp_path):
    bin_dir = sleeping_tool(tmp_path / "bin", "platin")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(NNBuildError, match=r"no PML beside the ELF: compile with patmos-clang -mserialize=prog.pml"):
        platin.analyze(tmp_path / "prog", "dot", {"loops": []}, PATMOS, tmp_path / "w")


def test_version_probe_never_fails():
    assert tools.version(["definitely-not-a-tool-nnbuild", "--version"]) is None
    found = tools.version([ARM["cc"], "--version"])
    assert found is None or "arm-none-eabi-gcc" in found


def test_boards_share_avr_keys_and_document_new_ones():
    for board in (ARM, PATMOS):
        # mcu is AVR's; v3_term_flash_bytes is optional, measured per compiler (without it, no early v3 refusal);
        # clock_define is avr-libc's F_CPU (no ARM or Patmos code reads a clock macro)
        assert set(AVR) - {"mcu", "v3_term_flash_bytes", "clock_define"} <= set(board)
        assert board["wcet_tool"] in ("otawa", "platin")
        new = set(board) - set(AVR) - {"notes", "deadline_ms"}
        assert new <= set(board["notes"]), new - set(board["notes"])
    assert ARM["otawa_script"] == ARM["instruction_timing"] == "arm7tdmi"
    assert "zero-wait" in ARM["notes"]["timing"] and "MAM" in ARM["notes"]["timing"]
    assert (PATMOS["clock_hz"], PATMOS["deadline_ms"]) == (50_000_000, 100)


# ---------------------------------------------------------------- (d) real tools (skip when absent)


@needs_arm_gcc
@needs_otawa
@pytest.mark.e2e  # arm-none-eabi-gcc, OTAWA and qemu-arm
def test_real_owcet_bounds_the_dot_kernel(arm_builds, tmp_path):
    (line,) = for_lines(DOT_C)
    result = otawa.analyze(arm_builds["dot"], "dot", dot_facts(line), {**ARM, "otawa_script": "trivial"}, tmp_path)
    assert result.analyzer == "otawa" and result.cycles > 0
    if shutil.which("qemu-arm"):
        log = tmp_path / "exec.log"
        subprocess.run(["qemu-arm", "-singlestep", "-d", "exec,nochain", "-D", str(log), str(arm_builds["dot"])],
                       timeout=30)
        executed = len(re.findall(r"\] dot$", log.read_text(), re.M))
        assert result.cycles >= 5 * executed    # trivial: 5 cycles per instruction on the longest path


@pytest.mark.e2e
@needs_arm_gcc
@needs_qemu
@needs_otawa
def test_real_owcet_arm7tdmi_model_is_exact_on_a_single_path_kernel(arm_builds, tmp_path):
    """dot has one path: OTAWA's arm7tdmi bound must equal the same clocks charged to qemu-arm's
    executed instructions, and differ from trivial's 5 per instruction."""
    from nnbuild.runners import qemu_user
    (line,) = for_lines(DOT_C)
    elf = arm_builds["dot"]
    bound = otawa.analyze(elf, "dot", dot_facts(line), ARM, tmp_path / "w")
    assert bound.details["script"] == "arm7tdmi" and "costs=" in " ".join(bound.details["command"])
    text = qemu_user.disassembly(ARM, elf)
    start, returns = qemu_user.call_sites(text, elf, "dot")
    log = tmp_path / "exec.log"
    subprocess.run(["qemu-arm", "-d", "in_asm,exec,nochain", "-D", str(log), str(elf)], timeout=30, check=True)
    (measured,) = qemu_user.instructions_per_call(log, start, returns, qemu_user.instruction_cost(ARM, text, elf))
    (count,) = qemu_user.instructions_per_call(log, start, returns)
    assert bound.cycles == measured and measured != 5 * count


# An integer row-by-column nest with one path: -O0 compiles both loops top-tested, -O2 rotates both.
NEST_C = """\
#include <stdint.h>
int32_t nest(const int8_t *w, const int8_t *x, int32_t *y) __attribute__((noinline));
int32_t nest(const int8_t *w, const int8_t *x, int32_t *y)
{
    int32_t sum = 0;
    for (int i = 0; i < 6; i++) {
        int32_t acc = 0;
        for (int j = 0; j < 10; j++) {
            acc += w[i * 10 + j] * x[j];
        }
        y[i] = acc;
        sum ^= acc;
    }
    return sum;
}
static int8_t W[60], X[10];
static int32_t Y[6];
int main(void)
{
    for (int k = 0; k < 60; k++) {
        W[k] = (int8_t)(k * 7 - 100);
    }
    for (int k = 0; k < 10; k++) {
        X[k] = (int8_t)(k - 5);
    }
    return nest(W, X, Y) == 12345;
}
"""


def nest_facts():
    """The generator's facts for NEST_C: passes per entry and over one call."""
    outer, inner = for_lines(NEST_C)[:2]
    return {"entry": "nest", "loops": [
        {"function": "nest", "file": "nest.c", "line": outer, "max_iterations": 6, "total_iterations": 6},
        {"function": "nest", "file": "nest.c", "line": inner, "max_iterations": 10, "total_iterations": 60}]}


@pytest.mark.e2e
@needs_arm_gcc
@needs_qemu
@needs_otawa
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_nest_bound_is_exact_in_both_loop_forms(tmp_path, opt, monkeypatch):
    """A single-path nest: OTAWA's arm7tdmi bound equals qemu-arm's clocks exactly, top-tested at
    -O0 (max N, total T) and rotated at -O2 (max N - 1, total T (N - 1) / N). One back edge fewer
    than that on the rotated loops, per entry or in total, puts the bound below the measured
    clocks: this test catches a rotated-loop count off by one in the unsound direction."""
    elf = build_arm(tmp_path, "nest", NEST_C, opt)
    (measured,) = clocks_per_call(elf, "nest", elf.with_suffix(".exec.log"), timeout=30, check=False)
    result = otawa.analyze(elf, "nest", nest_facts(), ARM, tmp_path / "w")
    loops = result.details["loop_bounds"]
    assert [l["rotated"] for l in loops] == [opt == "-O2"] * 2 and result.details["unmapped_loops"] == []
    assert result.cycles == measured
    if opt == "-O2":
        for k, count in enumerate(["max_back_edges", "total_back_edges"]):
            right = getattr(otawa.LoopBound, count).fget
            monkeypatch.setattr(otawa.LoopBound, count, property(lambda b, right=right: right(b) - b.rotated))
            assert otawa.analyze(elf, "nest", nest_facts(), ARM, tmp_path / f"w{k}").cycles < measured
            monkeypatch.undo()


@pytest.mark.skipif(shutil.which("patmos-clang") is None or shutil.which("platin") is None,
                    reason="T-CREST patmos-clang/platin not on PATH (github.com/t-crest release tarballs)")
def test_real_platin_bounds_the_dot_kernel(tmp_path):
    src = tmp_path / "dot.c"
    src.write_text(DOT_C)
    prog = platin.build_executable(PATMOS, [src], tmp_path / "dot", entry="dot")
    assert platin.pml_path(prog).is_file()
    result = platin.analyze(prog, "dot", dot_facts(for_lines(DOT_C)[0]), PATMOS, tmp_path / "w")
    assert result.analyzer == "platin" and result.cycles > 0


# ---------------------------------------------------------------- (e) libgcc loops for OTAWA

LIBLOOP_CASES = {  # operation -> the table entry (routine, header offset) it drives to its bound
    "tiny * one": ("__aeabi_fmul", 0xE0), "one * tiny": ("__aeabi_fmul", 0xFC),
    "tiny / one": ("__aeabi_fdiv", 0xD0), "one / tiny": ("__aeabi_fdiv", 0xEC),
    "one / three": ("__aeabi_fdiv", 0x4C)}
LIBLOOP_C = r"""
#include <stdint.h>
#include <string.h>
volatile float sink;
int main(void)
{
    uint32_t bits = 1u;   /* the smallest subnormal: 23 normalising shifts */
    volatile float tiny, one = 1.0f, three = 3.0f;
    float t;
    memcpy(&t, &bits, sizeof t);
    tiny = t;
    (void)one; (void)three;
    sink = OPERATION;
    return 0;
}
"""


@pytest.mark.e2e  # arm-none-eabi-gcc and qemu-arm
@needs_arm_gcc
@pytest.mark.skipif(shutil.which("qemu-arm") is None, reason="qemu-arm not installed")
@pytest.mark.parametrize("operation", sorted(LIBLOOP_CASES))
def test_arm_libloop_bounds_are_reached_under_qemu(operation, tmp_path):
    """Each arm_libloops.json entry matches the linked libgcc (pattern) and its bound is exact: the
    adversarial operands make qemu-arm execute the loop header exactly `max` times, and no other
    table loop more than its own bound."""
    elf = arm7tdmi_elf(tmp_path, "ll", LIBLOOP_C.replace("OPERATION", operation))
    functions = otawa.disassemble(elf, ARM)
    bounds = otawa.library_bounds(functions)
    by_key = {(b.function, b.address): b for b in bounds}
    table = json.loads(otawa.LIBLOOPS_PATH.read_text())["loops"]
    linked = [e for e in table if e["symbols"][0] in functions]
    assert len(bounds) == len(linked) >= 2, [b.source for b in bounds]   # every linked loop matches its pattern
    pcs = executed_pcs(elf, tmp_path / "exec.log")
    routine, offset = LIBLOOP_CASES[operation]
    start = functions[routine][0].start
    for b in bounds:
        assert pcs.count(b.address) <= b.max, b.source
    assert pcs.count(start + offset) == by_key[(routine, start + offset)].max


def test_computed_jumps_are_refused_returns_are_not():
    """A jump table or register branch leaves OTAWA's CFG: the adapter refuses rather than bound."""
    jump = lambda m, o: otawa.computed_jump(otawa.Insn(0, m, o))  # noqa: E731
    assert jump("ldrls", "pc, [pc, r3, lsl #2]") and jump("bx", "r4") and jump("blx", "r3")
    assert jump("add", "pc, pc, r2, lsl #2") and jump("mov", "pc, r1")
    assert not jump("bx", "lr") and not jump("mov", "pc, lr") and not jump("pop", "{r4, pc}")
    assert not jump("ldm", "sp!, {r4, pc}") and not jump("bl", "8400 <f>") and not jump("ldr", "r3, [pc, #8]")
    f = otawa.Function("f", 0x100, [otawa.Insn(0x100, "bl", "200 <g>"), otawa.Insn(0x104, "bx", "lr")])
    g = otawa.Function("g", 0x200, [otawa.Insn(0x200, "ldrls", "pc, [pc, r3, lsl #2]")])
    with pytest.raises(NNBuildError, match=r"computed jump `ldrls pc, \[pc, r3, lsl #2\]` at g\+0x0"):
        otawa.require_no_computed_jumps({"f": [f], "g": [g]}, "f")


def switch_function(cmp_reg="r3", table=(0x118, 0x120, 0x118)):
    """gcc's bounded ARM switch: cmp rI, #N; ldrls pc, [pc, rI, lsl #2]; b default; N+1 words."""
    insns = [otawa.Insn(0x100, "cmp", f"{cmp_reg}, #{len(table) - 1}"),
             otawa.Insn(0x104, "ldrls", "pc, [pc, r3, lsl #2]"), otawa.Insn(0x108, "b", "124 <g+0x24>")]
    words = {0x10c + 4 * k: t for k, t in enumerate(table)}
    insns += [otawa.Insn(a, "mov", "r0, #1") for a in (0x118, 0x11c, 0x120, 0x124)] + [otawa.Insn(0x128, "bx", "lr")]
    return otawa.Function("g", 0x100, insns, words)


def test_bounded_jump_table_is_resolved_to_multibranch():
    g = switch_function()
    assert otawa.jump_tables(g) == {0x104: [0x118, 0x120]}
    otawa.require_no_computed_jumps({"g": [g]}, "g")          # resolved: not refused
    blocks = otawa.build_cfg(g)
    assert set(blocks[0x100].succs) == {0x118, 0x120, 0x108}  # the cases and the default
    ff = otawa.render_ff([], "g", otawa.jump_tables(g))
    assert "multibranch 0x104 to 0x118, 0x120; // jump table" in ff


@pytest.mark.parametrize("kwargs", [{"cmp_reg": "r2"}, {"table": (0x118, 0x900)}])
def test_unproven_jump_table_stays_refused(kwargs):
    """Another register compared, or a word that is no instruction of the function: not resolved."""
    g = switch_function(**kwargs)
    assert otawa.jump_tables(g) == {}
    with pytest.raises(NNBuildError, match="computed jump `ldrls"):
        otawa.require_no_computed_jumps({"g": [g]}, "g")


SWITCH_C = (Path(__file__).resolve().parent / "wcet_fixtures" / "switch_act.c").read_text()
SWITCH_MAIN = """
static const int16_t IN[8] = {CASE, CASE, CASE, CASE};
int main(void) { int16_t out[4]; switch_act(IN, out); return out[0] == 5 ? 0 : 1; }
"""


@pytest.mark.e2e
@needs_arm_gcc
@needs_qemu
@needs_otawa
@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_switch_jump_table_bound_covers_every_case(tmp_path, opt):
    """The switch's jump table reaches owcet as `multibranch`: its bound is >= every case measured
    under qemu-arm with the same clocks, and at -O0 equals the worst one (case 2, negative x, four
    times: 362; OTAWA's own WCET step truncated lp_solve's 361.99999999999994 to 361)."""
    facts = json.loads((Path(__file__).resolve().parent / "wcet_fixtures" / "switch_act.flowfacts.json").read_text())
    measured, bounds = [], set()
    for k, case in enumerate(["5, 0", "-5, 1", "-9, 2", "9, 2", "4, 3", "4, 7"]):
        elf = build_arm(tmp_path, f"switch{k}", SWITCH_C + SWITCH_MAIN.replace("CASE", case), opt)
        loops = [{**loop, "file": elf.with_suffix(".c").name} for loop in facts["loops"]]
        result = otawa.analyze(elf, "switch_act", {**facts, "loops": loops}, ARM, tmp_path / f"w{k}")
        assert len(result.details["jump_tables"]) == 1
        bounds.add(result.cycles)
        (cost,) = clocks_per_call(elf, "switch_act", tmp_path / f"exec{k}.log", timeout=30, check=False)
        measured.append(cost)
    (bound,) = bounds                      # the same function in every build
    assert bound >= max(measured)
    if opt == "-O0":
        assert bound == max(measured) == 362


def test_register_call_resolved_by_indirect_flow_fact():
    """v1's kernel call (`mov lr, pc; bx r3` on the fact's line) gets its targets as `multicall`; the
    call falls through in our CFG (a loop around it keeps its back edge); a target missing from the
    ELF is an error; without the fact the call stays refused."""
    at = lambda a, m, o, line=None: otawa.Insn(a, m, o, "gen/net.c", line)  # noqa: E731
    run = otawa.Function("net_infer", 0x100, [
        at(0x100, "mov", "r4, #0"), at(0x104, "mov", "lr, pc", 40), at(0x108, "bx", "r3", 40),
        at(0x10c, "add", "r4, r4, #1", 39), at(0x110, "cmp", "r4, #3", 39), at(0x114, "bls", "104 <net_infer+0x4>", 39),
        at(0x118, "bx", "lr")])
    kernels = {name: [otawa.Function(name, start, [at(start, "bx", "lr")])]
               for name, start in (("nn_dense", 0x200), ("nn_conv2d", 0x300))}
    functions = {"net_infer": [run], **kernels}
    fact = {"indirect": [{"file": "net.c", "line": 40, "targets": ["nn_conv2d", "nn_dense"]}]}
    calls = otawa.indirect_calls(functions, fact)
    assert calls == {0x108: [0x300, 0x200]}
    assert otawa.register_call(run.insns[1], run.insns[2]) and not otawa.register_call(None, run.insns[6])
    assert [loop.header for loop in otawa.natural_loops(run)] == [0x104]
    otawa.require_no_computed_jumps(functions, "net_infer", calls)
    assert {f.name for f in otawa.reachable(functions, "net_infer", calls)} == {"net_infer", "nn_dense", "nn_conv2d"}
    assert "multicall 0x108 to 0x300, 0x200; // indirect flow fact" in otawa.render_ff([], "net_infer", {}, calls)
    with pytest.raises(NNBuildError, match="computed jump `bx r3`"):
        otawa.require_no_computed_jumps(functions, "net_infer", {})
    with pytest.raises(NNBuildError, match="target 'nn_pool2d' is not a function of the ELF"):
        otawa.indirect_calls(functions, {"indirect": [{**fact["indirect"][0], "targets": ["nn_pool2d"]}]})


@pytest.mark.e2e
@pytest.mark.skipif(otawa.locate("otawa-config") is None or shutil.which("g++") is None,
                    reason="OTAWA (otawa-config) or g++ absent")
def test_arm7tdmi_plugin_builds_once_and_a_failed_build_leaves_nothing(monkeypatch, tmp_path):
    from nnbuild.wcet import otawa_timing
    config = otawa.locate("otawa-config")
    monkeypatch.setenv("NNBUILD_CACHE", str(tmp_path / "cache"))
    script = otawa_timing.prepared_script("arm7tdmi", config, ARM)
    plugin = script.parent / "nnbuild" / "arm7tdmi.so"
    assert plugin.is_file() and f'<path to="{script.parent}"/>' in script.read_text()
    stamp = plugin.stat().st_mtime_ns
    assert otawa_timing.prepared_script("arm7tdmi", config, ARM) == script and plugin.stat().st_mtime_ns == stamp
    fake = tmp_path / "fake" / "bin" / "otawa-config"         # a prefix without OTAWA's headers
    fake.parent.mkdir(parents=True)
    with pytest.raises(NNBuildError, match="building the OTAWA plugin failed"):
        otawa_timing.prepared_script("arm7tdmi", fake, ARM)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [script.parent.name]
