"""The v1 shape (generic kernels behind a table of layer structs) on the IR's N-d operations: every
case of test_shape_v2_ops either matches nnbuild.ir.reference (compiled with the strict flags) or is
refused with one NNBuildError line naming the layer; never a layer silently dropped."""

import shutil
import subprocess

import numpy as np
import pytest

from conftest import needs_avr
from nnbuild import codegen
from nnbuild.codegen import cnn, v1
from nnbuild.errors import NNBuildError
from nnbuild.ir import graph as g
from test_shape_v2_ops import CASES, avr_runs_within_the_bound
from test_shape_v3_ops import QUICK_CASES, WARNINGS, check, check_program, in_one_program

#: the cases v1 compiles (the others must be refused naming their layer)
SUPPORTED = ("transpose", "transpose_inner", "pad_constant", "pad_edge", "pad_reflect", "pad_wrap",
             "slice_negative", "gather_vector", "gather_scalar", "gather_elements", "tile", "resize_nearest",
             "resize_linear", "resize_cubic", "unary_chain", "broadcast_constant", "broadcast_rank_up",
             "broadcast_tensors", "reduce", "reduce_prod_min", "softmax_middle", "lrn", "conv_groups",
             "conv_depthwise")
REFUSED = tuple(c for c in CASES if c not in SUPPORTED)


#: the quick supported cases' float32 program (test_shape_v3_ops.one_program), built at the first
_QUICK_PROGRAM = {}


def generate(folder, m, precision):
    out = folder / f"{m.name}_{precision}"
    codegen.generate(m, out, shape="v1", precision=precision, storage="const", passes_log=[])
    return out


def build(tmp_path, m, precision="float32"):
    """(generated folder, executable) of `m`: a quick supported case in float32 runs in the module's
    one program of those cases, any other in a check program of its own (a refused case raises
    at generation)."""
    if precision == "float32" and m.name in QUICK_CASES and m.name in SUPPORTED and CASES.get(m.name) is m:
        quick = [CASES[c] for c in sorted(QUICK_CASES) if c in SUPPORTED]
        return in_one_program(_QUICK_PROGRAM, tmp_path / "quick_cases", quick, m,
                              lambda folder, q: generate(folder, q, precision), ["-O2", *WARNINGS])
    out = generate(tmp_path, m, precision)
    return out, check_program(out, m, ["-O2", *WARNINGS])


@pytest.mark.parametrize("precision", ["float32", pytest.param("float64", marks=pytest.mark.e2e)])
@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c in QUICK_CASES or c in REFUSED else [pytest.mark.e2e])
                                  for c in CASES])   # the refused cases and one per family in the quick tier
def test_v1_matches_the_reference_or_refuses_naming_the_layer(tmp_path, case, precision):
    m = CASES[case]
    g.validate(m)
    if case in REFUSED:
        with pytest.raises(NNBuildError) as info:
            build(tmp_path, m, precision)
        text = str(info.value)
        assert "\n" not in text and any(f"'{layer.name}'" in text for layer in m.layers), text
        return
    out, exe = build(tmp_path, m, precision)
    check(exe, m, precision)
    code = (out / f"{m.name}.c").read_text()
    assert "malloc" not in code and "while" not in code
    assert f"(shape v1, {precision})" in code
    # every computing layer has at least one table entry (none dropped)
    for layer in m.layers:
        assert f"'{layer.name}'" in code, (case, layer.name)


@pytest.mark.e2e  # cppcheck (the quick tier compiles and runs each case above)
@pytest.mark.skipif(not shutil.which("cppcheck"), reason="cppcheck not installed")
@pytest.mark.parametrize("case", SUPPORTED)
def test_v1_code_passes_cppcheck(tmp_path, case):
    from test_c_cppcheck import CPPCHECK
    m = CASES[case]
    out = tmp_path / "gen"
    codegen.generate(m, out, shape="v1", precision="float32", storage="const", passes_log=[])
    run = subprocess.run(CPPCHECK + [str(out / f"{m.name}.c")], capture_output=True, text=True)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr


def test_unknown_kind_is_refused_naming_the_layer():
    op = {"kind": "mystery", "name": "odd", "source_type": "Odd", "activation": "linear", "src": ["in"],
          "dst": "out", "softmax": None, "c_name": "odd"}
    with pytest.raises(NNBuildError, match="odd"):
        v1.entries_of(op, {})


def test_rank_above_four_is_refused_in_one_line(tmp_path):
    m = g.Model("rank5", (2, 3, 2, 3, 2), [g.Transpose("t", (4, 3, 2, 1, 0))])
    with pytest.raises(NNBuildError) as info:
        codegen.generate(m, tmp_path / "out", shape="v1", precision="float32", storage="const", passes_log=[])
    assert "\n" not in str(info.value) and "'t'" in str(info.value)


def test_grouped_conv_entries_carry_the_group_fields():
    lowered = cnn.lower(CASES["conv_groups"], "const")
    index_of = {a["symbol"]: i for i, a in enumerate(lowered["arrays"])}
    (e,) = v1.entries_of(lowered["ops"][0], index_of)
    assert (e["cg"], e["og"], e["cb"], e["gi"]) == (2, 3, 0, 0)


@pytest.mark.e2e
@needs_avr
def test_avr_runs_the_new_operations_within_the_wcet_bound(tmp_path):
    """v2's AVR DAG of new operations plus an elu unary (LRN stays out: avr-libc's pow has a loop the
    builtin WCET analysis cannot bound), in shape v1 on the ATmega1284: simavr equals the reference
    and the WCET bound (indirect calls resolved by the flow facts) covers every measured run."""
    def f32(*shape):
        return np.random.default_rng(8).normal(size=shape).astype(np.float32)

    layers = [g.Conv2D("dw", f32(3, 3, 1, 4), f32(4), (1, 1), (1, 1), (1, 1, 1, 1), "relu", groups=4),
              g.Pad("pad", ((1, 0), (0, 1), (0, 0)), "reflect"),
              g.Transpose("chw", (2, 0, 1)),
              g.Resize("up", (4, 7, 5), (1, 1.4, 1.0), "linear"),
              g.Unary("el", "elu", (0.7,)),
              g.Reduce("mean", "mean", (1, 2), False),
              g.Elementwise("scale", "mul", ((1, f32(4)),), "linear"),
              g.Softmax("soft", 0)]
    avr_runs_within_the_bound(tmp_path, g.Model("avr_v1_ops", (5, 4, 4), layers), "v1")


def test_kernel_loop_totals_sum_each_entry_over_its_loop_nest():
    """total_iterations = sum over the kernel's table entries of the product of the nest's trip counts
    (field - start); a nest with a loop of another form, or another function, gets none."""
    code = "\n".join([
        "static void nn_dense(const struct nn_layer *L)",           # 1
        "    for (uint_fast16_t p = 0; p < L->outer; ++p) {",        # 2
        "        for (uint_fast16_t k = 1; k < L->k; ++k) {",        # 3
        "        }",                                                 # 4
        "        for (int i = 0; i < 4; i++) {",                     # 5
        "        }",                                                 # 6
        "    }",                                                     # 7
        "    for (uint_fast16_t i = 0; i < 3u; ++i) {",              # 8
        "    }"])                                                    # 9
    facts = {"loops": [{"function": "nn_dense", "line": 2, "last_line": 7, "max_iterations": 3},
                       {"function": "nn_dense", "line": 3, "last_line": 4, "max_iterations": 7},
                       {"function": "nn_dense", "line": 5, "last_line": 6, "max_iterations": 4},
                       {"function": "net_infer", "line": 8, "last_line": 9, "max_iterations": 3}]}
    entries = [{"kernel": "dense", "outer": 2, "k": 8}, {"kernel": "dense", "outer": 3, "k": 5},
               {"kernel": "pool2d", "outer": 9, "k": 9}]
    v1.add_loop_totals(code, facts, entries)
    assert [l.get("total_iterations") for l in facts["loops"]] == [2 + 3, 2 * 7 + 3 * 4, None, None]
