"""The user's edge without a build: unknown keywords name the nearest one, waiver hints speak the
interface's syntax, a failing gate leaves no gate.json and no release image, boards resolve by path
and from the project's boards/ folder to a reference every step subprocess reads the same way.
(The same through real scons, CLI and simulators: tests/test_user_edge.py.)"""

import json

import pytest

from nnbuild import boards, options, pipeline, steps
from nnbuild.checks import deadline, gates
from nnbuild.errors import NNBuildError
from conftest import REPO


def test_an_unknown_keyword_names_the_nearest_one():
    with pytest.raises(NNBuildError, match=r"^NNModel\('xor'\): unknown keyword 'deadlne'; did you mean deadline\?$"):
        options.refuse_unknown({"deadlne": "5ms"}, ["deadline", "precision"], "NNModel('xor')")
    with pytest.raises(NNBuildError, match="unknown keyword 'zzz'; known: board, models"):
        options.refuse_unknown({"zzz": 1}, ["models", "board"], "NNFirmware('app')")
    options.refuse_unknown({"deadline": 1}, ["deadline"], "NNModel('xor')")


def unverifiable_report(**extra):
    return dict({"tolerance": 1e-4, "max_abs_error_by_run": {"host": 0.0}, "check_inputs": 4, "wcet": None,
                 "deadline_ms": 5.0, "deadline_origin": None, "wcet_unavailable": "no timing model"}, **extra)


@pytest.mark.parametrize("interface, words", [
    (None, "waive it with deadline=none or wcet=skip"),
    ("scons", "waive it with deadline=none or wcet=skip"),
    ("nnmodel", 'waive it with deadline="none" or wcet="skip"'),
    ("cmake", "waive it with DEADLINE none or WCET skip"),
    ("cli", "waive it with --deadline none or --wcet skip"),
])
def test_the_waiver_hint_speaks_the_interface(interface, words):
    broken, = gates.violations(unverifiable_report(), interface)
    assert broken.endswith(words), broken


@pytest.mark.parametrize("spelling", ["none", "None", " none "])
def test_deadline_none_is_one_word_everywhere(spelling):
    assert deadline.deadline_spec(spelling) == (None, None)
    assert deadline.deadline_spec(spelling, {"clock_hz": 1, "deadline_ms": 3}) == ("none:3.0ms", "board")


def test_a_failing_gate_removes_the_old_gate_and_the_release_images(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(unverifiable_report()))
    old_gate, hex_file, bin_file = tmp_path / "gate.json", tmp_path / "app.hex", tmp_path / "app.bin"
    for path in (old_gate, hex_file, bin_file):
        path.write_text('{"passed": true}')
    with pytest.raises(NNBuildError, match=r"or --wcet skip; no release image \(app.hex, app.bin removed\)$"):
        steps.gate(str(report), str(old_gate), interface="cli", discard=[str(hex_file), str(bin_file)])
    assert not old_gate.exists() and not hex_file.exists() and not bin_file.exists()
    with pytest.raises(NNBuildError, match=r"no release image \(app.hex, app.bin not written\)$"):
        steps.gate(str(report), str(old_gate), discard=[str(hex_file), str(bin_file)])
    report.write_text(json.dumps(unverifiable_report(deadline_ms=None)))
    steps.gate(str(report), str(old_gate), discard=[str(hex_file)])
    assert json.loads(old_gate.read_text())["passed"] is True


def test_the_firmware_images_come_after_every_gate():
    board = boards.load_board("host")
    model = str(REPO / "firmware_examples" / "xor" / "xor.h5")
    from nnbuild import kinds
    model_plan = pipeline.plan(name="xor", model=model, board=board, kind=kinds.of_file(model),
                               input_range=(0.0, 1.0))
    the_plan = pipeline.firmware_plan(firmware="app", stem="app", board=board, models=[(model_plan, "/m")],
                                      interface="nnmodel")
    order = [t.step for t in the_plan.tasks]
    assert order.index("image") > order.index("gate")
    images = [t for t in the_plan.tasks if t.step == "image"]
    assert all(t.after == ["app.checks/xor/gate.json"] for t in images)
    gate, = [t for t in the_plan.tasks if t.step == "gate"]
    assert gate.options == {"interface": "nnmodel", "discard": ["app.hex", "app.bin"]}


def write_board(path, name):
    data = json.loads((REPO / "toolchains" / "host.json").read_text())
    data["name"] = name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_boards_by_path_and_from_the_project_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NNBUILD_BOARDS", raising=False)
    monkeypatch.delenv("NNBUILD_TOOLCHAINS", raising=False)
    write_board(tmp_path / "boards" / "host3.json", "host3")
    write_board(tmp_path / "myboards" / "host2.json", "host2")
    assert "host3" in boards.available_boards()
    assert boards.load_board("host3").ref == "host3"          # the project's boards/, by name
    assert boards.load_board("boards/host3.json").ref == "host3"
    by_path = boards.load_board(str(tmp_path / "myboards" / "host2.json"))
    assert by_path.ref == "myboards/host2.json"               # relative: no checkout path in a signature
    assert boards.load_board(by_path.ref).path.resolve() == by_path.path.resolve()
    assert boards.load_board("avr").ref == "avr"
    # loaded for a project whose steps run elsewhere (CMake: ninja in the build tree): absolute
    assert boards.load_board("host3", project_dir=tmp_path).ref == str((tmp_path / "boards/host3.json").resolve())
    assert boards.load_board("avr", project_dir=tmp_path).ref == "avr"
    with pytest.raises(NNBuildError, match="unknown target 'host2'"):
        boards.load_board("host2")
    # a plan's steps name the board the way every step subprocess finds it
    model = str(REPO / "firmware_examples" / "xor" / "xor.h5")
    from nnbuild import kinds
    the_plan = pipeline.plan(name="xor", model=model, board=by_path, kind=kinds.of_file(model), input_range=(0.0, 1.0))
    named = {t.options.get("board") or t.options.get("target") for t in the_plan.tasks} - {None, "host"}
    assert named == {"myboards/host2.json"}
