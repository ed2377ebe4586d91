"""report.html of a multi-item build: the Petri-net checks, the host runs, the board's bounds
(per item, end to end) against the deadline. Same rules as report_html: one self-contained page,
no script, every string from the report escaped (the template report_multiitem.html.j2 beside
this module, through report_html.TEMPLATES), the same report gives the same bytes."""

from markupsafe import Markup

from nnbuild import files
from nnbuild.checks.report_html import CSS, PALETTE, TEMPLATES, bar_segments


def header(r):
    verdict = "all gates hold" if r.get("gates_passed") else "a gate failed: " + str(r.get("failure", ""))
    return [("items", ", ".join(r["items"])), ("synchronisation", r.get("sync")),
            ("code shape / precision", f"{r.get('shape')} / {r.get('precision')}"), ("verdict", verdict)]


def petri(r):
    p = r["petri"]
    return [("places / transitions / initial tokens", f"{p['places']} / {p['transitions']} / {p['initial_tokens']}"),
            ("reachable markings: data flow / program order / unsplit",
             f"{p['states']} / {p['program_order_states']} / {p['unsplit_states']}"),
            ("product states (trace inclusion, equivalence)",
             f"{p['product_states']} / {p['program_order_product_states']}"),
            ("deadlock-free, 1-safe, trace inclusion, equivalence",
             ", ".join("yes" if p[k] else "NO" for k in ("deadlock_free", "one_safe", "trace_inclusion",
                                                         "equivalence")))]


def split(r):
    """How a single-graph model was split (items=N or a map), by which costs; None when it was not."""
    sp = r.get("split")
    if not sp:
        return None
    by_item = {}
    for layer, item in sp["layers"].items():
        by_item.setdefault(item, []).append(layer)
    return ([("split by", sp["by"]), ("layer costs", sp["cost_source"]),
             ("items on their own cores / in sequence", f"{sp['items_on_own_cores']:,} / {sp['sequential']:,}")]
            + [(item, ", ".join(layers)) for item, layers in by_item.items()])


def host(r):
    """(title, rows) of the host's thread checks and of its timing runs."""
    out = []
    for key, title in (("host", "Threads, random start delays"), ("thread_sanitizer", "Under ThreadSanitizer")):
        h = r.get(key)
        if h:
            out.append((title, [
                ("runs bit-equal to the unsplit model", f"{h['bit_equal_runs']} / {h['runs']}"),
                ("every run a firing sequence of the net", "yes" if h["firing_sequences"] else h["trace_violation"]),
                ("distinct event orders", h["distinct_orders"]), ("sanitizer reports", h["sanitizer_reports"])]))
    t = r.get("host_timing")
    if t:
        out.append(("Host timing: the timed net on measured costs", [
            ("runs within the critical path of measured segment and sync costs", f"{t['within_critical_path']} / {t['runs']}"),
            ("the same without the sync costs", f"{t['within_without_sync_costs']} / {t['runs']}"),
            ("median end-to-end / critical path / without sync costs",
             f"{t['median_end_to_end_ns'] / 1e3:.1f} us / {t['median_critical_path_ns'] / 1e3:.1f} us / "
             f"{t['median_critical_path_without_sync_ns'] / 1e3:.1f} us"),
            ("bound of the worst costs / worst measured", f"{t['bound_of_worst_costs_ns'] / 1e3:.1f} us / "
                                                          f"{t['max_end_to_end_ns'] / 1e3:.1f} us")]))
    return out


def board(r):
    """The board's run and bounds, the item bounds as a stacked bar; None without a board check."""
    d, b = r.get("deadline") or {}, r.get("board")
    if not b:
        return None
    items = sorted((d.get("item_bounds_ms") or {}).items())
    bar = bar_segments([(name, ms, PALETTE[i % len(PALETTE)], f"{name}: {ms} ms")
                        for i, (name, ms) in enumerate(items)]) if items else None
    return {"rows": [
        ("max error vs float64", f"{b['max_abs_error']:.3g}"),
        ("outputs bit-equal to the unsplit model's code", f"{b['bit_equal_to_unsplit_cases']} / {b['cases']}"
         if "bit_equal_to_unsplit_cases" in b else "float32: compared with float64 only"),
        ("worst measured", f"{d.get('worst_measured_ms')} ms"),
        ("end-to-end bound (this deployment)", f"{d.get('end_to_end_bound_ms')} ms"),
        ("items on their own cores (longest path of the timed net)", f"{d.get('items_on_own_cores_bound_ms')} ms"),
        ("deadline", d.get("verdict"))], "bar": bar, "item_rows": [(name, f"{ms} ms") for name, ms in items]}


def render(report: dict) -> str:
    r = report
    return TEMPLATES.get_template("report_multiitem.html.j2").render(
        r=r, css=Markup(CSS), header=header(r), split=split(r), petri=petri(r), host=host(r), board=board(r))


def save(path, report):
    files.write_text(path, render(report))
