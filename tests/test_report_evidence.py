"""report.json is evidence: a verdict and every gate, the hashes of the files it speaks of, the
compiler and its flags, the timing model and its assumptions, the check inputs, the readers'
versions, all following the shipped JSON Schema (nnbuild/report.schema.json), for every model
kind (a real host build of each: nn, tpg, gravity, multiitem)."""

import hashlib
import html
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import REPO, SHARED
from nnbuild import pipeline, project, steps
from nnbuild.checks import report as reports
from nnbuild.checks import report_html
from nnbuild.compilers import gcc
from nnbuild.errors import NNBuildError

EXAMPLES = REPO / "firmware_examples"


def sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build(tmp_path, example, **overrides):
    """The example's whole host build through the pipeline SCons and the CLI run; its report."""
    config = project.resolve(example)
    args = dict(name=config["name"], model=config["model"], board="host", kind=None, count=config["check_inputs"],
                seed=config["seed"], input_range=tuple(config["input_range"]), environment=config.get("environment"),
                data=config.get("check_data"), tolerance=config["tolerance"])
    args.update(overrides)
    from nnbuild import kinds
    args["kind"] = kinds.of_file(config["model"])
    the_plan = pipeline.plan(**args)
    pipeline.execute(the_plan, tmp_path)
    return json.loads((tmp_path / "report.json").read_text()), config


def test_the_schema_is_a_valid_schema_that_documents_every_key_and_says_how_to_add_one():
    schema = reports.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False and "To add a key" in schema["description"]
    assert schema["properties"]["schema_version"]["const"] == reports.SCHEMA_VERSION
    for key, spec in schema["properties"].items():
        assert spec.get("description"), key
    assert {"auto", "interface", "precision_auto"} <= set(schema["properties"])   # documented, optional
    assert "report.schema.json" in {p.name for p in (REPO / "nnbuild").glob("*.json")}


def test_a_host_build_report_is_evidence_that_follows_the_schema(tmp_path):
    report, config = build(tmp_path, "xor")
    reports.validate(report)
    assert report["schema_version"] == 1 and report["passed"] is True
    assert [g["name"] for g in report["gates"]] == ["semantics (host run)", "deadline", "WCET bound soundness",
                                                     "memory (flash)", "memory (RAM)"]
    assert {g["verdict"] for g in report["gates"]} <= {"pass", "na"}
    semantics = report["gates"][0]
    assert semantics["figures"]["tolerance"] == config["tolerance"] and semantics["waiver"] is None
    files = {f["role"]: f for f in report["files"]}
    assert files["model"]["sha256"] == sha(config["model"]) and files["model"]["file"] == "firmware_examples/xor/xor.h5"  # from the root
    for name in ("xor.c", "xor.h", "xor_weights.c", "xor_weights.h"):
        assert files[f"generated:{name}"]["sha256"] == sha(tmp_path / "gen" / name)
    assert files["elf:check"]["sha256"] == sha(tmp_path / "check") and "ihex_sha256" not in files["elf:check"]
    assert not any(f["file"].startswith("/") for f in report["files"])
    board = __import__("nnbuild.boards", fromlist=["x"]).load_board("host")
    assert report["compiler"]["compile_flags"] == gcc.compile_flags(board)
    assert report["compiler"]["executable"] == "gcc" and report["compiler"]["version"].startswith("gcc")
    assert report["compiler"]["path_map_flags"] == ["-fdebug-prefix-map=<build root>=."]
    assert report["timing"]["assumptions"] == board["assumptions"] and report["timing"]["analyzer"] is None
    assert report["inputs"] == {"count": config["check_inputs"], "seed": config["seed"],
                                "range": list(config["input_range"]), "data": None}
    for reader in ("numpy", "h5py", "onnx", "scons", "jinja2", "jsonschema", "nnbuild", "gcc"):
        assert report["tool_versions"][reader], reader
    assert report["deadline_ms"] is None and report["deadline_origin"] is None
    # report.html's head shows the verdict, the hashes and the assumptions, escaped
    page = (tmp_path / "report.html").read_text()
    head = page[:page.index('<h2 id="gates">')]
    assert "passed: every gate holds" in head and files["generated:xor.c"]["sha256"] in head
    assert html.escape(board["assumptions"], quote=True) in head and report["compiler"]["version"] in head
    hostile = dict(report, files=[dict(files["model"], file='<script>x</script>".h5')],
                   timing=dict(report["timing"], assumptions="<b>zero-wait</b>"))
    text = report_html.render(hostile)
    assert "<script>x" not in text and "&lt;script&gt;x&lt;/script&gt;&quot;.h5" in text
    assert "&lt;b&gt;zero-wait&lt;/b&gt;" in text


def test_a_broken_gate_is_a_false_verdict_with_the_failing_gate(tmp_path):
    with pytest.raises(NNBuildError, match="max error"):
        build(tmp_path, "xor", tolerance=1e-12)
    report = json.loads((tmp_path / "report.json").read_text())
    reports.validate(report)
    assert report["passed"] is False and not (tmp_path / "gate.json").exists()
    assert report["gates"][0]["verdict"] == "fail" and report["gates"][0]["figures"]["tolerance"] == 1e-12


def test_a_deadline_records_where_it_came_from_and_a_waiver_its_gate(tmp_path):
    for origin in ("command line", "NNModel deadline in the SConstruct", "DEADLINE of nnbuild_add_model",
                   "board", "example"):
        record = dict(reports.wcet_fields("m", {"name": "host"}, None, None, "5.0ms", origin), tolerance=1.0,
                      max_abs_error_by_run={}, check_inputs=1, flash_bytes=1, ram_bytes=1)
        assert record["deadline_origin"] == origin
        assert reports.gate_list(record)[0]["detail"].startswith(f"deadline 5 ms (from the {origin}) cannot be")
    waived = dict(reports.wcet_fields("m", {"name": "host"}, None, None, "none:5.0ms", "example"), tolerance=1.0,
                  max_abs_error_by_run={}, check_inputs=1, flash_bytes=1, ram_bytes=1)
    gate = reports.gate_list(waived)[0]
    assert gate["verdict"] == "waived" and gate["waiver"].startswith("deadline=none")
    plan_args = {"name": "xor", "model": str(EXAMPLES / "xor" / "xor.h5"), "board": "host", "deadline": "5ms"}
    text = pipeline.cmake_model("xor", "/b", "/t", **plan_args)
    assert "DEADLINE of nnbuild_add_model" in text


def test_a_report_that_does_not_follow_the_schema_is_not_written(tmp_path):
    with pytest.raises(NNBuildError, match=r"report.json does not follow report.schema.json at \(top level\): "
                                           r"unknown key 'mystery' \(add it to report.schema.json: its description says how\)"):
        steps.write_report(tmp_path / "report.json", {"mystery": 1}, lambda path, record: None)
    assert not (tmp_path / "report.json").exists()


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_a_tpg_report_follows_the_schema(tmp_path):
    if not (SHARED / "data" / "tpg").exists():
        pytest.skip("../shared/data/tpg not present")
    report, config = build(tmp_path, "tpg_fishing_derby", count=4)
    reports.validate(report)
    files = {f["role"]: f for f in report["files"]}
    assert report["kind"] == "tpg" and files["check data"]["sha256"] == sha(config["check_data"])
    assert report["inputs"]["seed"] is None and report["inputs"]["data"] == Path(config["check_data"]).name


def test_a_gravity_report_follows_the_schema(tmp_path):
    report, config = build(tmp_path, "gravity_digits", count=3)
    reports.validate(report)
    assert report["kind"] == "gravity" and {f["role"] for f in report["files"]} >= {"model", "elf:check"}


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_a_multiitem_report_follows_the_schema(tmp_path):
    model = EXAMPLES / "multiitem_cnn" / "multiitem_cnn.nnef"
    report = pipeline.build_multiitem(model, tmp_path, board="host", runs=3, sanitize=False, count=2)
    reports.validate(report)
    assert report["kind"] == "multiitem" and report["passed"] is report["gates_passed"] is True
    assert report["gates"][0] == {"name": "multi-item checks", "verdict": "pass", "detail": "every check holds",
                                  "figures": {}, "waiver": None}
