"""The scalar host code (storage `const`) of the mlp and v2 shapes: gcc unrolls its loops over a
layer's inputs on x86-64 (NN_UNROLL) and nowhere else, and the unrolled code computes the same bits
as the code built without optimisation (each neuron adds its products in input order).
Instruction counts against ACETONE are bench/mlp_callgrind.py's, lenet5_callgrind.py's and
acasxu_callgrind.py's (no timed tests)."""

import re
import shutil
import subprocess

import numpy as np
import pytest

from nnbuild import codegen, passes
from nnbuild.ir import reference
from nnbuild.ir.graph import Conv2D, Dense, Flatten, Model

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


def generate(model, shape, storage, out):
    model, log = passes.run(model)
    codegen.generate(model, out, shape=shape, storage=storage, passes_log=log)
    return model, (out / f"{model.name}.c").read_text()


@pytest.mark.parametrize("shape,make", [("mlp", mlp), ("v2", mlp), ("v2", cnn)])
def test_unroll_is_written_for_the_scalar_host_storage_only(tmp_path, shape, make):
    _, host = generate(make(), shape, "const", tmp_path / "const")
    assert re.search(r"NN_UNROLL\(\d+\)\n\s*(NN_LOOPBOUND\(\d+\)\n\s*)?for \(", host)
    guard = host[host.index("#define NN_UNROLL_PRAGMA") - 200:host.index("#define NN_UNROLL_PRAGMA")]
    assert "defined(__x86_64__) && defined(__OPTIMIZE__)" in guard and "!defined(__clang__)" in guard
    _, avr = generate(make(), shape, "avr-progmem-far", tmp_path / "avr")
    assert "NN_UNROLL" not in avr


@pytest.mark.e2e
@pytest.mark.parametrize("shape,make", [("mlp", mlp), ("v2", mlp), ("v2", cnn)])
def test_unrolled_host_code_gives_the_bits_of_the_unoptimised_code(tmp_path, shape, make):
    model, _ = generate(make(), shape, "const", tmp_path / "gen")
    gen, name = tmp_path / "gen", model.name
    (tmp_path / "driver.c").write_text(DRIVER.replace("UPPER", name.upper()).replace("NAME", name))
    x = np.random.default_rng(9).uniform(-2, 2, (40,) + tuple(model.input_shape)).astype(np.float32)
    outputs = {}
    for flags in FLAG_SETS:
        exe = tmp_path / re.sub(r"\W+", "_", flags)
        subprocess.run(["gcc", *flags.split(), "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{gen}",
                        str(tmp_path / "driver.c"), str(gen / f"{name}.c"), str(gen / f"{name}_weights.c"),
                        "-o", str(exe), "-lm"], check=True)
        run = subprocess.run([str(exe)], input=x.tobytes(), capture_output=True, check=True)
        outputs[flags] = np.frombuffer(run.stdout, dtype=np.float32).reshape(len(x), -1)
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
