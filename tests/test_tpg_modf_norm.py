"""modf's fraction x - trunc(x) normalises in at most 23 passes (avr_libloops.json: __addsf3x's
normalisation header +0x6e, within modf, call site __addsf3+0x4; exp reaches it through its modf
call). Checked under simavr (tests/wcet_fixtures/avr_trace.c): every fraction size of x in [1, 2),
x near 2^k for every k below 23, random arguments, both signs: the passes per call never exceed
the entry's bound and reach it (x = 1 + 2^-23).
"""

import numpy as np
import pytest

from conftest import needs_avr
from tpg_helpers import avr_libm_driver, trace_calls

from nnbuild.wcet import avr_decode, avr_loops

DRIVER = """#include <math.h>
void cg_modf(const float in[1], float out[1]) { float ip; out[0] = modff(in[0], &ip) + ip * 0.0f; }
"""


def entry():
    [ent] = [e for e in avr_loops.load_table() if e["symbol"] == "__addsf3x" and e.get("within") == ["modf"]]
    return ent


def arguments(rng):
    k = np.arange(0, 23)
    x = [1 + 2.0 ** -np.arange(1, 24), 1 + np.arange(1, 4096) * 2.0 ** -23]
    for j in k:  # just above and below 2^j: the smallest fraction at each exponent
        ulp = 2.0 ** (j - 23)
        x += [2.0 ** j + ulp * np.arange(1, 64), 2.0 ** (j + 1) - ulp * np.arange(1, 64)]
    x.append(rng.uniform(1, 2 ** 23, 4000))
    x = np.concatenate(x).astype(np.float32)
    return np.concatenate([x, -x])


@pytest.mark.e2e
@needs_avr
def test_modf_subtraction_normalises_at_most_23_times(tmp_path):
    from test_wcet_avr_context import Probe
    ent = entry()
    elf = avr_libm_driver(tmp_path, "modf", DRIVER)
    prog = avr_decode.load(elf)
    header = prog.address_of("__addsf3x") + ent["offset"]
    probe = Probe(prog.address_of("__addsf3x"), ("modf",), None, "sup", [header])
    x = arguments(np.random.default_rng(3))
    trace_calls(elf, [probe], x, tmp_path, ["modf"])
    passes = max(v[0] for _, _, v in probe.vectors)
    print(f"\n  modf: {len(x)} arguments, {probe.invocations} subtractions, max normalisation passes {passes}")
    assert probe.invocations > len(x) // 2
    assert passes == ent["header_max"] == 23
