"""Property-based fuzzing of every loader (issue 9): Keras full .h5, the architecture.json +
weights.h5 pair, GEGELATI .dot graphs and their environment JSON files.

Strategies start from valid models and mutate them: config values of wrong types, missing keys,
nulls, huge/zero/negative numbers, deep nesting, wrong layer classes, layer names holding a canary
with every C comment/preprocessor token, weight values (NaN, inf, beyond float32, wrong shapes and
dtypes), and bytes of the files (truncation, flips, overwritten ranges). Every example must end in
one of two ways:

(a) an NNBuildError whose message is one line starting with one of the model's files, with no other
    exception, no warning (warnings are errors here) and no output directory left behind;
(b) generated C. For canary names the C holds no raw canary and no payload directive at a line
    start; for a sample of the generated models the C is compiled with gcc -Werror -pedantic, run
    and compared with the reference (NN: nnbuild.ir.reference, TPG: nnbuild.ir.tpg_reference), and
    a canary model's comment-stripped C is the same program as the one named with c_identifier.

CI runs a bounded, derandomized number of examples per strategy (FUZZ_EXAMPLES); a long random
run: NNBUILD_FUZZ_EXAMPLES=5000 python3 -m pytest -s tests/test_fuzz_loaders.py
"""

import json
import os
import shutil
import subprocess
import tempfile
import warnings
from collections import Counter, defaultdict
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_files as kf
from conftest import have
from test_injection import PAYLOAD, assert_inert, renamed, strip_comments
from tpg_helpers import TEST_ENV, build_replay, replay, small_graph
from nnbuild import codegen, names, pipeline
from nnbuild.errors import NNBuildError
from nnbuild.frontends.keras_h5 import SUPPORTED_LAYERS
from nnbuild.ir import reference, tpg_reference
from nnbuild.runners import CHECK_MAIN, check_main_defines, native

#: every test compiles and runs generated C (gcc) or reads the counts of those that do: the e2e tier
#: (the quick tier does not import this module, nor hypothesis with it: tests/conftest.py)
pytestmark = pytest.mark.e2e

LONG = int(os.environ.get("NNBUILD_FUZZ_EXAMPLES", "0") or 0)
#: examples per strategy: bounded and reproducible in CI, random and as long as asked otherwise
FUZZ_EXAMPLES = LONG or 150
#: generated models compiled, run and compared with the reference, per strategy
COMPILED = max(3, FUZZ_EXAMPLES // 40)
SETTINGS = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=not LONG, database=None,
                    print_blob=True, suppress_health_check=list(HealthCheck))
GCC = ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off", "-O1"]

#: per strategy: examples, refused, generated, compiled, compared, canary
COUNTS = defaultdict(Counter)
#: a layer-name canary: every way out of a C comment or string (see tests/test_injection.py)
CANARY = "n " + PAYLOAD
#: file names cannot hold '/' or NUL; this one holds the rest of the comment/directive tokens
FILE_CANARY = "m *\n#define X 1\n#include <x.h>\\\n??= \"q' \r\u2028 \u00e9 \\"
_DANGEROUS = ("*/", "/*", "//", "\n", "\\", "??/", '"', "\x00", "\r", "\u2028", "#")


# ----------------------------------------------------------------------------- the property


def check(kind, model_file, inputs, out, *, environment=None, canaries=()):
    """Load + generate one example and check its outcome (see the module docstring).
    Returns (model, generated files) or None when it was refused."""
    COUNTS[kind]["examples"] += 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            model, log = pipeline.load_model(model_file, environment=environment)
            files = codegen.generate(model, out, shape="auto", passes_log=log)
        except NNBuildError as exc:
            message = str(exc)
            assert "\n" not in message and "\r" not in message, message
            assert any(message.startswith(names.one_line(f"{p}: ")) for p in inputs), message
            assert not out.exists(), f"{out} left behind by: {message}"
            COUNTS[kind]["refused"] += 1
            return None
    COUNTS[kind]["generated"] += 1
    raw = [n for n in canaries if n and any(t in n for t in _DANGEROUS)]
    if raw:
        COUNTS[kind]["canary"] += 1
        assert_inert([f for f in files if f.suffix in (".c", ".h")], raw)
    return model, files


def sample(kind) -> bool:
    """Whether this generated model is one of the strategy's compiled-and-compared sample."""
    return have("gcc") and COUNTS[kind]["compiled"] < COMPILED


def compile_and_compare(kind, model, files, work):
    """Build the check program with -Werror -pedantic and compare it with the float64 reference
    (when the weights are tame enough for float32 to be compared at all)."""
    COUNTS[kind]["compiled"] += 1
    out = files[0].parent
    exe = work / "check"
    cmd = [*GCC, f"-I{out}", *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size,
                                                  model.output_size),
           *[str(f) for f in files if f.suffix == ".c"], str(CHECK_MAIN), "-o", str(exe), "-lm"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
    assert run.returncode == 0, run.stderr[-3000:]
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, model.input_size)).astype(np.float32)
    y = native.run_cases(exe, x, model.output_size)
    with np.errstate(all="ignore"):
        want = reference.run(model, x.astype(np.float64).reshape((4,) + tuple(model.input_shape))).reshape(4, -1)
    tame = all(np.max(np.abs(a)) < 1e3 for l in model.layers for a in (getattr(l, "kernel", None),
                                                                          getattr(l, "bias", None)) if a is not None)
    if tame and np.all(np.isfinite(want)):
        scale = 1.0 + float(np.max(np.abs(want)))
        assert np.max(np.abs(y - want)) <= 1e-4 * scale, (y, want)
        COUNTS[kind]["compared"] += 1


def same_program_as_plain_names(kind, model, files, work):
    """Comment-stripped C of a canary-named model == that of the same model named with c_identifier."""
    plain = codegen.generate(renamed(model, names.c_identifier), work / "plain", shape="auto")
    for e, p in zip(files, plain):
        if e.suffix in (".c", ".h"):
            assert strip_comments(e, work) == strip_comments(p, work), e.name
    COUNTS[kind]["stripped-equal"] += 1


def report(kind):
    """Print the counts (visible with -s) and check enough examples really ran."""
    counts = COUNTS[kind]
    print(f"\nfuzz {kind}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    assert counts["examples"] >= FUZZ_EXAMPLES // 2, dict(counts)
    assert counts["refused"] > 0 and counts["generated"] > 0, dict(counts)


# ----------------------------------------------------------------------------- strategies: values

_BIG = [0, -1, -2, 2 ** 31, 2 ** 63, 10 ** 30, 10 ** 400]
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 6), st.sampled_from(_BIG),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.5, 1.5, 1e-300, 1e300]),
    st.sampled_from(["false", "true", "", "same", "valid", "relu", "softmax", "4", "channels_first", CANARY]),
    st.text(max_size=6),
)
VALUE = st.recursive(LEAF, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                     max_leaves=8)
#: a value of the right kind for the key, often (so deeper checks are reached)
PLAUSIBLE = st.one_of(st.integers(-2, 5), st.lists(st.integers(-2, 5), min_size=1, max_size=3),
                      st.lists(st.lists(st.integers(-1, 3), min_size=2, max_size=2), min_size=2, max_size=2))
CONFIG_KEYS = ["units", "output_dim", "use_bias", "bias", "activation", "kernel_size", "strides", "pool_size",
               "padding", "target_shape", "axis", "epsilon", "filters", "dilation_rate", "name",
               "batch_input_shape", "batch_shape", "input_shape", "input_dim", "data_format", "groups", "scale",
               "center", "max_value", "negative_slope", "threshold"]
LAYER_NAMES = st.sampled_from([CANARY, "n */ #define X", "a\x00b", "a\nb", "", "input", "a/b", ".", "..",
                               "x" * 300, "d\u00e9j\u00e0", "dense_1", "int", "_x", "1abc"])
DEEP = st.integers(40, 3000)
#: how many edits of one kind: none half of the time, so whole models often stay valid
FEW = st.sampled_from([0, 0, 0, 1, 1, 2, 3])


def deep_text(depth):
    """JSON text nested `depth` lists deep (json.dumps itself cannot write that)."""
    return "[" * depth + '["dense_1", 0, 0, {}]' + "]" * depth


# ----------------------------------------------------------------------------- strategies: models


def weights(rng, *shape, scale=0.5):
    return (rng.normal(size=shape) * scale).astype(np.float32)


def base_layers(kind, rng):
    """Valid layer specs (tests/keras_files.py format) of a few shapes of model."""
    if kind == "mlp":
        return [kf.dense("dense_1", weights(rng, 3, 4), weights(rng, 4), "relu", input_dim=3),
                kf.activation("act", "tanh"), kf.dropout("drop"),
                kf.dense("dense_2", weights(rng, 4, 2), None, "softmax")]
    if kind == "mlp1":
        return [kf.dense("dense_1", weights(rng, 2, 3), weights(rng, 3), "sigmoid", input_dim=2, keras=1),
                kf.dense("dense_2", weights(rng, 3, 2), weights(rng, 2), "linear", keras=1)]
    bn = {"class_name": "BatchNormalization", "config": {"name": "bn", "axis": -1, "epsilon": 1e-3},
          "weights": [("gamma", weights(rng, 3) + 1), ("beta", weights(rng, 3)), ("moving_mean", weights(rng, 3)),
                      ("moving_variance", np.abs(weights(rng, 3)) + 0.5)]}
    conv = kf.conv2d("conv", weights(rng, 3, 3, 2, 3), weights(rng, 3))
    conv["config"]["activation"] = "linear"
    return [kf.input_layer("in", (6, 6, 2)), conv, bn,
            {"class_name": "MaxPooling2D", "config": {"name": "pool", "pool_size": [2, 2], "padding": "same"},
             "weights": []},
            {"class_name": "ZeroPadding2D", "config": {"name": "pad", "padding": [[1, 0], [0, 1]]}, "weights": []},
            {"class_name": "AveragePooling2D", "config": {"name": "avg", "pool_size": 2, "strides": 1}, "weights": []},
            {"class_name": "Reshape", "config": {"name": "resh", "target_shape": [-1, 3]}, "weights": []},
            {"class_name": "Flatten", "config": {"name": "flat"}, "weights": []},
            kf.dense("out", weights(rng, 12, 2), weights(rng, 2), "tanh")]


STYLES = {"mlp": ["dict", "list", "functional", "functional3"], "mlp1": ["list"],
          "cnn": ["dict", "functional", "functional3"]}

WEIGHT_EDITS = ["nan", "inf", "f64huge", "f32huge", "transpose", "zero_dim", "extra_dim", "scalar", "int",
                "bool", "bytes", "drop", "extra", "tiny_variance", "negative_variance"]


@st.composite
def keras_cases(draw):
    """(layer specs, model config JSON text, canary names) of a mutated Keras model."""
    kind = draw(st.sampled_from(sorted(STYLES)))
    style = draw(st.sampled_from(STYLES[kind]))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    layers = base_layers(kind, rng)
    canaries = []
    for _ in range(draw(FEW)):  # names: renamed in config and weights alike
        s = layers[draw(st.integers(0, len(layers) - 1))]
        s["config"]["name"] = draw(LAYER_NAMES)
        canaries.append(s["config"]["name"])
    for _ in range(draw(FEW)):  # weight values, shapes and dtypes
        with_weights = [s for s in layers if s["weights"]]
        s = with_weights[draw(st.integers(0, len(with_weights) - 1))]
        k = draw(st.integers(0, len(s["weights"]) - 1))
        short, arr = s["weights"][k]
        edit = draw(st.sampled_from(WEIGHT_EDITS))
        arr = np.array(arr)
        if arr.size == 0 or arr.dtype.kind != "f":  # an earlier edit emptied or retyped it
            continue
        pos = tuple(draw(st.integers(0, d - 1)) for d in arr.shape)
        if edit in ("nan", "inf", "f64huge", "f32huge"):
            arr = arr.astype(np.float64 if edit == "f64huge" else arr.dtype)
            arr[pos] = {"nan": np.nan, "inf": -np.inf, "f64huge": 1e300, "f32huge": 3e38}[edit]
        elif edit == "transpose":
            arr = arr.T.copy()
        elif edit == "zero_dim":
            arr = np.zeros(arr.shape[:-1] + (0,), arr.dtype)
        elif edit == "extra_dim":
            arr = arr[..., None]
        elif edit == "scalar":
            arr = np.float32(1.5)
        elif edit in ("int", "bool"):
            arr = arr.astype(np.int32 if edit == "int" else bool)
        elif edit == "bytes":
            arr = np.array([b"w"] * arr.size)
        elif edit == "drop":
            del s["weights"][k]
            continue
        elif edit == "extra":
            s["weights"].append(("extra", arr))
            continue
        elif edit == "tiny_variance":
            arr = np.full_like(arr, 1e-30)
        else:
            arr[pos] = -abs(arr[pos]) - 1
        s["weights"][k] = (short, arr)
    config = json.loads(json.dumps(kf.model_config(layers, style=style), allow_nan=True))
    entries = config["config"] if isinstance(config["config"], list) else config["config"]["layers"]
    deep = None
    for _ in range(draw(FEW)):  # config edits
        op = draw(st.sampled_from(["set", "set", "plausible", "del", "entry", "class", "top", "drop", "dup",
                                   "swap", "deep", "end"]))
        i = draw(st.integers(0, max(len(entries) - 1, 0)))
        if not entries or not isinstance(entries[i], dict):
            continue
        cfg = entries[i].get("config")
        if op in ("set", "plausible", "del") and isinstance(cfg, dict):
            key = draw(st.sampled_from(CONFIG_KEYS + sorted(cfg)))
            if op == "del":
                cfg.pop(key, None)
            else:
                cfg[key] = draw(VALUE if op == "set" else PLAUSIBLE)
        elif op == "entry":
            entries[i] = draw(st.one_of(LEAF, st.just({}), st.just({"class_name": "Dense"}),
                                        st.just({"class_name": "Dense", "config": None})))
        elif op == "class":
            entries[i]["class_name"] = draw(st.sampled_from(list(SUPPORTED_LAYERS) + ["LSTM", "", "InputLayer"])
                                            | VALUE)
        elif op == "top":
            target = config if draw(st.booleans()) or not isinstance(config["config"], dict) else config["config"]
            target[draw(st.sampled_from(["class_name", "config", "layers", "input_layers", "output_layers",
                                         "build_input_shape"]))] = draw(VALUE)
        elif op == "drop":
            del entries[i]
        elif op == "dup":
            entries.insert(i, json.loads(json.dumps(entries[i])))
        elif op == "swap":
            j = draw(st.integers(0, len(entries) - 1))
            entries[i], entries[j] = entries[j], entries[i]
        elif op == "deep":
            deep = draw(DEEP)
            entries[i]["inbound_nodes" if draw(st.booleans()) else "config"] = "__DEEP__"
        elif op == "end" and "inbound_nodes" in entries[i]:
            entries[i]["inbound_nodes"] = draw(VALUE)
    text = json.dumps(config, allow_nan=True)
    if deep:
        text = text.replace('"__DEEP__"', deep_text(deep))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 15)) == 0:  # invalid UTF-8 somewhere
        k = draw(st.integers(0, len(data)))
        data = data[:k] + b"\xff\xfe" + data[k:]
    return layers, data, canaries


def write_weights(root, layers):
    """model_weights layout (Keras 2 names) for hostile specs: a name HDF5 cannot hold is left out
    (the loader then reports the missing group), arrays of any dtype are stored as given."""
    root.attrs["keras_version"] = "2.3.1"
    root.attrs["backend"] = "tensorflow"
    good = []
    for s in layers:
        name = s["config"]["name"]
        try:
            group = root.create_group(name)
            wnames = []
            for short, arr in s["weights"]:
                sub = group.require_group(name)
                sub.create_dataset(f"{short}:0", data=arr)
                wnames.append(f"{name}/{short}:0")
            group.attrs["weight_names"] = np.array([w.encode("utf-8", "surrogatepass") for w in wnames]) \
                if wnames else np.array([], dtype=np.float64)
            good.append(name)
        except (ValueError, TypeError, KeyError, OSError, UnicodeError):
            continue
    root.attrs["layer_names"] = np.array([n.encode("utf-8", "surrogatepass") for n in good]) \
        if good else np.array([], dtype=np.float64)


def write_full(path, layers, config_bytes):
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "2.3.1"
        f.attrs["backend"] = "tensorflow"
        try:
            f.attrs["model_config"] = config_bytes.decode("utf-8")
        except UnicodeDecodeError:
            f.attrs["model_config"] = np.bytes_(config_bytes)
        write_weights(f.create_group("model_weights"), layers)
    return path


def write_pair(path, layers, config_bytes):
    path.write_bytes(config_bytes)
    with h5py.File(path.with_name("weights.h5"), "w") as f:
        write_weights(f, layers)
    return path, path.with_name("weights.h5")


CORRUPTIONS = st.lists(st.tuples(st.sampled_from(["truncate", "flip", "zero", "junk"]),
                                 st.floats(0, 1), st.integers(1, 64)), min_size=1, max_size=3)


def corrupt(data: bytes, ops) -> bytes:
    """Byte-level damage: truncation, bit flips, zeroed or junk ranges."""
    data = bytearray(data)
    for op, where, size in ops:
        k = min(int(where * len(data)), max(len(data) - 1, 0))
        if op == "truncate":
            del data[k:]
        elif op == "flip" and data:
            for j in range(k, min(k + size, len(data)), max(size // 4, 1)):
                data[j] ^= 0xFF
        elif op == "zero":
            data[k:k + size] = bytes(len(data[k:k + size]))
        else:
            data[k:k + size] = bytes((j * 37 + size) % 256 for j in range(len(data[k:k + size])))
    return bytes(data)


# ----------------------------------------------------------------------------- Keras tests


def workdir():
    """A fresh directory per example (hypothesis runs many examples in one test)."""
    return Path(tempfile.mkdtemp(prefix="nnfuzz"))


def finish(kind, result, work, canaries):
    if result is None or not sample(kind):
        return
    model, files = result
    if getattr(model, "kind", "nn") == "tpg":
        return compile_tpg(kind, model, files, work)
    compile_and_compare(kind, model, files, work)
    if any(l.name != names.c_identifier(l.name) for l in model.layers):
        same_program_as_plain_names(kind, model, files, work)


@SETTINGS
@given(case=keras_cases(), canary_file=st.integers(0, 7))
def fuzz_keras_full(case, canary_file):
    layers, config, canaries = case
    work = workdir()
    try:
        path = write_full(work / ((FILE_CANARY if canary_file == 0 else "model") + ".h5"), layers, config)
        result = check("keras-h5", path, [path], work / "out", canaries=canaries)
        finish("keras-h5", result, work, canaries)
    finally:
        shutil.rmtree(work)


@SETTINGS
@given(case=keras_cases(), damage=st.one_of(st.none(), CORRUPTIONS), target=st.sampled_from(["json", "weights"]))
def fuzz_keras_pair(case, damage, target):
    layers, config, canaries = case
    work = workdir()
    try:
        jpath, wpath = write_pair(work / "architecture.json", layers, config)
        if damage:
            victim = jpath if target == "json" else wpath
            victim.write_bytes(corrupt(victim.read_bytes(), damage))
        result = check("keras-json", jpath, [jpath, wpath], work / "out", canaries=canaries)
        finish("keras-json", result, work, canaries)
    finally:
        shutil.rmtree(work)


@st.composite
def valid_keras(draw):
    kind = draw(st.sampled_from(sorted(STYLES)))
    layers = base_layers(kind, np.random.default_rng(draw(st.integers(0, 2 ** 16))))
    text = json.dumps(kf.model_config(layers, style=draw(st.sampled_from(STYLES[kind]))))
    return layers, text.encode()


@SETTINGS
@given(case=valid_keras(), damage=CORRUPTIONS)
def fuzz_keras_bytes(case, damage):
    layers, config = case
    work = workdir()
    try:
        path = write_full(work / "model.h5", layers, config)
        path.write_bytes(corrupt(path.read_bytes(), damage))
        result = check("keras-h5-bytes", path, [path], work / "out")
        finish("keras-h5-bytes", result, work, [])
    finally:
        shutil.rmtree(work)


def test_base_models_are_valid(tmp_path):
    """Every unmutated base model generates (so refusals come from the mutations)."""
    for kind, styles in STYLES.items():
        for style in styles:
            layers = base_layers(kind, np.random.default_rng(0))
            text = json.dumps(kf.model_config(layers, style=style)).encode()
            (tmp_path / f"{kind}_{style}").mkdir()
            jpath, _ = write_pair(tmp_path / f"{kind}_{style}" / "architecture.json", layers, text)
            for path in (write_full(tmp_path / f"{kind}_{style}.h5", layers, text), jpath):
                model, log = pipeline.load_model(path)
                assert codegen.generate(model, tmp_path / f"out_{path.name}", shape="auto", passes_log=log)


def test_fuzz_keras_full_h5():
    fuzz_keras_full()
    report("keras-h5")


def test_fuzz_keras_json_pair():
    fuzz_keras_pair()
    report("keras-json")


def test_fuzz_keras_h5_bytes():
    fuzz_keras_bytes()
    report("keras-h5-bytes")


# ----------------------------------------------------------------------------- TPG tests

DOT_NUMBER = st.sampled_from(["0", "1", "7", "99", "-1", "4294967296", "9" * 30, "9" * 5000, "1e400", "nan", "x"])
ENV_KEYS = ["name", "about", "registers", "constants", "data_sources", "actions", "action_names",
            "integer_tables", "instructions", "nnbuild_tpg_environment"]
#: (C template, Python semantics): consistent pairs, or pairs a loader must refuse (the loader cannot
#: know that two consistent-looking descriptions of one instruction differ, so none such is drawn)
INSTRUCTION = st.sampled_from([
    ("$0 = $1 + $2;", "$1 + $2"), ("$0 = $1 / $2;", "$1 / $2"), ("$0 = cos($1);", "cos($1)"),
    ("$0 = (($1) < ($2)) ? -($1) : ($1);", "-$1 if $1 < $2 else $1"), ("$0 = $1 * 0.5;", "$1 * 0.5"),
    ("$0 = $1 */ + $2;", "$1 + $2"), ("r = $1;", "$1"), ("$0 = $1; }\n#define X", "$1"),
    ("$0 = --$1;", "$1 - 1"), ("$0 = 1e400;", "1e400"), ("$0 = $1;", "__import__('os')"),
    ("$0 = $1;", "(" * 200 + "$1" + ")" * 200), ("$0 = $1;", "-" * 5000 + "$1"), ("$0 = $1;", "$1\x00"),
    ("$0 = $1;", "lambda: 1"), ("$0 = $3;", "$3"), ("$0 = $1;", ""), ("$0 = cos(($1);", "cos($1)"),
])


@st.composite
def tpg_cases(draw):
    """(dot text bytes, environment JSON bytes, canary strings) of a mutated GEGELATI graph."""
    lines = small_graph().splitlines(keepends=True)
    env = json.loads(json.dumps(TEST_ENV))
    canaries = []
    for _ in range(draw(FEW)):
        op = draw(st.sampled_from(["delete", "dup", "swap", "number", "garbage", "truncate"]))
        i = draw(st.integers(0, len(lines) - 1))
        if op == "delete" and len(lines) > 1:
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "number":
            spans = [(m.start(), m.end()) for m in __import__("re").finditer(r"-?\d+", lines[i])]
            if spans:
                a, b = spans[draw(st.integers(0, len(spans) - 1))]
                lines[i] = lines[i][:a] + draw(DOT_NUMBER) + lines[i][b:]
        elif op == "garbage":
            lines.insert(i, draw(st.sampled_from([CANARY, "\t\tT1 -- T2\n", "}\n", "digraph{\n", "\x00\n",
                                                  "\t\tA9 -> P0\n", "\t\tT2 -> P0 -> T2\n", "\u2028\n"])))
        elif lines:
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
    for _ in range(draw(FEW)):
        op = draw(st.sampled_from(["set", "plausible", "del", "instruction", "operands", "shape", "canary"]))
        if op == "set":
            env[draw(st.sampled_from(ENV_KEYS))] = draw(VALUE)
        elif op == "plausible":
            env[draw(st.sampled_from(ENV_KEYS))] = draw(PLAUSIBLE)
        elif op == "del":
            env.pop(draw(st.sampled_from(ENV_KEYS)), None)
        elif op in ("instruction", "operands"):
            table = env.get("instructions")
            if isinstance(table, list) and table and isinstance(table[-1], dict):
                if op == "operands":
                    table[-1]["operands"] = draw(VALUE)
                else:
                    table[-1]["c"], table[-1]["python"] = draw(INSTRUCTION)
        elif op == "shape":
            sources = env.get("data_sources")
            if isinstance(sources, list) and sources and isinstance(sources[0], dict):
                sources[0]["shape"] = draw(st.sampled_from([[0], [-1, 3], [6], [3, 2], [10 ** 9, 10 ** 9],
                                                                    [True, 6], [2.0, 3]]))
        else:
            key = draw(st.sampled_from(["name", "about"]))
            env[key] = CANARY
            canaries.append(CANARY)
    dot = "".join(lines).encode("utf-8", "surrogatepass")
    env_text = json.dumps(env, allow_nan=True).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:
        dot = corrupt(dot, draw(CORRUPTIONS))
    if draw(st.integers(0, 9)) == 0:
        env_text = corrupt(env_text, draw(CORRUPTIONS))
    return dot, env_text, canaries


def compile_tpg(kind, model, files, work):
    """Compile the generated switch C with -Werror -pedantic and compare its actions with the reference."""
    COUNTS[kind]["compiled"] += 1
    gen = files[0].parent
    try:
        program = build_replay(gen, [model.name], model.input_size, work / "replay")
    except subprocess.CalledProcessError as exc:
        raise AssertionError(f"generated C does not compile: {exc.stderr[-3000:]}") from None
    x = np.random.default_rng(1).uniform(-10, 10, (64, model.input_size))
    x[1::3] = np.round(x[1::3])
    assert np.array_equal(replay(program, 0, x), tpg_reference.run(model, x))
    COUNTS[kind]["compared"] += 1


@SETTINGS
@given(case=tpg_cases(), canary_file=st.integers(0, 7))
def fuzz_tpg(case, canary_file):
    dot, env_text, canaries = case
    work = workdir()
    try:
        path = work / ((FILE_CANARY if canary_file == 0 else "graph") + ".dot")
        path.write_bytes(dot)
        env = work / "env.json"
        env.write_bytes(env_text)
        result = check("gegelati", path, [path, env], work / "out", environment=str(env), canaries=canaries)
        finish("gegelati", result, work, canaries)
    finally:
        shutil.rmtree(work)


def test_fuzz_gegelati_dot_and_environment():
    fuzz_tpg()
    report("gegelati")


def test_fuzz_strategies_reach_both_outcomes_quickly():
    """The strategies are not vacuous: a sample refuses some inputs and generates others, and the
    canary reaches generated code (checked inert) in the Keras strategies."""
    fuzz = {k: dict(v) for k, v in COUNTS.items()}
    if len(fuzz) < 4:
        pytest.skip("run with the other fuzz tests of this file")
    print("\nfuzz totals:", json.dumps(fuzz, sort_keys=True))
    assert sum(v.get("canary", 0) for k, v in fuzz.items() if k.startswith("keras")) > 0
    assert sum(v.get("compared", 0) for v in fuzz.values()) >= 4
