"""report.html of a multi-item build: the Petri-net checks, the host runs, the board's bounds
(per item, end to end) against the deadline. Same rules as report_html: one self-contained page,
no script, every string from the report escaped, the same report gives the same bytes."""

from nnbuild import files
from nnbuild.checks.report_html import CSS, PALETTE, esc, stacked_bar


def _rows(pairs):
    return "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs) + "</table>"


def section_header(r):
    verdict = "all gates hold" if r.get("gates_passed") else "a gate failed: " + str(r.get("failure", ""))
    return (f"<h1>{esc(r['model'])}: multi-item system on {esc(r['target'])}</h1>"
            + _rows([("items", ", ".join(r["items"])), ("synchronisation", r.get("sync")),
                     ("code shape / precision", f"{r.get('shape')} / {r.get('precision')}"), ("verdict", verdict)]))


def section_petri(r):
    p = r["petri"]
    return ("<h2>Petri net (checked before any code)</h2>"
            + _rows([("places / transitions / initial tokens", f"{p['places']} / {p['transitions']} / {p['initial_tokens']}"),
                     ("reachable markings: data flow / program order / unsplit",
                      f"{p['states']} / {p['program_order_states']} / {p['unsplit_states']}"),
                     ("product states (trace inclusion, equivalence)",
                      f"{p['product_states']} / {p['program_order_product_states']}"),
                     ("deadlock-free, 1-safe, trace inclusion, equivalence",
                      ", ".join("yes" if p[k] else "NO" for k in ("deadlock_free", "one_safe", "trace_inclusion",
                                                                  "equivalence")))]))


def section_split(r):
    """How a single-graph model was split (items=N or a map), by which costs."""
    sp = r.get("split")
    if not sp:
        return ""
    by_item = {}
    for layer, item in sp["layers"].items():
        by_item.setdefault(item, []).append(layer)
    return ("<h2>Split of the single-graph model</h2>" + _rows(
        [("split by", sp["by"]), ("layer costs", sp["cost_source"]),
         ("items on their own cores / in sequence", f"{sp['items_on_own_cores']:,} / {sp['sequential']:,}")]
        + [(item, ", ".join(layers)) for item, layers in by_item.items()]))


def section_host(r):
    out = []
    for key, title in (("host", "Threads, random start delays"), ("thread_sanitizer", "Under ThreadSanitizer")):
        h = r.get(key)
        if h:
            out.append(f"<h2>{esc(title)}</h2>" + _rows([
                ("runs bit-equal to the unsplit model", f"{h['bit_equal_runs']} / {h['runs']}"),
                ("every run a firing sequence of the net", "yes" if h["firing_sequences"] else h["trace_violation"]),
                ("distinct event orders", h["distinct_orders"]), ("sanitizer reports", h["sanitizer_reports"])]))
    t = r.get("host_timing")
    if t:
        out.append("<h2>Host timing: the timed net on measured costs</h2>" + _rows([
            ("runs within the critical path of measured segment and sync costs", f"{t['within_critical_path']} / {t['runs']}"),
            ("the same without the sync costs", f"{t['within_without_sync_costs']} / {t['runs']}"),
            ("median end-to-end / critical path / without sync costs",
             f"{t['median_end_to_end_ns'] / 1e3:.1f} us / {t['median_critical_path_ns'] / 1e3:.1f} us / "
             f"{t['median_critical_path_without_sync_ns'] / 1e3:.1f} us"),
            ("bound of the worst costs / worst measured", f"{t['bound_of_worst_costs_ns'] / 1e3:.1f} us / "
                                                          f"{t['max_end_to_end_ns'] / 1e3:.1f} us")]))
    return "".join(out)


def section_board(r):
    d, b = r.get("deadline") or {}, r.get("board")
    if not b:
        return ""
    items = sorted((d.get("item_bounds_ms") or {}).items())
    bar = stacked_bar([(name, ms, PALETTE[i % len(PALETTE)], f"{name}: {ms} ms") for i, (name, ms) in enumerate(items)],
                      "item bounds") if items else ""
    return ("<h2>Board run and bounds</h2>" + _rows([
        ("max error vs float64", f"{b['max_abs_error']:.3g}"),
        ("outputs bit-equal to the unsplit model's code", f"{b['bit_equal_to_unsplit_cases']} / {b['cases']}"
         if "bit_equal_to_unsplit_cases" in b else "float32: compared with float64 only"),
        ("worst measured", f"{d.get('worst_measured_ms')} ms"),
        ("end-to-end bound (this deployment)", f"{d.get('end_to_end_bound_ms')} ms"),
        ("items on their own cores (longest path of the timed net)", f"{d.get('items_on_own_cores_bound_ms')} ms"),
        ("deadline", d.get("verdict"))]) + "<h3>Item bounds</h3>" + bar
        + _rows([(name, f"{ms} ms") for name, ms in items]))


def render(report: dict) -> str:
    title = f"nnbuild report: {report['model']} (multi-item) on {report['target']}"
    body = (section_header(report) + section_split(report) + section_petri(report) + section_host(report)
            + section_board(report))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n"
            "<footer>Drawn from report.json by nnbuild.</footer>\n</main></body></html>\n")


def save(path, report):
    files.write_text(path, render(report))
