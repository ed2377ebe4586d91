"""ACETONE (acetone-nnet 1.0.post1) as a peer built side by side with nnbuild's code in the benches.

ACETONE needs Keras <= 2.12 (it imports `keras.engine`), hence TensorFlow 2.12, which cannot share
nnbuild's environment (numpy 2, Keras 3). It is run from an interpreter of its own, found in this
order: --acetone-python, $NNBUILD_ACETONE_PYTHON, /tmp/acetone-venv/bin/python. Make one with

    python3 -m venv /tmp/acetone-venv
    /tmp/acetone-venv/bin/pip install "tensorflow==2.12.1" "acetone-nnet==1.0.post1"

Nothing of ACETONE's is kept: the bench hands the layers and weights over (an .npz and a JSON list
of layers), the interpreter rebuilds the same network as a Keras 2 Sequential, ACETONE writes its C
into the bench's temporary directory, and the bench builds `inference.c` and `global_vars.c` with
the same driver and flags as nnbuild's code (one inference per process, stdin to stdout).
"""

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import numpy as np

DEFAULT_PYTHON = "/tmp/acetone-venv/bin/python"
#: every Conv2D implementation acetone-nnet 1.0.post1 registers (its Dense has one, "default")
CONV_VARIANTS = ("6loops", "std_gemm_nn", "std_gemm_nt", "std_gemm_tn", "std_gemm_tt",
                 "indirect_gemm_nn", "indirect_gemm_nt", "indirect_gemm_tn", "indirect_gemm_tt")

#: runs in ACETONE's interpreter: argv = spec.json weights.npz out_base conv_variant...: one
#: directory out_base/<variant> per Conv2D variant (one TensorFlow import for all of them)
GENERATE = r"""
import json, sys, os, contextlib, io
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
from tensorflow import keras
from acetone_nnet import CodeGenerator
spec = json.load(open(sys.argv[1]))
weights = np.load(sys.argv[2])
model = keras.Sequential([keras.Input(shape=tuple(spec["input_shape"]))])
for k, layer in enumerate(spec["layers"]):
    kind = layer["kind"]
    if kind == "dense":
        model.add(keras.layers.Dense(layer["units"], activation=layer["activation"]))
    elif kind == "conv2d":
        model.add(keras.layers.Conv2D(layer["filters"], tuple(layer["kernel_size"]), strides=tuple(layer["strides"]),
                                      padding=layer["padding"], activation=layer["activation"]))
    elif kind == "avgpool2d":
        model.add(keras.layers.AveragePooling2D(tuple(layer["pool_size"]), strides=tuple(layer["strides"])))
    elif kind == "maxpool2d":
        model.add(keras.layers.MaxPooling2D(tuple(layer["pool_size"]), strides=tuple(layer["strides"])))
    elif kind == "flatten":
        model.add(keras.layers.Flatten())
    else:
        raise SystemExit(f"peer_acetone: no Keras layer for {kind}")
    if f"kernel_{k}" in weights.files:
        model.layers[-1].set_weights([weights[f"kernel_{k}"], weights[f"bias_{k}"]])
for variant in sys.argv[4:]:
    with contextlib.redirect_stdout(io.StringIO()):
        gen = CodeGenerator(file=model, function_name="inference", nb_tests=0, verbose=False,
                            versions={"Conv2D": variant})
        gen.generate_c_files(os.path.join(sys.argv[3], variant))
"""

DRIVER = r"""
#include <stdio.h>
#include "inference.h"
int main(void)
{
    static float in[%(inputs)d], out[%(outputs)d];
    if (fread(in, sizeof in, 1, stdin) != 1) return 2;
    inference(out, in);
    fwrite(out, sizeof out, 1, stdout);
    return 0;
}
"""


def interpreter(explicit=None):
    """The Python that has acetone-nnet, or None (the bench then prints recorded figures, labelled)."""
    for candidate in (explicit, os.environ.get("NNBUILD_ACETONE_PYTHON"), DEFAULT_PYTHON):
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", "import acetone_nnet, keras; print(keras.__version__)"],
                                   capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            if probe.returncode == 0:
                return candidate
    return None


def version(python):
    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('acetone-nnet'))"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def spec_of(model):
    """The JSON layer list and the weights (Keras layout) of an nnbuild IR model made of Dense,
    Conv2D, pooling and Flatten layers, the only kinds the benches hand over."""
    layers, weights = [], {}
    for k, layer in enumerate(model.layers):
        if layer.kind == "dense":
            layers.append({"kind": "dense", "units": int(layer.units), "activation": layer.activation})
        elif layer.kind == "conv2d" and not any(layer.padding) and layer.groups == 1 and layer.dilation == (1, 1):
            kh, kw, _, filters = layer.kernel.shape
            layers.append({"kind": "conv2d", "filters": int(filters), "kernel_size": [int(kh), int(kw)],
                           "strides": [int(s) for s in layer.strides], "padding": "valid",
                           "activation": layer.activation})
        elif layer.kind == "pool2d" and not any(layer.padding) and layer.activation == "linear":
            layers.append({"kind": f"{layer.mode}pool2d", "pool_size": [int(p) for p in layer.pool],
                           "strides": [int(s) for s in layer.strides]})
        elif layer.kind == "flatten":
            layers.append({"kind": "flatten"})
        else:
            raise ValueError(f"peer_acetone: layer {layer.name} ({layer.kind}) is not handed to ACETONE")
        if layer.kind in ("dense", "conv2d"):
            weights[f"kernel_{k}"] = np.asarray(layer.kernel, np.float32)
            weights[f"bias_{k}"] = np.asarray(layer.bias, np.float32)
    return {"input_shape": [int(d) for d in model.input_shape], "layers": layers}, weights


def variants_of(model):
    """ACETONE's code variants for `model`: every Conv2D implementation if it has a Conv2D, else
    its one Dense implementation (named "default")."""
    return CONV_VARIANTS if any(l.kind == "conv2d" for l in model.layers) else ("default",)


def generate(python, model, out_base):
    """ACETONE's C for `model`, one directory out_base/<variant> per variant: {variant: directory}."""
    out_base = Path(out_base)
    out_base.mkdir(parents=True)
    spec, weights = spec_of(model)
    (out_base / "spec.json").write_text(json.dumps(spec))
    np.savez(out_base / "weights.npz", **weights)
    (out_base / "generate.py").write_text(GENERATE)
    variants = variants_of(model)
    run = subprocess.run([python, str(out_base / "generate.py"), str(out_base / "spec.json"),
                          str(out_base / "weights.npz"), str(out_base), *variants],
                         capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if run.returncode != 0:
        raise RuntimeError(f"ACETONE generation failed: {run.stderr.strip().splitlines()[-1:]}")
    return {variant: out_base / variant for variant in variants}


def build(gen, flags, inputs, outputs, exe):
    """Build ACETONE's inference.c + global_vars.c with the bench's one-inference driver."""
    gen = Path(gen)
    (gen / "bench_driver.c").write_text(DRIVER % {"inputs": inputs, "outputs": outputs})
    subprocess.run(["gcc", *flags.split(), "-g", f"-I{gen}", str(gen / "bench_driver.c"), str(gen / "inference.c"),
                    str(gen / "global_vars.c"), "-o", str(exe), "-lm"], check=True, capture_output=True)
    return exe


def ir_of_one_inference(exe, x, workdir):
    """(callgrind Ir of inference() and its callees for one input, the outputs)."""
    out = Path(workdir) / "callgrind_acetone.out"
    run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=inference",
                          str(exe)], input=np.asarray(x, np.float32).tobytes(), capture_output=True, check=True)
    total = re.search(r"^(?:summary|totals):\s+(\d+)", out.read_text(), re.M)
    return int(total.group(1)), np.frombuffer(run.stdout, dtype=np.float32)


def measure(exe, x, expected, workdir):
    """(Ir of each input's inference, max |outputs - expected|), as the benches measure nnbuild's code."""
    runs = [ir_of_one_inference(exe, row, workdir) for row in x]
    outputs = np.array([y for _, y in runs])
    return [ir for ir, _ in runs], float(np.max(np.abs(outputs - np.asarray(expected).reshape(outputs.shape))))


def measure_all(python, model, x, expected, flag_sets, workdir):
    """ACETONE's figures for `model`: {flags: {variant: (min Ir over x, all Ir, max |C - expected|)}},
    every variant generated once and built at each flag set with the bench's driver. A variant that
    does not build or crashes is printed and left out (acetone-nnet 1.0.post1's std_gemm_nt
    segfaults on LeNet-5)."""
    workdir = Path(workdir)
    dirs = generate(python, model, workdir / f"acetone_{model.name}")
    n_in = int(np.prod(model.input_shape))
    n_out = int(np.asarray(expected).reshape(len(x), -1).shape[1])
    figures = {}
    for flags in flag_sets:
        figures[flags] = {}
        tag = re.sub(r"\W+", "_", flags)
        for variant, gen in dirs.items():
            try:
                exe = build(gen, flags, n_in, n_out, workdir / f"acetone_{model.name}_{variant}_{tag}")
            except subprocess.CalledProcessError as exc:
                print(f"  ACETONE {variant} at {flags}: does not build ({fate(exc)}), left out")
                continue
            try:
                counts, err = measure(exe, x, expected, workdir)
            except subprocess.CalledProcessError as exc:
                print(f"  ACETONE {variant} at {flags}: {fate(exc)}, left out")
                continue
            figures[flags][variant] = (min(counts), counts, err)
    return figures


def fate(exc):
    """One line for a failed build or run."""
    if exc.returncode < 0:
        return f"killed by {signal.Signals(-exc.returncode).name}"
    return f"exit {exc.returncode}"


#: a variant whose outputs are further than this from the reference (or NaN) is not a candidate
#: for "best" (acetone-nnet 1.0.post1's *_tn GEMM variants give NaN on LeNet-5)
TOLERANCE = 1e-3


def correct(figure):
    return bool(np.isfinite(figure[2]) and figure[2] <= TOLERANCE)


def best(figures_at_flags):
    """(variant, min Ir, max error) of ACETONE's lowest-Ir variant with correct outputs at one flag set."""
    candidates = {v: f for v, f in figures_at_flags.items() if correct(f)}
    if not candidates:
        raise RuntimeError("no ACETONE variant computed the reference outputs")
    variant = min(candidates, key=lambda v: candidates[v][0])
    return variant, candidates[variant][0], candidates[variant][2]
