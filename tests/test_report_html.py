"""report.html: a well-formed, self-contained, deterministic page drawn from report.json, with every
string from the model escaped and every stacked bar summing to 100%."""

import html
import json
import math
from html.parser import HTMLParser

import pytest

from conftest import REPO, copy_project, needs_avr, scons
from nnbuild import pipeline
from nnbuild.checks import report_html

EXAMPLES = REPO / "firmware_examples"
HOSTILE = '<script>alert("x")</script>&amp;\'" onmouseover=\'bad()\' style="x:url(http://e.x/)"'
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "source", "track", "wbr"}


class Page(HTMLParser):
    """Checks nesting as it parses; collects tags, attributes, text, and each stacked bar's shares."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open, self.errors, self.tags, self.text, self.style = [], [], [], [], []
        self.bars, self.segments = [], {}

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        attrs = dict(attrs)
        if tag == "svg" and "stacked" in (attrs.get("class") or ""):
            self.bars.append([])
        if tag == "rect" and "data-pct" in attrs:
            self.bars[-1].append(float(attrs["data-pct"]))
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.open or self.open[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.open[-1] if self.open else None}>")
        else:
            self.open.pop()

    def handle_data(self, data):
        (self.style if self.open and self.open[-1] == "style" else self.text).append(data)


def check_page(text):
    """Parse the page and assert what every report.html must hold; returns the parser."""
    assert text.startswith("<!DOCTYPE html>\n")
    page = Page()
    page.feed(text)
    page.close()
    assert not page.errors and not page.open, (page.errors, page.open)
    names = [t for t, _ in page.tags]
    assert "script" not in names and "iframe" not in names and "object" not in names and "img" not in names
    for tag, attrs in page.tags:
        assert "src" not in attrs, (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
        if "href" in attrs:
            assert attrs["href"].startswith("#"), (tag, attrs)
        for value in attrs.values():
            assert "://" not in (value or "") and "url(" not in (value or ""), (tag, attrs)
    style = "".join(page.style)
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    assert page.bars, "no stacked bar"
    for bar in page.bars:
        assert abs(sum(bar) - 100) <= 0.1, bar
    return page


def recorded_report():
    """A report.json record as the report step writes it (an AVR build), with a hostile layer name."""
    per_layer = {"dense_1": 466508, HOSTILE: 927880, "dense_3": 7650}
    wcet = 1472728
    return {
        "model": "f1tenth", "target": "avr", "kind": "nn",
        "board": "ATmega1284 <b>at</b> 20 MHz & more", "precision": "q16-acc32", "shape": "mlp",
        "activation_memory": None, "opt": "-Os", "clock_hz": 20000000,
        "measured_cycles": 1435285, "measured_ms": 71.76425, "measured_inputs": 4,
        "max_abs_error": 0.000763, "max_abs_error_by_run": {"simavr": 0.000763, "host": 0.000763},
        "case_errors_by_run": {"host": [0.0, 1.2e-6, 0.000763, 4e-5], "simavr": [0.0, 1.2e-6, 0.000763, 4e-5]},
        "tolerance": 0.001, "error_violation": None, "error_summary": None, "error_format": "{:.3g}",
        "check_inputs": 4,
        "text_bytes": 53592, "data_bytes": 0, "bss_bytes": 4, "flash_bytes": 53592, "ram_bytes": 940,
        "flash_capacity": 131072, "ram_capacity": 16384, "stack_bytes": 936,
        "stack": {"bytes": 936, "entry": "main", "not_bounded": [], "path": ["main", "f1tenth_infer", "__mulsi3"]},
        "layers": [{"name": n, "type": "Dense", "activation": "tanh", "inputs": 61, "units": 128, "lines": [a, a + 20]}
                   for n, a in zip(per_layer, (180, 202, 244))],
        "passes": [], "tool_versions": {"nnbuild": "0.1.0", "avr-gcc": "avr-gcc (GCC) 5.4.0 <x>"},
        "deadline_ms": 100.0, "deadline_origin": "example", "waivers": [],
        "wcet": {"analyzer": "builtin-avr", "wcet_cycles": wcet, "wcet_ms": wcet / 2e4, "deadline_ms": 100.0,
                 "margin_ms": 100 - wcet / 2e4, "margin": (100 - wcet / 2e4) / 100, "measured_cycles": 1435285,
                 "bound_over_measured": wcet / 1435285, "met": True, "label": "f1tenth on avr @ 20 MHz",
                 "per_layer": {k: {"cycles": v, "share": v / wcet} for k, v in per_layer.items()},
                 "outside_layers": {"cycles": wcet - sum(per_layer.values()),
                                    "share": (wcet - sum(per_layer.values())) / wcet}},
        "analyzer": "builtin-avr", "wcet_cycles": wcet, "wcet_ms": wcet / 2e4,
    }


def test_recorded_report_is_self_contained_escaped_and_sums_to_100():
    r = recorded_report()
    text = report_html.render(r)
    page = check_page(text)
    shown = "".join(page.text)
    # the hostile name is shown as text (the parser unescapes it) and never becomes markup
    assert HOSTILE in shown and html.escape(HOSTILE, quote=True) in text
    assert "<script>" not in text and "onmouseover='" not in text and "style=\"x:url" not in text
    assert "ATmega1284 <b>at</b> 20 MHz & more" in shown and "<b>at</b>" not in text
    # the WCET bar: three layers and the rest of the bound, outside any layer
    wcet_bar = page.bars[0]
    outside = r["wcet"]["outside_layers"]["cycles"]
    assert len(wcet_bar) == 4 and outside > 0
    assert math.isclose(wcet_bar[-1], 100 * outside / r["wcet_cycles"], abs_tol=0.001)
    assert "outside any layer" in shown and "70,690" in shown
    assert "deadline 100 ms" in shown and "measured (max): 71.76 ms" in shown
    # every gate has a verdict row
    for gate in ("semantics (host run)", "semantics (simavr run)", "deadline", "WCET bound soundness",
                 "memory (flash)", "memory (RAM)"):
        assert gate in shown
    assert "PASS" in shown and "FAIL" not in shown
    # the histogram: the exact zero has its own column, every case is counted once
    assert "4 cases; max 0.000763; 4 of 4 within the tolerance 0.001." in shown
    # the same record gives the same bytes, whatever the order of its dictionaries
    shuffled = json.loads(json.dumps(r, sort_keys=True))
    shuffled["max_abs_error_by_run"] = dict(reversed(list(shuffled["max_abs_error_by_run"].items())))
    assert report_html.render(shuffled) == text


def test_report_without_outside_share_computes_it_and_a_failing_build_says_fail():
    r = recorded_report()
    del r["wcet"]["outside_layers"]
    r["max_abs_error_by_run"]["simavr"] = 0.5
    r["case_errors_by_run"]["simavr"] = [0.0, 0.5, float("inf"), 4e-5]
    r["waivers"] = ["wcet=skip: deadline 100 ms (example) not checked"]
    page = check_page(report_html.render(r))
    shown = "".join(page.text)
    assert len(page.bars[0]) == 4
    assert "FAIL" in shown and "max error 0.5 > tolerance 0.001 (simavr run vs float64 reference)" in shown
    assert "1 infinite or NaN; 2 of 4 within the tolerance 0.001." in shown
    assert "wcet=skip: deadline 100 ms (example) not checked" in shown


def test_precision_auto_table_and_tpg_mismatches_are_drawn():
    r = recorded_report()
    r["precision_auto"] = {"winner": "q16-acc32", "why": "q16-acc32 has the smallest WCET (73.6 ms)",
                           "candidates": [
                               {"precision": "float32", "wcet_cycles": 4_000_000, "wcet_ms": 200.0,
                                "measured_cycles": 3_900_000, "max_abs_error": 1e-7, "flash_bytes": 60000,
                                "ram_bytes": 900, "violations": ["WCET 200 ms > deadline 100 ms (<x>)"]},
                               {"precision": "q16-acc32", "wcet_cycles": 1472728, "wcet_ms": 73.6,
                                "measured_cycles": 1435285, "max_abs_error": 7.6e-4, "flash_bytes": 53592,
                                "ram_bytes": 940, "violations": []}]}
    page = check_page(report_html.render(r))
    shown = "".join(page.text)
    assert "precision=auto" in shown and "WCET 200 ms > deadline 100 ms (<x>)" in shown
    assert any(t == "a" and a.get("href") == "#auto" for t, a in page.tags)

    tpg = recorded_report()
    for key in ("case_errors_by_run",):
        del tpg[key]
    tpg.update(kind="tpg", tolerance=0, error_format="{:.0f}", check_inputs=10,
               max_abs_error_by_run={"host": 0, "simavr": 3}, mismatch_cases_by_run={"host": [], "simavr": [2, 5, 9]})
    page = check_page(report_html.render(tpg))
    shown = "".join(page.text)
    marks = [a for t, a in page.tags if t == "rect" and a.get("fill") == "#b00020" and a.get("height") == "20"]
    assert len(marks) == 3
    assert "3 of 10 actions differ from the reference (first at case 2)." in shown
    assert "0 of 10 actions differ from the reference." in shown


@pytest.mark.e2e  # seconds of work: the whole suite runs it, the quick tier does not
def test_a_host_build_writes_report_html_beside_report_json(tmp_path):
    """A real build (the xor example on the host, through the pipeline the CLI and SCons use): the
    page is the rendering of the report.json beside it, and a second build writes the same bytes."""
    pages = []
    for n in range(2):
        plan = pipeline.plan(name="xor", model=str(EXAMPLES / "xor" / "xor.h5"), board="host", kind="nn",
                             count=8)
        pipeline.execute(plan, tmp_path / f"b{n}")
        out = tmp_path / f"b{n}"
        report = json.loads((out / "report.json").read_text())
        semantic = json.loads((out / "semantic.json").read_text())
        text = (out / "report.html").read_text()
        assert text == report_html.render(report)
        pages.append((out / "report.html").read_bytes())
    run = semantic["runs"]["host"]
    assert len(run["case_errors"]) == semantic["cases"] and max(run["case_errors"]) == run["max_abs_error"]
    assert report["case_errors_by_run"]["host"] == run["case_errors"]
    page = check_page(text)
    assert "no WCET step was run" in "".join(page.text) or "No WCET bound" in "".join(page.text)
    assert pages[0] == pages[1]
    assert str(tmp_path) not in text


@pytest.mark.e2e
@needs_avr
def test_avr_build_page_shows_the_whole_bound(tmp_path, caplog, monkeypatch):
    project = copy_project(tmp_path)
    result = scons(project, "target=avr", "model=xor")
    assert result.returncode == 0, result.stdout + result.stderr
    out = project / "build/avr/xor"
    report = json.loads((out / "report.json").read_text())
    w = report["wcet"]
    assert sum(v["cycles"] for v in w["per_layer"].values()) + w["outside_layers"]["cycles"] == w["wcet_cycles"]
    text = (out / "report.html").read_text()
    assert text == report_html.render(report)
    page = check_page(text)
    assert len(page.bars[0]) == len([v for v in w["per_layer"].values() if v["cycles"]]) + (
        1 if w["outside_layers"]["cycles"] else 0)
    assert "deadline" in "".join(page.text) and str(project) not in text

    # progress (forced here on a short run) is logged (shown on stderr with -v) and changes no result
    import logging

    import numpy as np
    from nnbuild import boards
    from nnbuild.runners import simavr
    from nnbuild.wcet import avr_ipet
    board = boards.load_board("avr")
    with np.load(out / "inputs.npz") as data, np.load(out / "run_simavr.npz") as run:
        x, outputs, cycles = data["x"], run["outputs"], run["cycles"]
    caplog.set_level(logging.INFO, logger="nnbuild")
    monkeypatch.setattr(simavr, "PROGRESS_SECONDS", 0.0)
    again, again_cycles = simavr.run(board, out / "check.elf", x, outputs.shape[1], io=None, entry="xor_infer",
                                     harness=project / "build/tools/simavr_run")
    assert (again == outputs).all() and (again_cycles == cycles).all()
    assert caplog.messages[-1].startswith(f"simavr: {len(x)}/{len(x)} cases, ") and caplog.messages[-1].endswith(" s")
    monkeypatch.setattr(avr_ipet, "PROGRESS_SECONDS", 0.0)
    bound = avr_ipet.analyze(out / "check.elf", "xor_infer", out / "gen/xor.flowfacts.json", board, tmp_path / "w")
    assert bound.cycles == w["wcet_cycles"]
    timing = caplog.messages[-1]
    assert timing.startswith("builtin-avr: ") and " regions in " in timing
    for phase in ("decode", "CFG", "loops", "ILP solve", "other"):
        assert f"{phase} " in timing
