"""The CNN shapes' split float32 sums (v1, v2, v3 on AVR flash; nnbuild.codegen.common.split_accumulation).

On the AVR storages the conv2d and dense sums flush inputs below their layer's threshold and add the
products by sign (pos, neg), as the MLP shape does; elsewhere they stay sequential. These tests run
the generated C on the host (gcc): the split code against the float64 code, NN_EXP against the
exponent field numpy reads, and the predicate that turns the split on for every shape at once.
The WCET side (bounds never beaten under simavr) is test_wcet_avr_adversarial.py's.
"""

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nnbuild import codegen, passes
from nnbuild.codegen import common
from nnbuild.numerics import float_facts

from test_wcet_avr_v1 import small_cnn

needs_gcc = pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")
FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1", "-ffp-contract=off"]
SPLIT_MARKS = ("nn_bits", "NN_EXP(")


def generated(tmp_path, shape, storage, precision="float32"):
    model, log = passes.run(small_cnn(), None)
    out = tmp_path / f"{shape}-{storage}-{precision}"
    files = codegen.generate(model, out, shape=shape, precision=precision, storage=storage, passes_log=log)
    return model, out, files


def host_library(tmp_path, shape, storage, precision="float32"):
    """The model's <name>_infer compiled for the host (the AVR storages' weight readers fall back to
    plain arrays off AVR), as a function of one input row."""
    model, out, files = generated(tmp_path, shape, storage, precision)
    so = out / "lib.so"
    subprocess.run(["gcc", *FLAGS, "-shared", "-fPIC", f"-I{out}", *[str(f) for f in files if f.suffix == ".c"],
                    "-o", str(so), "-lm"], check=True, capture_output=True)
    fn = getattr(ctypes.CDLL(str(so)), f"{model.name}_infer")

    def run(x):
        y = np.zeros(model.output_size, np.float32)
        fn(np.ascontiguousarray(x, np.float32).ctypes.data_as(ctypes.c_void_p), y.ctypes.data_as(ctypes.c_void_p))
        return y.astype(np.float64)
    return model, run


@pytest.mark.e2e
@needs_gcc
def test_split_sums_stay_within_the_float_floor_of_float64(tmp_path):
    """v1, v2 and v3 as written for AVR flash (split sums), compiled for the host, against v2
    float64: the float floor of the sequential sums (1.2e-7 here; the semantic gate's tolerance
    is 1e-5), on random inputs and on inputs with subnormal, tiny and
    huge entries (the flush zeroes what the threshold says)."""
    model, ref = host_library(tmp_path, "v2", "const", "float64")
    rng = np.random.default_rng(3)
    xs = rng.uniform(-1.0, 1.0, (40, model.input_size)).astype(np.float32)
    odd = xs[:8].copy()
    odd[:, ::3] = np.float32(1e-40)
    odd[:, 1::5] = np.float32(-3e-39)
    xs = np.vstack([xs, odd])
    refs = [ref(x) for x in xs]
    for shape in ("v1", "v2", "v3"):
        _, split = host_library(tmp_path, shape, "avr-progmem-far")
        err = max(float(np.max(np.abs(split(x) - r))) for x, r in zip(xs, refs))
        print(f"\n  {shape} split sums: max |float32 - float64| {err:.3g}")
        assert err < 1e-6


def test_only_the_avr_storages_split_and_every_shape_asks_one_predicate(tmp_path, monkeypatch):
    """The float32 code of v1, v2 and v3 splits its sums on the AVR storages only (host and ARM
    storages keep the sequential sums); turning common.split_accumulation on for `const` turns it
    on in every shape, the MLP's included (one place for another soft-float board)."""
    for shape in ("v1", "v2", "v3"):
        for storage, split in (("const", False), ("const-simd", False), ("avr-progmem-far", True),
                               ("avr-progmem-near", True)):
            _, out, _ = generated(tmp_path, shape, storage)
            code = (out / "v1net.c").read_text()
            assert all(m in code for m in SPLIT_MARKS) == split, (shape, storage)
            assert ("NN_EXP(" in code) == split
    monkeypatch.setattr(common, "SPLIT_STORAGES", common.FLASH_STORAGES + ("const",))
    for shape in ("v1", "v2", "v3"):
        _, out, _ = generated(tmp_path / "on", shape, "const")
        assert "NN_EXP(" in (out / "v1net.c").read_text(), shape
    from nnbuild.codegen import mlp
    dense = [l for l in mlp.plan_layers(_mlp_model(), "const") if l["kind"] == "dense"]
    assert all(l["split"] and l["facts"] for l in dense)


def _mlp_model():
    from nnbuild.ir.graph import Dense, Model
    rng = np.random.default_rng(1)
    return Model("m", (3,), [Dense("d", rng.normal(size=(3, 2)).astype(np.float32), np.zeros(2, np.float32), "relu")])


def test_split_lines_carry_the_mlp_value_facts(tmp_path):
    """Each split multiply line carries the MLP's __mulsf3 tags (zero-or-normal weights, inputs
    flushed below 2^(keep_exp - 127)) and each signed addition __addsf3x:same-sign; v2's
    thresholds are constants in <name>_weights.c, v1's a table field, v3's literals."""
    for shape in ("v1", "v2", "v3"):
        _, out, _ = generated(tmp_path, shape, "avr-progmem-far")
        facts = json.loads((out / "v1net.flowfacts.json").read_text())["values"]
        muls = [v for v in facts if v["op"] == "mul" and v["tags"] == list(float_facts.MUL_TAGS)]
        adds = [v for v in facts if v["op"] == "add" and v["tags"] == list(float_facts.ADD_TAGS) and "adds" not in v]
        assert muls and adds, shape
        assert all("flushed" in v["why"] for v in muls)
    weights = (tmp_path / "v2-avr-progmem-far-float32" / "v1net_weights.c").read_text()
    assert "const uint8_t v1net_" in weights and "_keep_exp = " in weights


@needs_gcc
def test_nn_exp_is_the_biased_exponent(tmp_path):
    """NN_EXP (two high bytes, no 32-bit shift loop on AVR) reads the same exponent field as
    float_facts.biased_exponents, for zeros, subnormals, normals, the largest float, inf and NaN
    of both signs."""
    values = np.array([0.0, -0.0, 1e-45, -1e-40, 1.1754942e-38, 1.1754944e-38, -2.0 ** -100, 0.5, 1.0,
                       -1.5, 3.0, 2.0 ** 100, -3.4028235e38, np.inf, -np.inf, np.nan], np.float32)
    src = tmp_path / "e.c"
    src.write_text("#include <stdint.h>\n"
                   "typedef union { float f; uint32_t u; } nn_bits;\n"
                   "#define NN_EXP(u) ((uint8_t)(((uint8_t)((u) >> 24) << 1) | ((uint8_t)((u) >> 16) >> 7)))\n"
                   "void exps(const float *x, uint8_t *e, int n);\n"
                   "void exps(const float *x, uint8_t *e, int n) { for (int i = 0; i < n; ++i) { nn_bits v; "
                   "v.f = x[i]; e[i] = NN_EXP(v.u); } }\n")
    subprocess.run(["gcc", *FLAGS, "-shared", "-fPIC", str(src), "-o", str(tmp_path / "e.so")], check=True)
    template = (Path(codegen.__file__).parent / "templates" / "cnn_common.c.j2").read_text()
    assert "#define NN_EXP(u) ((uint8_t)(((uint8_t)((u) >> 24) << 1) | ((uint8_t)((u) >> 16) >> 7)))" in template
    out = np.zeros(values.size, np.uint8)
    ctypes.CDLL(str(tmp_path / "e.so")).exps(values.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p),
                                             values.size)
    assert out.tolist() == float_facts.biased_exponents(values).tolist()
