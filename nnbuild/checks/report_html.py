"""report.html: report.json drawn for a person (a safety engineer reviewing one build).

One self-contained page: inline CSS and SVG, no script, nothing fetched (no fonts, images or
links other than '#' anchors inside the page). The same report gives the same bytes: no
timestamp, no absolute path, dictionaries drawn in a fixed order, numbers in fixed formats.

The markup is the jinja2 template report.html.j2 beside this module; this module computes what
it shows (gates, shares, coordinates). Every value the template prints is HTML-escaped (autoescape,
quotes too, as html.escape writes them), in text and in attributes alike: layer names, model name,
board text, waivers, tool versions; colours and sizes are computed here, never taken from the report.
"""

import html
import math
import re
from pathlib import Path

import jinja2
import jinja2.ext
from markupsafe import Markup

from nnbuild import files
from nnbuild.checks import gates
from nnbuild.checks.deadline import fmt_ms
from nnbuild.checks.report import cycles_text, error_text, pct

#: layer colours, in model order (a colour-blind-safe palette: Okabe-Ito, then Tol's muted)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#332288", "#88CCEE", "#44AA99", "#117733", "#999933", "#DDCC77", "#AA4499", "#882255")
OUTSIDE_COLOUR = "#8c8c8c"
FREE_COLOUR = "#e8e8e8"
#: width of every SVG drawing in user units (the page scales it to the column)
WIDTH = 1000

CSS = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #1a1a1a; margin: 0;
       background: #fafafa; }
main { max-width: 1080px; margin: 0 auto; padding: 16px 24px 40px; background: #fff; }
h1 { font-size: 1.5em; margin: 0.4em 0 0.2em; }
h2 { font-size: 1.15em; margin: 1.6em 0 0.5em; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
h3 { font-size: 1em; margin: 1em 0 0.3em; }
p, li { line-height: 1.4; }
nav a { margin-right: 1em; color: #0b5394; }
table { border-collapse: collapse; margin: 0.3em 0 0.6em; }
th, td { border: 1px solid #d0d0d0; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.facts th { width: 11em; }
.verdict { display: inline-block; padding: 1px 8px; border-radius: 3px; font-weight: 700;
           font-size: 0.9em; }
.pass { background: #d9f2d9; color: #14521a; }
.fail { background: #f8d4d4; color: #8a1111; }
.waived { background: #fdeccc; color: #7a4b00; }
.na { background: #e8e8e8; color: #444; }
.overall { font-size: 1.1em; margin: 0.5em 0; }
.note { color: #555; font-size: 0.92em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; vertical-align: -0.1em;
          border: 1px solid #777; margin-right: 0.4em; }
tr.winner td { background: #eef7ee; font-weight: 600; }
svg { display: block; width: 100%; height: auto; margin: 0.3em 0; }
svg text { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; font-size: 13px; fill: #1a1a1a; }
svg text.light { fill: #ffffff; }
code { font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 0.92em; }
footer { margin-top: 2em; color: #666; font-size: 0.85em; }
table.hashes code { font-size: 0.85em; word-break: break-all; }
"""


def esc(value):
    """Text or attribute value from the report, escaped (quotes too)."""
    return html.escape(str(value), quote=True)


class Compact(jinja2.ext.Extension):
    """The templates' line breaks and indentation are layout only: a newline and the spaces after it
    are dropped from the source, so the page is the concatenation of the lines; `{{ NL }}` writes a
    newline into the page."""

    def preprocess(self, source, name, filename=None):
        return re.sub(r"\n[ \t]*", "", source)


def _escaped(value):
    """Every printed value escaped as html.escape(quote=True) writes it (autoescape's own escape
    writes quotes as &#34;/&#39;); markup the template built itself passes as it is."""
    return value if isinstance(value, Markup) else Markup(esc(value))


#: the page templates (report.html.j2 beside this module), escaping every value they print
TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).resolve().parent)),
                               autoescape=True, finalize=_escaped, undefined=jinja2.StrictUndefined,
                               extensions=[Compact], keep_trailing_newline=True)
TEMPLATES.globals.update(NL=Markup("\n"))


def num(x, digits=3):
    """A fixed-format number for SVG coordinates and data attributes."""
    return f"{x:.{digits}f}"


def sci(x):
    """1e-06 -> '1e-6', 10**-4.5 -> '3.2e-5': bin edges as an engineer writes them."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def nice_step(top, ticks=5):
    """A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `top`."""
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


# --------------------------------------------------------------------------- the gates


def gate_rows(r):
    """(gate, status, detail) for every gate the build judges (report.gate_list, the gates of
    report.json): tolerance per run, deadline, bound soundness, flash and RAM."""
    from nnbuild.checks.report import gate_list
    return [(g["name"], g["verdict"], g["detail"]) for g in gate_list(r)]


def origin(r):
    return f" (from the {r['deadline_origin']})" if r.get("deadline_origin") else ""


VERDICT_WORDS = {"pass": "PASS", "fail": "FAIL", "waived": "WAIVED", "na": "N/A"}


def header(r):
    """The page's head: facts, the overall verdict and its reasons, the gates."""
    clock = f"{r['clock_hz'] / 1e6:g} MHz" if r.get("clock_hz") else "untimed (no clock)"
    facts = [("model", r["model"]), ("model kind", r.get("kind", "nn")), ("target", r["target"]),
             ("board", r["board"]), ("clock", clock), ("precision", r["precision"]), ("code shape", r["shape"]),
             ("optimisation", r.get("opt") or "-"),
             ("activation memory", r.get("activation_memory") or "-"),
             ("check inputs", r["check_inputs"]),
             ("tolerance", f"{r['tolerance']:g}")]
    if r.get("arguments"):
        facts.append(("C arguments", ", ".join(f"{a['name']} ({a['role']}put '{a['label']}', "
                                               f"{'x'.join(map(str, a['shape']))})" for a in r["arguments"])))
    if r.get("max_abs_error_by_output"):
        facts.append(("max error per output", ", ".join(f"{error_text(r, o['max_abs_error'])} ({o['output']})"
                                                        for o in r["max_abs_error_by_output"])))
    if r.get("blob"):
        b = r["blob"]
        facts.append(("memory blob", f"{b['memory_size_bytes']:,} bytes: memory_hard {b['memory_hard_bytes']:,} "
                                     f"(weights, activations), training-only {b['rest_bytes']:,}"))
    for entry, e in sorted((r.get("entries") or {}).items()):
        w = e.get("wcet")
        facts.append((f"WCET of {entry}", f"{w['wcet_cycles']:,} cycles ({w['wcet_ms']:.3f} ms), measured "
                                          f"{w['measured_cycles'] or 0:,}" if w else
                      (e.get("wcet_error") or e.get("wcet_unavailable") or "-")))
    return {"facts": facts, "evidence": evidence(r), "broken": gates.violations(r), "waived": bool(r.get("waivers")),
            "auto": bool(r.get("precision_auto")),
            "gates": [(gate, status, detail, VERDICT_WORDS[status]) for gate, status, detail in gate_rows(r)],
            "waivers": r.get("waivers") or []}


def evidence(r):
    """What the verdict rests on, for the page's head: the timing model and its assumptions, the
    compiler and its flags, the check inputs, and the sha256 of every file (None for a report
    from before these keys)."""
    if "files" not in r:
        return None
    timing, compiler, inputs = r.get("timing") or {}, r.get("compiler") or {}, r.get("inputs") or {}
    made = (f"{inputs.get('count')} inputs" + (f", seed {inputs['seed']}" if inputs.get("seed") is not None else "")
            + (f", range [{inputs['range'][0]:g}, {inputs['range'][1]:g}]" if inputs.get("range") else "")
            + (f", from {inputs['data']}" if inputs.get("data") else ""))
    facts = [("verdict", "passed: every gate holds" if r.get("passed") else "failed: a gate does not hold"),
             ("WCET analyzer", timing.get("analyzer") or "none on this board"),
             ("timing model", timing.get("timing_model") or "-"),
             ("timing assumptions", timing.get("assumptions") or "the board file states none"),
             ("compiler", compiler.get("version") or compiler.get("executable") or "-"),
             ("compile flags", " ".join(compiler.get("compile_flags") or [])),
             ("link flags", " ".join(compiler.get("link_flags") or []) or "-"),
             ("check inputs", made)]
    hashes = []
    for f in r["files"]:
        hashes.append((f["file"], f["role"], f["sha256"]))
        if f.get("ihex_sha256"):
            hashes.append((f"Intel HEX of {f['file']}", "image (.hex)", f["ihex_sha256"]))
    return {"facts": facts, "hashes": hashes}


# --------------------------------------------------------------------------- drawings


def stacked_bar(segments, label, height=34):
    """One SVG bar whose segments (name, value, colour, hover text) fill its width in proportion
    to their values: the percentages (data-pct) sum to 100."""
    return TEMPLATES.get_template("report_drawings.html.j2").module.stacked_bar(bar_segments(segments, height), label,
                                                                         height, WIDTH)


def bar_segments(segments, height=34):
    """The drawn segments of a stacked bar: x, width, share in percent, label (when it fits)."""
    total = sum(v for _, v, _, _ in segments)
    out, x = [], 0.0
    for name, value, colour, hover in segments:
        if value <= 0 or total <= 0:
            continue
        share = value / total
        w = WIDTH * share
        text = f"{name} {pct(share)}"
        label = None
        if w > 7.5 * len(text) + 8:
            dark = colour in (PALETTE[1], PALETTE[4], PALETTE[6], PALETTE[8], PALETTE[12], FREE_COLOUR)
            label = {"x": num(x + 5), "y": f"{height / 2 + 5:.0f}", "light": not dark, "text": text}
        out.append({"x": num(x), "width": num(w), "colour": colour, "pct": num(100 * share), "hover": hover,
                    "label": label})
        x += w
    return out


def legend(rows):
    """(colour, name, value, share text) rows of a legend table."""
    return [(colour, name, f"{value:,}", pct(share)) for colour, name, value, share in rows]


def layer_colours(r):
    """Layer name -> palette colour, in model order (the same colour in every drawing)."""
    names = [l["name"] for l in r.get("layers") or []]
    w = r.get("wcet") or {}
    names += sorted(set(w.get("per_layer") or {}) - set(names))
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def wcet_view(r):
    """The WCET section: the bound, its timeline, and its split per layer (or why there is none)."""
    w = r.get("wcet")
    if not w:
        measured = None
        if r.get("measured_cycles") is not None:
            measured = {"cycles": cycles_text(r["measured_cycles"]),
                        "ms": f" ({fmt_ms(r['measured_ms'])})" if r.get("measured_ms") else "",
                        "inputs": r["measured_inputs"]}
        return {"bound": None, "why": r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET step was run",
                "measured": measured}
    view = {"bound": {"cycles": cycles_text(w["wcet_cycles"]), "ms": fmt_ms(w["wcet_ms"]),
                      "analyzer": w["analyzer"], "label": w.get("label", "")},
            "timeline": timeline(w), "note": None, "bar": None}
    colours = layer_colours(r)
    per_layer = w.get("per_layer") or {}
    order = [l["name"] for l in r.get("layers") or [] if l["name"] in per_layer]
    order += sorted(set(per_layer) - set(order))
    segs = [(n, per_layer[n]["cycles"], colours[n], f"{n}: {per_layer[n]['cycles']:,} cycles") for n in order]
    outside = w.get("outside_layers")
    if outside is None and not per_layer:
        view["note"] = w.get("per_layer_note") or "the analyzer gives no per-layer split"
        return view
    if outside is None:  # a report from before outside_layers: the rest of the bound, computed here
        rest = w["wcet_cycles"] - sum(v["cycles"] for v in per_layer.values())
        outside = {"cycles": rest}
    if outside["cycles"] > 0:
        segs.append(("outside any layer", outside["cycles"], OUTSIDE_COLOUR,
                     f"outside any layer: {outside['cycles']:,} cycles"))
    total = sum(v for _, v, _, _ in segs)
    view["excess"] = f"{-outside['cycles']:,}" if outside["cycles"] < 0 else None
    view["bar"] = bar_segments(segs)
    view["legend"] = legend([(c, n, v, v / total if total else 0.0) for n, v, c, _ in segs])
    return view


def timeline(w):
    """Bound and measured cycles against the deadline, on one time axis (ms): the drawing's parts."""
    clock_ms = w["wcet_ms"] / w["wcet_cycles"] if w["wcet_cycles"] else None
    measured_ms = w["measured_cycles"] * clock_ms if w.get("measured_cycles") and clock_ms else None
    deadline_ms = w.get("deadline_ms")
    top = max(v for v in (w["wcet_ms"], measured_ms, deadline_ms, 1e-9) if v is not None) * 1.12
    scale = (WIDTH - 20) / top
    rows = [("WCET bound", w["wcet_ms"], "#0072B2")]
    if measured_ms is not None:
        rows.append(("measured (max)", measured_ms, "#56B4E9"))
    axis = 12 + 34 * len(rows)
    view = {"height": 56 + 34 * len(rows), "axis": axis, "rows": [], "ticks": [], "deadline": None}
    for i, (name, ms, colour) in enumerate(rows):
        y = 8 + 34 * i
        wpx = ms * scale
        label = f"{name}: {fmt_ms(ms)}"
        inside = wpx > 9 * len(label)
        view["rows"].append({"y": y, "width": num(wpx), "colour": colour, "hover": f"{name}: {fmt_ms(ms)}",
                             "text_x": num(16 if inside else 16 + wpx), "text_y": y + 17,
                             "light": inside and colour == "#0072B2", "label": label})
    step = nice_step(top)
    for k in range(int(top / step) + 1):
        view["ticks"].append({"x": num(10 + k * step * scale), "label": fmt_ms(k * step) if k else "0"})
    if deadline_ms is not None:
        x = 10 + deadline_ms * scale
        anchor = "end" if x > WIDTH / 2 else "start"
        view["deadline"] = {"x": num(x), "colour": "#14521a" if w.get("met") else "#b00020",
                            "ms": fmt_ms(deadline_ms), "text_x": num(x + (-6 if anchor == "end" else 6)),
                            "anchor": anchor, "used": pct(w["wcet_ms"] / deadline_ms),
                            "margin": fmt_ms(w["margin_ms"])}
    return view


def errors_view(r):
    """The semantic check's section: per run the cases whose action differs (TPG), or the
    histogram of each case's error; None when the report has neither."""
    cases = r.get("mismatch_cases_by_run")
    if cases is not None:  # a kind whose outputs are right or wrong (TPG actions): the cases that differ
        return {"strips": [(label, mismatch_strip(cases[label], r["check_inputs"])) for label in sorted(cases)]}
    errors = r.get("case_errors_by_run")
    if errors is None:
        return None
    return {"histograms": [(label, histogram(errors[label], r["tolerance"])) for label in sorted(errors)]}


def histogram(values, tolerance):
    """Cases per half-decade of error (log scale), with an exact-zero and a non-finite column, and
    the tolerance as a dashed line: the drawing's parts."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    zeros = sum(1 for v in finite if v == 0)
    positive = [math.log10(v) for v in finite if v > 0]
    bad = len(values) - len(finite)
    tol_log = math.log10(tolerance) if tolerance > 0 else None
    columns = []  # (label, count, hover, beyond the tolerance)
    if zeros:
        columns.append(("0", zeros, "exactly 0", False))
    first_bin = len(columns)
    edges = []
    ends = positive + ([tol_log] if tol_log is not None else [])
    if ends:
        lo = math.floor(min(ends) * 2) / 2
        top = math.floor(max(ends) * 2) / 2 + 0.5  # the largest value's bin is [top - 0.5, top)
        edges = [lo + 0.5 * k for k in range(int(round((top - lo) * 2)) + 1)]
        for a, b in zip(edges, edges[1:]):
            count = sum(1 for v in positive if a <= v < b)
            over = tol_log is not None and b > tol_log and count and any(a <= v < b and v > tol_log for v in positive)
            columns.append((sci(10 ** a), count, f"in [{sci(10 ** a)}, {sci(10 ** b)})", bool(over)))
    if bad:
        columns.append(("inf/NaN", bad, "infinite or NaN", True))
    height, base, left, tall = 200, 150, 50, 115
    col = (WIDTH - left - 10) / max(len(columns), 1)
    peak = max([c for _, c, _, _ in columns] + [1])
    view = {"height": height, "base": base, "left": left, "top": base - tall, "peak": peak, "columns": [],
            "tolerance": None, "mid": f"{(left + WIDTH) / 2:.0f}"}
    for i, (name, count, span, over) in enumerate(columns):
        x = left + i * col
        h = tall * count / peak
        view["columns"].append({"x": num(x + 2), "y": num(base - h), "width": num(col - 4), "height": num(h),
                                "colour": "#b00020" if over else "#0072B2", "count": count, "span": span,
                                "centre": num(x + col / 2), "count_y": num(base - h - 4), "name": name})
    if tol_log is not None and edges:
        tol_x = left + (first_bin + (tol_log - edges[0]) / 0.5) * col
        anchor, dx = ("end", -5) if tol_x > WIDTH / 2 else ("start", 5)
        view["tolerance"] = {"x": num(tol_x), "y1": base - tall - 10, "text_x": num(tol_x + dx),
                             "text_y": base - tall - 1, "anchor": anchor, "value": f"{tolerance:g}"}
    within = sum(1 for v in finite if v <= tolerance)
    view["summary"] = (f"{len(values)} cases" + (f"; max {max(finite):.3g}" if finite else "")
                       + (f"; {bad} infinite or NaN" if bad else "")
                       + f"; {within} of {len(values)} within the tolerance {tolerance:g}.")
    return view


def mismatch_strip(positions, cases):
    """The check cases as one strip, a red tick at each case whose action differs."""
    step = (WIDTH - 20) / max(cases, 1)
    return {"height": 46, "ticks": [{"x": num(10 + p * step), "width": num(max(step, 2)), "case": int(p)}
                                    for p in positions],
            "last": max(cases - 1, 0), "count": len(positions), "cases": cases,
            "first": f" (first at case {positions[0]})" if positions else ""}


def memory_view(r):
    """Flash and RAM: each a stacked bar of its parts (and what is free) with a legend table."""
    stack = r.get("stack_bytes") or 0
    parts_of = (
        ("Flash", r["flash_bytes"], r.get("flash_capacity"),
         [("code and constants (.text)", r["text_bytes"], "#0072B2"),
          ("initialised data (.data)", r["data_bytes"], "#E69F00")]),
        ("RAM", r["ram_bytes"], r.get("ram_capacity"),
         [("initialised data (.data)", r["data_bytes"], "#E69F00"),
          ("zeroed data (.bss)", r["bss_bytes"], "#009E73"),
          ("stack bound", stack, "#CC79A7")]))
    memories = []
    for title, used, cap, parts in parts_of:
        whole = max(cap or 0, sum(v for _, v, _ in parts))
        segs = [(n, v, c, f"{n}: {v:,} bytes") for n, v, c in parts]
        if cap and cap > used:
            segs.append(("free", cap - sum(v for _, v, _ in parts), FREE_COLOUR, f"free: {cap - used:,} bytes"))
        memories.append({"title": title, "used": f"{used:,}",
                         "of": f" of {cap:,} bytes ({pct(used / cap)})" if cap else " (the board states no capacity)",
                         "bar": bar_segments(segs),
                         "legend": legend([(c, n, v, v / whole if whole else 0.0) for n, v, c, _ in segs]),
                         "share_of": "share of " + ("the capacity" if cap else "the use")})
    s = r.get("stack")
    measured = r.get("measured_stack_bytes")
    from nnbuild.checks.memory import measured_stack_bound, stack_violation
    bound, entry = measured_stack_bound(r)
    return {"memories": memories, "stack": {"bytes": f"{stack:,}", "entry": s.get("entry"), "path": s.get("path") or [],
                                            "measured": f"{measured:,}" if measured is not None else None,
                                            "measured_entry": entry, "measured_bound": f"{bound:,}" if bound else "-",
                                            "within": not stack_violation(r)}
            if s else None, "no_stack": not s and not r.get("stack_bytes")}


def auto_view(r):
    """precision=auto's table of candidates, or None."""
    auto = r.get("precision_auto")
    if not auto:
        return None
    rows = [{"precision": row["precision"], "winner": row["precision"] == auto["winner"],
             "wcet": "no bound" if row.get("wcet_ms") is None else fmt_ms(row["wcet_ms"]),
             "measured": cycles_text(row.get("measured_cycles")), "error": error_text(r, row.get("max_abs_error")),
             "flash": cycles_text(row.get("flash_bytes")), "ram": cycles_text(row.get("ram_bytes")),
             "verdict": "; ".join(row.get("violations") or []) or "meets every gate"} for row in auto["candidates"]]
    return {"winner": auto["winner"], "why": auto["why"], "rows": rows}


def trace_view(r):
    """Each layer with its C lines, its colour and its WCET cycles."""
    per_layer = (r.get("wcet") or {}).get("per_layer") or {}
    colours = layer_colours(r)
    rows = []
    for i, layer in enumerate(r.get("layers") or []):
        lines = layer.get("lines")
        span = f"{lines[0]}-{lines[1]}" if isinstance(lines, (list, tuple)) and len(lines) == 2 else (lines or "-")
        rows.append({"index": i, "colour": colours[layer["name"]], "name": layer["name"], "type": layer.get("type"),
                     "activation": layer.get("activation") or "-", "inputs": layer.get("inputs"),
                     "units": layer.get("units"), "span": span,
                     "cycles": cycles_text(per_layer.get(layer["name"], {}).get("cycles"))})
    return rows


def render(report: dict) -> str:
    """The page for one report record (report.json's content)."""
    r = report
    return TEMPLATES.get_template("report.html.j2").render(
        r=r, css=Markup(CSS), header=header(r), wcet=wcet_view(r), errors=errors_view(r), memory=memory_view(r),
        auto=auto_view(r), layers=trace_view(r), passes=r.get("passes") or [],
        versions=sorted((r.get("tool_versions") or {}).items()),
        version=(r.get("tool_versions") or {}).get("nnbuild", ""), width=WIDTH)


def save(path, report):
    """Write render(report) to `path` atomically (nnbuild.files)."""
    files.write_text(path, render(report))
