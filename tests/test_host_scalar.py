"""The scalar host code (storages `const` and `const-host`) of the mlp and v2 shapes: gcc unrolls its
loops over a layer's inputs on x86-64 (NN_UNROLL) and nowhere else, and the unrolled code computes
the same bits as the code built without optimisation (each neuron adds its products in input
order). const-host interleaves the mlp shape's blocked weights and applies the activation in a pass
of its own, which gcc -O3 vectorises: the same bits as const, whose C the MCU targets keep.
Instruction counts against ACETONE are bench/mlp_callgrind.py's, lenet5_callgrind.py's and
acasxu_callgrind.py's (no timed tests)."""

import re
import shutil
import subprocess

import dataclasses
import json

import numpy as np
import pytest

from nnbuild import codegen, passes
from nnbuild.ir import reference
from nnbuild.ir.graph import Activation, Conv2D, Dense, Flatten, Model

DRIVER = r"""
#include <stdio.h>
#include "NAME.h"
int main(void)
{
    static float in[UPPER_INPUTS], out[UPPER_OUTPUTS];
    while (fread(in, sizeof in, 1, stdin) == 1) {
        NAME_infer(in, out);
        fwrite(out, sizeof out, 1, stdout);
    }
    return 0;
}
"""
FLAG_SETS = ("-O0", "-O2 -fno-tree-vectorize", "-O3")


def mlp(name="hsmlp", sizes=(13, 27, 25, 3), seed=3):
    """Odd input counts (13, 27, 25) so the unrolled loops have remainders; 27 and 25 neurons so the
    blocks of 12 have a rest."""
    rng = np.random.default_rng(seed)
    layers = [Dense(name=f"d{k}", kernel=rng.standard_normal((a, b)).astype(np.float32),
                    bias=rng.standard_normal(b).astype(np.float32), activation="tanh" if k % 2 else "relu")
              for k, (a, b) in enumerate(zip(sizes, sizes[1:]))]
    return Model(name=name, input_shape=(sizes[0],), layers=layers, meta={"format": "test"})


def cnn(name="hscnn", seed=4):
    rng = np.random.default_rng(seed)
    return Model(name=name, input_shape=(7, 6, 3), layers=[
        Conv2D(name="c", kernel=rng.standard_normal((3, 3, 3, 14)).astype(np.float32),
               bias=rng.standard_normal(14).astype(np.float32), activation="relu"),
        Flatten(name="f"),
        Dense(name="d", kernel=rng.standard_normal((5 * 4 * 14, 5)).astype(np.float32),
              bias=rng.standard_normal(5).astype(np.float32))], meta={"format": "test"})


def outputs_by_flags(gen, sources, x):
    """{flags: the program's stdout on x's bytes} for each of FLAG_SETS: `sources` (the driver, the
    generated .c files) compiled with gcc at those flags, -I`gen`, warnings as errors."""
    outputs = {}
    for flags in FLAG_SETS:
        exe = gen / re.sub(r"\W+", "_", flags)
        subprocess.run(["gcc", *flags.split(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{gen}",
                        *map(str, sources), "-o", str(exe), "-lm"], check=True)
        outputs[flags] = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True).stdout
    return outputs


def generate(model, shape, storage, out):
    model, log = passes.run(model)
    codegen.generate(model, out, shape=shape, storage=storage, passes_log=log)
    return model, (out / f"{model.name}.c").read_text()


@pytest.mark.parametrize("shape,make,storage", [("mlp", mlp, "const"), ("mlp", mlp, "const-host"), ("v2", mlp, "const"),
                                                ("v2", cnn, "const")])
def test_unroll_is_written_for_the_scalar_host_storage_only(tmp_path, shape, make, storage):
    _, host = generate(make(), shape, storage, tmp_path / "const")
    assert re.search(r"NN_UNROLL\(\d+\)\n\s*(NN_LOOPBOUND\(\d+\)\n\s*)?for \(", host)
    guard = host[host.index("#define NN_UNROLL_PRAGMA") - 200:host.index("#define NN_UNROLL_PRAGMA")]
    assert "defined(__x86_64__) && defined(__OPTIMIZE__)" in guard and "!defined(__clang__)" in guard
    _, avr = generate(make(), shape, "avr-progmem-far", tmp_path / "avr")
    assert "NN_UNROLL" not in avr


@pytest.mark.e2e
@pytest.mark.parametrize("shape,make,storage", [("mlp", mlp, "const"), ("mlp", mlp, "const-host"), ("v2", mlp, "const"),
                                                ("v2", cnn, "const"), ("v2", cnn, "const-host")])
def test_unrolled_host_code_gives_the_bits_of_the_unoptimised_code(tmp_path, shape, make, storage):
    model, _ = generate(make(), shape, storage, tmp_path / "gen")
    gen, name = tmp_path / "gen", model.name
    (tmp_path / "driver.c").write_text(DRIVER.replace("UPPER", name.upper()).replace("NAME", name))
    x = np.random.default_rng(9).uniform(-2, 2, (40,) + tuple(model.input_shape)).astype(np.float32)
    outputs = {flags: np.frombuffer(out, dtype=np.float32).reshape(len(x), -1) for flags, out in
               outputs_by_flags(gen, [tmp_path / "driver.c", gen / f"{name}.c", gen / f"{name}_weights.c"], x).items()}
    for flags in FLAG_SETS[1:]:
        assert outputs[flags].tobytes() == outputs["-O0"].tobytes(), flags
    expected = reference.run(model, x.astype(np.float64)).reshape(len(x), -1)
    assert np.max(np.abs(outputs["-O0"] - expected)) < 1e-4 * max(1.0, float(np.max(np.abs(expected))))


@pytest.mark.e2e
def test_the_pragma_reaches_host_gcc_only(tmp_path):
    """gcc -O2 on x86-64 sees `#pragma GCC unroll`; -O0 and arm-none-eabi-gcc (the MCU targets'
    code, whose loops the WCET analysis maps as written) see nothing."""
    model, _ = generate(mlp(), "mlp", "const", tmp_path / "gen")
    source = tmp_path / "gen" / f"{model.name}.c"

    def preprocessed(cc, *flags):
        return subprocess.run([cc, *flags, "-std=c99", "-E", str(source)], capture_output=True, text=True,
                              check=True).stdout

    assert "#pragma GCC unroll 8" in preprocessed("gcc", "-O2")
    assert "unroll" not in preprocessed("gcc", "-O0")
    if shutil.which("arm-none-eabi-gcc"):
        assert "unroll" not in preprocessed("arm-none-eabi-gcc", "-O2", "-mcpu=cortex-m4")


def every_activation(name="hsact", seed=5, second="tanh"):
    """relu, tanh (or `second`), sigmoid and linear Dense layers, a sigmoid layer and a softmax; 27
    and 25 neurons (balanced blocks: 3 x 9; 9, 9 and a rest of 7), a 1-neuron layer."""
    rng = np.random.default_rng(seed)

    def dense(k, a, b, act, bias=True):
        return Dense(f"d{k}", rng.standard_normal((a, b)).astype(np.float32),
                     rng.standard_normal(b).astype(np.float32) if bias else None, act)
    return Model(name, (11,), [dense(0, 11, 27, "relu"), dense(1, 27, 25, second, bias=False),
                               dense(2, 25, 13, "sigmoid"), dense(3, 13, 1, "relu"), Activation("s", "sigmoid"),
                               dense(4, 1, 6, "softmax")], meta={"format": "test"})


def weight_literals(text, symbol):
    body = text[text.index(symbol):]
    body = re.sub(r"/\*.*?\*/", "", body[body.index("{") + 1:body.index("};")], flags=re.S)
    return np.array([float(v.strip().rstrip("f")) for v in body.replace("\n", " ").split(",")], np.float32)


def test_const_host_interleaves_the_blocks_and_applies_the_activation_after_them(tmp_path):
    """const-host: per block, the weights of one input side by side (block by block, the last one
    smaller); relu, tanh and sigmoid in a loop of their own with its flow fact; every loop of the
    file has one; generation is byte-reproducible. const keeps rows in order and the activation at
    the store (the MCU targets' C)."""
    model, host = generate(every_activation(), "mlp", "const-host", tmp_path / "host")
    kernel = np.asarray(model.layers[0].kernel, np.float32)       # 11 x 27: blocks of 9
    expected = np.concatenate([kernel[:, b:b + 9].ravel() for b in range(0, 27, 9)])
    weights = (tmp_path / "host" / "hsact_weights.c").read_text()
    assert np.array_equal(weight_literals(weights, "hsact_d0_w0[297]"), expected)
    kernel = np.asarray(model.layers[1].kernel, np.float32)       # 27 x 25: blocks of 9, 9 and 7
    expected = np.concatenate([kernel[:, b:b + 9].ravel() for b in range(0, 25, 9)])
    assert np.array_equal(weight_literals(weights, "hsact_d1_w0[675]"), expected)
    assert "w += 9u;" in host and "w += 7u;" in host and "acc8 += w[8u] * xi;" in host
    for act in ("relu", "tanh", "sigmoid"):
        assert re.search(rf"/\* activation {act} of the \d+ sums, a pass of its own", host), act
    assert "buf0[k] = (buf0[k] > 0.0f ? buf0[k] : 0.0f) /* relu */;" in host
    lines = host.splitlines()
    facts = json.loads((tmp_path / "host" / "hsact.flowfacts.json").read_text())
    assert sorted(f["line"] for f in facts["loops"]) == [i + 1 for i, l in enumerate(lines) if l.strip().startswith("for (")]
    _, again = generate(every_activation(), "mlp", "const-host", tmp_path / "again")
    assert again == host and (tmp_path / "again" / "hsact_weights.c").read_text() == weights
    _, mcu = generate(every_activation(), "mlp", "const", tmp_path / "mcu")
    assert "pass of its own" not in mcu and "interleaved" not in mcu and "acc1 += w[11u] * xi;" in mcu


def test_v2_const_host_interleaves_dense_and_conv_blocks(tmp_path):
    """v2 with const-host: a Dense's and a Conv2D's blocks interleaved (the weights file says so),
    their relu in a pass of its own with a flow fact, the convolution window's loops unrolled whole
    on x86-64 (NN_UNROLL of its rows and of a row's values); const keeps rows in order."""
    base = cnn()
    relu_dense = Model(base.name, base.input_shape, base.layers[:2] + [dataclasses.replace(base.layers[2], activation="relu")],
                       meta=base.meta)
    model, host = generate(relu_dense, "v2", "const-host", tmp_path / "host")
    weights = (tmp_path / "host" / "hscnn_weights.c").read_text()
    assert weights.count("interleaved by blocks of") == 2
    kernel = np.asarray(model.layers[2].kernel, np.float32)      # 280 x 5: one block of 5
    assert np.array_equal(weight_literals(weights, "hscnn_d_w0[1400]"), kernel.ravel())
    rows = np.transpose(np.asarray(model.layers[0].kernel, np.float32), (3, 0, 1, 2)).reshape(14, -1)  # blocks of 7
    assert np.array_equal(weight_literals(weights, "hscnn_c_w0[378]"),
                          np.concatenate([rows[b:b + 7].T.ravel() for b in (0, 7)]))
    assert "w += 5u;" in host and "acc4 += w[4u] * v;" in host and "acc6 += w[6u] * v;" in host
    assert "NN_UNROLL(3)" in host and "NN_UNROLL(9)" in host
    assert "/* activation relu of the 5 sums, a pass of its own" in host
    assert "/* activation relu of the 280 sums, a pass of its own" in host
    lines = host.splitlines()
    facts = json.loads((tmp_path / "host" / "hscnn.flowfacts.json").read_text())
    assert sorted(f["line"] for f in facts["loops"]) == [i + 1 for i, l in enumerate(lines) if l.strip().startswith("for (")]
    _, mcu = generate(cnn(), "v2", "const", tmp_path / "mcu")
    assert "interleaved" not in (tmp_path / "mcu" / "hscnn_weights.c").read_text() and "pass of its own" not in mcu


@pytest.mark.e2e
@pytest.mark.parametrize("shape", ["mlp", "v2"])
def test_const_host_gives_the_bits_of_const_and_is_vectorised_at_O3(tmp_path, shape):
    """const-host == const bit for bit at -O0, -O2 -fno-tree-vectorize and -O3 (overflowing sums,
    subnormal inputs, signed zeros too), float32 and float64, mlp and v2 shapes; at -O3 gcc computes
    const-host's blocks with packed adds (addps: lanes that are neurons; an in-order sum cannot use
    them), which it does not for const. const-host's float32 tanh is its own rational (checked in
    test_host_tanh.py): the float32 model has a sigmoid layer in its place, and the tanh model's
    const-host runs agree at every flag set."""
    x = np.random.default_rng(8).uniform(-3, 3, (48, 11)).astype(np.float32)
    x[:6] *= np.float32(1e30)
    x[6:12] *= np.float32(1e-41)
    x[12], x[13] = 0.0, -0.0
    (tmp_path / "driver.c").write_text(DRIVER.replace("UPPER", "HSACT").replace("NAME", "hsact"))
    cases = [("float32", every_activation(second="sigmoid"), ("const", "const-host")),
             ("float64", every_activation(), ("const", "const-host")),
             ("float32", every_activation(), ("const-host",))]
    for precision, model, storages in cases:
        runs = {}
        for storage in storages:
            gen = tmp_path / f"{precision}-{storage}"
            codegen.generate(passes.run(model)[0], gen, shape=shape, precision=precision, storage=storage)
            sources = [tmp_path / "driver.c", gen / "hsact.c", gen / "hsact_weights.c"]
            runs.update({(storage, flags): out for flags, out in outputs_by_flags(gen, sources, x).items()})
        if len(storages) == 2 and precision == "float32":
            asm = {s: subprocess.run(["gcc", "-O3", "-std=c99", "-S", "-o", "-", str(tmp_path / f"float32-{s}" / "hsact.c")],
                                     capture_output=True, text=True, check=True).stdout for s in ("const", "const-host")}
            assert asm["const-host"].count("addps") > 10 * max(1, asm["const"].count("addps"))
        for key, out in runs.items():
            assert out == runs[storages[0], "-O0"], (precision, storages, key)


def pooled_cnn(name="hspool", first="relu", second="sigmoid", seed=6):
    """A one-channel Conv2D (16 output columns: 8 at a time) under an average pooling, then a
    5-channel Conv2D (6 columns) under a max pooling, a Dense: both convolutions' activations
    move into their poolings under const-host, the first also computes by columns (lanes)."""
    from nnbuild.ir.graph import Pool2D
    rng = np.random.default_rng(seed)
    return Model(name=name, input_shape=(12, 18, 1), layers=[
        Conv2D(name="c1", kernel=rng.standard_normal((3, 3, 1, 5)).astype(np.float32),
               bias=rng.standard_normal(5).astype(np.float32), activation=first),
        Pool2D(name="p1", mode="avg", pool=(2, 2), strides=(2, 2), source_type="AveragePooling2D"),
        Conv2D(name="c2", kernel=rng.standard_normal((3, 3, 5, 4)).astype(np.float32),
               bias=rng.standard_normal(4).astype(np.float32), activation=second),
        Pool2D(name="p2", mode="max", pool=(2, 2), strides=(2, 2)),
        Flatten(name="f"),
        Dense(name="d", kernel=rng.standard_normal((1 * 3 * 4, 3)).astype(np.float32),
              bias=rng.standard_normal(3).astype(np.float32))], meta={"format": "test"})


def test_v2_const_host_pools_apply_the_convolutions_activation(tmp_path):
    """const-host: an unpadded pooling that is a Conv2D's only reader applies its activation as it
    reads the sums (no pass of its own); the one-channel Conv2D computes 8 neighbouring columns of a
    filter at a time, each weight 8 times in its array, its sums stored by rows for its pooling;
    every loop has its flow fact. const (the MCU targets' C) keeps the activation at the store."""
    model, host = generate(pooled_cnn(), "v2", "const-host", tmp_path / "host")
    assert "/* activation relu of 'c1', applied as its sums are read */" in host
    assert "/* activation sigmoid of 'c2', applied as its sums are read */" in host
    assert "float v = nn_relu(xp[ky * 80u + kx]);" in host                  # [y][channel][x] rows of 16
    assert "float acc = nn_sigmoid(xp[0]);" in host and "pass of its own" not in host
    assert "acc7 += w[7u] * xr[kx + 7u];" in host and "yp[o * 16u + 7u] = acc7;" in host
    weights = (tmp_path / "host" / "hspool_weights.c").read_text()
    kernel = np.transpose(np.asarray(model.layers[0].kernel, np.float32), (3, 0, 1, 2)).reshape(5, -1)
    assert np.array_equal(weight_literals(weights, "hspool_c1_w0[360]"), np.repeat(kernel[:, :, None], 8, axis=2).ravel())
    lines = host.splitlines()
    facts = json.loads((tmp_path / "host" / "hspool.flowfacts.json").read_text())
    assert sorted(f["line"] for f in facts["loops"]) == [i + 1 for i, l in enumerate(lines) if l.strip().startswith("for (")]
    _, mcu = generate(pooled_cnn(), "v2", "const", tmp_path / "mcu")
    assert "applied as its sums are read" not in mcu and "stored by rows" not in mcu


@pytest.mark.e2e
def test_v2_const_host_pooled_convolutions_give_the_bits_of_const(tmp_path):
    """The pooled, column-wise const-host C computes const's bits at -O0, -O2 -fno-tree-vectorize
    and -O3 (relu and sigmoid, average and max pooling; subnormal, zero, huge inputs too), and with
    tanh (const-host's own, test_host_tanh.py) the same bits at every flag set."""
    x = np.random.default_rng(7).uniform(-3, 3, (24, 12, 18, 1)).astype(np.float32)
    x[:3] *= np.float32(1e30)
    x[3:6] *= np.float32(1e-41)
    x[6], x[7] = 0.0, -0.0
    (tmp_path / "driver.c").write_text(DRIVER.replace("UPPER", "HSPOOL").replace("NAME", "hspool"))
    cases = [(pooled_cnn(), ("const", "const-host")), (pooled_cnn(first="tanh", second="tanh"), ("const-host",))]
    for model, storages in cases:
        runs = {}
        for storage in storages:
            gen = tmp_path / f"{model.layers[0].activation}-{storage}"
            codegen.generate(passes.run(model)[0], gen, shape="v2", storage=storage)
            sources = [tmp_path / "driver.c", gen / "hspool.c", gen / "hspool_weights.c"]
            runs.update({(storage, flags): out for flags, out in outputs_by_flags(gen, sources, x).items()})
        for key, out in runs.items():
            assert out == runs[storages[0], "-O0"], key
        expected = reference.run(passes.run(model)[0], x[8:].astype(np.float64)).reshape(16, -1)
        got = np.frombuffer(runs[storages[-1], "-O3"], dtype=np.float32).reshape(len(x), -1)[8:]
        assert np.max(np.abs(got - expected)) < 1e-5
