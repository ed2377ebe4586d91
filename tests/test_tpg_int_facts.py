"""The value facts of a TPG table helper's integer test (nnbuild/codegen/templates/tpg_common.j2,
integer_lookup): after `x >= -255.0 && x <= 255.0`, `const int k = (int)x` gets "__fixsfsi:|x|<256"
and `(double)k == x` gets "__floatsisf:|k|<256"; avr_libloops.json then drops __fixunssfsi's left
shift (exponents above 23) and __floatsisf's right shift (a non-zero top byte). Checked here: the
generated helpers carry the facts on the conversion lines, and a driver with the same lines, run
under simavr on every integer of the range and every exponent of the fractions in it (both signs),
never enters the dropped loops, and its bound with the facts covers every run and is reached.
"""

import json

import numpy as np
import pytest

from conftest import needs_avr
from test_wcet_avr import board
from tpg_helpers import avr_libm_driver, small_graph, trace_calls, write, write_env

from nnbuild import codegen
from nnbuild.frontends import gegelati_dot
from nnbuild.ir.tpg import Environment
from nnbuild.numerics.float_facts import TPG_INT_TAGS
from nnbuild.runners import simavr
from nnbuild.wcet import avr_decode, avr_ipet, avr_loops

#: the helper's integer test, as the template writes it (double is float on AVR)
DRIVER = """#include <math.h>
volatile int cg_index;
void cg_int(const float in[1], float out[1])
{
    const double x = in[0];
    out[0] = -1.0f;
    if (x >= -255.0 && x <= 255.0) {
        const int k = (int)x;
        if ((double)k == x) {
            cg_index = k - (-255);
            out[0] = 1.0f;
        }
    }
}
"""
FACTS = {"loops": [], "layers": [], "values": [
    {"file": "cg.c", "line": 8, "op": "fix", "tags": [TPG_INT_TAGS["fix"]], "why": "-255 <= x <= 255 (line 7)"},
    {"file": "cg.c", "line": 9, "op": "float", "tags": [TPG_INT_TAGS["float"]], "why": "k = (int)x, |x| <= 255"}]}


def generated(tmp_path, lo, hi):
    tmp_path.mkdir(exist_ok=True)
    env = write_env(tmp_path / "env.json", integer_tables={"min": lo, "max": hi})
    model = gegelati_dot.load(write(tmp_path / "g.dot", small_graph()), Environment.load(str(env)))
    model.name = "g"
    codegen.generate(model, tmp_path / "gen", shape="switch")
    return (tmp_path / "gen" / "g.c").read_text().splitlines(), json.loads((tmp_path / "gen" / "g.flowfacts.json").read_text())


def test_helpers_carry_the_conversion_facts(tmp_path):
    lines, facts = generated(tmp_path, -8, 8)
    conv = [f for f in facts["values"] if f["op"] in ("fix", "float")]
    assert conv and len(conv) % 2 == 0
    for f in conv:
        assert f["tags"] == [TPG_INT_TAGS[f["op"]]]
        text = lines[f["line"] - 1].strip()
        assert text == ("const int k = (int)x;" if f["op"] == "fix" else "if ((double)k == x) {")
        if f["op"] == "fix":
            assert lines[f["line"] - 2].strip().startswith("if (x >= -8.0 && x <= 8.0) {")
    # a range beyond 255 gets no such fact (the table entries assume |x| < 256)
    _, facts = generated(tmp_path / "wide", -300, 300)
    assert not [f for f in facts.get("values", []) if f["op"] in ("fix", "float")]


def arguments():
    """Every integer in -255..255 and, per biased exponent 0..134, mantissas 0, 1, all ones, one
    bit and random ones (|x| <= 255 only), both signs; values just outside and non-finite ones."""
    rng = np.random.default_rng(5)
    m = np.concatenate([[0, 1, 0x7FFFFF, 0x400000, 0x000100], rng.integers(0, 1 << 23, 12)]).astype(np.uint32)
    e = np.arange(0, 135, dtype=np.uint32)
    x = ((e[:, None] << np.uint32(23)) | m[None, :]).ravel().view(np.float32)
    x = np.concatenate([x[np.abs(x) <= 255], np.arange(-255, 256, dtype=np.float32)])
    x = np.concatenate([x, -x, np.float32([255.5, -255.5, 256, 1e30, np.inf, -np.inf, np.nan])])
    return x.astype(np.float32)


@pytest.mark.e2e
@needs_avr
def test_conversions_stay_off_the_dropped_loops_and_reach_the_bound(tmp_path):
    from test_wcet_avr_context import Probe
    b = board()
    elf = avr_libm_driver(tmp_path, "int", DRIVER)
    prog = avr_decode.load(elf)
    bound = avr_ipet.analyze(elf, "cg_int", FACTS, b, None).cycles
    free = avr_ipet.analyze(elf, "cg_int", dict(FACTS, values=[]), b, None).cycles
    x = arguments()
    out, cycles = simavr.run_cases(elf, x[:, None], 1, entry_symbol="cg_int", mcu=b["mcu"], freq=b["clock_hz"],
                                   harness=simavr.build_harness(tmp_path / "simavr_run"))
    integer = np.isfinite(x) & (np.abs(x) <= 255) & (x == np.trunc(x))
    assert np.array_equal(out[:, 0] == 1.0, integer)
    print(f"\n  integer test: bound {bound} with the facts, {free} without; simavr max {cycles.max()} "
          f"over {len(x)} arguments")
    # the rest of the slack is context-free (the compares, __fixsfsi's overflow exit), not these facts
    assert cycles.max() <= bound <= cycles.max() + 30
    assert bound <= free - 40
    # the loops the entries drop never run (every conversion call here is on a fact's line)
    probes = []
    for ent in avr_loops.load_table():
        tag = set(ent.get("within", [])) & set(TPG_INT_TAGS.values())
        if tag:
            assert ent["header_max"] == 0
            start = prog.address_of(ent["symbol"])
            probes.append(Probe(start, (), None, "sup", [start + ent["offset"]], group=len(probes)))
    assert len(probes) == 2
    trace_calls(elf, probes, x, tmp_path)
    for p in probes:
        assert p.invocations == np.sum(np.isfinite(x) & (np.abs(x) <= 255)) or p.invocations > 0
        assert max(v[0] for _, _, v in p.vectors) == 0
