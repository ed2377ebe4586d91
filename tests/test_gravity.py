"""Gravity programs: the .g front-end, the blob layout, the generated C (through the JIT, built by
the host compiler) against the float64 numpy reference, and the reference's gradients against
finite differences."""

import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from nnbuild import jit
from nnbuild.codegen import gravity as generator
from nnbuild.errors import NNBuildError
from nnbuild.frontends import gravity_g
from nnbuild.ir import gravity as ir

#: the paper's Listing 1, the program bench/gravity_callgrind.py measures
MNIST = (Path(__file__).resolve().parents[1] / "bench" / "mnist.g").read_text()

HIDDEN = ("relu", "sigmoid", "tanh", "linear")
OUTPUTS = ("softmax", "sigmoid", "linear")
PAIRS = [(h, o, c) for h, o, c in itertools.product(HIDDEN, OUTPUTS, ir.COSTS)
         if not (c == "cross_entropy" and o == "linear")]


def program(tmp_path, text, name="net.g"):
    path = tmp_path / name
    path.write_text(text)
    return path


def small(hidden="tanh", output="softmax", cost="quadratic", precision="double", batch=3, rate="0.5"):
    return (f'.module "net"; .prefix "nt"; .optimizer sgd {rate}; .precision {precision};\n'
            f".costfnc {cost}; .batch {batch}; .input 5;\n.hidden 7 {hidden}; .hidden 6 {hidden};\n"
            f".output 4 {output};\n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NNBUILD_JIT_CACHE", str(tmp_path / "jit"))
    return tmp_path / "jit"


def targets(output, n, rng):
    """Targets each output activation can reach: one-hot (softmax), in (0, 1) (sigmoid), any (linear)."""
    if output == "softmax":
        return np.eye(4)[rng.integers(0, 4, n)]
    if output == "sigmoid":
        return rng.uniform(0.05, 0.95, (n, 4))
    return rng.uniform(-0.5, 0.5, (n, 4))


# --------------------------------------------------------------------------- the language


def test_the_papers_listing_reads_in_declared_order(tmp_path):
    model = gravity_g.load(program(tmp_path, MNIST))
    assert (model.name, model.prefix, model.inputs, model.batch, model.cost) == ("mnist", "mnist", 784, 8,
                                                                                "cross_entropy")
    assert [(l.size, l.activation, l.directive) for l in model.layers] == [
        (100, "relu", "hidden"), (100, "relu", "hidden"), (10, "softmax", "output")]
    assert model.layers[0].where.endswith("net.g:9:1") and model.layers[1].where.endswith("net.g:10:1")


def test_declared_order_is_kept(tmp_path):
    text = '.module "m"; .input 4; .hidden 9 relu; .hidden 3 sigmoid; .output 2 sigmoid; .costfnc quadratic;'
    model = gravity_g.load(program(tmp_path, text))
    assert model.sizes == [4, 9, 3, 2] and model.layers[1].activation == "sigmoid"


@pytest.mark.parametrize("expr, value", [("28 * 28", 784), ("28 - 1", 27), ("-(3 + 4) * -2", 14),
                                         ("17 / 5", 3), ("17 % 5", 2), ("2 + 3 * 4", 14), ("(2 + 3) * 4", 20)])
def test_integer_expressions(tmp_path, expr, value):
    model = gravity_g.load(program(tmp_path, f'.module "m"; .input {expr}; .hidden 2 relu; .output 2 softmax;'))
    assert model.inputs == value


def test_defaults_strings_reals_and_precisions(tmp_path):
    text = (".module 'net_1'; .prefix \"\"; .optimizer sgd .5E-1; .precision fixed [8, 2 * 4];"
            " .input 3; .hidden 2 linear; .output 1 sigmoid; // final comment without a newline")
    model = gravity_g.load(program(tmp_path, text))
    assert (model.prefix, model.learning_rate, model.precision, model.batch) == ("", 0.05, "fixed8.8", 1)
    # a string's value is the text between its quotes, unprocessed, as Gravity takes it
    with pytest.raises(NNBuildError, match=r"'n\\\\et' is not a C identifier"):
        gravity_g.load(program(tmp_path, ".module 'n\\et'; .input 3; .hidden 2 relu; .output 2 softmax;"))
    with pytest.raises(NNBuildError, match="'a\"\"b' is not a C identifier"):
        gravity_g.load(program(tmp_path, '.module "a""b"; .input 3; .hidden 2 relu; .output 2 softmax;'))
    default = gravity_g.load(program(tmp_path, '.module "m"; .input 3; .hidden 2 relu; .output 2 softmax;'))
    assert (default.prefix, default.learning_rate, default.precision, default.cost) == ("g", 0.1, "float32",
                                                                                    "cross_entropy")


@pytest.mark.parametrize("text, where, words", [
    ('.module "m"; .input 28 -1; .hidden 2 relu; .output 2 softmax;', "1:24", "expected ';'"),
    ('.module "m"; .optimizer sgd 1; .input 2; .hidden 2 relu; .output 2 softmax;', "1:29", "real learning rate"),
    ('.module "m"; .input 4 / (2 - 2); .hidden 2 relu; .output 2 softmax;', "1:23", "division by zero"),
    ('.module "m";\n.input 4;\n  .hidden 2 gelu; .output 2 softmax;', "3:13", "activation"),
    ('.module "m"; .input 4; .output 2 softmax;', "1:42", "missing .hidden"),
    ('.input 4; .hidden 2 relu; .output 2 softmax;', "1:45", "missing .module"),
    ('.module "m"; .module "n"; .input 4; .hidden 2 relu; .output 2 softmax;', "1:14", "given twice"),
    ('.module "2x"; .input 4; .hidden 2 relu; .output 2 softmax;', "1:9", "not a C identifier"),
    ('.module "m"; .batch 1001; .input 4; .hidden 2 relu; .output 2 softmax;', "1:21", ".batch must be"),
    ('.module "m"; .input 0; .hidden 2 relu; .output 2 softmax;', "1:21", ".input must be"),
    ('.module "m"; .precision fixed [0, 8]; .input 4; .hidden 2 relu; .output 2 softmax;', "1:32", "w >= 1"),
    ('.module "m"; .optimizer sgd 1.5; .input 4; .hidden 2 relu; .output 2 softmax;', "1:29", "(0, 1]"),
    ('.module "m"; .input 4; .hidden 2 relu; .output 2 linear;', "1:40", "softmax or sigmoid"),
    ('.module "m"; .input 4 .hidden 2 relu; .output 2 softmax;', "1:23", "expected ';'"),
    ('.module "m"; .input 4; @', "1:24", "unexpected character"),
    ('.module "m"; .speed 4;', "1:14", "unknown directive"),
    ('.module "m"; .costfnc hinge;', "1:23", "cost function"),
])
def test_errors_are_one_line_with_file_line_column(tmp_path, text, where, words):
    path = program(tmp_path, text)
    with pytest.raises(NNBuildError) as error:
        gravity_g.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{where}: ") and words in message and "\n" not in message


def test_write_reads_back(tmp_path):
    model = gravity_g.load(program(tmp_path, small(rate="1.0E-3", precision="fixed [6, 10]")))
    gravity_g.write(model, tmp_path / "again.g")
    again = gravity_g.load(tmp_path / "again.g")
    assert (again.sizes, again.precision, again.learning_rate, again.cost, again.batch) == (
        model.sizes, model.precision, model.learning_rate, model.cost, model.batch)


# --------------------------------------------------------------------------- blob and C


def test_mnist_blob_matches_gravitys_size(tmp_path):
    """Gravity's blob is 721,696 bytes with a0 copied in (784 floats); ours reads x in place and
    keeps the 210 activations in the hard region."""
    plan = ir.plan(gravity_g.load(program(tmp_path, MNIST)))
    assert plan.size_bytes == 721_696 - 784 * 4
    assert plan.hard_bytes == 358_440 + 210 * 4
    assert plan.output_offset * 4 + 40 == plan.hard_bytes


def test_c_is_byte_identical_and_warning_free(tmp_path):
    model = gravity_g.load(program(tmp_path, MNIST))
    first, second = generator.render(model), generator.render(gravity_g.load(program(tmp_path, MNIST)))
    assert first == second
    for precision in ("float32", "fixed8.8"):
        files = generator.render(model, precision=precision)
        for name in ("mnist.c", "mnist.h"):
            (tmp_path / name).write_text(files[name])
        subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "mnist.c"],
                       cwd=tmp_path, check=True)
        code = files["mnist.c"]
        assert "malloc" not in code and "static gv_t" not in code.split("typedef")[0]
        assert "layer 1: .hidden 100 relu (net.g:9:1)" in code
        facts = files["mnist.flowfacts.json"]
        assert {l["function"] for l in facts["loops"]} >= {"mnist_forward", "mnist_train", "mnist_backprop"}
        assert facts["entries"] == ["mnist_activate", "mnist_train"]


# --------------------------------------------------------------------------- the C against numpy


def test_initialisation_is_seeded_glorot(tmp_path, cache):
    net = jit.compile(program(tmp_path, small(precision="float")), seed=7)
    assert np.array_equal(net.memory, ir.initial_blob(net.plan, 7))
    weights = net.weights()
    for (w, b), (n_in, n_out) in zip(weights, zip(net.model.sizes[:-1], net.model.sizes[1:])):
        assert np.all(np.abs(w) <= ir.glorot_limit(n_in, n_out)) and not b.any()
    net.initialize(8)
    assert not np.array_equal(net.memory, ir.initial_blob(net.plan, 7))
    fixed = jit.compile(program(tmp_path, small(precision="fixed [4, 12]")), seed=7)
    assert np.array_equal(fixed.memory, ir.initial_blob(fixed.plan, 7))


#: every activation in float (a compile per pair); double, the same generated functions with
#: another number type, runs one pair in the quick tier and the other two e2e
ACTIVATE_CASES = [pytest.param(precision, floor, hidden, output, id=f"{precision}-{floor:g}-{hidden}-{output}",
                               marks=[pytest.mark.e2e] if precision == "double" and hidden != "relu" else [])
                  for precision, floor in (("float", 2e-6), ("double", 1e-14))
                  for hidden, output in (("relu", "softmax"), ("tanh", "sigmoid"), ("sigmoid", "linear"))]


@pytest.mark.parametrize("precision, floor, hidden, output", ACTIVATE_CASES)
def test_activate_matches_the_reference(tmp_path, cache, precision, floor, hidden, output):
    rng = np.random.default_rng(3)
    net = jit.compile(program(tmp_path, small(hidden, output, precision=precision)), seed=5)
    x = rng.uniform(-2, 2, (16, 5)).astype(np.float32)
    assert np.abs(net.activate(x) - ir.activate(net.model, net.weights(), x)).max() < floor


@pytest.mark.e2e   # 32 host compilations
@pytest.mark.parametrize("hidden, output, cost", PAIRS)
def test_one_train_step_matches_the_numpy_gradient_step(tmp_path, cache, hidden, output, cost):
    rng = np.random.default_rng(11)
    net = jit.compile(program(tmp_path, small(hidden, output, cost, "double")), seed=2)
    if hidden == "relu":   # keep every relu away from its kink (finite differences need it)
        net.set_weights([(w, b + 0.3) for w, b in net.weights()])
    x, y = rng.uniform(-1, 1, (3, 5)), targets(output, 3, rng)
    before = net.weights()
    expected = ir.train_step(net.model, before, x, y)
    net.train(x, y)
    for (w, b), (ew, eb) in zip(net.weights(), expected):
        scale = max(1.0, np.abs(ew).max(), np.abs(eb).max())
        assert np.abs(w - ew).max() < 1e-13 * scale and np.abs(b - eb).max() < 1e-13 * scale


@pytest.mark.parametrize("hidden, output, cost", PAIRS)
def test_reference_gradient_matches_finite_differences(hidden, output, cost):
    model = gravity_g.parse("net.g", small(hidden, output, cost))
    rng = np.random.default_rng(4)
    weights = [(rng.normal(0, 0.5, (a, b)), rng.normal(0.3 if hidden == "relu" else 0, 0.2, b))
               for a, b in zip(model.sizes[:-1], model.sizes[1:])]
    x, y = rng.uniform(-1, 1, (3, 5)), targets(output, 3, rng)
    grads = ir.gradients(model, weights, x, y)
    h = 1e-6
    for l, (w, b) in enumerate(weights):
        for array, grad in ((w, grads[l][0]), (b, grads[l][1])):
            numeric = np.zeros_like(array)
            for index in np.ndindex(array.shape):
                keep = array[index]
                array[index] = keep + h
                up = ir.cost(model, weights, x, y)
                array[index] = keep - h
                down = ir.cost(model, weights, x, y)
                array[index] = keep
                numeric[index] = (up - down) / (2 * h)
            assert np.abs(numeric - grad).max() < 1e-6 * max(1.0, np.abs(grad).max())


def test_float_train_step_at_the_float_floor(tmp_path, cache):
    rng = np.random.default_rng(6)
    net = jit.compile(program(tmp_path, small("sigmoid", "softmax", "cross_entropy", "float")), seed=3)
    x, y = rng.uniform(-1, 1, (3, 5)).astype(np.float32), targets("softmax", 3, rng)
    expected = ir.train_step(net.model, net.weights(), x, y)
    net.train(x, y)
    for (w, b), (ew, eb) in zip(net.weights(), expected):
        assert np.abs(w - ew).max() < 1e-6 and np.abs(b - eb).max() < 1e-6


@pytest.mark.parametrize("hidden, output, cost", [("relu", "softmax", "cross_entropy"),
                                                  ("tanh", "linear", "quadratic"),
                                                  ("sigmoid", "sigmoid", "exponential")])
def test_fixed_point_tracks_the_reference(tmp_path, cache, hidden, output, cost):
    """fixed [8, 16]: activate within a few LSB per layer; one train step within the rounding of
    its gradient products (exponential: 2 exp(sum (a - y)^2) must stay below 128, hence sigmoid)."""
    rng = np.random.default_rng(8)
    net = jit.compile(program(tmp_path, small(hidden, output, cost, "fixed [8, 16]", rate="0.5")), seed=4)
    lsb = 2.0 ** -16
    x, y = rng.uniform(-1, 1, (3, 5)), targets(output, 3, rng)
    weights = net.weights()
    assert np.abs(net.activate(x) - ir.activate(net.model, weights, x)).max() < 64 * lsb
    expected = ir.train_step(net.model, weights, x, y)
    net.train(x, y)
    for (w, b), (ew, eb) in zip(net.weights(), expected):
        assert np.abs(w - ew).max() < 256 * lsb and np.abs(b - eb).max() < 256 * lsb


def test_fixed_saturates_instead_of_wrapping(tmp_path, cache):
    net = jit.compile(program(tmp_path, small("linear", "linear", "quadratic", "fixed [3, 5]")), seed=1)
    net.set_weights([(np.full_like(w, 3.0), np.full_like(b, 3.0)) for w, b in net.weights()])
    assert np.all(net.activate(np.full(5, 3.0)) == (2 ** 7 - 1) / 32)


def test_the_jit_recompiles_only_when_the_model_changes(tmp_path, cache):
    path = program(tmp_path, small())
    assert jit.compile(path).compiled
    again = jit.compile(path)
    assert not again.compiled and again.version == ir.VERSION
    path.write_text(small(rate="0.25"))
    assert jit.compile(path).compiled
    assert not jit.compile(path, precision="float64").compiled   # the .g says double already


def test_a_trained_program_saves_as_a_g_and_weights_pair(tmp_path, cache):
    net = jit.compile(program(tmp_path, small(precision="float")), seed=9)
    (tmp_path / "out").mkdir()
    net.save(tmp_path / "out" / "trained.g")
    again = jit.compile(tmp_path / "out" / "trained.g")
    with np.load(tmp_path / "out" / "trained.npz") as saved:
        again.set_weights([(saved[f"W{l}"], saved[f"b{l}"]) for l in (1, 2, 3)])
    x = np.linspace(-1, 1, 5)
    assert np.array_equal(again.activate(x), net.activate(x))


def test_a_trained_program_exports_as_keras_h5_that_nnbuild_builds(tmp_path, cache):
    from nnbuild import frontends
    from nnbuild.ir import reference
    net = jit.compile(program(tmp_path, small("tanh", "softmax", "cross_entropy", "float")), seed=9)
    rng = np.random.default_rng(2)
    net.train(rng.uniform(-1, 1, (3, 5)), targets("softmax", 3, rng))
    net.save_keras(tmp_path / "trained.h5")
    model = frontends.load(tmp_path / "trained.h5")
    x = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    assert np.abs(reference.run(model, x.astype(np.float64)) - net.activate(x)).max() < 1e-6


def test_the_jit_takes_a_trained_keras_model_and_keeps_its_weights(tmp_path, cache):
    from nnbuild import frontends
    from nnbuild.ir import reference
    xor = Path(__file__).resolve().parents[1] / "firmware_examples" / "xor" / "xor.h5"
    net = jit.compile(xor, learning_rate=0.5, batch=4)
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    expected = reference.run(frontends.load(xor), x.astype(np.float64))
    assert np.abs(net.activate(x) - expected).max() < 1e-6
    assert net.model.cost == "cross_entropy" and net.model.sizes == [2, 2, 1]   # sigmoid output
    before = net.weights()
    step = ir.train_step(net.model, before, x, 1 - np.round(expected))   # and it trains
    net.train(x, 1 - np.round(expected))
    assert any(np.abs(b - bb).max() > 1e-3 for (_, b), (_, bb) in zip(net.weights(), before))
    for (w, b), (ew, eb) in zip(net.weights(), step):
        scale = max(1.0, np.abs(ew).max(), np.abs(eb).max())
        assert np.abs(w - ew).max() < 1e-6 * scale and np.abs(b - eb).max() < 1e-6 * scale


def test_a_file_name_reaches_the_c_only_escaped(tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    path = folder / "x*??\\\nint evil;.g"
    path.write_text(small())
    files = generator.render(gravity_g.load(path))
    (tmp_path / "net.c").write_text(files["net.c"])
    (tmp_path / "net.h").write_text(files["net.h"])
    assert "int evil;" not in files["net.c"].replace("\\012int evil;", "")
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "net.c"], cwd=tmp_path,
                   check=True)


def test_a_fixed_format_whose_sums_could_overflow_is_refused_naming_the_layer(tmp_path):
    path = program(tmp_path, '.module "m"; .precision fixed [16, 16]; .input 784;\n.hidden 100 relu; .output 10 softmax;')
    model = gravity_g.load(path)
    with pytest.raises(NNBuildError, match=r"net\.g:2:1: precision fixed16\.16 cannot sum 785 products"):
        ir.plan(model)
    assert ir.plan(model, "fixed8.16").number.ctype == "int32_t"


def test_an_empty_prefix_gives_bare_api_names(tmp_path, cache):
    net = jit.compile(program(tmp_path, small(precision="float").replace('.prefix "nt";', '.prefix "";')), seed=3)
    assert net.version == ir.VERSION and net.activate(np.zeros(5)).shape == (4,)
    assert "void *activate(void *m, const void *x);" in generator.render(net.model)["net.h"]


@pytest.mark.e2e  # cppcheck
@pytest.mark.skipif(not shutil.which("cppcheck"), reason="cppcheck not installed (bash scripts/setup.sh)")
@pytest.mark.parametrize("precision, storage", [("float32", "const"), ("fixed6.10", "const"),
                                               ("float32", "avr-progmem-far")])
def test_cppcheck_finds_nothing(tmp_path, precision, storage):
    """The house's cppcheck families (tests/test_c_warnings.py) on both arithmetics and on AVR's
    value-fact shape."""
    from test_c_cppcheck import CPPCHECK
    files = generator.render(gravity_g.load(program(tmp_path, MNIST)), precision=precision, storage=storage)
    for name in ("mnist.c", "mnist.h"):
        (tmp_path / name).write_text(files[name])
    subprocess.run(CPPCHECK + [str(tmp_path / "mnist.c")], check=True)


# --------------------------------------------------------------------------- hostile programs (issue 23)


@pytest.mark.parametrize("text, where", [
    ('.module "m"; .optimizer sgd 1.0E-49; .input 2; .hidden 2 relu; .output 2 softmax;', "1:29"),
    ('.module "m"; .optimizer sgd 1.0E-36;\n.batch 1000; .input 2; .hidden 2 relu; .output 2 softmax;', "1:29"),
])
def test_a_rate_a_float32_flushes_to_zero_is_refused(tmp_path, text, where):
    """`.optimizer sgd 1e-49` generated `const gv_t rate = 1e-49f;`: "floating constant truncated to
    zero" under -Werror, and an update by zero had it compiled. rate / batch must be a normal float32."""
    path = program(tmp_path, text)
    with pytest.raises(NNBuildError) as error:
        gravity_g.load(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{where}: the sgd rate ") and "smallest normal float32" in message
    assert "\n" not in message


def test_the_smallest_normal_rate_is_accepted_and_every_builder_is_checked(tmp_path):
    model = gravity_g.load(program(tmp_path, '.module "m"; .optimizer sgd 1.2E-38; .input 2; .hidden 2 relu; '
                                             '.output 2 softmax;'))
    assert model.learning_rate == 1.2e-38
    model.learning_rate = 1e-45   # e.g. a JIT model made from a network, not from a .g file
    with pytest.raises(NNBuildError, match="smallest normal float32"):
        ir.validate(model)


@pytest.mark.parametrize("directive, length, refused", [("module", 63, False), ("module", 64, True),
                                                         ("module", 100_000, True), ("prefix", 64, True)])
def test_names_longer_than_a_c_identifier_are_refused(tmp_path, run_cli, directive, length, refused):
    """A .module of 100,000 characters was `OSError: File name too long` (a traceback)."""
    name = "a" * length
    text = f'.module "{name if directive == "module" else "m"}"; .prefix "{name if directive == "prefix" else "p"}";'
    path = program(tmp_path, text + " .input 2; .hidden 2 relu; .output 2 softmax;")
    result = run_cli("generate", path, "-o", tmp_path / "out")
    if not refused:
        assert result.returncode == 0, result.stderr
        assert (tmp_path / "out" / f"{name}.c").is_file()
        return
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"nnbuild: error: {path}:1:{9 if directive == 'module' else 22}: "
                                     f".{directive} name of {length:,} characters: at most 63 (the "
                                     "significant characters of a C identifier)")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("target", ["atmega328p", "avr"])
def test_a_blob_larger_than_the_boards_ram_is_refused_before_any_c(tmp_path, run_cli, target):
    """`.input 20000; .hidden 20000 relu` for AVR generated C declaring a 3.2 GB blob: "large
    integer implicitly truncated" at compile time. The capability check compares blob and RAM."""
    path = program(tmp_path, '.module "big"; .input 20000; .hidden 20000 relu; .output 2 softmax;')
    result = run_cli("generate", path, "-o", tmp_path / "out", "--target", target)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0
    assert f"{path}: Gravity program 'big' (20000-20000-2) needs 3,200,720,040 bytes of RAM in float32" in result.stderr
    assert "a memory blob of 3,200,640,032 bytes" in result.stderr and f"board {target} has " in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    from nnbuild import boards, kinds
    kind, model = kinds.get("gravity"), gravity_g.load(path)
    assert kinds.refusal(kind, "gravity", "float32", boards.load_board("host"), model) is None
    small_model = gravity_g.load(program(tmp_path, small(), "small.g"))
    assert kinds.refusal(kind, "gravity", "float32", boards.load_board(target), small_model) is None


@pytest.mark.e2e  # compiles
@pytest.mark.parametrize("hidden, output", [("tanh", "softmax"), ("sigmoid", "tanh"), ("relu", "sigmoid")])
def test_a_format_without_one_computes_one_minus_x_and_compiles(tmp_path, hidden, output):
    """fixed [1, 15] holds [-1, 1): `gv_sub(32768, a[j])` overflowed int16_t (-Werror=overflow)."""
    model = gravity_g.load(program(tmp_path, f'.module "m"; .precision fixed [1, 15]; .costfnc quadratic; '
                                             f'.input 3; .hidden 4 {hidden}; .output 3 {output};'))
    files = generator.render(model)
    assert "gv_sub(32768" not in files["m.c"]
    for name in ("m.c", "m.h"):
        (tmp_path / name).write_text(files[name])
    for cc in (["gcc"], ["avr-gcc", "-mmcu=atmega1284"] if shutil.which("avr-gcc") else None):
        if cc:
            subprocess.run(cc + ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", "m.c", "-o", "m.o"],
                           cwd=tmp_path, check=True)


def random_program(rng, k):
    """A seeded .g program over the whole language: precisions, activations, costs, batch, rates
    near the float32 floor, widths up to what a board cannot hold."""
    activations = ("relu", "linear", "softmax", "sigmoid", "tanh")
    whole = int(rng.integers(1, 33))
    precision = rng.choice(["float", "double", f"fixed [{whole}, {int(rng.integers(0, 33 - whole))}]"])
    cost = rng.choice(list(ir.COSTS))
    output = rng.choice(["softmax", "sigmoid"] if cost == "cross_entropy" else list(activations))
    hidden = "".join(f".hidden {int(rng.integers(1, 10))} {rng.choice(activations)};\n"
                     for _ in range(int(rng.integers(1, 4))))
    rate = rng.choice(["1.0", "0.5", "1.0E-3", "1.0E-37", "1.2E-38", "2.0E-38"])
    inputs = int(rng.integers(1, 70000)) if rng.random() < 0.15 else int(rng.integers(1, 10))
    return (f'.module "m{k}"; .prefix "p{k}"; .optimizer sgd {rate}; .precision {precision}; .costfnc {cost};\n'
            f".batch {int(rng.integers(1, 1001))}; .input {inputs};\n{hidden}.output {int(rng.integers(1, 10))} {output};\n")


@pytest.mark.e2e  # compiles with gcc and avr-gcc
def test_every_program_generate_accepts_compiles_for_its_board(tmp_path):
    """Property (issue 23, point 6): seeded random programs through the generate step for the host
    and the AVR boards, in the .g's precision and float32; whatever it accepts compiles warning-free
    with the board's own flags, whatever it refuses is one line."""
    from nnbuild import boards, steps
    rng = np.random.default_rng(23)
    compiled = 0
    for k in range(30):
        path = program(tmp_path, random_program(rng, k), f"m{k}.g")
        try:
            model = gravity_g.load(path)
        except NNBuildError as error:
            assert "\n" not in str(error)
            continue
        for target in ("host", "avr", "atmega328p"):
            board = boards.load_board(target)
            if board["cc"] != "gcc" and not shutil.which(board["cc"]):
                continue
            for precision in (model.precision, "float32"):
                out = tmp_path / f"out{k}_{target}_{precision}"
                try:
                    steps.generate(path, out, precision=precision, target=target)
                except NNBuildError as error:
                    assert "\n" not in str(error)
                    assert not out.exists() or not any(out.glob("*.c"))
                    continue
                subprocess.run([board["cc"], *board["cflags"], board["opt"], "-c", f"m{k}.c", "-o", f"m{k}.o"],
                               cwd=out, check=True)
                compiled += 1
    assert compiled >= 30


# --------------------------------------------------------------------------- AVR's value-fact shape

BLOB_DRIVER = r"""
#include <stdio.h>
#include "net.h"

static float blob[NET_MEMORY_SIZE / sizeof(float)];
static float x[NET_BATCH * NET_INPUTS], y[NET_BATCH * NET_OUTPUTS];

/* stdin: the blob, a batch of inputs, its targets; stdout: activate on the first input, then the
 * blob after one train step */
int main(void)
{
    const float *out;
    if (fread(blob, sizeof blob, 1, stdin) != 1 || fread(x, sizeof x, 1, stdin) != 1
        || fread(y, sizeof y, 1, stdin) != 1) return 2;
    out = (const float *)nt_activate(blob, x);
    fwrite(out, sizeof(float), NET_OUTPUTS, stdout);
    nt_train(blob, x, y);
    fwrite(blob, sizeof blob, 1, stdout);
    return 0;
}
"""


def avr_shape_on_the_host(tmp_path, text):
    """The C an AVR board gets (value-fact shape), compiled by gcc: (model, plan, run(blob, x, y))."""
    model = gravity_g.parse("net.g", text)
    files = generator.render(model, storage="avr-progmem-far")
    for name in ("net.c", "net.h"):
        (tmp_path / name).write_text(files[name])
    (tmp_path / "driver.c").write_text(BLOB_DRIVER)
    exe = tmp_path / "net"
    subprocess.run(["gcc", "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{tmp_path}",
                    str(tmp_path / "driver.c"), str(tmp_path / "net.c"), "-o", str(exe), "-lm"], check=True)
    plan = ir.plan(model)

    def run(blob, x, y):
        stdin = np.asarray(blob, np.float32).tobytes() + np.asarray(x, np.float32).tobytes() + \
            np.asarray(y, np.float32).tobytes()
        out = np.frombuffer(subprocess.run([str(exe)], input=stdin, capture_output=True, check=True).stdout,
                            np.float32)
        return out[:model.output_size], ir.unpack(plan, out[model.output_size:])
    return model, plan, files, run


@pytest.mark.parametrize("batch", [1, 3])
def test_the_avr_value_fact_shape_stays_at_the_float_floor(tmp_path, batch):
    """Flushes below 2^-63, sign-split sums, softmax's expf cut at -17.5, batch 1's stored gradient
    sums: activate and one train step against float64, with tiny inputs (flushed) and weights
    scaled so some softmax terms fall below the cut."""
    model, plan, files, run = avr_shape_on_the_host(tmp_path, small("relu", "softmax", "cross_entropy", "float",
                                                                    batch=batch))
    rng = np.random.default_rng(9)
    for scale in (1.0, 40.0):
        weights = [(w * scale, b + 0.1 * scale) for w, b in ir.unpack(plan, ir.initial_blob(plan, 3))]
        x = rng.uniform(-1, 1, (batch, 5)).astype(np.float32)
        x[0, :2] = [1e-40, -3e-20]   # a subnormal and a value below 2^-63: flushed
        y = np.eye(4)[rng.integers(0, 4, batch)]
        weights = [(w.astype(np.float32), b.astype(np.float32)) for w, b in weights]
        outputs, after = run(ir.pack(plan, weights), x, y)
        expected = ir.activate(model, weights, x[:1])[0]
        assert np.abs(outputs - expected).max() < 2e-6
        if scale > 1:
            assert expected.min() < np.exp(generator.SOFTMAX_CUT)   # the cut runs
        for (w, b), (ew, eb) in zip(after, ir.train_step(model, weights, x, y)):
            floor = 1e-6 * max(1.0, np.abs(ew).max(), np.abs(eb).max())   # float32 relative to the largest
            assert np.abs(w - ew).max() < floor and np.abs(b - eb).max() < floor


def test_value_facts_mark_every_soft_float_operation_they_cover(tmp_path):
    """AVR float32: a mul fact per multiply line, an add fact per sign-split addition, softmax's
    exp, sum and division; host code and fixed point carry none."""
    model = gravity_g.parse("net.g", small("relu", "softmax", "cross_entropy", "float", batch=1))
    files = generator.render(model, storage="avr-progmem-far")
    code, facts = files["net.c"].splitlines(), files["net.flowfacts.json"]["values"]
    ops = {}
    for fact in facts:
        ops.setdefault(fact["op"], []).append(code[fact["line"] - 1])
    assert all("*" in line for line in ops["mul"]) and len(ops["mul"]) == 3 * 2 + 2 + 1   # affine, gw, back, update
    assert all("+=" in line or "-=" in line for line in ops["add"])
    assert ["expf(d)" in line for line in ops["exp"]] == [True] and ["/= sum" in line for line in ops["div"]] == [True]
    assert "gv_axpy" not in files["net.c"] and "2^-63" in files["net.c"]
    for storage, precision in (("const", None), ("avr-progmem-far", "fixed8.8")):
        other = generator.render(model, storage=storage, precision=precision)
        assert not other["net.flowfacts.json"].get("values")
