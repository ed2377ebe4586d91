"""Adversarial search against the builtin-avr bound, one float32 build per code shape.

Per build (the xor model as shape mlp, v1, v2 and v3 for the avr board): range corners, zeros of
both signs, subnormals, NaN and infinities, huge and tiny magnitudes, random bit patterns, then a
coordinate-wise hill-climb on simavr cycles from the slowest of them; at least 500 inputs, run in
batches by one simavr process each. The bound must never be beaten; the worst ratio is printed
(run with -s). Every shape's float32 sums are split by sign on AVR (flushed inputs, value facts on
each split line: nnbuild.codegen.common.split_accumulation); the value facts and the library path
entries conditioned on them are checked routine by routine in test_wcet_avr_value_facts.py; this
is the whole-program check.

Besides the input-space search, `exp_slow_inputs` aims at the output activation: avr-libc's expf
runs longest when frac(|z| * log2(e)) is tiny (its polynomial's products denormalise), so inputs
are solved (bisection along a line of the input space, on a float64 model of the Dense layers)
to put the output neuron's pre-activation z at +-k ln 2, then nudged by a few ulps.
"""

import json

import numpy as np
import pytest

from conftest import REPO, needs_avr, slow
from nnbuild import pipeline, wcet
from nnbuild.runners import simavr

from test_wcet_avr import float_cases, worst_case_search

pytestmark = [pytest.mark.e2e, needs_avr]

XOR = REPO / "firmware_examples/xor/xor.h5"
#: inputs per build: the fixed set plus this many hill-climb runs (>= 500 in all)
CLIMB_RUNS = 240


def dense_preactivation(model, x):
    """The last Dense layer's pre-activation (float64) of a model of Dense layers, per input row."""
    acts = {"relu": lambda v: np.maximum(v, 0.0), "linear": lambda v: v, "tanh": np.tanh,
            "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v))}
    v = np.asarray(x, np.float64)
    for k, layer in enumerate(model.layers):
        v = v @ layer.kernel.astype(np.float64) + layer.bias.astype(np.float64)
        if k < len(model.layers) - 1:
            v = acts[layer.activation](v)
    return v[:, 0]


def exp_slow_inputs(model, lo, hi, rng, nudges=(-2, -1, 0, 1, 2)):
    """Inputs whose output pre-activation z is k ln 2 (|z| < 40: the sigmoid's expf range), found by
    bisection on segments between random points of [lo, hi]^n, each nudged by `nudges` ulps in its
    first coordinate (the float32 sums land within a few ulps of the float64 target)."""
    n_in = model.layers[0].kernel.shape[0]
    ends = rng.uniform(lo, hi, (64, 2, n_in))
    ends = np.concatenate([ends, np.array([[np.full(n_in, lo), np.full(n_in, hi)]])])
    z_ends = [dense_preactivation(model, e) for e in ends]
    rows = []
    for k in range(1, 58):
        for target in (k * np.log(2.0), -k * np.log(2.0)):
            seg = next((e for e, z in zip(ends, z_ends) if (z[0] - target) * (z[1] - target) < 0), None)
            if seg is None:
                continue
            a, b = 0.0, 1.0
            za = dense_preactivation(model, seg[:1])[0] - target
            for _ in range(60):
                m = (a + b) / 2
                zm = dense_preactivation(model, (seg[0] + m * (seg[1] - seg[0]))[None])[0] - target
                a, b, za = (m, b, zm) if zm * za > 0 else (a, m, za)
            x = (seg[0] + a * (seg[1] - seg[0])).astype(np.float32)
            for d in nudges:
                row = x.copy()
                bits = row[:1].view(np.int32)
                bits += d
                rows.append(row)
    return np.asarray(rows, dtype=np.float32).reshape(-1, n_in)


def special_rows(n_in, lo, hi):
    """Range corners and IEEE specials, alone and mixed with the corners."""
    specials = [0.0, -0.0, 1.4e-45, -1e-40, 1.1754944e-38, 3.4028235e38, -3.4028235e38, 1e30, -1e-30,
                np.inf, -np.inf, np.nan]
    corners = [np.array(c, dtype=np.float32) for c in np.array(np.meshgrid(*[[lo, hi]] * n_in)).reshape(n_in, -1).T]
    rows = corners + [np.full(n_in, v, np.float32) for v in specials]
    rows += [np.where(np.arange(n_in) % 2 == 0, v, hi).astype(np.float32) for v in specials]
    rows += [np.where(np.arange(n_in) % 2 == 1, v, lo).astype(np.float32) for v in specials]
    return np.asarray(rows, dtype=np.float32)


@pytest.mark.parametrize("shape", ["mlp", "v1", "v2", "v3"])
def test_adversarial_search_never_beats_the_bound(tmp_path, shape):
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(XOR, board, tmp_path, name="xor", shape=shape)
    facts = json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "wcet")

    def run(cases):
        _, cycles = simavr.run_cases(elf, np.asarray(cases, np.float32), 1, entry_symbol="xor_infer",
                                     mcu=board["mcu"], freq=board["clock_hz"], harness=harness)
        return cycles

    rng = np.random.default_rng(27)
    model, _ = pipeline.load_model(XOR, "xor")
    x = np.vstack([special_rows(2, 0.0, 1.0), float_cases(2, rng, n_random=120),
                   rng.uniform(0.0, 1.0, (40, 2)).astype(np.float32), exp_slow_inputs(model, -2.0, 2.0, rng)])
    cycles = run(x)
    i = int(np.argmax(cycles))
    _, climbed, evals = worst_case_search(run, (x[i], cycles[i]), rng, "float", budget=CLIMB_RUNS)
    worst = max(int(cycles.max()), climbed)
    assert len(x) + evals >= 500
    print(f"\nxor {shape} float32: bound {bound.cycles:,}, simavr worst {worst:,} over {len(x) + evals} inputs "
          f"({len(x)} fixed, {evals} hill-climb), bound/measured {bound.cycles / worst:.3f}")
    assert worst <= bound.cycles, f"UNSOUND: {shape}: measured {worst} > bound {bound.cycles}"


SIGMOID_DRIVER = """#include "{name}.c"
void sg_run(const float in[1], float out[1]);
void sg_run(const float in[1], float out[1]) {{ out[0] = nn_sigmoid(in[0]); }}
"""


def test_sigmoid_value_facts_hold_and_reach_their_bound(tmp_path):
    """nn_sigmoid's value facts (exp:|x|<40 for expf(-x), 1 + e of one sign, 1/(1 + e) with a
    normal divisor) on the generated code itself (xor, shape mlp: the driver includes xor.c and
    calls its nn_sigmoid; the flow facts are the generator's): the analyser's bound covers simavr
    on arguments that drive exp's slowest paths (|z| = k ln 2 and its ulp neighbours: a tiny
    polynomial argument; -39.99 and 39.99: n = 57, the largest integer part the |x| < 40 entries
    allow) and stays within 1.2x of the slowest; without the facts the bound is larger."""
    from nnbuild.runners import CHECK_MAIN, check_main_defines
    board = pipeline.load_board("avr")
    gen = tmp_path / "gen"
    pipeline.build_check_program(XOR, board, tmp_path, name="xor", shape="mlp")
    facts = json.loads((gen / "xor.flowfacts.json").read_text())
    (gen / "sg.h").write_text("void sg_run(const float in[1], float out[1]);\n")
    (gen / "sg.c").write_text(SIGMOID_DRIVER.format(name="xor"))
    elf = board.compiler.build_executable(board, [gen / "sg.c", gen / "xor_weights.c", CHECK_MAIN],
                                          tmp_path / "sg.elf", include_dirs=[gen],
                                          defines=[d[2:] for d in check_main_defines("sg.h", "sg_run", 1, 1)])
    tagged = [v for v in facts["values"] if "exp:|x|<40" in v["tags"]]
    assert tagged, "nn_sigmoid's expf call carries no exp:|x|<40 fact"
    bound = wcet.analyze(board, elf, "sg_run", {"loops": [], "layers": [], "values": facts["values"]},
                         tmp_path / "w").cycles
    plain = wcet.analyze(board, elf, "sg_run", {"loops": [], "layers": []}, tmp_path / "w0").cycles
    ks = np.arange(1, 58)
    base = np.concatenate([ks * np.log(2.0), -ks * np.log(2.0)]).astype(np.float32).view(np.int32)
    near = (base[:, None] + np.arange(-6, 7)[None, :]).ravel().view(np.float32)
    x = np.concatenate([near, np.linspace(-40, 40, 801, dtype=np.float32),
                        [39.99, -39.99, 40.0, -40.0, 0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan]])
    _, cycles = simavr.run_cases(elf, x.astype(np.float32)[:, None], 1, entry_symbol="sg_run", mcu=board["mcu"],
                                 freq=board["clock_hz"], harness=simavr.build_harness(tmp_path / "simavr_run"))
    worst = int(cycles.max())
    print(f"\n  nn_sigmoid: bound {bound} with its value facts ({plain} without), simavr max {worst} over {len(x)} "
          f"arguments, bound/measured {bound / worst:.3f}")
    assert worst <= bound <= 1.2 * worst
    assert bound < plain


def test_v1_charges_each_table_entry_its_own_activation(tmp_path):
    """xor as v1: avr-gcc resolves the const table's two kernel pointers into two direct calls of
    nn_dense on the network line; the `calls` fact still applies there (one per entry), each
    entry's `indirect` list sends nn_apply's pointer call to that entry's activation only (ReLU for
    dense_1, sigmoid for dense_2). Without the lists every call is charged the sigmoid. On AVR the
    sums are split by sign: every entry's weights are zero or normal, so nn_dense's multiply line
    carries the __mulsf3 value facts for all of them and no call needs `values` of its own. A
    list naming a target outside the site's own entry is refused in one line."""
    from nnbuild.errors import NNBuildError
    from nnbuild.numerics import float_facts
    board = pipeline.load_board("avr")
    elf, _ = pipeline.build_check_program(XOR, board, tmp_path, name="xor", shape="v1")
    facts = json.loads((tmp_path / "gen" / "xor.flowfacts.json").read_text())
    calls = facts["indirect"][0]["calls"]
    assert [c["indirect"][0]["targets"] for c in calls] == [["nn_relu"], ["nn_sigmoid"]]
    per_entry = wcet.analyze(board, elf, "xor_infer", facts, tmp_path / "w1").cycles
    generic = json.loads(json.dumps(facts))
    for c in generic["indirect"][0]["calls"]:
        del c["indirect"]
    worst_act = wcet.analyze(board, elf, "xor_infer", generic, tmp_path / "w2").cycles
    assert any(v["op"] == "mul" and v["tags"] == list(float_facts.MUL_TAGS) for v in facts["values"])
    assert all("values" not in c for c in calls)
    no_values = json.loads(json.dumps(facts))
    no_values["values"] = [v for v in facts["values"] if v["op"] != "mul" or v["tags"] != list(float_facts.MUL_TAGS)]
    unsplit_facts = wcet.analyze(board, elf, "xor_infer", no_values, tmp_path / "w4").cycles
    print(f"\n  xor v1: bound {per_entry} with each entry's activation and the split line's facts, {unsplit_facts} "
          f"without the __mulsf3 facts, {worst_act} with the slowest activation for every call")
    assert per_entry < unsplit_facts and per_entry < worst_act
    bad = json.loads(json.dumps(facts))
    bad["indirect"][0]["calls"][0]["indirect"][0]["targets"] = ["nn_dense"]
    with pytest.raises(NNBuildError, match=r"indirect flow fact: a call's target 0x[0-9a-f]+ at 0x[0-9a-f]+ is not "
                                           r"among the site's targets"):
        wcet.analyze(board, elf, "xor_infer", bad, tmp_path / "w3")


#: inputs of the small CNN's search: e2e and slow tier (NNBUILD_SLOW_TESTS=1)
CNN_INPUTS = {"e2e": 150, "slow": 500}


@pytest.mark.parametrize("shape,tier", [("v2", "e2e"), ("v1", "e2e"),
                                        pytest.param("v2", "slow", marks=slow("the e2e tier's 150-input search of the "
                                                                              "same build"))])
def test_small_cnn_search_never_beats_the_bound(tmp_path, shape, tier):
    """The v1 tests' 6x6x2 CNN (zero padding, padded conv ReLU, max and average pooling, add,
    batchnorm tanh, concat, dense sigmoid, softmax) as float32 v2 and v1 on AVR: the padded conv's
    tap loops carry total_iterations (taps inside the input), which builtin-avr applies per
    invocation (v1: per call of the network loop's `calls` fact, v1.add_conv_call_totals); corners, specials, constructed alignment inputs (alignment_inputs) and a
    hill-climb never beat the bound."""
    from adversarial_search import check_bound
    from nnbuild import codegen, passes
    from nnbuild.runners import CHECK_MAIN, check_main_defines
    from test_wcet_avr_v1 import small_cnn
    board = pipeline.load_board("avr")
    model, log = passes.run(small_cnn(), None)
    files = codegen.generate(model, tmp_path / "gen", shape=shape, storage=board.get("weights_storage", "const"),
                             passes_log=log)
    defines = check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size, model.output_size)
    elf = board.compiler.build_executable(board, [f for f in files if str(f).endswith(".c")] + [CHECK_MAIN],
                                          tmp_path / "check.elf", include_dirs=[tmp_path / "gen"],
                                          defines=[d[2:] for d in defines])
    facts = json.loads((tmp_path / "gen" / f"{model.name}.flowfacts.json").read_text())
    assert any("total_iterations" in f for f in facts["loops"])
    if shape == "v1":
        assert any("total_iterations" in f for c in facts["indirect"][0]["calls"] for f in c["loops"])
    bound = wcet.analyze(board, elf, f"{model.name}_infer", facts, tmp_path / "wcet").cycles
    harness = simavr.build_harness(tmp_path / "simavr_run")

    def run(x):
        return simavr.run_cases(elf, x, model.output_size, entry_symbol=f"{model.name}_infer", mcu=board["mcu"],
                                freq=board["clock_hz"], harness=harness)

    check_bound(f"small CNN {shape} float32 ({tier})", bound, run, model.input_size, -1.0, 1.0, 27, CNN_INPUTS[tier],
                extra=alignment_inputs(model.input_shape, np.random.default_rng(27)))


def alignment_inputs(shape, rng, exponents=(24, 28, 30), periods=(2, 3)):
    """Images of tiny values (2^-k, random signs) with values of magnitude 1..2 on a lattice of
    every `period`-th row and column: each conv window holds a large product and tiny ones, so
    most split additions align their operand by about k bits (__addsf3x's byte and bit steps,
    its slowest same-sign additions)."""
    rows = []
    for k in exponents:
        for period in periods:
            x = rng.choice([-1.0, 1.0], shape) * rng.uniform(1.0, 2.0, shape)
            big = np.zeros(shape, bool)
            big[::period, ::period] = True
            rows.append(np.where(big, x, x * 2.0 ** -k).ravel())
    return np.asarray(rows, np.float32)


JOIN_DRIVER = """#include "{name}.c"
void jn_run(const float in[2], float out[1]);
void jn_run(const float in[2], float out[1]) {{ out[0] = nn_join(in[0], in[1]); }}
"""


def join_cases(rng):
    """(pos, neg) pairs the split sums can end with: zero, inf, NaN or >= 2^-102 with clear sign
    bits (NaN of either sign), exponents equal, 1 apart (every rounding case of a 25-bit
    difference, ties included) and 2..40 apart, near-equal magnitudes (massive cancellation)."""
    def floats(e, m):
        return ((np.asarray(e, np.uint32) << 23) | np.asarray(m, np.uint32)).view(np.float32)
    n = 400
    e = rng.integers(25, 255, n)
    m = rng.integers(0, 1 << 23, (2, n), dtype=np.uint32)
    rows = [np.stack([floats(e, m[0]), floats(e, m[1])], 1)]                        # same exponent
    e1 = rng.integers(25, 254, n)
    rows.append(np.stack([floats(e1 + 1, m[0]), floats(e1, m[1])], 1))             # 1 apart, both ways
    rows.append(np.stack([floats(e1, m[1]), floats(e1 + 1, m[0])], 1))
    near = m[0] ^ rng.integers(0, 8, n, dtype=np.uint32)                            # cancellation
    rows.append(np.stack([floats(e, m[0]), floats(e, near)], 1))
    top = floats(e1 + 1, np.zeros(n, np.uint32))                                   # 2^k - just below
    rows.append(np.stack([top, floats(e1, (1 << 23) - 1 - rng.integers(0, 4, n, dtype=np.uint32))], 1))
    odd = floats(e1, m[1] | 1)                                                      # ties of the 25-bit difference
    rows.append(np.stack([floats(e1 + 1, m[0]), odd], 1))
    d = rng.integers(2, 41, n)
    eb = np.clip(e - d, 25, 254)
    rows.append(np.stack([floats(e, m[0]), floats(eb, m[1])], 1))
    rows.append(np.stack([floats(eb, m[1]), floats(e, m[0])], 1))
    specials = np.array([0.0, 2.0 ** -102, 1.0, 3.4028235e38, np.inf, np.nan, -np.nan], np.float32)
    rows.append(np.array(np.meshgrid(specials, specials)).reshape(2, -1).T)
    return np.vstack(rows).astype(np.float32)


def test_join_is_subtraction_and_its_fact_holds(tmp_path):
    """nn_join (the CNN shapes' pos - neg on AVR) on the generated code itself (xor as v2: the
    driver includes xor.c and calls its nn_join): its result equals numpy's float32 pos - neg bit
    for bit (NaN: a NaN) on pairs that drive each path (exact integer path at every rounding case,
    __subsf3 at exponent distances 2..40 and on zero, inf and NaN operands); the analyser's bound
    with the no-cancel fact covers simavr on all of them, and without it the bound is larger."""
    from nnbuild.runners import CHECK_MAIN, check_main_defines
    board = pipeline.load_board("avr")
    gen = tmp_path / "gen"
    pipeline.build_check_program(XOR, board, tmp_path, name="xor", shape="v2")
    facts = json.loads((gen / "xor.flowfacts.json").read_text())
    tagged = [v for v in facts["values"] if v["tags"] == ["__addsf3x:no-cancel"]]
    assert len(tagged) == 1 and tagged[0]["layer"] is None
    (gen / "jn.h").write_text("void jn_run(const float in[2], float out[1]);\n")
    (gen / "jn.c").write_text(JOIN_DRIVER.format(name="xor"))
    elf = board.compiler.build_executable(board, [gen / "jn.c", gen / "xor_weights.c", CHECK_MAIN],
                                          tmp_path / "jn.elf", include_dirs=[gen],
                                          defines=[d[2:] for d in check_main_defines("jn.h", "jn_run", 2, 1)])
    bound = wcet.analyze(board, elf, "jn_run", {"loops": [], "layers": [], "values": facts["values"]},
                         tmp_path / "w").cycles
    plain = wcet.analyze(board, elf, "jn_run", {"loops": [], "layers": []}, tmp_path / "w0").cycles
    x = join_cases(np.random.default_rng(31))
    y, cycles = simavr.run_cases(elf, x, 1, entry_symbol="jn_run", mcu=board["mcu"], freq=board["clock_hz"],
                                 harness=simavr.build_harness(tmp_path / "simavr_run"))
    with np.errstate(invalid="ignore", over="ignore"):
        want = (x[:, 0] - x[:, 1]).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(y[:, 0]), nan)
    bad = np.flatnonzero(y[~nan, 0].view(np.uint32) != want[~nan].view(np.uint32))
    assert bad.size == 0, f"nn_join({x[~nan][bad[0]].tolist()}) = {y[~nan][bad[0], 0]!r}, want {want[~nan][bad[0]]!r}"
    worst = int(cycles.max())
    print(f"\n  nn_join: bound {bound} with its value fact ({plain} without), simavr max {worst} over {len(x)} "
          f"pairs, bound/measured {bound / worst:.3f}")
    assert worst <= bound < plain
