"""report.json: one record of what was built, measured and checked, and a short printed summary."""

import json
import platform
import shutil
import subprocess

import numpy as np

from nnbuild import __version__
from nnbuild.checks import memory


def run_cycles(run):
    """The cycles of each case of a run .npz (None when the runner measures none)."""
    if not run:
        return None
    with np.load(run) as data:
        return data["cycles"] if "cycles" in data.files else None


def build_report(*, model, board, semantic, size, trace, run=None, wcet=None, precision="float32",
                 shape="auto", opt=None, deadline=None, deadline_origin=None, entries=None):
    """The report record from the step results (dicts; `run` is the target run's .npz path;
    `entries`: {entry: (wcet dict, run path)} of further entry points, bounded and gated each)."""
    cycles = run_cycles(run)
    measured = int(cycles.max()) if cycles is not None and len(cycles) else None
    target_run = board.run_label() if board.run_label() in semantic["runs"] else board["name"]
    if target_run not in semantic["runs"]:
        target_run = "host"
    clock = board.get("clock_hz")
    record = {
        "model": model,
        "target": board["name"],
        "board": board.get("description", board["name"]),
        "precision": trace.get("precision", precision),
        "shape": trace.get("shape", shape),
        "activation_memory": trace.get("memory"),
        "opt": opt or board.get("opt"),
        "clock_hz": clock,
        "measured_cycles": measured,
        "measured_ms": round(measured / clock * 1e3, 6) if measured and clock else None,
        "measured_inputs": int(len(cycles)) if cycles is not None else None,
        "max_abs_error": semantic["runs"][target_run]["max_abs_error"],
        "max_abs_error_by_run": {k: v["max_abs_error"] for k, v in semantic["runs"].items()},
        "tolerance": semantic["tolerance"],
        "kind": semantic.get("kind", "nn"),
        "error_violation": semantic.get("violation"),
        "error_summary": semantic.get("summary"),
        "error_format": semantic.get("error_format"),
        "check_inputs": semantic["cases"],
        **case_data(semantic),
        "text_bytes": size["text_bytes"], "data_bytes": size["data_bytes"], "bss_bytes": size["bss_bytes"],
        "flash_bytes": size["flash_bytes"], "ram_bytes": size["ram_bytes"],
        "flash_capacity": size["flash_capacity"], "ram_capacity": size["ram_capacity"],
        "stack_bytes": size.get("stack_bytes"), "stack": size.get("stack"),
        "layers": [{k: l[k] for k in ("name", "type", "activation", "inputs", "units", "lines")}
                   for l in trace["layers"]],
        "passes": trace["passes"],
        "tool_versions": tool_versions(board),
    }
    if trace.get("blob"):
        record["blob"] = trace["blob"]
    record.update(wcet_fields(model, board, measured, wcet, deadline, deadline_origin))
    record["entries"] = {}
    for entry, (entry_wcet, entry_run) in sorted((entries or {}).items()):
        entry_cycles = run_cycles(entry_run)
        worst = int(entry_cycles.max()) if entry_cycles is not None and len(entry_cycles) else None
        fields = wcet_fields(f"{model} {entry}", board, worst, entry_wcet, deadline, deadline_origin)
        fields.update(measured_cycles=worst, measured_inputs=int(len(entry_cycles)) if entry_cycles is not None else None)
        record["entries"][entry] = fields
    return record


def wcet_fields(model, board, measured, wcet, deadline_text, deadline_origin):
    """The bound, deadline, margin and tightness; or why there is no bound on this board."""
    from nnbuild.checks import deadline
    deadline_ms, waiver = deadline.read_spec(deadline_text, deadline_origin)
    fields = {"deadline_ms": deadline_ms, "deadline_origin": deadline_origin if deadline_ms else None,
              "waivers": [waiver] if waiver else []}
    if not wcet:
        from nnbuild import wcet as analyzers
        why = analyzers.unavailable_reason(board) or f"no WCET step was run for target {board['name']}"
        return {**fields, "wcet": None, "wcet_unavailable": why}
    if "error" in wcet:
        return {**fields, "wcet": None, "wcet_error": wcet["error"]}
    clock = board["clock_hz"]
    label = f"{model} on {board['name']} @ {clock / 1e6:g} MHz"
    record = deadline.verdict(wcet, deadline_ms, clock, measured, label)
    record["per_layer"] = {k: {"cycles": v, "share": v / wcet["cycles"]} for k, v in wcet["per_layer"].items()}
    record.update(outside_layers(wcet))
    return {**fields, "wcet": record, "analyzer": wcet["analyzer"], "wcet_cycles": wcet["cycles"],
            "wcet_ms": record["wcet_ms"], "margin": record["margin"], "margin_ms": record["margin_ms"],
            "bound_over_measured": record["bound_over_measured"]}


def outside_layers(wcet):
    """The bound's cycles in no layer (entry, exit, code between layers): the rest of the bound after
    the per-layer split, so that per_layer plus outside_layers is the whole bound. None, with the
    analyzer's note, when the analyzer gives no per-layer split at all."""
    if not wcet["per_layer"]:
        note = (wcet.get("details") or {}).get("per_layer_note") or f"{wcet['analyzer']} gives no per-layer split"
        return {"outside_layers": None, "per_layer_note": note}
    rest = wcet["cycles"] - sum(wcet["per_layer"].values())
    return {"outside_layers": {"cycles": rest, "share": rest / wcet["cycles"] if wcet["cycles"] else 0.0}}


def case_data(semantic):
    """Per-case results of each run where the semantic record has them: max |C - reference| per case
    (neural networks), the cases whose action differs (TPGs)."""
    runs = semantic["runs"]
    out = {}
    if runs and all("case_errors" in r for r in runs.values()):
        out["case_errors_by_run"] = {k: r["case_errors"] for k, r in runs.items()}
    if runs and all("mismatch_cases" in r for r in runs.values()):
        out["mismatch_cases_by_run"] = {k: r["mismatch_cases"] for k, r in runs.items()}
    return out


def read_json(path):
    with open(path) as f:
        return json.load(f)


def tool_versions(board):
    """Versions of what produced the numbers: compiler, simulator package, Python stack."""
    import h5py
    versions = {"nnbuild": __version__, "python": platform.python_version(),
                "numpy": np.__version__, "h5py": h5py.__version__}
    cc = shutil.which(board["cc"])
    if cc:
        versions[board["cc"]] = board.compiler.tool_version(cc)
    package = getattr(board.runner, "DEBIAN_PACKAGE", None) if hasattr(board, "runner") else None
    if package:
        versions[package] = debian_version(package)
    return versions


def debian_version(package):
    if not shutil.which("dpkg-query"):
        return None
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True)
    return out.stdout.strip() or None


def summary_text(r):
    """A few PlatformIO-style lines: what was built, how fast, how exact, how big."""
    clock = f" @ {r['clock_hz'] / 1e6:g} MHz" if r["clock_hz"] else ""
    lines = [f"nnbuild: {r['model']} on {r['target']} ({r['board']}){clock}, {r['precision']}, "
             f"shape {r['shape']}, {r['opt']}"]
    if r["measured_cycles"] is not None:
        lines.append(f"  measured : {r['measured_cycles']:,} cycles ({r['measured_ms']:.3f} ms), "
                     f"max over {r['measured_inputs']} inputs")
    number = r.get("error_format") or "{:.3g}"
    errors = ", ".join(f"{number.format(e)} ({k})" for k, e in sorted(r["max_abs_error_by_run"].items()))
    wording = r.get("error_summary") or "  max error: {errors} vs float64 reference, tolerance {tolerance:g}"
    lines.append(wording.format(errors=errors, cases=r["check_inputs"], tolerance=r["tolerance"]))
    if r.get("wcet"):
        w = r["wcet"]
        tight = f", bound/measured {w['bound_over_measured']:.4f}" if w["bound_over_measured"] else ""
        lines.append(f"  WCET     : {w['wcet_cycles']:,} cycles ({w['wcet_ms']:.3f} ms, {w['analyzer']}){tight}")
        from nnbuild.checks.deadline import bar
        lines.append(f"  {bar(w)}")
        shares = sorted(w["per_layer"].items(), key=lambda kv: -kv[1]["cycles"])
        outside = w.get("outside_layers")
        if outside:
            shares.append(("outside any layer", outside))
        if shares:
            lines.append("  per layer: " + ", ".join(f"{k} {100 * v['share']:.1f}%" for k, v in shares))
    elif r.get("wcet_error"):
        lines.append(f"  WCET     : no bound ({r['wcet_error']})")
    elif r.get("deadline_ms") is not None:
        lines.append(f"  WCET     : not computed ({r['wcet_unavailable']}); deadline {r['deadline_ms']:g} ms cannot be "
                     "checked")
    for entry, e in sorted((r.get("entries") or {}).items()):
        if e.get("wcet"):
            w = e["wcet"]
            tight = f", bound/measured {w['bound_over_measured']:.4f}" if w["bound_over_measured"] else ""
            measured = f", measured {e['measured_cycles']:,}" if e.get("measured_cycles") is not None else ""
            lines.append(f"  {entry}: WCET {w['wcet_cycles']:,} cycles ({w['wcet_ms']:.3f} ms){measured}{tight}")
        else:
            lines.append(f"  {entry}: no bound ({e.get('wcet_error') or e.get('wcet_unavailable')})")
    if r.get("blob"):
        b = r["blob"]
        lines.append(f"  blob     : {b['memory_size_bytes']:,} bytes, memory_hard {b['memory_hard_bytes']:,} "
                     f"(weights and activations), training-only {b['rest_bytes']:,}")
    for waiver in r.get("waivers") or ():
        lines.append(f"  waived   : {waiver}")
    lines.append(f"  Flash: {memory.bar(r['flash_bytes'], r['flash_capacity'])}")
    stack = f" incl. stack <= {r['stack_bytes']:,} bytes" if r.get("stack_bytes") else ""
    lines.append(f"  RAM:   {memory.bar(r['ram_bytes'], r['ram_capacity'])}{stack}")
    return "\n".join(lines)
