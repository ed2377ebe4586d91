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


#: (shape, storage, precision, split storages) -> generated(): the files the tests only read,
#: generated once for the module (the split storages key the monkeypatched generation apart)
_READ_ONLY = {}


def generated(tmp_path, shape, storage, precision="float32", read_only=False):
    """(model, folder, files) of small_cnn generated in `tmp_path`; `read_only`: the module's copy
    (made once, in the first asking test's tmp_path), for tests that read the files and write
    nothing beside them but files of their own names."""
    key = (shape, storage, precision, common.SPLIT_STORAGES)
    if read_only and key in _READ_ONLY:
        return _READ_ONLY[key]
    model, log = passes.run(small_cnn(), None)
    out = tmp_path / f"{shape}-{storage}-{precision}"
    files = codegen.generate(model, out, shape=shape, precision=precision, storage=storage, passes_log=log)
    if read_only:
        _READ_ONLY[key] = model, out, files
    return model, out, files


def host_library(tmp_path, shape, storage, precision="float32"):
    """The model's <name>_infer compiled for the host (the AVR storages' weight readers fall back to
    plain arrays off AVR), as a function of one input row."""
    return host_function(*generated(tmp_path, shape, storage, precision))


def host_function(model, out, files):
    """(model, <name>_infer of the generated `files` in `out` compiled for the host as a function of
    one input row, returning float64)."""
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
            _, out, _ = generated(tmp_path, shape, storage, read_only=True)
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
        _, out, _ = generated(tmp_path, shape, "avr-progmem-far", read_only=True)
        facts = json.loads((out / "v1net.flowfacts.json").read_text())["values"]
        muls = [v for v in facts if v["op"] == "mul" and v["tags"] == list(float_facts.MUL_TAGS)]
        adds = [v for v in facts if v["op"] == "add" and v["tags"] == list(float_facts.ADD_TAGS) and "adds" not in v]
        assert muls and adds, shape
        assert all("flushed" in v["why"] for v in muls)
    weights = (generated(tmp_path, "v2", "avr-progmem-far", read_only=True)[1] / "v1net_weights.c").read_text()
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


def test_join_ends_the_avr_sums_where_its_flush_allows(tmp_path):
    """On AVR flash every shape ends its split sums with nn_join (one no-cancel value fact, on
    nn_join's own __subsf3 line) and flushes with mac_facts(join=True)'s threshold: non-zero
    products >= 2^(JOIN_EXP - 127). A bias below 2^-102, or weights so small that the join's flush
    would exceed 2^-60 (float_facts.JOIN_KEEP_MAX), leaves the plain pos - neg and threshold."""
    for shape in ("v1", "v2", "v3"):
        _, out, _ = generated(tmp_path, shape, "avr-progmem-far", read_only=True)
        code = (out / "v1net.c").read_text()
        assert "nn_join(pos" in code and "pos - neg)" not in code.replace("return pos - neg;", ""), shape
        facts = json.loads((out / "v1net.flowfacts.json").read_text())["values"]
        join = [v for v in facts if v["tags"] == list(float_facts.NO_CANCEL_TAGS)]
        assert len(join) == 1 and join[0]["layer"] is None and "2^-102" in join[0]["why"], shape
    model, _ = passes.run(small_cnn(), None)
    for k, (layer, attr, at, value) in enumerate((("c1", "bias", 0, 3e-32),            # a bias below 2^-102
                                                  ("d1", "kernel", (0, 0), 1e-14))):  # a weight below 2^-42
        source = small_cnn()
        getattr(next(lay for lay in source.layers if lay.name == layer), attr)[at] = np.float32(value)
        tweaked, log = passes.run(source, None)
        out = tmp_path / f"tweak{k}"
        codegen.generate(tweaked, out, shape="v2", precision="float32", storage="avr-progmem-far", passes_log=log)
        code = (out / "v1net.c").read_text()
        assert "nn_join" not in code and "pos - neg" in code
    from nnbuild.codegen import cnn
    lowered = cnn.lower(model, "avr-progmem-far")
    assert common.split_facts(lowered["ops"], "avr-progmem-far", "float")
    dense = next(op for op in lowered["ops"] if op["name"] == "d1")
    assert dense["facts"].keep_exp == float_facts.mac_facts(np.asarray(dense["weights"]).T, join=True).keep_exp
    assert dense["facts"].exp_sum_min == float_facts.BIAS + float_facts.JOIN_EXP
    assert not common.split_facts(cnn.lower(model, "const")["ops"], "const", "float")


JOIN_HOST = """#include "v1net.c"
void join_all(const float *a, const float *b, float *y, int n);
void join_all(const float *a, const float *b, float *y, int n) { for (int i = 0; i < n; ++i) y[i] = nn_join(a[i], b[i]); }
"""


@needs_gcc
def test_join_equals_float_subtraction_on_the_host(tmp_path):
    """nn_join as generated (v2, AVR flash, compiled for the host: IEEE float and int->float
    conversion) against numpy's float32 pos - neg, bit for bit, on 600,000 pairs of the values a
    split sum can end with: zero, inf, NaN or >= 2^-102, exponents equal, 1 apart (every rounding
    case of the 25-bit difference) or further."""
    _, out, files = generated(tmp_path, "v2", "avr-progmem-far", read_only=True)
    (out / "jh.c").write_text(JOIN_HOST)
    so = out / "jh.so"
    subprocess.run(["gcc", *FLAGS, "-Wno-unused-function", "-shared", "-fPIC", f"-I{out}", str(out / "jh.c"),
                    str(out / "v1net_weights.c"), "-o", str(so), "-lm"], check=True, capture_output=True)
    rng = np.random.default_rng(8)
    n = 100_000
    m = rng.integers(0, 1 << 23, (2, n), dtype=np.uint32)
    e = rng.integers(25, 254, n).astype(np.uint32)

    def f(exp, man):
        return ((exp << 23) | man).view(np.float32)
    a = np.concatenate([f(e, m[0]), f(e + 1, m[0]), f(e, m[1]), f(e, m[0]), f(e + 1, np.zeros(n, np.uint32)),
                        f(e, m[0])])
    b = np.concatenate([f(e, m[1]), f(e, m[1]), f(e + 1, m[0]), f(e, m[0] ^ rng.integers(0, 16, n, dtype=np.uint32)),
                        f(e, (1 << 23) - 1 - rng.integers(0, 16, n, dtype=np.uint32)),
                        f(np.clip(e - rng.integers(2, 40, n).astype(np.uint32), 25, 254), m[1])])
    specials = np.array([0.0, 2.0 ** -102, 1.0, 3.4028235e38, np.inf, np.nan], np.float32)
    sa, sb = (v.ravel() for v in np.meshgrid(specials, specials))
    a, b = np.concatenate([a, sa]).astype(np.float32), np.concatenate([b, sb]).astype(np.float32)
    y = np.zeros_like(a)
    ctypes.CDLL(str(so)).join_all(a.ctypes.data_as(ctypes.c_void_p), b.ctypes.data_as(ctypes.c_void_p),
                                  y.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(a.size))
    with np.errstate(invalid="ignore", over="ignore"):
        want = a - b
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(y), nan)
    assert np.array_equal(y[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_conv_call_totals_count_the_taps_nn_conv2d_runs():
    """v1's per-call total_iterations of nn_conv2d's kw and channel loops (v1.add_conv_call_totals)
    equal the body executions of the kernel's loop nest as v1.c.j2 writes it (rows inside the
    input enter the kw loop, taps inside it the channel loop), counted here by running the nest,
    for strides, dilations, paddings and sizes that leave taps outside on every side."""
    from nnbuild.codegen import v1
    rng = np.random.default_rng(4)
    loops = [{"file": "m.c", "line": 10, "why": "v1 largest kw of nn_conv2d"},
             {"file": "m.c", "line": 12, "why": "v1 largest cg of nn_conv2d"},
             {"file": "m.c", "line": 14, "why": "v1 largest ow of nn_conv2d"}]
    for _ in range(200):
        e = {"kernel": "conv2d", "h": int(rng.integers(1, 9)), "w": int(rng.integers(1, 9)), "kh": int(rng.integers(1, 4)),
             "kw": int(rng.integers(1, 4)), "sh": int(rng.integers(1, 3)), "sw": int(rng.integers(1, 3)),
             "dh": int(rng.integers(1, 4)), "dw": int(rng.integers(1, 4)), "pt": int(rng.integers(0, 3)),
             "pl": int(rng.integers(0, 3)), "oh": int(rng.integers(1, 7)), "ow": int(rng.integers(1, 7)),
             "rows": int(rng.integers(1, 4)), "cg": int(rng.integers(1, 5))}
        kw_bodies = cg_bodies = 0
        for oy in range(e["oh"]):
            for ox in range(e["ow"]):
                for o in range(e["rows"]):
                    for ky in range(e["kh"]):
                        iy = oy * e["sh"] + ky * e["dh"] - e["pt"]
                        if 0 <= iy < e["h"]:
                            for kx in range(e["kw"]):
                                kw_bodies += 1
                                ix = ox * e["sw"] + kx * e["dw"] - e["pl"]
                                if 0 <= ix < e["w"]:
                                    cg_bodies += e["cg"]
        calls = [{"target": "nn_conv2d", "loops": [{"file": "m.c", "line": n, "max_iterations": 9} for n in (10, 12, 14)]}]
        got = {l["line"]: l.get("total_iterations") for l in v1.add_conv_call_totals(calls, [e], loops)[0]["loops"]}
        assert got == {10: kw_bodies, 12: cg_bodies, 14: None}, e
