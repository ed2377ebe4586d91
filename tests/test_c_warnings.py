"""Generated C is clean under the strictest warning set we hold it to (cppcheck: test_c_cppcheck.py).

Every code shape and precision (MLP in float32, float64, q16, q16-acc32, fix16 and fixedW.F; CNN
shapes v1, v2, v3; TPG shapes switch and stack), with weights `const` and (AVR only)
`avr-progmem-far` (ATmega1284) and `avr-progmem-near` (ATmega328P), and the float MLPs with the
host's `const-simd` (GCC vectors, compiled by every board's gcc too), is generated and compiled,
together with the check firmware main that is built around it (nnbuild/runners/check_main.c, tpg_check_main.c), by each gcc of the boards (host gcc,
avr-gcc, arm-none-eabi-gcc) with the board's own flags plus STRICT. The quick cases use small models built here (every layer kind and activation, so every
template branch is rendered) and the xor example; the repo's larger examples (f1tenth in every
precision, cifarnet v1/v2, LeNet-5) are e2e.
"""

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED
from nnbuild import boards, codegen, kinds, pipeline
from nnbuild.compilers.gcc import compile_flags
from nnbuild.ir.graph import (Activation, Add, BatchNorm, Concatenate, Conv2D, Dense, Flatten, Model,
                              Pool2D, Recurrent, Reshape, ZeroPadding2D)

#: on top of each board's own cflags (which already hold -std=c99 -Wall -Wextra -Werror -pedantic)
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Wdouble-promotion", "-Wfloat-equal",
          "-Wswitch-default", "-Werror"]

EX = REPO / "firmware_examples"
TFLITE = REPO / "tests" / "data" / "tflite"
SIPS22_GAME = SHARED / "data" / "tpg" / "sips22" / "cleaned" / "out_best_cleaned.fishing_derby.9.t48.dot"
BOARDS = ("host", "avr", "arm")
FIXED = ("q16", "q16-acc32", "q8", "fix16", "fixed16.8", "fixed16.16")
#: the fixed-point precisions of the CNN shapes
CNN_FIXED = ("q16", "q16-acc32")


def mlp_model(name="tinymlp"):
    """Every MLP activation, fused (as fixed point needs) and standalone (float only)."""
    rng = np.random.default_rng(11)
    w = lambda *s: (rng.normal(size=s) * 0.4).astype(np.float32)  # noqa: E731
    layers = [Dense("d_tanh", w(3, 6), w(6), "tanh"), Dense("d_sigmoid", w(6, 5), w(5), "sigmoid"),
              Dense("d_relu", w(5, 5), w(5), "relu"), Dense("d_soft", w(5, 3), w(3), "softmax")]
    return Model(name, (3,), layers, source_files=(f"{name}.h5",))


def mlp_float_model():
    rng = np.random.default_rng(12)
    w = lambda *s: (rng.normal(size=s) * 0.4).astype(np.float32)  # noqa: E731
    layers = [Dense("d_lin", w(3, 6), None), Activation("a_tanh", "tanh"), Dense("d_sig", w(6, 5), w(5), "sigmoid"),
              Dense("d_relu", w(5, 4), w(4)), Activation("a_relu", "relu"), Dense("d_soft", w(4, 3), w(3), "softmax")]
    return Model("tinymlpf", (3,), layers, source_files=("tinymlpf.h5",))


def cnn_model():
    """Every CNN layer kind on a 6x6x2 input: pad, conv (+relu), batchnorm, max and average pool,
    a padded conv, add, concatenate, flatten, dense with each activation, softmax."""
    rng = np.random.default_rng(8)
    w = lambda *s: (rng.normal(size=s) * 0.3).astype(np.float32)  # noqa: E731
    layers = [ZeroPadding2D("pad", (1, 0, 1, 0)),
              Conv2D("conv", w(3, 3, 2, 4), w(4), activation="relu"),
              BatchNorm("bn", w(4) + 1, w(4), w(4), np.abs(w(4)) + 0.5, 1e-3),
              Pool2D("pool", "max", (2, 2), (2, 2)),
              Conv2D("conv2", w(3, 3, 4, 4), w(4), padding=(1, 1, 1, 1), activation="tanh"),
              Add("add"),
              Concatenate("cat", 2),
              Pool2D("avg", "avg", (2, 2), (1, 1), source_type="AveragePooling2D"),
              Flatten("flat"),
              Dense("dense", w(8, 6), w(6), "sigmoid"),
              Dense("dense2", w(6, 3), w(3), "softmax")]
    edges = {"pad": ("input",), "conv": ("pad",), "bn": ("conv",), "pool": ("bn",), "conv2": ("pool",),
             "add": ("pool", "conv2"), "cat": ("add", "pool"), "avg": ("cat",), "flat": ("avg",),
             "dense": ("flat",), "dense2": ("dense",)}
    return Model("tinycnn", (6, 6, 2), layers, source_files=("tinycnn.h5",), edges=edges)


def lenet_model():
    """LeNet-5's layers at a tenth of its size (tanh convolutions, each read by an average pooling
    only, the first with one input channel and an output width of 8): the const-host paths LeNet-5
    takes (table tanh, the poolings applying their convolution's activation, the column-wise first
    Conv2D, interleaved Dense blocks) in C that compiles in a fraction of LeNet-5's time."""
    rng = np.random.default_rng(5)
    w = lambda *s: (rng.normal(size=s) * 0.3).astype(np.float32)  # noqa: E731
    layers = [Conv2D("conv1", w(3, 3, 1, 4), w(4), activation="tanh"),
              Pool2D("pool1", "avg", (2, 2), (2, 2), source_type="AveragePooling2D"),
              Conv2D("conv2", w(3, 3, 4, 8), w(8), activation="tanh"),
              Pool2D("pool2", "avg", (2, 2), (2, 2), source_type="AveragePooling2D"),
              Flatten("flat"),
              Dense("dense1", w(8, 8), w(8), "tanh"),
              Dense("dense2", w(8, 3), w(3), "softmax")]
    return Model("tinylenet", (10, 10, 1), layers, source_files=("tinylenet.h5",))


def rnn_model(dense=True):
    """The recurrent layer's C variants: a bidirectional LSTM sequence (peepholes, clip, an initial
    state, CIFG) into a GRU's last state (linear_before_reset, reverse), then Dense (not in float64:
    the CNN shapes' Dense is not -Wdouble-promotion clean there)."""
    rng = np.random.default_rng(9)
    w = lambda *s: (rng.normal(size=s) * 0.4).astype(np.float32)  # noqa: E731
    steps, features, hidden = 4, 3, 5
    lstm = Recurrent("lstm", "lstm", ("forward", "reverse"), w(2, 4 * hidden, features), w(2, 4 * hidden, hidden),
                     w(2, 4 * hidden), peephole=w(2, 3, hidden), initial_h=w(2, hidden), initial_c=w(2, hidden),
                     clip=2.0, cell_clip=3.0, coupling="input_from_forget", activations=("sigmoid", "tanh", "relu"))
    gru = Recurrent("gru", "gru", ("reverse",), w(1, 3 * hidden, 2 * hidden), w(1, 3 * hidden, hidden),
                    w(1, 3 * hidden), rbias=w(1, hidden), linear_before_reset=True, output="last", source_type="GRU")
    layers = [lstm, Reshape("seq", (steps, 2 * hidden)), gru, Reshape("last", (hidden,))]
    if dense:
        layers.append(Dense("dense", w(hidden, 3), w(3), "softmax"))
    return Model("tinyrnn", (steps, features), layers, source_files=("tinyrnn.onnx",))


def example(path, environment=None):
    def load():
        if not Path(path).exists():
            pytest.skip(f"{path} not present")
        model, log = pipeline.load_model(str(path), environment=environment)
        return model, log
    return load


def built(model):
    return lambda: (model(), [])


#: the weights storages every case is generated with; the float MLPs add the host layouts const-simd
#: and const-host
STORAGES = ("const", "avr-progmem-far", "avr-progmem-near")
HOST_STORAGES = ("const-simd", "const-host")


def case(label, load, shape, precision="float32", storages=STORAGES, marks=()):
    fixed = precision in FIXED or precision.startswith("fixed")
    return pytest.param(label, load, shape, precision, storages, (-1.0, 1.0) if fixed else None,
                        id=label, marks=list(marks))


E2E = [pytest.mark.e2e]
CASES = [
    *(case(f"tinymlp-{p}", built(mlp_model), "mlp", p) for p in FIXED),
    case("tinymlp-float32", built(mlp_float_model), "mlp", "float32", storages=STORAGES + HOST_STORAGES),
    case("tinymlp-float64", built(mlp_float_model), "mlp", "float64", storages=("const",) + HOST_STORAGES),
    case("xor-float32", example(EX / "xor" / "xor.h5"), "mlp", storages=STORAGES + HOST_STORAGES),
    *(case(f"tinycnn-{s}", built(cnn_model), s) for s in ("v1", "v2")),
    # v3 in float reads no weight array (literals in the code): its far and near C differ from the
    # const C only in the prelude's read macros, unused here, compiled where used by v1/v2's cases
    case("tinycnn-v3", built(cnn_model), "v3", storages=("const",)),
    case("tinycnn-v2-host", built(cnn_model), "v2", storages=("const-host",)),
    # const-host's table tanh, poolings applying a convolution's activation, the column-wise Conv2D:
    # LeNet-5's own C (2 s a host compile) is e2e, tinylenet takes the same paths in the quick tier
    case("tinylenet-v2-host", built(lenet_model), "v2", storages=("const-host",)),
    case("lenet5-v2-host", example(EX / "lenet5" / "lenet5.h5"), "v2", storages=("const-host",), marks=E2E),
    *(case(f"tinycnn-{s}-{p}", built(cnn_model), s, p) for s in ("v2", "v3") for p in CNN_FIXED),
    *(case(f"tinycnn-{s}-q8", built(cnn_model), s, "q8") for s in ("v1", "v2")),
    case("tinyrnn-v2", built(rnn_model), "v2"),
    case("tinyrnn-v2-float64", built(lambda: rnn_model(dense=False)), "v2", "float64", storages=("const",)),
    case("tinycnn-v3-q8", built(cnn_model), "v3", "q8", marks=E2E),  # v3's unrolled C: 2 s a compile
    *(case(f"tpg-{s}", example(SIPS22_GAME, "sips22-atari"), s) for s in ("switch", "stack")),
    # f1tenth's 36 KB weight rows exceed avr-gcc's object size limit as plain const arrays: AVR far only
    *(case(f"f1tenth-{p}", example(EX / "f1tenth" / "architecture.json"), "mlp", p, marks=E2E)
      for p in FIXED),
    case("f1tenth-float32", example(EX / "f1tenth" / "architecture.json"), "mlp", storages=STORAGES + ("const-simd",),
         marks=E2E),
    case("f1tenth-float64", example(EX / "f1tenth" / "architecture.json"), "mlp", "float64",
         storages=("const", "const-simd"), marks=E2E),
    *(case(f"cifarnet-{s}", example(EX / "cifarnet" / "cifarnet.h5"), s, marks=E2E) for s in ("v1", "v2")),
    # the int8 precision (shape tflm): every operator it generates is in one of these fixtures
    case("cnn-int8", example(TFLITE / "cnn_int8.tflite"), "tflm", "int8"),
    *(case(f"{m}-int8", example(TFLITE / f"{m}_int8.tflite"), "tflm", "int8", marks=E2E)
      for m in ("arith", "merge", "extra", "mixed", "core", "kws_lstm")),
    case("lenet5-v2-q16-acc32", example(EX / "lenet5" / "lenet5.h5"), "v2", "q16-acc32", storages=("avr-progmem-far",),
         marks=E2E),
]


def targets(label, precision, storage):
    """The boards that compile this variant: far storage is AVR's (ATmega1284), near storage the
    ATmega328P's (no ELPM there); float64 needs a 64-bit double."""
    names = {"avr-progmem-far": ("avr",), "avr-progmem-near": ("atmega328p",)}.get(storage, BOARDS)
    if precision == "float64":
        names = tuple(b for b in names if boards.load_board(b).get("double_bits", 64) >= 64)
    if label == "lenet5-v2-host":    # a host's storage: its Dense arrays are not split below avr-gcc's 32 KB
        names = tuple(b for b in names if b != "avr")
    if label.startswith("f1tenth") and storage in ("const", "const-simd"):
        names = tuple(b for b in names if b != "avr")
    if label.startswith("tinycnn-v3-") and storage == "const":
        # v3's fixed-point C (4 s an avr-gcc compile in q16) is the far storage's but for the prelude's
        # read macros (their const text is the one v1/v2's const cases compile with avr-gcc): avr-gcc
        # compiles it in far and near only
        names = tuple(b for b in names if b != "avr")
    return names


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Generate each (case, storage) once for the module: (directory, model)."""
    cache = {}

    def get(label, load, shape, precision, storage, input_range):
        key = (label, storage)
        if key not in cache:
            model, log = load()
            out = tmp_path_factory.mktemp(f"{label}-{storage}")
            codegen.generate(model, out, shape=shape, precision=precision, storage=storage, passes_log=log,
                             input_range=input_range)
            cache[key] = (out, model)
        return cache[key]
    return get


def check_main(model):
    """The check firmware main of the model's kind and the -D flags that bind it (as the pipeline does)."""
    kind = kinds.of_model(model)
    return kind.check_main(), [f"-D{name}={value}" for name, value in kind.check_defines(model.name)]


def compile_strict(board, sources, gen_dir, workdir, defines=()):
    cmd = [board["cc"], *compile_flags(board), *STRICT, f"-I{gen_dir}", *defines, "-c", *map(str, sources)]
    result = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True)
    return result.returncode, result.stderr


#: host variants whose C is another quick variant's byte for byte but for comments (a repetition in
#: the quick tier, compiled in the e2e tier): tinymlp's q16 accumulators fit 32 bits, so its q16 C
#: is its q16-acc32 C (tinycnn-v2-q16/-q16-acc32 are the two accumulator paths in the quick tier);
#: xor's layers are too narrow for vectors, so its const-simd C is its const C (tinymlp-float32
#: and -float64 const-simd are the vector code in the quick tier)
HOST_REPEATS = {("tinymlp-q16-acc32", "const"), ("xor-float32", "const-simd")}


def variants():
    for p in CASES:
        label, load, shape, precision, storages, rng = p.values
        for storage in storages:
            for board in targets(label, precision, storage):
                # cross-compilers, and v3's unrolled code (about a second per compile), run in the e2e tier
                cross = [] if board == "host" and shape != "v3" and (label, storage) not in HOST_REPEATS else E2E
                yield pytest.param(label, load, shape, precision, storage, rng, board,
                                   id=f"{label}-{storage}-{board}", marks=list(p.marks) + cross)


@pytest.mark.parametrize("label,load,shape,precision,storage,input_range,board", list(variants()))
def test_generated_c_compiles_without_a_warning(tmp_path, generated, label, load, shape, precision, storage,
                                                input_range, board):
    spec = boards.load_board(board)
    if not shutil.which(spec["cc"]):
        pytest.skip(f"{spec['cc']} not installed ({spec.get('install_hint', '')})")
    gen_dir, model = generated(label, load, shape, precision, storage, input_range)
    sources = sorted(gen_dir.glob("*.c"))
    assert len(sources) == 2
    # one compiler run for the generated C and the check main (the main's -D names are its own: the
    # generated C uses none of them); the compiler's words name the file that warned
    main, defines = check_main(model)
    rc, err = compile_strict(spec, [*sources, main], gen_dir, tmp_path, defines)
    assert rc == 0 and "warning" not in err, f"{spec['cc']} on the generated C and {main.name}:\n{err[:6000]}"
