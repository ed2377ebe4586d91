"""The ONNX backend test data shipped in the `onnx` wheel (onnx/backend/test/data: pytorch-converted,
pytorch-operator, simple), run through nnbuild on the host.

Each case is a model.onnx with test_data_set_*/input_*.pb and output_*.pb recorded by PyTorch or the
ONNX authors. A case counts when onnxruntime itself reproduces its outputs (the ONNX backend test's
tolerance, rtol 1e-3 and atol 1e-7): that subset is the denominator. nnbuild either refuses the model
at load, in one line (the reason is counted), or generates the v2 C, compiles it with the strict
flags, runs every recorded input (a static batch of N runs as N calls; a model of several inputs
and outputs through its flat check vectors) and must match the recorded outputs at the float32
floor: max |C - recorded| <= 1e-5 x max(1, max |recorded|).

The wheel ships no files of the ONNX node tests, so the survey adds the node tests of the recurrent
operators (LSTM, GRU, RNN) as the suite "node-recurrent", built by the wheel's own generators
(onnx/backend/test/case/node/lstm.py, gru.py, rnn.py; numpy's global seed set to 0 first, since two
of them draw random weights). Those tests declare every operand a graph input, the weights too; a
deployed model holds its weights as initializers, and nnbuild refuses weights given at run time
("W and R must be constants"). So, for nnbuild only, a graph input that feeds a weight slot of the
recurrent node (W, R, B, and LSTM's peepholes P: WEIGHT_SLOTS) is folded into an initializer holding
the value the test data records for it (the same in every data set, else nothing is folded);
onnxruntime runs the case as recorded. Nothing else is folded: an initial state or sequence_lens
given as an input stays an input (a state input is an argument of the C function; sequence_lens
read at run time is refused).

`python3 tests/onnx_conformance.py` prints the README's pass table (markdown).
"""

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

FILE_SUITES = ("pytorch-converted", "pytorch-operator", "simple")
#: the suite of the recurrent operators' node tests, made by the wheel's generators
NODE_SUITE = "node-recurrent"
SUITES = FILE_SUITES + (NODE_SUITE,)
#: the recurrent operators and their input slots that hold weights (W, R, B; P for LSTM)
WEIGHT_SLOTS = {"LSTM": (1, 2, 3, 7), "GRU": (1, 2, 3), "RNN": (1, 2, 3)}
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-ffp-contract=off"]
FLOOR = 1e-5
#: generated C above this size compiles at -O0: gcc -O1 spends about 40 s CPU on the 3.4 MB C of
#: pytorch-converted's MaxPool2d_stride_padding_dilation (-O0: 8 s); the comparison at the float
#: floor does not depend on the level (-ffp-contract=off, SSE arithmetic on x86-64) and the
#: optimised strict compiles are tests/test_c_warnings.py's
LARGE_C_BYTES = 1 << 20


def data_dir():
    import onnx
    return Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


class Case:
    """One backend case: the model and data sets onnxruntime runs (as recorded) and the ones nnbuild
    runs (the same, but for the node tests' weights folded into initializers)."""

    def __init__(self, name, ort_model, ort_sets, model=None, sets=None):
        self.name, self.ort_model, self.ort_sets = name, ort_model, ort_sets
        self.model = ort_model if model is None else model
        self.sets = ort_sets if sets is None else sets


def cases(suite):
    if suite == NODE_SUITE:
        return node_cases()
    return [Case(p.name, p / "model.onnx", data_sets(p))
            for p in sorted(p for p in (data_dir() / suite).iterdir() if (p / "model.onnx").exists())]


def node_cases():
    """The node tests of LSTM, GRU and RNN from the wheel's generators, weights folded for nnbuild."""
    import importlib
    import onnx.backend.test.case.node as node_tests
    state = np.random.get_state()
    np.random.seed(0)
    try:
        made = []
        for module in ("lstm", "gru", "rnn"):
            before = len(node_tests._NodeTestCases)
            importlib.import_module(f"onnx.backend.test.case.node.{module}")
            made += node_tests._NodeTestCases[before:]
    finally:
        np.random.set_state(state)
    out = []
    for case in made:
        sets = [(list(i), list(o)) for i, o in case.data_sets]
        model, kept = fold_weights(case.model, sets)
        out.append(Case(case.name, case.model, sets, model, kept))
    return sorted(out, key=lambda c: c.name)


def fold_weights(model, sets):
    """(the model with the graph inputs that feed a recurrent node's weight slot made initializers of
    their recorded values, the data sets without those inputs); unchanged where the values differ
    between the data sets."""
    import onnx
    from onnx import numpy_helper
    names = [i.name for i in model.graph.input]
    weights = {node.input[k] for node in model.graph.node if node.op_type in WEIGHT_SLOTS
               for k in WEIGHT_SLOTS[node.op_type] if k < len(node.input) and node.input[k] in names}
    fold = [k for k, n in enumerate(names) if n in weights
            and all(np.array_equal(inputs[k], sets[0][0][k]) for inputs, _ in sets)]
    if not fold:
        return model, sets
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    del folded.graph.input[:]
    folded.graph.input.extend(i for k, i in enumerate(model.graph.input) if k not in fold)
    folded.graph.initializer.extend(numpy_helper.from_array(sets[0][0][k], names[k]) for k in fold)
    return folded, [([a for k, a in enumerate(inputs) if k not in fold], outputs) for inputs, outputs in sets]


def data_sets(case):
    """[(inputs, outputs)] of every test_data_set_* folder (numpy arrays, in name order)."""
    from onnx import numpy_helper, TensorProto
    out = []
    for folder in sorted(case.glob("test_data_set_*")):
        def read(kind):
            arrays = []
            for f in sorted(folder.glob(f"{kind}_*.pb"), key=lambda p: int(re.findall(r"\d+", p.stem)[-1])):
                t = TensorProto()
                t.ParseFromString(f.read_bytes())
                arrays.append(numpy_helper.to_array(t))
            return arrays
        out.append((read("input"), read("output")))
    return out


def onnxruntime_passes(case):
    """Whether onnxruntime reproduces the recorded outputs (the backend test's tolerance)."""
    import onnxruntime as ort
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        model = case.ort_model
        session = ort.InferenceSession(str(model) if isinstance(model, Path) else model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for inputs, outputs in case.ort_sets:
            got = session.run(None, dict(zip(names, inputs)))
            if len(got) != len(outputs):
                return False
            for g, want in zip(got, outputs):
                np.testing.assert_allclose(np.asarray(g), want, rtol=1e-3, atol=1e-7)
        return True
    except Exception:  # noqa: BLE001 (any failure of the peer means the case is out of the denominator)
        return False


def refusal_reason(message):
    """A short key for a refusal line: the operator named, else the message's first words."""
    m = re.search(r"\((\w+)\): operator", message) or re.search(r"operator '?(\w+)'? (?:is )?not", message)
    if m:
        return f"operator {m.group(1)}"
    text = re.sub(r"^.*?: ", "", message.splitlines()[0]) if ": " in message else message
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\d+", "N", text)
    return text[:70]


def run_nnbuild(case, workdir, run_c=True):
    """('pass', max error) | ('refused', one-line message) | ('fail', what); without `run_c`, a case
    nnbuild generates is ('generated', None): its C is neither compiled nor run."""
    from nnbuild import codegen, frontends
    from nnbuild.errors import NNBuildError
    from nnbuild.runners import CHECK_MAIN, check_main_defines, native
    path = case.model
    if not isinstance(path, Path):   # a node test: the model file nnbuild reads, weights folded
        import onnx
        path = Path(workdir) / case.name / "model.onnx"
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(case.model, str(path))
    try:
        model = frontends.load(path)
    except NNBuildError as error:
        message = str(error)
        if "\n" in message.strip():
            return "fail", f"refusal of more than one line: {message!r}"
        return "refused", message
    out = Path(workdir) / case.name / "gen"
    try:
        codegen.generate(model, out, shape="v2", storage="const", passes_log=[])
    except NNBuildError as error:
        return "refused", str(error)
    if not run_c:
        return "generated", None
    exe = out / "check"
    level = "-O0" if (out / f"{model.name}.c").stat().st_size > LARGE_C_BYTES else "-O1"
    proc = subprocess.run(["gcc", level, *WARNINGS, f"-I{out}",
                           *check_main_defines(f"{model.name}.h", f"{model.name}_infer", model.input_size,
                                               model.output_size, several_io=model.several_io),
                           str(out / f"{model.name}.c"), str(out / f"{model.name}_weights.c"), str(CHECK_MAIN),
                           "-o", str(exe), "-lm"], capture_output=True, text=True)
    if proc.returncode:
        return "fail", f"C does not compile: {proc.stderr.strip()[:300]}"
    worst = 0.0
    in_sizes = [int(np.prod(shape)) for _, shape in model.inputs]
    out_sizes = [int(np.prod(shape)) for shape in model.output_shapes()]
    for inputs, outputs in case.sets:
        if len(inputs) != len(in_sizes) or len(outputs) != len(out_sizes):
            return "fail", f"{len(inputs)} inputs / {len(outputs)} outputs recorded, the model has {len(in_sizes)} / {len(out_sizes)}"
        rows = inputs[0].size // in_sizes[0]
        if any(rows * n != a.size for n, a in zip(in_sizes + out_sizes, inputs + outputs)):
            return "fail", (f"sizes: inputs {[a.shape for a in inputs]} outputs {[a.shape for a in outputs]} vs model "
                            f"{in_sizes}/{out_sizes}")
        # a static batch of N runs as N calls; each call's vector holds every input's sample (model order)
        x = np.concatenate([a.astype(np.float32).reshape(rows, -1) for a in inputs], axis=1)
        want = np.concatenate([a.astype(np.float64).reshape(rows, -1) for a in outputs], axis=1)
        y = native.run_cases(exe, x, model.output_size)
        err = float(np.max(np.abs(y.reshape(-1) - want.reshape(-1)))) if want.size else 0.0
        worst = max(worst, err / max(1.0, float(np.max(np.abs(want))) if want.size else 1.0))
    if worst > FLOOR:
        return "fail", f"max relative error {worst:.3g} > {FLOOR}"
    return "pass", worst


def survey(suites=SUITES, workdir=None, leave_out=(), denominator_c_only=False):
    """{suite: [(case name, onnxruntime passes, status, detail)]}, but for the cases named in
    `leave_out`; with `denominator_c_only`, the C of a case onnxruntime does not reproduce (outside
    the denominator: its match is not counted) is not compiled nor run ('generated')."""
    results = {}
    with tempfile.TemporaryDirectory(prefix="nnbuild-onnx-conformance-") as tmp:
        for suite in suites:
            results[suite] = []
            for case in cases(suite):
                if case.name in leave_out:
                    continue
                ort_ok = onnxruntime_passes(case)
                status, detail = run_nnbuild(case, workdir or tmp, run_c=ort_ok or not denominator_c_only)
                results[suite].append((case.name, ort_ok, status, detail))
    return results


def table(results):
    """The README table: per suite, cases, onnxruntime's passes, nnbuild's passes and refusals."""
    lines = ["| suite | cases | onnxruntime passes | nnbuild matches (of those) | nnbuild refuses (of those) | "
             "nnbuild wrong |", "|---|---|---|---|---|---|"]
    reasons = collections.Counter()
    for suite, rows in results.items():
        denominator = [r for r in rows if r[1]]
        passed = sum(1 for r in denominator if r[2] == "pass")
        refused = [r for r in denominator if r[2] == "refused"]
        wrong = sum(1 for r in denominator if r[2] == "fail")
        reasons.update(refusal_reason(r[3]) for r in refused)
        lines.append(f"| {suite} | {len(rows)} | {len(denominator)} | {passed} | {len(refused)} | {wrong} |")
    lines += ["", "| refusal reason (onnxruntime-passing cases) | cases |", "|---|---|"]
    lines += [f"| {reason} | {n} |" for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    res = survey()
    for suite, rows in res.items():
        for name, ort_ok, status, detail in rows:
            print(f"{suite}/{name}: onnxruntime {'ok' if ort_ok else 'no'}, nnbuild {status}: {detail}",
                  file=sys.stderr)
    print(table(res))
