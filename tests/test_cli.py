"""`python -m nnbuild ...`: what a user runs outside SCons.

A few tests start the real command (`nnbuild`: the entry point, exit status and streams of a
process); the rest call the same command line in-process (`run_cli`, conftest.py), which saves an
interpreter start and the imports on each."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, needs_avr, shared_file
from keras_files import dense, write_full_model
from nnbuild import cli, steps

GOLDEN_L61 = -0.662313857  # ../shared/data/f1tenth/README.md, all inputs 0.1 (tf_keras: -0.6623139)


def nnbuild(*args):
    """The real command in a new interpreter."""
    return subprocess.run([sys.executable, "-m", "nnbuild", *args], cwd=REPO, capture_output=True, text=True)


def golden_data(tmp_path, y=GOLDEN_L61):
    data = tmp_path / "golden.npz"
    np.savez(data, x=np.full((1, 61), 0.1, dtype=np.float32), y=np.array([[y]]))
    return data


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_check_matches_keras_golden_on_host(tmp_path, run_cli):
    """In-process (run_cli): the real command runs on simavr below."""
    model = shared_file("data", "f1tenth", "TD3_L61_128x128_C1.h5")
    result = run_cli("check", str(model), "--data", str(golden_data(tmp_path)), "--tolerance", "1e-6")
    assert result.returncode == 0, result.stderr
    assert "max |C - y|" in result.stdout and "max |C - reference|" in result.stdout


@pytest.mark.e2e
@needs_avr
def test_check_matches_keras_golden_on_simavr(tmp_path):
    model = shared_file("data", "f1tenth", "TD3_L61_128x128_C1.h5")
    result = nnbuild("check", str(model), "--data", str(golden_data(tmp_path)), "--target", "avr",
                     "--tolerance", "1e-6")
    assert result.returncode == 0, result.stderr
    assert "on simavr" in result.stdout and "cycles" in result.stdout


@pytest.mark.e2e  # f1tenth's check build; in the quick tier test_check_json_prints_the_record_on_stdout_pass_and_fail
# (its failing check: exit 2, one "nnbuild: error:" line with "> tolerance") and
# test_check_leaves_no_temp_dir_pass_or_fail_and_loads_the_model_once fail a check above its tolerance
def test_check_fails_above_tolerance_with_one_line(tmp_path, run_cli):
    model = shared_file("data", "f1tenth", "TD3_L21_64x64_C1.h5")
    data = tmp_path / "bad.npz"
    np.savez(data, x=np.full((1, 21), 0.1, dtype=np.float32), y=np.array([[-0.6]]))
    result = run_cli("check", str(model), "--data", str(data), "--tolerance", "1e-3")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "> tolerance" in result.stderr


def test_generate_unsupported_layer_is_one_line_and_writes_nothing(tmp_path, run_cli):
    lstm = {"class_name": "LSTM", "weights": [],
            "config": {"name": "lstm_1", "units": 4, "batch_input_shape": [None, 3, 2]}}
    path = write_full_model(tmp_path / "rnn.h5", [lstm, dense("dense_1", np.zeros((4, 2)), np.zeros(2))])
    out = tmp_path / "out"
    result = run_cli("generate", str(path), "-o", str(out))
    assert result.returncode == 2
    assert result.stderr.startswith("nnbuild: error:") and result.stderr.strip().count("\n") == 0
    assert "lstm_1" in result.stderr and "LSTM" in result.stderr and "rnn.h5" in result.stderr
    assert not out.exists()


def test_generate_writes_the_declared_files(tmp_path, run_cli):
    result = run_cli("generate", "firmware_examples/xor/xor.h5", "-o", str(tmp_path), "--target", "avr")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["xor.h", "xor.c", "xor_weights.h", "xor_weights.c", "xor.flowfacts.json", "xor.trace.json"])


# ----------------------------------------------------------------------------- hostile input (issue 9)

XOR = REPO / "firmware_examples" / "xor" / "xor.h5"


def one_line_error(result, *needles):
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("nnbuild: error:") and result.stderr.strip().count("\n") == 0, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)


def bad_data_files(tmp_path):
    """(label, path, expected words) for every malformed --data file the campaign tried."""
    d = tmp_path
    files = []

    def npz(label, words, **arrays):
        path = d / f"{label}.npz"
        np.savez(path, **arrays)
        files.append((label, path, words))

    npz("no_x", "no inputs 'x'", y=np.zeros((2, 1)))
    npz("zero_rows", "no cases", x=np.zeros((0, 2)))
    npz("string_x", "text, not real numbers", x=np.array([["a", "b"]]))
    npz("string_y", "'y' holds text", x=np.zeros((1, 2)), y=np.array([["a"]]))
    npz("complex_x", "complex", x=np.zeros((1, 2), dtype=complex))
    npz("scalar_x", "no cases", x=np.float32(1.0))
    npz("wide_x", "the model takes 2 values per case, 'x' has 3", x=np.zeros((4, 3)))
    npz("y_rows", "'y' has 3 rows for 2 cases", x=np.zeros((2, 2)), y=np.zeros((3, 1)))
    npz("y_width", "the model gives 1 values per case, 'y' has 2", x=np.zeros((2, 2)), y=np.zeros((2, 2)))
    (d / "text.npz").write_text("x = 1, 2\n")
    files.append(("text", d / "text.npz", "not an .npz"))
    (d / "empty.npz").write_bytes(b"")
    files.append(("empty", d / "empty.npz", "not an .npz"))
    np.save(d / "single.npy", np.zeros((1, 2)))
    (d / "single.npy").rename(d / "npy.npz")
    files.append(("npy", d / "npy.npz", "single .npy array"))
    np.savez(d / "objects.npz", x=np.array([[1, None]], dtype=object))
    files.append(("objects", d / "objects.npz", "object arrays"))
    files.append(("missing", d / "missing.npz", "check data file not found"))
    return files


def test_check_data_is_validated_in_one_line(tmp_path, capsys):
    """In-process (cli.main) for speed; the shell: test_a_refused_option_is_one_line_and_exit_2_from_the_shell."""
    from nnbuild import cli
    for label, path, words in bad_data_files(tmp_path):
        assert cli.main(["check", str(XOR), "--data", str(path)]) == 2, label
        captured = capsys.readouterr()
        result = subprocess.CompletedProcess([], 2, captured.out, captured.err)
        one_line_error(result, str(path), words)


def test_check_nan_inputs_pass_when_c_and_reference_agree_on_nan(tmp_path, run_cli):
    """A float model fed NaN gives NaN in C and in the reference: equal, not an infinite error."""
    from nnbuild.checks.semantic import max_abs_error
    assert max_abs_error([[np.nan, 1.0]], [[np.nan, 1.0]]) == (0.0, 0)
    assert max_abs_error([[np.nan, 1.0]], [[0.5, 1.0]])[0] == float("inf")
    assert max_abs_error([[1.0], [np.inf]], [[1.0], [np.inf]]) == (0.0, 0)
    assert max_abs_error([[1.0], [np.inf]], [[1.0], [-np.inf]]) == (float("inf"), 1)
    data = tmp_path / "nan.npz"
    np.savez(data, x=np.array([[np.nan, 0.0], [1.0, 0.0]], dtype=np.float32))
    result = run_cli("check", str(XOR), "--data", str(data))
    assert result.returncode == 0, result.stderr
    assert "max |C - reference| = 0" in result.stdout or "max |C - reference| = " in result.stdout


def test_check_leaves_no_temp_dir_pass_or_fail_and_loads_the_model_once(tmp_path, monkeypatch, capsys):
    from nnbuild import cli, frontends
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", None)
    loads = []
    real_load = frontends.load
    monkeypatch.setattr(frontends, "load", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    good = tmp_path / "good.npz"
    np.savez(good, x=np.array([[0.0, 1.0]], dtype=np.float32))
    assert cli.main(["check", str(XOR), "--data", str(good)]) == 0
    assert len(loads) == 1
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.array([[0.0, 1.0]], dtype=np.float32), y=np.array([[5.0]]))
    assert cli.main(["check", str(XOR), "--data", str(bad)]) == 2
    assert "> tolerance" in capsys.readouterr().err
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("args,words", [
    (["--tolerance", "abc"], "tolerance 'abc'"),
    (["--tolerance", "nan"], "tolerance 'nan'"),
    (["--tolerance=-1"], "tolerance '-1'"),
    (["--opt", "-O9"], "optimisation flag '-O9'"),
    (["--precision", "fixed99.3"], "fixed99.3"),
    (["--name", "bad name;"], "model name 'bad name;'"),
    (["--name", "../escaped"], "model name '../escaped'"),
])
def test_check_options_are_refused_in_one_line(tmp_path, run_cli, args, words):
    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((1, 2), dtype=np.float32))
    one_line_error(run_cli("check", str(XOR), "--data", str(data), *args), words)


def test_a_refused_option_is_one_line_and_exit_2_from_the_shell(tmp_path):
    """The argparse refusal path (SystemExit) through the real interpreter, as a user meets it."""
    data = tmp_path / "d.npz"
    np.savez(data, x=np.zeros((1, 2), dtype=np.float32))
    one_line_error(nnbuild("check", str(XOR), "--data", str(data), "--tolerance", "abc"), "tolerance 'abc'")


def test_generate_refuses_a_bad_name_and_writes_nothing(tmp_path, run_cli):
    for name in ("bad name;", "../escaped", "int", "math"):
        one_line_error(run_cli("generate", str(XOR), "-o", str(tmp_path / "out"), "--name", name), "model name")
    assert not (tmp_path / "out").exists()
    assert not (REPO / "escaped").exists()


# the standard headers differ only by name: one of them (stdint, which the generated C includes) in
# the quick tier, the rest in e2e
@pytest.mark.parametrize("stem", ["stdint", "check_main", *(pytest.param(s, marks=pytest.mark.e2e)
                                                            for s in ("math", "stdio", "string"))])
def test_models_named_like_headers_or_our_files_build(tmp_path, run_cli, stem):
    """math.h5 must not make a math.h that hides <math.h> (the C would not compile)."""
    path = tmp_path / f"{stem}.h5"
    path.write_bytes(XOR.read_bytes())
    data = tmp_path / "d.npz"
    np.savez(data, x=np.array([[0.0, 1.0], [1.0, 1.0]], dtype=np.float32))
    result = run_cli("check", str(path), "--data", str(data), "--build-dir", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "b" / "gen" / f"{stem}_model.h").exists()


@pytest.mark.e2e  # two full project copies, each generating every file
def test_generated_files_are_identical_across_clones(tmp_path, run_cli):
    """No absolute path or machine detail in any output: two copies of a model give the same bytes.
    In-process (run_cli: no interpreter start and import per generation); the generate step in a
    process of its own in each checkout, through SCons: test_reproducible.py."""
    import shutil
    dot = REPO.parent / "shared/data/tpg/sips22/cleaned/out_best_cleaned.fishing_derby.9.t48.dot"
    cases = [("xor.h5", XOR, []), ("architecture.json", REPO / "firmware_examples/f1tenth/architecture.json",
                                  ["--precision", "q16", "--range=-1,1"])]
    if dot.exists():
        cases.append(("fd.dot", dot, ["--environment", "sips22-atari", "--shape", "stack"]))
    for filename, src, extra in cases:
        outs = []
        for clone in ("a/deep/clone", "b"):
            d = tmp_path / clone / src.parent.name
            d.mkdir(parents=True)
            shutil.copy(src, d / filename)
            if filename == "architecture.json":
                shutil.copy(src.parent / "weights.h5", d / "weights.h5")
            out = tmp_path / clone / "out"
            result = run_cli("generate", str(d / filename), "-o", str(out), "--name", "m", *extra)
            assert result.returncode == 0, result.stderr
            outs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
        assert outs[0] == outs[1], filename
        assert not any(str(tmp_path).encode() in b for b in outs[0].values())


def xor_data(tmp_path, y=None):
    data = tmp_path / "xor.npz"
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    np.savez(data, x=x, **({"y": np.asarray(y, dtype=np.float64)} if y is not None else {}))
    return data


#: each a check build: the quick tier keeps the float default and the fixedW.F formula; the named
#: fixed-point defaults (one table, one code path) are e2e (q16's is also checked in the quick tier
#: by test_check_json_prints_the_record_on_stdout_pass_and_fail)
E2E = pytest.mark.e2e


@pytest.mark.parametrize("precision, tolerance, why", [
    ("float32", 1e-4, "the float default"),
    pytest.param("q16", 1e-3, "the q16 default", marks=E2E),
    pytest.param("q16-acc32", 2e-3, "the q16-acc32 default", marks=E2E),
    pytest.param("q8", 2e-2, "the q8 default", marks=E2E),
    ("fixed8.12", 64 * 2.0 ** -12, "the fixedW.F default: 64 steps of 2^-12"),
])
def test_check_default_tolerance_follows_the_precision_and_says_why(tmp_path, capsys, precision, tolerance, why):
    from nnbuild import cli
    assert cli.main(["check", str(XOR), "--data", str(xor_data(tmp_path)), "--precision", precision,
                     "--range", "0,1"]) == 0
    out = capsys.readouterr().out
    assert f"tolerance {tolerance:g} ({why}" in out.splitlines()[0]


def test_check_json_prints_the_record_on_stdout_pass_and_fail(tmp_path, capsys):
    import json

    from nnbuild import cli
    assert cli.main(["check", str(XOR), "--data", str(xor_data(tmp_path)), "--json", "--precision", "q16",
                     "--range", "-1,1", "--opt", "-O0"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["passed"] and record["tolerance"] == 1e-3 and record["tolerance_why"].startswith("the q16 default")
    assert record["semantic"]["runs"]["host"]["max_abs_error"] <= 1e-3 and record["semantic"]["cases"] == 4
    assert record["summary"][0].startswith("tolerance 0.001") and "xor on host: 4 inputs" in record["summary"][-1]
    assert cli.main(["check", str(XOR), "--data", str(xor_data(tmp_path, y=[[5.0]] * 4)), "--json"]) == 2
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert not record["passed"] and "> tolerance" in record["error"] and record["semantic"]["runs"]["host"]
    assert captured.err.startswith("nnbuild: error:") and captured.err.count("\n") == 1


def test_range_and_opt_take_their_dash_value_as_the_next_word(tmp_path, run_cli):
    """`--range -1,1` and `--opt -O0` (space form), as `--range=-1,1` and `--opt=-O0`."""
    result = run_cli("check", str(XOR), "--data", str(xor_data(tmp_path)), "--precision", "q16", "--range", "-1,1",
                     "--opt", "-O0", "--tolerance", "1e-2")
    assert result.returncode == 0, result.stderr
    assert "tolerance 0.01 (--tolerance)" in result.stdout


def test_outputs_are_readable_like_any_file_the_user_writes(tmp_path, run_cli):
    """Generated files and step outputs get 0666 less the umask (mkstemp alone would give 0600)."""
    import os

    from nnbuild import steps
    old = os.umask(0o022)
    try:
        assert run_cli("generate", str(XOR), "-o", str(tmp_path / "gen")).returncode == 0
        steps.save_json(tmp_path / "r.json", {})
        steps.save_npz(tmp_path / "r.npz", x=np.zeros(1))
        os.umask(0o027)
        steps.save_json(tmp_path / "private.json", {})
    finally:
        os.umask(old)
    for path in list((tmp_path / "gen").iterdir()) + [tmp_path / "r.json", tmp_path / "r.npz"]:
        assert oct(path.stat().st_mode & 0o777) == oct(0o644), path
    assert oct((tmp_path / "private.json").stat().st_mode & 0o777) == oct(0o640)


def test_cmake_dir_prints_the_folder_of_the_cmake_module():
    result = nnbuild("--cmake-dir")
    assert result.returncode == 0, result.stderr
    folder = Path(result.stdout.strip())
    assert (folder / "nnbuild.cmake").is_file() and (folder / "avr-gcc.cmake").is_file()


# ----------------------------------------------------------------------------- fitting the ecosystem (issue 25)


def test_help_lists_the_user_commands_and_sets_the_pipeline_steps_apart(run_cli):
    shown = run_cli("--help").stdout
    commands = shown[shown.index("commands:"):shown.index("pipeline steps")]
    for command in cli.USER_COMMANDS:
        assert f"\n    {command} " in commands, command
    for step in steps.STEPS:
        if step not in cli.USER_COMMANDS:
            assert f"\n    {step} " not in commands, step
            assert step in shown[shown.index("pipeline steps"):]
    assert run_cli("wcet", "--help").returncode == 0   # still callable: SCons and CMake run it


@pytest.mark.parametrize("command", cli.USER_COMMANDS)
def test_every_option_of_a_user_command_says_what_it_is(command):
    sub = cli.parser().commands.choices[command]
    silent = [action.dest for action in sub._actions if not action.help]
    assert silent == [], f"{command}: options without a help line: {silent}"


@pytest.mark.parametrize("args,line", [
    (["genrate"], "unknown command 'genrate' (did you mean 'generate'?)"),
    (["check", str(XOR), "--data", "d.npz", "--tolerence", "1e-3"], "check: unknown option '--tolerence' "
                                                                      "(did you mean '--tolerance'?)"),
    (["generate", str(XOR), "-o", "out", "--shap", "v2"], "did you mean '--shape'?"),
    (["generate", str(XOR), "-o", "out", "--shape", "v22"], "'v22' is not one of auto"),
])
def test_a_mistyped_command_or_option_is_one_line_with_the_nearest_name(run_cli, tmp_path, args, line):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("nnbuild: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert line in result.stderr
    assert "nnbuild: error: nnbuild" not in result.stderr


def test_generate_says_what_it_wrote_and_gives_json(tmp_path, run_cli):
    said = run_cli("generate", str(XOR), "-o", str(tmp_path / "a"))
    assert said.stdout.startswith(f"nnbuild: wrote 6 files to {tmp_path / 'a'}: xor.h, ") and said.stdout.count("\n") == 1
    record = json.loads(run_cli("generate", str(XOR), "-o", str(tmp_path / "b"), "--json").stdout)
    assert record["outdir"] == str(tmp_path / "b") and sorted(Path(f).name for f in record["files"]) == sorted(
        p.name for p in (tmp_path / "b").iterdir())
    quiet = run_cli("generate", str(XOR), "-o", str(tmp_path / "c"), "-q")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == sorted(p.name for p in (tmp_path / "b").iterdir())


@pytest.mark.e2e
def test_check_says_each_fact_once_and_the_timing_lines_only_with_v(tmp_path, run_cli):
    data = tmp_path / "d.npz"
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=np.float32)
    np.savez(data, x=x, y=np.array([[0], [1], [1], [0]], dtype=np.float32))
    said = run_cli("check", str(XOR), "--data", str(data), "--tolerance", "0.5", "--target", "avr")
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    assert len(lines) == len(set(lines)) and sum("max |C - reference|" in l for l in lines) == 1, lines
    assert "simavr:" not in said.stderr
    loud = run_cli("check", str(XOR), "--data", str(data), "--tolerance", "0.5", "--target", "avr", "-v")
    assert loud.returncode == 0 and "simavr: 4/4 cases" in loud.stderr
