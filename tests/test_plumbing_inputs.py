"""Files a user writes (example.json, board files) and names they give: wrong types, bombs and
flags that would run programs are one line naming the file and the key, never a traceback."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, copy_project, scons
from nnbuild import boards, cli, names, options, project
from nnbuild.compilers import flags
from nnbuild.errors import NNBuildError

XOR = REPO / "firmware_examples" / "xor" / "xor.h5"


def example(tmp_path, config):
    folder = tmp_path / "bad"
    folder.mkdir(exist_ok=True)
    shutil.copy(XOR, folder / "xor.h5")
    (folder / "example.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return folder


@pytest.mark.parametrize("config, words", [
    ({"model": 5}, "key 'model': 5 is not valid (expected: the model file"),
    ({"model": None}, "key 'model': null is not valid"),
    ({"model": ["xor.h5"]}, "key 'model': [\"xor.h5\"] is not valid"),
    ({"model": "xor.h5", "precision": 5}, "key 'precision': 5 is not valid"),

    ({"model": "xor.h5", "check_inputs": 2.5}, "key 'check_inputs': 2.5 is not valid"),
    ({"model": "xor.h5", "check_inputs": True}, "key 'check_inputs': true is not valid"),
    ({"model": "xor.h5", "input_range": [0, "x"]}, "key 'input_range[1]': \"x\" is not valid"),
    ({"model": "xor.h5", "seed": 1.5}, "key 'seed': 1.5 is not valid"),
    ({"model": "."}, "is neither a model file nor a model folder"),
    ('{"model": ' + "[" * 100000 + "]" * 100000 + "}", "example config is nested too deeply (more than 64 levels"),
])
def test_example_json_is_checked_in_one_line(tmp_path, config, words):
    folder = example(tmp_path, config)
    with pytest.raises(NNBuildError) as err:
        project.resolve("bad", tmp_path)
    line = str(err.value)
    assert line.startswith(str(folder / "example.json")) and words in line and "\n" not in line


@pytest.mark.parametrize("check_data", [".", "/dev/zero"])
def test_example_check_data_must_be_a_regular_file(tmp_path, check_data):
    """The refusal names the data file (a folder, a device), before any build step reads it."""
    example(tmp_path, {"model": "xor.h5", "check_data": check_data})
    with pytest.raises(NNBuildError, match="check data file is not a regular file") as err:
        project.resolve("bad", tmp_path)
    assert "\n" not in str(err.value)


def test_every_shipped_example_agrees_with_the_schema():
    import jsonschema
    schema = json.loads(project.SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for config in sorted((REPO / "firmware_examples").glob("*/example.json")):
        jsonschema.validate(json.loads(config.read_text()), schema)


@pytest.mark.parametrize("value, ok", [(2, 2), ("3", 3), (32.0, 32), (2.5, None), ("2.5", None), (True, None),
                                       (0, None), (None, None), ("1" * 5000, None)])
def test_counts_are_whole_numbers_never_truncated(value, ok):
    if ok is None:
        with pytest.raises(NNBuildError, match="is not a positive integer"):
            options.count(value)
    else:
        assert options.count(value) == ok


def board_file(tmp_path, stem="myboard", **change):
    data = {**json.loads(boards.board_path("host").read_text()), **change}
    path = tmp_path / f"{stem}.json"
    path.write_text(json.dumps(data))
    return path


def test_names_have_one_length_limit(tmp_path):
    long = "m" * (names.MAX_NAME_LENGTH + 1)
    assert names.is_c_identifier("m" * names.MAX_NAME_LENGTH) and not names.is_c_identifier(long)
    limit = names.MAX_NAME_LENGTH
    with pytest.raises(NNBuildError, match=f"model name 'm+\\.\\.\\.' has {limit + 1} characters; at most {limit} are allowed"):
        options.model_name(long)
    with pytest.raises(NNBuildError, match=f"key 'name': board name 'b+\\.\\.\\.' has 300 characters; at most {limit}"):
        boards.load_board(str(board_file(tmp_path, name="b" * 300)))


def test_a_name_of_300_characters_is_one_line_from_the_cli(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["check", str(XOR), "--data", "x.npz", "--name", "n" * 300])
    assert exit_.value.code != 0
    err = capsys.readouterr().err
    assert f"has 300 characters; at most {names.MAX_NAME_LENGTH} are allowed" in err and "Traceback" not in err


def test_a_board_file_nested_100000_deep_is_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"cc": "gcc", "cflags": [], "notes": ' + "[" * 100000 + "]" * 100000 + "}")
    with pytest.raises(NNBuildError, match="deep.json: board file is nested too deeply"):
        boards.load_board(str(path))


def test_every_shipped_board_passes_the_flag_allow_list():
    for name in boards.available_boards():
        board = boards.load_board(name)
        assert flags.check_board(board) is None


@pytest.mark.parametrize("key, value, words", [
    ("cflags", ["-wrapper", "sh,-c,touch pwned"], "runs a program around each compiler pass"),
    ("cflags", ["-B/tmp/evil"], "takes compiler programs from a folder"),
    ("cflags", ["-fplugin=/tmp/evil.so"], "loads code into the compiler"),
    ("cflags", ["@/tmp/options"], "reads more options from a file"),
    ("ldflags", ["--specs=/tmp/evil.specs"], "names a spec file"),
    ("ldflags", ["-specs=evil.specs"], "names a spec file"),
    ("cflags", ["-I/etc"], "reads headers from outside nnbuild"),
    ("cflags", ["-include", "/etc/passwd"], "reads a file into every compilation"),
    ("ldflags", ["-Wl,-Map,/tmp/x"], "passes options past this check"),
    ("ldflags", ["-Xlinker", "--foo"], "passes options past this check"),
    ("cflags", ["-DX=\"a\""], "not in the allow-list"),
    ("cflags", ["-fuse-ld=/tmp/ld"], "not in the allow-list"),
    ("libs", ["/tmp/libevil.a"], "a library is a name"),
    ("cc", "sh", "not a compiler or binutils program name"),
    ("objcopy", "/usr/bin/python3", "not a compiler or binutils program name"),
])
def test_board_flags_that_run_or_read_anything_are_refused(tmp_path, key, value, words):
    with pytest.raises(NNBuildError) as err:
        boards.load_board(str(board_file(tmp_path, **{key: value})))
    assert f"key '{key}'" in str(err.value) and words in str(err.value) and "is refused" in str(err.value)


@pytest.mark.parametrize("flag", ["-mmcu=atmega2560", "-mcpu=cortex-m7", "-O3", "-fno-strict-aliasing", "-Wshadow",
                                  "-gdwarf-4", "-std=gnu11", "--specs=nano.specs",
                                  "-Wl,--defsym=__DATA_REGION_LENGTH__=0x2000", "-Wl,--gc-sections"])
def test_board_flags_of_the_usual_families_load(tmp_path, flag):
    boards.load_board(str(board_file(tmp_path, cflags=["-std=c99", flag])))


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_the_wrapper_canary_never_fires_from_nnbuild_check(tmp_path):
    board_file(tmp_path, "evil", name="evil", cflags=["-wrapper", f"sh,-c,touch {tmp_path / 'pwned'}"])
    env = {**os.environ, "PYTHONPATH": str(REPO), "NNBUILD_BOARDS": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "nnbuild", "check", str(XOR), "--data", "x.npz", "--target", "evil"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode != 0 and not (tmp_path / "pwned").exists()
    assert run.stderr.strip().count("\n") == 0 and "-wrapper" in run.stderr and "is refused" in run.stderr


@pytest.mark.e2e
def test_scons_reads_a_wrong_example_json_in_one_line(tmp_path):
    project_dir = copy_project(tmp_path / "p") if (tmp_path / "p").mkdir() is None else None
    example(project_dir / "firmware_examples", {"model": 5}).rename(project_dir / "firmware_examples" / "bad5")
    result = scons(project_dir, "target=host", "model=bad5")
    assert result.returncode != 0
    assert "key 'model': 5 is not valid" in result.stderr and "Traceback" not in result.stderr + result.stdout
