"""precision=auto: every precision the kind, shape and board allow (nnbuild.kinds.precision_candidates)
is built, measured and bounded; the winner is the one with the smallest WCET that meets both the
tolerance and the deadline (on a board without an analyzer: the fewest measured cycles, else the
smallest memory footprint, flash plus RAM)."""

import shutil

from nnbuild.checks import gates


def row(precision, report, interface=None):
    """One line of the candidate table (hints in the syntax of `interface`)."""
    w = report.get("wcet") or {}
    return {"precision": precision, "wcet_cycles": w.get("wcet_cycles"), "wcet_ms": w.get("wcet_ms"),
            "measured_cycles": report.get("measured_cycles"), "max_abs_error": report.get("max_abs_error"),
            "flash_bytes": report.get("flash_bytes"), "ram_bytes": report.get("ram_bytes"),
            "memory_bytes": footprint(report),
            "violations": gates.violations(report, interface)}


def footprint(report):
    """Flash plus RAM: a float64 build can have the smaller image and twice the buffers."""
    if report.get("flash_bytes") is None:
        return None
    return report["flash_bytes"] + (report.get("ram_bytes") or 0)


#: what ranks the qualifying candidates, best first: the WCET bound where the board has an analyzer,
#: else the worst measured cycles where its runner counts them, else the memory footprint
RANKINGS = (("wcet_cycles", "the smallest WCET ({wcet_ms:.4g} ms)"),
            ("measured_cycles", "the fewest measured cycles ({measured_cycles:,}; no WCET analyzer)"),
            ("memory_bytes", "the smallest memory footprint ({memory_bytes:,} bytes of flash and RAM; "
                     "no WCET analyzer, no cycle counts)"))


def choose(reports, interface=None):
    """(winner, table, why): reports is {precision: report}; winner None when nobody qualifies.

    A candidate qualifies when it breaks no gate and, where any candidate has a WCET bound, has one
    too (a bound cannot be compared with no bound)."""
    table = [row(p, r, interface) for p, r in sorted(reports.items())]
    ok = [r for r in table if not r["violations"]]
    for key, wording in RANKINGS:
        if any(r[key] is not None for r in ok):
            ranked = [r for r in ok if r[key] is not None]
            break
    else:
        ranked = []
    if not ranked:
        return None, table, "no candidate meets every constraint"
    best = min(ranked, key=lambda r: r[key])
    others = [r["precision"] for r in ranked if r is not best]
    why = (f"{best['precision']} has {wording.format(**best)} of the candidates that meet the tolerance and the "
           "deadline" + (f" ({', '.join(others)} also qualify)" if others else ""))
    return best["precision"], table, why


def refusal(table):
    """One line naming the constraint each candidate broke."""
    parts = []
    for r in table:
        broken = r["violations"] or (["no WCET bound"] if r["wcet_cycles"] is None and any(
            t["wcet_cycles"] is not None for t in table) else [])
        parts.append((r["precision"], broken[0] if broken else "ok"))
    reasons = {reason for _, reason in parts}
    if len(parts) > 1 and len(reasons) == 1:   # one reason for all: said once
        return f"precision=auto: no candidate qualifies; every candidate ({', '.join(p for p, _ in parts)}): {reasons.pop()}"
    return "precision=auto: no candidate qualifies; " + "; ".join(f"{p}: {reason}" for p, reason in parts)


def install_winner(winner_file, destination):
    """The winner's file at `destination`, atomically (a failed copy leaves nothing)."""
    if winner_file:
        from nnbuild import files
        with files.atomic(destination) as tmp:
            shutil.copyfile(winner_file, tmp)


def known_to_meet(record, report_path):
    """For a missed deadline: the builds of the same model that this build tree has already
    measured and bounded within the deadline (other precisions of a precision=auto run, other
    boards), as one clause; None when there is none. Only measured facts are named."""
    import json
    from pathlib import Path
    report_path = Path(report_path)
    deadline_ms = record["wcet"]["deadline_ms"]
    model_dir = report_path.parent
    if model_dir.parent.name == "candidates":  # a candidate of precision=auto: its siblings and the model dir
        model_dir = model_dir.parent.parent
    board_dirs = model_dir.parent.parent
    found = []
    for path in sorted(set(model_dir.glob("candidates/*/report.json")) | set(board_dirs.glob(f"*/{model_dir.name}/report.json"))):
        if path.resolve() == report_path.resolve():
            continue
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        wcet = other.get("wcet") or {}
        if wcet.get("wcet_ms") is not None and meets(wcet, deadline_ms) and not gates.violations(
                dict(other, wcet=dict(wcet, deadline_ms=deadline_ms, met=True))):
            found.append(f"precision={other.get('precision')} on {other.get('target')} "
                         f"({wcet['wcet_ms']:.4g} ms, {path.parent.relative_to(board_dirs)})")
    return f"known to meet it: {', '.join(found)}" if found else None


def meets(wcet, deadline_ms):
    """A bound within the deadline, in cycles at the bound's clock (exact) where the record has it."""
    from nnbuild.checks.deadline import deadline_cycles
    if wcet.get("clock_hz") and wcet.get("wcet_cycles") is not None:
        return int(wcet["wcet_cycles"]) <= deadline_cycles(deadline_ms, wcet["clock_hz"])
    return wcet["wcet_ms"] <= deadline_ms
