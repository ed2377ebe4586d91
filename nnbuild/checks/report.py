"""report.json: one record of what was built, measured and checked, and a short printed summary.

The record is evidence a reviewer can file: its verdict (`passed`) and every gate with its figures
and waiver, the sha256 of every file it speaks of (model, generated C, ELF, the Intel HEX of the
ELF), the compiler with its version and full flags, the analyzer with its timing model and the
assumptions it rests on, the check inputs' seed, count and range, and the versions of every reader.
nnbuild/report.schema.json describes it (`schema_version`); tests validate every report against it.
"""

import hashlib
import json
import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np

from nnbuild import __version__
from nnbuild.checks import memory

#: the version of report.json's layout (nnbuild/report.schema.json): raised when a key changes
#: meaning or goes; a new optional key keeps it
SCHEMA_VERSION = 1
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "report.schema.json"
#: the Python packages whose code reads a model or writes a figure of the report
READERS = ("numpy", "h5py", "onnx", "scipy", "jinja2", "jsonschema", "scons")


def schema():
    """The JSON Schema of report.json (shipped in the package)."""
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        return json.load(f)


def validate(record):
    """Raise jsonschema.ValidationError when `record` does not follow the shipped schema; a key the
    schema does not list first, by name (a new key is documented there before it is written)."""
    import jsonschema
    layout = schema()
    unknown = sorted(set(record) - set(layout["properties"])) if isinstance(record, dict) else []
    if unknown:
        raise jsonschema.ValidationError(f"unknown key '{unknown[0]}' (add it to {SCHEMA_FILE.name}: its "
                                         "description says how)")
    jsonschema.Draft202012Validator(layout).validate(record)


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def shown_path(path):
    """A path as a report shows it: relative to the build's root (the directory the build runs in)
    when inside it, else the file's name: never an absolute path, so two checkouts agree."""
    path = Path(path)
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd().resolve())).as_posix() \
            if path.resolve().is_relative_to(Path.cwd().resolve()) else path.name
    except (AttributeError, ValueError):   # Python < 3.9 has no is_relative_to
        return path.name


def file_records(files, ihex=None):
    """[{role, file, sha256}] for {role: path} (files that do not exist are left out); each ELF
    also gets `ihex_sha256`, the sha256 of its Intel HEX (`ihex(path)`: the bytes the image step
    writes as the .hex), when `ihex` is given and can make one."""
    out = []
    for role, path in files.items():
        if not path or not Path(path).is_file():
            continue
        record = {"role": role, "file": shown_path(path), "sha256": sha256(path)}
        if ihex and role.startswith("elf"):
            record["ihex_sha256"] = ihex(path)
        out.append(record)
    return out


def compiler_record(board, opt=None):
    """The board's compiler: executable, version and the full flags every compile and link gets."""
    family = board.compiler
    cc = shutil.which(board["cc"])
    return {"family": board.get("compiler", "gcc"), "executable": board["cc"],
            "version": family.tool_version(cc) if cc else None,
            "compile_flags": family.compile_flags(board, opt),
            "path_map_flags": [f.replace(str(Path.cwd().resolve()), "<build root>").replace(
                str(Path(__file__).resolve().parents[1]), "<nnbuild package>") for f in family.path_map_flags(Path.cwd())],
            "link_flags": family.link_flags(board, opt), "libs": family.libs(board)}


def timing_record(board, wcet=None):
    """The analyzer, the board's timing model and the assumptions it rests on (the board file's
    `assumptions`), the clock cycles are converted with."""
    return {"analyzer": (wcet or {}).get("analyzer") or board.get("wcet_tool"),
            "analyzer_version": (wcet or {}).get("tool_version"),
            "timing_model": board.get("timing_model"), "assumptions": board.get("assumptions"),
            "clock_hz": board.get("clock_hz"), "clock_define": board.get("clock_define"),
            "board_file": Path(board.path).name if getattr(board, "path", None) else None}


def gate_list(r):
    """Every gate the build judges as {name, verdict (pass, fail, waived, na), detail, figures,
    waiver}: tolerance per run, deadline, bound soundness, flash, RAM. report.html draws the same."""
    from nnbuild.checks.deadline import deadline_violation, fmt_ms, soundness_violation
    gates = []

    def gate(name, verdict, detail, figures=None, waiver=None):
        gates.append({"name": name, "verdict": verdict, "detail": detail, "figures": figures or {},
                      "waiver": waiver})
    tolerance = r["tolerance"]
    wording = (r.get("error_summary") or "max error: {errors} vs float64 reference, tolerance {tolerance:g}").strip()
    for label, error in sorted((r.get("max_abs_error_by_run") or {}).items()):
        detail = " ".join(wording.format(errors=error_text(r, error), cases=r["check_inputs"],
                                         tolerance=tolerance).split())
        gate(f"semantics ({label} run)", "pass" if error <= tolerance else "fail", detail,
             {"max_abs_error": error, "tolerance": tolerance, "cases": r["check_inputs"]})
    w = r.get("wcet")
    waivers = r.get("waivers") or []
    origin = f" (from the {r['deadline_origin']})" if r.get("deadline_origin") else ""
    if w and w.get("deadline_ms") is not None:
        broken = deadline_violation(w)
        detail = broken or (f"WCET {fmt_ms(w['wcet_ms'])} <= deadline {fmt_ms(w['deadline_ms'])}"
                            f"{origin}, margin {fmt_ms(w['margin_ms'])} ({pct(w['margin'])})")
        gate("deadline", "fail" if broken else "pass", detail,
             {"wcet_cycles": w["wcet_cycles"], "wcet_ms": w["wcet_ms"], "deadline_ms": w["deadline_ms"],
              "margin_ms": w["margin_ms"], "clock_hz": r.get("clock_hz")})
    elif r.get("deadline_ms") is not None:
        why = r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET bound"
        gate("deadline", "fail", f"deadline {fmt_ms(r['deadline_ms'])}{origin} cannot be checked: {why}",
             {"deadline_ms": r["deadline_ms"]})
    elif waivers:
        gate("deadline", "waived", "; ".join(waivers), waiver="; ".join(waivers))
    else:
        gate("deadline", "na", "no deadline set for this build")
    if w:
        broken = soundness_violation(w)
        figures = {"wcet_cycles": w["wcet_cycles"], "measured_cycles": w.get("measured_cycles"),
                   "bound_over_measured": w.get("bound_over_measured")}
        if broken:
            gate("WCET bound soundness", "fail", broken, figures)
        elif w.get("measured_cycles"):
            gate("WCET bound soundness", "pass",
                 f"bound {cycles_text(w['wcet_cycles'])} >= measured {cycles_text(w['measured_cycles'])} "
                 f"cycles (bound/measured {w['bound_over_measured']:.4f})", figures)
        else:
            gate("WCET bound soundness", "na", "no measured run to compare the bound with", figures)
    else:
        why = r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET bound"
        gate("WCET bound soundness", "na", f"no bound: {why}")
    stack = memory.stack_gate_detail(r)
    if stack:
        gate("stack bound soundness", stack[0], stack[1],
             {"measured_stack_bytes": r.get("measured_stack_bytes"), "stack_bytes": r.get("stack_bytes")})
    for kind, what in (("flash", "flash"), ("ram", "RAM")):
        used, cap = r.get(f"{kind}_bytes"), r.get(f"{kind}_capacity")
        stack = " incl. the stack bound" if kind == "ram" and r.get("stack_bytes") else ""
        figures = {"used_bytes": used, "capacity_bytes": cap}
        if cap:
            ok = used <= cap
            gate(f"memory ({what})", "pass" if ok else "fail",
                 f"{used:,} bytes{stack} {'<=' if ok else '>'} {cap:,} bytes", figures)
        else:
            gate(f"memory ({what})", "na", f"{used:,} bytes{stack}; the board states no capacity", figures)
    return gates


def error_text(report, value):
    """An error as the model's kind writes it (TPG: a count of actions)."""
    if value is None:
        return "-"
    try:
        return (report.get("error_format") or "{:.3g}").format(value)
    except (ValueError, TypeError):
        return str(value)


def cycles_text(c):
    return "-" if c is None else f"{int(c):,}"


def pct(share):
    """A share as a percentage; a small non-zero share does not read as 0.0%."""
    if 0 < share < 0.0005:
        return "<0.1%"
    return f"{100 * share:.1f}%"


def multiitem_fields(report):
    """schema_version, passed, gates and tool_versions of a multi-item system's report (its own
    checks decided gates_passed and failure): the keys every report.json has."""
    deadline = report.get("deadline") or {}
    met = deadline.get("met")
    gates = [{"name": "multi-item checks", "verdict": "pass" if report["gates_passed"] else "fail",
              "detail": report.get("failure") or "every check holds", "figures": {}, "waiver": None},
             {"name": "deadline", "verdict": "na" if met is None else "pass" if met else "fail",
              "detail": deadline.get("verdict", "no deadline set"),
              "figures": {k: v for k, v in deadline.items() if k.endswith("_ms") and not isinstance(v, dict)},
              "waiver": None}]
    versions = {"nnbuild": __version__, "python": platform.python_version(), **reader_versions()}
    return {"schema_version": SCHEMA_VERSION, "passed": bool(report["gates_passed"]), "gates": gates,
            "tool_versions": versions}


def verdict(record):
    """`passed` and `gates` of a record: the gate step's violations decide `passed` (one rule)."""
    from nnbuild.checks import gates
    return {"passed": not gates.violations(record), "gates": gate_list(record)}


def run_cycles(run):
    """The cycles of each case of a run .npz (None when the runner measures none)."""
    if not run:
        return None
    with np.load(run) as data:
        return data["cycles"] if "cycles" in data.files else None


def run_stack(run):
    """{"measured_stack_bytes": the deepest stack any case of a run .npz used, "measured_stack_entry":
    the function called} (None each when the runner measures none)."""
    if not run:
        return {"measured_stack_bytes": None, "measured_stack_entry": None}
    with np.load(run) as data:
        if "stack" not in data.files or not len(data["stack"]):
            return {"measured_stack_bytes": None, "measured_stack_entry": None}
        entry = str(data["stack_entry"]) if "stack_entry" in data.files else ""
        return {"measured_stack_bytes": int(data["stack"].max()), "measured_stack_entry": entry or None}


def build_report(*, model, board, semantic, size, trace, run=None, wcet=None, precision="float32",
                 shape="auto", opt=None, deadline=None, deadline_origin=None, entries=None, files=(),
                 inputs=None):
    """The report record from the step results (dicts; `run` is the target run's .npz path;
    `entries`: {entry: (wcet dict, run path)} of further entry points, bounded and gated each;
    `files`: file_records of the evidence; `inputs`: how the check inputs were made)."""
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
        "stack_bytes": size.get("stack_bytes"), "stack": size.get("stack"), **run_stack(run),
        "layers": [{k: l[k] for k in ("name", "type", "activation", "inputs", "units", "lines")}
                   for l in trace["layers"]],
        "passes": trace["passes"],
        "tool_versions": tool_versions(board),
        "schema_version": SCHEMA_VERSION,
        "files": list(files),
        "compiler": compiler_record(board, opt),
        "timing": timing_record(board, wcet),
        "inputs": inputs or {"count": semantic["cases"], "seed": None, "range": None, "data": None},
    }
    if trace.get("blob"):
        record["blob"] = trace["blob"]
    if trace.get("arguments"):   # a model of several inputs or outputs: its C arguments, errors per output
        record["arguments"] = trace["arguments"]
        record["max_abs_error_by_output"] = semantic["runs"][target_run].get("max_abs_error_by_output")
    record.update(wcet_fields(model, board, measured, wcet, deadline, deadline_origin))
    record["entries"] = {}
    for entry, (entry_wcet, entry_run) in sorted((entries or {}).items()):
        entry_cycles = run_cycles(entry_run)
        worst = int(entry_cycles.max()) if entry_cycles is not None and len(entry_cycles) else None
        fields = wcet_fields(f"{model} {entry}", board, worst, entry_wcet, deadline, deadline_origin)
        fields.update(measured_cycles=worst, measured_inputs=int(len(entry_cycles)) if entry_cycles is not None else None)
        record["entries"][entry] = fields
    record.update(verdict(record))
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


def reader_versions():
    """{package: version} of every Python reader and writer nnbuild uses (None: not installed)."""
    versions = {}
    for package in READERS:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def tool_versions(board):
    """Versions of what produced the numbers: compiler, simulator package, Python stack."""
    versions = {"nnbuild": __version__, "python": platform.python_version(), **reader_versions()}
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
    if r.get("max_abs_error_by_output"):
        lines.append("  per output: " + ", ".join(f"{number.format(o['max_abs_error'])} ({o['output']})"
                                                  for o in r["max_abs_error_by_output"]))
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
    if r.get("measured_stack_bytes") is not None:
        bound, entry = memory.measured_stack_bound(r)
        stack += f"; {entry or 'the call'} measured {r['measured_stack_bytes']:,}" + (
            f" <= its bound {bound:,}" if bound is not None and entry != (r.get("stack") or {}).get("entry") else "")
    lines.append(f"  RAM:   {memory.bar(r['ram_bytes'], r['ram_capacity'])}{stack}")
    return "\n".join(lines)
