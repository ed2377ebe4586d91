"""report.html: report.json drawn for a person (a safety engineer reviewing one build).

One self-contained page: inline CSS and SVG, no script, nothing fetched (no fonts, images or
links other than '#' anchors inside the page). The same report gives the same bytes: no
timestamp, no absolute path, dictionaries drawn in a fixed order, numbers in fixed formats.

Every string that comes from the model or the build (layer names, model name, board text,
waivers, tool versions) is HTML-escaped, in text and in attributes alike; colours and sizes are
computed here, never taken from the report.
"""

import html
import math

from nnbuild import files
from nnbuild.checks import gates
from nnbuild.checks.deadline import deadline_violation, fmt_ms, soundness_violation

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
"""


def esc(value):
    """Text or attribute value from the report, escaped (quotes too)."""
    return html.escape(str(value), quote=True)


def num(x, digits=3):
    """A fixed-format number for SVG coordinates and data attributes."""
    return f"{x:.{digits}f}"


def cycles_text(c):
    return "-" if c is None else f"{int(c):,}"


def pct(share):
    """A share as a percentage; a small non-zero share does not read as 0.0%."""
    if 0 < share < 0.0005:
        return "<0.1%"
    return f"{100 * share:.1f}%"


def sci(x):
    """1e-06 -> '1e-6', 10**-4.5 -> '3.2e-5': bin edges as an engineer writes them."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def nice_step(top, ticks=5):
    """A round tick step (1, 2 or 5 times a power of ten) giving about `ticks` ticks up to `top`."""
    raw = top / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def error_text(report, value):
    """An error as the model's kind writes it (TPG: a count of actions)."""
    if value is None:
        return "-"
    try:
        return (report.get("error_format") or "{:.3g}").format(value)
    except (ValueError, TypeError):
        return esc(value)


# --------------------------------------------------------------------------- the gates


def gate_rows(r):
    """(gate, status, detail) for every gate the build judges: tolerance per run, deadline, bound
    soundness, flash and RAM. status: pass, fail, waived or na."""
    rows = []
    tolerance = r["tolerance"]
    # the kind's own wording of an error line (report.json's error_summary), else a network's
    wording = (r.get("error_summary") or "max error: {errors} vs float64 reference, tolerance {tolerance:g}").strip()
    for label, error in sorted((r.get("max_abs_error_by_run") or {}).items()):
        ok = error <= tolerance
        detail = " ".join(wording.format(errors=error_text(r, error), cases=r["check_inputs"],
                                         tolerance=tolerance).split())
        rows.append((f"semantics ({label} run)", "pass" if ok else "fail", detail))
    w = r.get("wcet")
    waivers = r.get("waivers") or []
    if w and w.get("deadline_ms") is not None:
        broken = deadline_violation(w)
        detail = broken or (f"WCET {fmt_ms(w['wcet_ms'])} <= deadline {fmt_ms(w['deadline_ms'])}"
                            f"{origin(r)}, margin {fmt_ms(w['margin_ms'])} ({pct(w['margin'])})")
        rows.append(("deadline", "fail" if broken else "pass", detail))
    elif r.get("deadline_ms") is not None:
        why = r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET bound"
        rows.append(("deadline", "fail", f"deadline {fmt_ms(r['deadline_ms'])}{origin(r)} cannot be checked: {why}"))
    elif waivers:
        rows.append(("deadline", "waived", "; ".join(waivers)))
    else:
        rows.append(("deadline", "na", "no deadline set for this build"))
    if w:
        broken = soundness_violation(w)
        if broken:
            rows.append(("WCET bound soundness", "fail", broken))
        elif w.get("measured_cycles"):
            rows.append(("WCET bound soundness", "pass",
                         f"bound {cycles_text(w['wcet_cycles'])} >= measured {cycles_text(w['measured_cycles'])} "
                         f"cycles (bound/measured {w['bound_over_measured']:.4f})"))
        else:
            rows.append(("WCET bound soundness", "na", "no measured run to compare the bound with"))
    else:
        why = r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET bound"
        rows.append(("WCET bound soundness", "na", f"no bound: {why}"))
    for kind, what in (("flash", "flash"), ("ram", "RAM")):
        used, cap = r.get(f"{kind}_bytes"), r.get(f"{kind}_capacity")
        stack = " incl. the stack bound" if kind == "ram" and r.get("stack_bytes") else ""
        if cap:
            ok = used <= cap
            rows.append((f"memory ({what})", "pass" if ok else "fail",
                         f"{used:,} bytes{stack} {'<=' if ok else '>'} {cap:,} bytes"))
        else:
            rows.append((f"memory ({what})", "na", f"{used:,} bytes{stack}; the board states no capacity"))
    return rows


def origin(r):
    return f" (from the {r['deadline_origin']})" if r.get("deadline_origin") else ""


def section_header(r):
    clock = f"{r['clock_hz'] / 1e6:g} MHz" if r.get("clock_hz") else "untimed (no clock)"
    facts = [("model", r["model"]), ("model kind", r.get("kind", "nn")), ("target", r["target"]),
             ("board", r["board"]), ("clock", clock), ("precision", r["precision"]), ("code shape", r["shape"]),
             ("optimisation", r.get("opt") or "-"),
             ("activation memory", r.get("activation_memory") or "-"),
             ("check inputs", r["check_inputs"]),
             ("tolerance", f"{r['tolerance']:g}")]
    if r.get("blob"):
        b = r["blob"]
        facts.append(("memory blob", f"{b['memory_size_bytes']:,} bytes: memory_hard {b['memory_hard_bytes']:,} "
                                     f"(weights, activations), training-only {b['rest_bytes']:,}"))
    for entry, e in sorted((r.get("entries") or {}).items()):
        w = e.get("wcet")
        facts.append((f"WCET of {entry}", f"{w['wcet_cycles']:,} cycles ({w['wcet_ms']:.3f} ms), measured "
                                          f"{w['measured_cycles'] or 0:,}" if w else
                      (e.get("wcet_error") or e.get("wcet_unavailable") or "-")))
    out = [f"<h1>nnbuild report: {esc(r['model'])} on {esc(r['target'])}</h1>"]
    broken = gates.violations(r)
    if broken:
        out.append('<p class="overall"><span class="verdict fail">FAIL</span> '
                   + "; ".join(esc(b) for b in broken) + "</p>")
    else:
        out.append('<p class="overall"><span class="verdict pass">PASS</span> every gate holds'
                   + (" (with the waivers below)" if r.get("waivers") else "") + "</p>")
    out.append('<nav><a href="#gates">Gates</a><a href="#wcet">WCET</a><a href="#errors">Errors</a>'
               '<a href="#memory">Memory</a>' + ('<a href="#auto">Precision candidates</a>'
                                                 if r.get("precision_auto") else "")
               + '<a href="#trace">Layers and C lines</a><a href="#tools">Tools</a></nav>')
    out.append('<table class="facts">' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in facts)
               + "</table>")
    out.append('<h2 id="gates">Gates</h2><table><tr><th>gate</th><th>verdict</th><th>detail</th></tr>')
    for gate, status, detail in gate_rows(r):
        out.append(f'<tr><td>{esc(gate)}</td><td><span class="verdict {status}">{VERDICT_WORDS[status]}</span></td>'
                   f"<td>{esc(detail)}</td></tr>")
    out.append("</table>")
    out.append(titled_list("Waivers", r.get("waivers")))
    return out


VERDICT_WORDS = {"pass": "PASS", "fail": "FAIL", "waived": "WAIVED", "na": "N/A"}


def titled_list(title, items):
    """An h3 and the items as a list (escaped), or 'none'."""
    body = "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>" if items else '<p class="note">none</p>'
    return f"<h3>{esc(title)}</h3>{body}"


# --------------------------------------------------------------------------- drawings


def stacked_bar(segments, label, height=34):
    """One SVG bar whose segments (name, value, colour, hover text) fill its width in proportion
    to their values: the percentages (data-pct) sum to 100."""
    total = sum(v for _, v, _, _ in segments)
    out = [f'<svg class="stacked" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{esc(label)}">']
    x = 0.0
    for name, value, colour, hover in segments:
        if value <= 0 or total <= 0:
            continue
        share = value / total
        w = WIDTH * share
        out.append(f'<rect class="seg" x="{num(x)}" y="0" width="{num(w)}" height="{height}" fill="{colour}" '
                   f'stroke="#fff" stroke-width="1" data-pct="{num(100 * share)}"><title>{esc(hover)}</title></rect>')
        text = f"{name} {pct(share)}"
        if w > 7.5 * len(text) + 8:
            dark = colour in (PALETTE[1], PALETTE[4], PALETTE[6], PALETTE[8], PALETTE[12], FREE_COLOUR)
            light = "" if dark else ' class="light"'
            out.append(f'<text x="{num(x + 5)}" y="{height / 2 + 5:.0f}"{light}>{esc(text)}</text>')
        x += w
    out.append("</svg>")
    return "".join(out)


def legend_table(rows, head):
    """A table of (colour, name, cycles or bytes, share) under a stacked bar."""
    out = ["<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"]
    for colour, name, value, share in rows:
        out.append(f'<tr><td><span class="swatch" style="background:{colour}"></span>{esc(name)}</td>'
                   f'<td class="num">{value:,}</td><td class="num">{pct(share)}</td></tr>')
    out.append("</table>")
    return "".join(out)


def layer_colours(r):
    """Layer name -> palette colour, in model order (the same colour in every drawing)."""
    names = [l["name"] for l in r.get("layers") or []]
    w = r.get("wcet") or {}
    names += sorted(set(w.get("per_layer") or {}) - set(names))
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def section_wcet(r):
    out = ['<h2 id="wcet">Worst-case execution time</h2>']
    w = r.get("wcet")
    if not w:
        why = r.get("wcet_error") or r.get("wcet_unavailable") or "no WCET step was run"
        out.append(f"<p>No WCET bound: {esc(why)}.</p>")
        if r.get("measured_cycles") is not None:
            out.append(f"<p>Measured: {cycles_text(r['measured_cycles'])} cycles"
                       + (f" ({fmt_ms(r['measured_ms'])})" if r.get("measured_ms") else "")
                       + f", the most of {r['measured_inputs']} inputs (a measurement, not a bound).</p>")
        return out
    out.append(f"<p>Static bound <b>{cycles_text(w['wcet_cycles'])} cycles ({esc(fmt_ms(w['wcet_ms']))})</b> "
               f"from {esc(w['analyzer'])}, for one call of the inference function ({esc(w.get('label', ''))}).</p>")
    out.append(timeline(w))
    out.append("<h3>Where the bound goes, per layer</h3>")
    colours = layer_colours(r)
    per_layer = w.get("per_layer") or {}
    order = [l["name"] for l in r.get("layers") or [] if l["name"] in per_layer]
    order += sorted(set(per_layer) - set(order))
    segs = [(n, per_layer[n]["cycles"], colours[n], f"{n}: {per_layer[n]['cycles']:,} cycles") for n in order]
    outside = w.get("outside_layers")
    if outside is None and not per_layer:
        out.append(f'<p class="note">{esc(w.get("per_layer_note") or "the analyzer gives no per-layer split")}</p>')
        return out
    if outside is None:  # a report from before outside_layers: the rest of the bound, computed here
        rest = w["wcet_cycles"] - sum(v["cycles"] for v in per_layer.values())
        outside = {"cycles": rest}
    if outside["cycles"] > 0:
        segs.append(("outside any layer", outside["cycles"], OUTSIDE_COLOUR,
                     f"outside any layer: {outside['cycles']:,} cycles"))
    total = sum(v for _, v, _, _ in segs)
    if outside["cycles"] < 0:
        out.append(f'<p class="note">The per-layer cycles exceed the bound by {-outside["cycles"]:,}: shares '
                   "below are of their sum.</p>")
    out.append(stacked_bar(segs, "WCET per layer"))
    out.append(legend_table([(c, n, v, v / total if total else 0.0) for n, v, c, _ in segs],
                            ("part of the code", "WCET cycles", "share of the bound")))
    out.append('<p class="note">"outside any layer": the bound\'s cycles in code of no layer\'s C lines: the '
               "inference function's entry and exit, input and output copies, and code between layers.</p>")
    return out


def timeline(w):
    """Bound and measured cycles against the deadline, on one time axis (ms)."""
    clock_ms = w["wcet_ms"] / w["wcet_cycles"] if w["wcet_cycles"] else None
    measured_ms = w["measured_cycles"] * clock_ms if w.get("measured_cycles") and clock_ms else None
    deadline_ms = w.get("deadline_ms")
    top = max(v for v in (w["wcet_ms"], measured_ms, deadline_ms, 1e-9) if v is not None) * 1.12
    scale = (WIDTH - 20) / top
    rows = [("WCET bound", w["wcet_ms"], "#0072B2")]
    if measured_ms is not None:
        rows.append(("measured (max)", measured_ms, "#56B4E9"))
    height = 56 + 34 * len(rows)
    axis = 12 + 34 * len(rows)
    out = [f'<svg class="timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
           'aria-label="WCET bound, measured time and deadline">']
    for i, (name, ms, colour) in enumerate(rows):
        y = 8 + 34 * i
        wpx = ms * scale
        out.append(f'<rect x="10" y="{y}" width="{num(wpx)}" height="24" fill="{colour}">'
                   f"<title>{esc(name)}: {esc(fmt_ms(ms))}</title></rect>")
        label = f"{name}: {fmt_ms(ms)}"
        inside = wpx > 9 * len(label)
        light = ' class="light"' if inside and colour == "#0072B2" else ""
        out.append(f'<text x="{num(16 if inside else 16 + wpx)}" y="{y + 17}"{light}>{esc(label)}</text>')
    out.append(f'<line x1="10" y1="{axis}" x2="{WIDTH - 10}" y2="{axis}" stroke="#555"/>')
    step = nice_step(top)
    for k in range(int(top / step) + 1):
        x = 10 + k * step * scale
        out.append(f'<line x1="{num(x)}" y1="{axis}" x2="{num(x)}" y2="{axis + 5}" stroke="#555"/>'
                   f'<text x="{num(x)}" y="{axis + 18}" text-anchor="middle">{esc(fmt_ms(k * step) if k else "0")}'
                   "</text>")
    if deadline_ms is not None:
        x = 10 + deadline_ms * scale
        colour = "#14521a" if w.get("met") else "#b00020"
        out.append(f'<line x1="{num(x)}" y1="2" x2="{num(x)}" y2="{axis}" stroke="{colour}" stroke-width="3" '
                   f'stroke-dasharray="6 3"><title>deadline {esc(fmt_ms(deadline_ms))}</title></line>')
        text = f"deadline {fmt_ms(deadline_ms)}"
        anchor = "end" if x > WIDTH / 2 else "start"
        out.append(f'<text x="{num(x + (-6 if anchor == "end" else 6))}" y="{axis - 6}" text-anchor="{anchor}" '
                   f'fill="{colour}" font-weight="bold">{esc(text)}</text>')
    out.append("</svg>")
    if deadline_ms is None:
        out.append('<p class="note">No deadline is set for this build.</p>')
    else:
        out.append(f'<p>Deadline {esc(fmt_ms(deadline_ms))}: the bound uses {pct(w["wcet_ms"] / deadline_ms)} of it '
                   f"(margin {esc(fmt_ms(w['margin_ms']))}).</p>")
    return "".join(out)


def section_errors(r):
    out = ['<h2 id="errors">Semantic check: error per case</h2>']
    cases = r.get("mismatch_cases_by_run")
    if cases is not None:  # a kind whose outputs are right or wrong (TPG actions): the cases that differ
        for label in sorted(cases):
            out.append(f"<h3>{esc(label)} run</h3>" + mismatch_strip(cases[label], r["check_inputs"]))
        return out
    errors = r.get("case_errors_by_run")
    if errors is None:
        out.append('<p class="note">This report has no per-case errors (its semantic check predates them).</p>')
        return out
    out.append(f'<p class="note">max |C output - float64 reference output| of each of the {r["check_inputs"]} check '
               "inputs, in half-decade bins; the dashed line is the tolerance.</p>")
    for label in sorted(errors):
        out.append(f"<h3>{esc(label)} run</h3>" + histogram(errors[label], r["tolerance"]))
    return out


def histogram(values, tolerance):
    """Cases per half-decade of error (log scale), with an exact-zero and a non-finite column, and
    the tolerance as a dashed line."""
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
    out = [f'<svg class="histogram" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="error histogram">',
           f'<line x1="{left}" y1="{base}" x2="{WIDTH - 10}" y2="{base}" stroke="#555"/>',
           f'<line x1="{left}" y1="{base - tall}" x2="{left}" y2="{base}" stroke="#555"/>',
           f'<text x="{left - 6}" y="{base - tall + 5}" text-anchor="end">{peak}</text>',
           f'<text x="{left - 6}" y="{base + 5}" text-anchor="end">0</text>']
    for i, (name, count, span, over) in enumerate(columns):
        x = left + i * col
        h = tall * count / peak
        colour = "#b00020" if over else "#0072B2"
        out.append(f'<rect x="{num(x + 2)}" y="{num(base - h)}" width="{num(col - 4)}" height="{num(h)}" '
                   f'fill="{colour}"><title>{count} case(s) with error {esc(span)}</title></rect>')
        if count:
            out.append(f'<text x="{num(x + col / 2)}" y="{num(base - h - 4)}" text-anchor="middle">{count}</text>')
        out.append(f'<text x="{num(x + col / 2)}" y="{base + 18}" text-anchor="middle">{esc(name)}</text>')
    if tol_log is not None and edges:
        tol_x = left + (first_bin + (tol_log - edges[0]) / 0.5) * col
        out.append(f'<line x1="{num(tol_x)}" y1="{base - tall - 10}" x2="{num(tol_x)}" y2="{base}" stroke="#b00020" '
                   f'stroke-width="2" stroke-dasharray="5 3"><title>tolerance {tolerance:g}</title></line>')
        anchor, dx = ("end", -5) if tol_x > WIDTH / 2 else ("start", 5)
        out.append(f'<text x="{num(tol_x + dx)}" y="{base - tall - 1}" text-anchor="{anchor}" fill="#b00020">'
                   f"tolerance {tolerance:g}</text>")
    out.append(f'<text x="{(left + WIDTH) / 2:.0f}" y="{height - 8}" text-anchor="middle">max |error| of a case '
               "(half-decade bins, labelled by their lower end)</text></svg>")
    within = sum(1 for v in finite if v <= tolerance)
    worst = f"; max {max(finite):.3g}" if finite else ""
    infinite = f"; {bad} infinite or NaN" if bad else ""
    out.append(f"<p>{len(values)} cases{worst}{infinite}; {within} of {len(values)} within the tolerance "
               f"{tolerance:g}.</p>")
    return "".join(out)


def mismatch_strip(positions, cases):
    """The check cases as one strip, a red tick at each case whose action differs."""
    height = 46
    out = [f'<svg class="strip" viewBox="0 0 {WIDTH} {height}" role="img" aria-label="mismatching cases">',
           f'<rect x="10" y="6" width="{WIDTH - 20}" height="20" fill="#d9f2d9" stroke="#777"/>']
    step = (WIDTH - 20) / max(cases, 1)
    for p in positions:
        out.append(f'<rect x="{num(10 + p * step)}" y="6" width="{num(max(step, 2))}" height="20" fill="#b00020">'
                   f"<title>case {int(p)}</title></rect>")
    out.append(f'<text x="10" y="{height - 4}">case 0</text><text x="{WIDTH - 10}" y="{height - 4}" '
               f'text-anchor="end">case {max(cases - 1, 0)}</text></svg>')
    first = f" (first at case {positions[0]})" if positions else ""
    out.append(f"<p>{len(positions)} of {cases} actions differ from the reference{first}.</p>")
    return "".join(out)


def section_memory(r):
    out = ['<h2 id="memory">Memory</h2>']
    stack = r.get("stack_bytes") or 0
    for title, used, cap, parts in (
            ("Flash", r["flash_bytes"], r.get("flash_capacity"),
             [("code and constants (.text)", r["text_bytes"], "#0072B2"),
              ("initialised data (.data)", r["data_bytes"], "#E69F00")]),
            ("RAM", r["ram_bytes"], r.get("ram_capacity"),
             [("initialised data (.data)", r["data_bytes"], "#E69F00"),
              ("zeroed data (.bss)", r["bss_bytes"], "#009E73"),
              ("stack bound", stack, "#CC79A7")])):
        whole = max(cap or 0, sum(v for _, v, _ in parts))
        segs = [(n, v, c, f"{n}: {v:,} bytes") for n, v, c in parts]
        if cap and cap > used:
            segs.append(("free", cap - sum(v for _, v, _ in parts), FREE_COLOUR, f"free: {cap - used:,} bytes"))
        of = f" of {cap:,} bytes ({pct(used / cap)})" if cap else " (the board states no capacity)"
        out.append(f"<h3>{title}: {used:,} bytes{of}</h3>")
        out.append(stacked_bar(segs, f"{title} use"))
        out.append(legend_table([(c, n, v, v / whole if whole else 0.0) for n, v, c, _ in segs],
                                ("part", "bytes", "share of " + ("the capacity" if cap else "the use"))))
    if r.get("stack"):
        s = r["stack"]
        out.append(f"<p>Stack bound {stack:,} bytes (static, from <code>{esc(s.get('entry'))}</code>), worst path: "
                   f"<code>{' &rarr; '.join(esc(f) for f in s.get('path') or [])}</code></p>")
    elif not r.get("stack_bytes"):
        out.append('<p class="note">No static stack bound on this board: RAM counts static data only.</p>')
    return out


def section_auto(r):
    auto = r.get("precision_auto")
    if not auto:
        return []
    out = ['<h2 id="auto">precision=auto: the candidates</h2>',
           f"<p>Winner <b>{esc(auto['winner'])}</b>: {esc(auto['why'])}.</p>",
           "<table><tr><th>precision</th><th>WCET</th><th>measured cycles</th><th>max error</th><th>flash bytes</th>"
           "<th>RAM bytes</th><th>verdict</th></tr>"]
    for row in auto["candidates"]:
        wcet = "no bound" if row.get("wcet_ms") is None else fmt_ms(row["wcet_ms"])
        verdict = "; ".join(row.get("violations") or []) or "meets every gate"
        cls = ' class="winner"' if row["precision"] == auto["winner"] else ""
        out.append(f"<tr{cls}><td>{esc(row['precision'])}</td><td class=\"num\">{esc(wcet)}</td>"
                   f"<td class=\"num\">{cycles_text(row.get('measured_cycles'))}</td>"
                   f"<td class=\"num\">{esc(error_text(r, row.get('max_abs_error')))}</td>"
                   f"<td class=\"num\">{cycles_text(row.get('flash_bytes'))}</td>"
                   f"<td class=\"num\">{cycles_text(row.get('ram_bytes'))}</td><td>{esc(verdict)}</td></tr>")
    out.append("</table>")
    return out


def section_trace(r):
    out = ['<h2 id="trace">Layers and their C lines</h2>',
           f"<p>Each model layer and the lines of <code>gen/{esc(r['model'])}.c</code> that compute it.</p>",
           "<table><tr><th>#</th><th>layer</th><th>type</th><th>activation</th><th>inputs</th><th>units</th>"
           "<th>C lines</th><th>WCET cycles</th></tr>"]
    per_layer = (r.get("wcet") or {}).get("per_layer") or {}
    colours = layer_colours(r)
    for i, layer in enumerate(r.get("layers") or []):
        lines = layer.get("lines")
        span = f"{lines[0]}-{lines[1]}" if isinstance(lines, (list, tuple)) and len(lines) == 2 else (lines or "-")
        cyc = per_layer.get(layer["name"], {}).get("cycles")
        out.append(f'<tr><td class="num">{i}</td><td><span class="swatch" style="background:{colours[layer["name"]]}">'
                   f"</span>{esc(layer['name'])}</td><td>{esc(layer.get('type'))}</td>"
                   f"<td>{esc(layer.get('activation') or '-')}</td><td class=\"num\">{esc(layer.get('inputs'))}</td>"
                   f"<td class=\"num\">{esc(layer.get('units'))}</td><td>{esc(span)}</td>"
                   f'<td class="num">{cycles_text(cyc)}</td></tr>')
    out.append("</table>")
    out.append(titled_list("Graph passes applied", r.get("passes")))
    return out


def section_tools(r):
    versions = r.get("tool_versions") or {}
    return ['<h2 id="tools">Tool versions</h2><table><tr><th>tool</th><th>version</th></tr>'
            + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in sorted(versions.items()))
            + "</table>"]


def render(report: dict) -> str:
    """The page for one report record (report.json's content)."""
    r = report
    body = (section_header(r) + section_wcet(r) + section_errors(r) + section_memory(r) + section_auto(r)
            + section_trace(r) + section_tools(r))
    version = (r.get("tool_versions") or {}).get("nnbuild", "")
    title = f"nnbuild report: {r['model']} on {r['target']}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n"
            + "\n".join(body)
            + f"\n<footer>Drawn from report.json by nnbuild {esc(version)}.</footer>\n</main></body></html>\n")


def save(path, report):
    """Write render(report) to `path` atomically (nnbuild.files)."""
    files.write_text(path, render(report))
