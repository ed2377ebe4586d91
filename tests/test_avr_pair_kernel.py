"""The grouped AVR dot kernels (NN_DOT16Q / NN_DOT8Q four neurons per pass, NN_DOT16P / NN_DOT8P two,
offset-unsigned operands): under simavr they give bias + sum(w * x) modulo 2^32 for any int16 inputs
and any int16 / int8 weights (extremes included), with the generator's interleaved offset weights
and folded bias (mlp_fixed.pair_layer); the mlp shape picks them and its WCET bound stays tight."""

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import REPO, needs_avr
from nnbuild import codegen, pipeline
from nnbuild.codegen import mlp_fixed
from nnbuild.ir.graph import Dense, Model
from nnbuild.runners import CHECK_MAIN, check_main_defines, simavr

F1TENTH = REPO / "firmware_examples/f1tenth/architecture.json"


def pair_model(units=6):
    """One tanh layer of an even width (paired) between odd ones (not paired)."""
    rng = np.random.default_rng(3)
    mk = lambda i, o, s: (rng.standard_normal((i, o)) * s).astype(np.float32)  # noqa: E731
    return Model("pk", (9,), [Dense("d1", mk(9, units, 0.5), mk(1, units, 0.1)[0], "tanh"),
                              Dense("d2", mk(units, 3, 0.5), None, "linear")])


def kernel_macros(code):
    """The generated code's `#if defined(__AVR__)` blocks that define the grouped kernels."""
    blocks = re.findall(r"#if defined\(__AVR__\)\n(?:(?!#endif).*\n)*?#endif\n", code)
    names = ("NN_PAIR", "NN_DOT16P", "NN_DOT8P", "NN_DOT16Q", "NN_DOT8Q")
    return "".join(b for b in blocks if any(f"#define {k}" in b for k in names))



def test_the_mlp_shape_groups_even_layers_only(tmp_path):
    codegen.generate(pair_model(), tmp_path, precision="q16-acc32", storage="avr-progmem-near", input_range=(-1, 1))
    code = (tmp_path / "pk.c").read_text()
    # 6 neurons: one pass of four, then a pair
    assert code.count("NN_DOT16Q(acc0, acc1, acc2, acc3, w, xq, 1u, NN_DOT16Q_TAIL1);") == 1
    assert code.count("NN_DOT16P(acc0, acc1, w, xq, 1u, NN_DOT16P_TAIL1);") == 1
    assert "NN_DOT16(acc, w, buf0, 1u, NN_DOT16_TAIL2);" in code  # 6 -> 3: odd, the one-neuron kernel
    facts = json.loads((tmp_path / "pk.flowfacts.json").read_text())["loops"]
    lines = code.split("\n")
    bounds = sorted((lines[f["line"] - 1].strip().split("(")[0], f["max_iterations"]) for f in facts
                    if f.get("counts") == "header")
    assert bounds == [("NN_DOT16", 1), ("NN_DOT16P", 1), ("NN_DOT16Q", 1)]


@pytest.mark.parametrize("units, runs", [(2, [(2, 1)]), (4, [(4, 1)]), (6, [(4, 1), (2, 1)]), (128, [(4, 32)]),
                                         (130, [(4, 32), (2, 1)])])
def test_group_runs_cover_every_neuron_once(units, runs):
    assert mlp_fixed.group_runs(units) == runs
    assert sum(g * n for g, n in runs) == units


def test_group_weights_are_interleaved_per_pass_and_offset():
    """Pass p of a four-neuron run holds, for input i, the four neurons' offset weights side by side."""
    w = np.arange(6 * 3).reshape(6, 3) - 9
    layer = {"c_name": "k", "bias": {}}
    qlayer = SimpleNamespace(weight=SimpleNamespace(bits=16), kernel_q=w, bias_q=np.zeros(6, np.int64), name="k")
    mlp_fixed.pair_layer("pk", qlayer, layer, "avr-progmem-near")
    quad, pair = layer["chunks"]
    assert (quad["group"], quad["start"], quad["rows"], quad["dot"]) == (4, 0, 4, "NN_DOT16Q")
    assert (pair["group"], pair["start"], pair["rows"], pair["dot"]) == (2, 4, 2, "NN_DOT16P")
    values = [int(v) for row in quad["values"] for v in row.split(", ")]
    assert values == [int(w[n, i]) + 32768 for i in range(3) for n in range(4)]


def kernel_program(tmp_path, bits, weights, bias, n):
    """A check program whose pk_infer runs one pass of g = len(weights) `bits`-bit neurons (g = 2:
    NN_DOT16P / NN_DOT8P, 4: NN_DOT16Q / NN_DOT8Q) over n int16 inputs (given as floats, exact) and
    returns the g uint32 accumulators as 2 * g exact 16-bit halves."""
    codegen.generate(pair_model(), tmp_path / "gen", precision="q16-acc32" if bits == 16 else "q8",
                     storage="avr-progmem-near", input_range=(-1, 1))
    macros = kernel_macros((tmp_path / "gen" / "pk.c").read_text())
    qlayer = SimpleNamespace(weight=SimpleNamespace(bits=bits), kernel_q=weights, bias_q=bias, name="k")
    layer = {"c_name": "k", "bias": {}}
    mlp_fixed.pair_layer("pk", qlayer, layer, "avr-progmem-near")
    (chunk,) = layer["chunks"]
    dot, g = chunk["dot"], chunk["group"]
    accs = ", ".join(f"acc{h}" for h in range(g))
    starts = "\n    ".join(f"acc{h} = (uint32_t)b_pass[{h}] - sx;" for h in range(g))
    outs = "\n    ".join(f"out[{2 * h}] = (float)(uint16_t)(acc{h} >> 16);\n    out[{2 * h + 1}] = (float)(uint16_t)acc{h};"
                          for h in range(g))
    src = f"""#include <stdint.h>
#include <avr/io.h>
#include <avr/pgmspace.h>
#include "pk.h"
{macros}
static const uint{bits}_t w_rows[{chunk['size']}] PROGMEM = {{ {", ".join(chunk['values'])} }};
static const int32_t b_pass[{g}] = {{ {", ".join(layer['bias']['values'])} }};

void pk_infer(const float in[{n}], float out[{2 * g}])
{{
    int16_t x[{n}];
    uint32_t sx = 0u, {accs};
    const uint{bits}_t *w = w_rows;
    for (uint8_t i = 0; i < {n}u; ++i) {{  /* stored offset, x + 2^15, as the layer before a grouped one does */
        x[i] = (int16_t)(uint16_t)((uint16_t)(int16_t)in[i] ^ 0x8000u);
        sx += (uint16_t)x[i];
    }}
    sx <<= {layer['sum_shift']};
    {starts}
    {dot}({accs}, w, x, {n // 8}u, {dot}_TAIL{n % 8});
    {outs}
}}
"""
    (tmp_path / "gen" / "kernel.c").write_text(src)
    (tmp_path / "gen" / "pk.h").write_text(f"void pk_infer(const float in[{n}], float out[{2 * g}]);\n")
    board = pipeline.load_board("avr")
    defines = [d[2:] for d in check_main_defines("pk.h", "pk_infer", n, 2 * g)]
    elf = board.compiler.build_executable(board, [tmp_path / "gen" / "kernel.c", CHECK_MAIN], tmp_path / "k.elf",
                                          include_dirs=[tmp_path / "gen"], defines=defines)
    return elf, board


@needs_avr
@pytest.mark.e2e  # avr-gcc + simavr
@pytest.mark.parametrize("bits, n, g", [(16, 15, 2), (16, 130, 2), (8, 15, 2), (8, 130, 2),
                                        (16, 15, 4), (16, 130, 4), (8, 15, 4), (8, 130, 4)])
def test_grouped_kernel_is_exact_modulo_2_32_on_random_and_extreme_operands(tmp_path, bits, n, g):
    rng = np.random.default_rng(bits * 1000 + n + g)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    weights = rng.integers(lo, hi + 1, size=(g, n))
    weights[0, :4], weights[1, :4] = [lo, hi, 0, -1], [hi, lo, lo, hi]
    weights[:, -1] = lo
    if g == 4:
        weights[2, :4], weights[3, :4] = [hi, hi, hi, hi], [lo, lo, 0, 1]
    bias = np.array([-(1 << 31), (1 << 31) - 1, 0, -1][:g])
    elf, board = kernel_program(tmp_path, bits, weights, bias, n)
    x = np.vstack([np.full(n, -32768), np.full(n, 32767), np.zeros(n), np.full(n, -1),
                   np.resize([-32768, 32767], n), rng.choice([-32768, -1, 0, 1, 32767], size=(20, n)),
                   rng.integers(-32768, 32768, size=(40, n))])
    harness = simavr.build_harness(tmp_path / "harness")
    y, _ = simavr.run_cases(elf, x.astype(np.float32), 2 * g, entry_symbol="pk_infer", mcu=board["mcu"],
                            freq=board["clock_hz"], harness=harness)
    got = (y.astype(np.int64)[:, 0::2] << 16) | y.astype(np.int64)[:, 1::2]
    want = (bias[None, :] + x.astype(np.int64) @ weights.T) % (1 << 32)
    assert np.array_equal(got, want)


@needs_avr
@pytest.mark.e2e
@pytest.mark.parametrize("precision", ["q16-acc32", "q8"])
def test_f1tenth_groups_are_bit_exact_and_the_bound_stays_within_1_percent(tmp_path, precision):
    from nnbuild import wcet
    from nnbuild.numerics import bitexact, plan as quantize
    from nnbuild.checks.inputs import check_inputs
    model = pipeline.load_model(F1TENTH, "f1tenth")[0]
    board = pipeline.load_board("avr")
    elf, harness = pipeline.build_check_program(model, board, tmp_path, precision=precision, input_range=(-1.0, 1.0))
    code = (tmp_path / "gen" / "f1tenth.c").read_text()
    # dense_1 and dense_2 four neurons a pass (q16's dense_2 in two 32 KB chunks), dense_3 (1 neuron) not
    assert code.count("NN_DOT16Q(acc0") + code.count("NN_DOT8Q(acc0") == (3 if precision == "q16-acc32" else 2)
    assert "NN_DOT16P(acc0" not in code and "NN_DOT8P(acc0" not in code
    x = np.vstack([check_inputs(model.input_size, 8, 11, (-1, 1)),
                   np.array([[1.0] * 61, [-1.0] * 61, [1.0, -1.0] * 30 + [1.0]], np.float32)])
    y, cycles = simavr.run_cases(elf, x, 1, entry_symbol="f1tenth_infer", mcu=board["mcu"], freq=board["clock_hz"],
                                 harness=harness)
    emulated = bitexact.run(quantize.quantize(model, precision, (-1, 1)), x)
    assert np.array_equal(y.view(np.uint32), emulated.view(np.uint32))
    facts = json.loads((tmp_path / "gen" / "f1tenth.flowfacts.json").read_text())
    bound = wcet.analyze(board, elf, "f1tenth_infer", facts, tmp_path).cycles
    print(f"\nf1tenth {precision}: WCET bound {bound:,}, simavr worst {int(cycles.max()):,}, "
          f"bound/measured {bound / cycles.max():.4f}, {cycles.max() / 24320:.2f} cycles per MAC")
    assert cycles.max() <= bound <= 1.01 * cycles.max()


@needs_avr
@pytest.mark.e2e
def test_avr_tanh_assembly_equals_the_model_on_every_kind_of_pre_activation(tmp_path):
    """nn_tanh_q14's AVR assembly (16-bit table, near flash) == bitexact.tanh_q on table points, their
    neighbours, every fraction near them, both signs, zero, the saturation edge 8 * 2^16 and beyond."""
    from nnbuild.numerics import bitexact
    codegen.generate(pair_model(), tmp_path / "gen", precision="q16-acc32", storage="avr-progmem-near",
                     input_range=(-1, 1))
    code = (tmp_path / "gen" / "pk.c").read_text()
    assert "static NN_NOINLINE int32_t nn_tanh_q14(int32_t z)" in code and "__asm__(\"mov   %[s], %D[z]" in code
    n = 32
    (tmp_path / "gen" / "tt.c").write_text(f"""#include "pk.c"
void tt_infer(const float in[{n}], float out[{n}])
{{
    for (uint8_t i = 0; i < {n}u; ++i) {{
        out[i] = (float)nn_tanh_q14((int32_t)in[i]);
    }}
}}
""")
    (tmp_path / "gen" / "tt.h").write_text(f"void tt_infer(const float in[{n}], float out[{n}]);\n")
    board = pipeline.load_board("avr")
    defines = [d[2:] for d in check_main_defines("tt.h", "tt_infer", n, n)]
    elf = board.compiler.build_executable(board, [tmp_path / "gen" / "tt.c", tmp_path / "gen" / "pk_weights.c",
                                                  CHECK_MAIN], tmp_path / "tt.elf", include_dirs=[tmp_path / "gen"],
                                          defines=defines)
    rng = np.random.default_rng(5)
    points = np.arange(0, 513) << 10
    z = np.concatenate([points, points + 1, points - 1, points + 511, points + 512, points + 1023,
                        [0, 1, -1, (8 << 16) - 1, 8 << 16, (8 << 16) + 1, 1 << 20, 1 << 24, 1 << 29, (1 << 30)],
                        rng.integers(-(9 << 16), 9 << 16, size=1000)])
    z = np.concatenate([z, -z])
    z = np.resize(z, -(-len(z) // n) * n).reshape(-1, n)
    y, _ = simavr.run_cases(elf, z.astype(np.float32), n, entry_symbol="tt_infer", mcu=board["mcu"],
                            freq=board["clock_hz"], harness=simavr.build_harness(tmp_path / "harness"))
    assert np.array_equal(y.astype(np.int64), bitexact.tanh_q(z.astype(np.int64), 14))
