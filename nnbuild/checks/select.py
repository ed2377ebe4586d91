"""precision=auto: every precision the board supports is built, measured and bounded; the winner
is the one with the smallest WCET that meets both the tolerance and the deadline."""

import shutil

from nnbuild.checks import gates
from nnbuild.errors import NNBuildError
from nnbuild.passes.quantize import FIXED_PRECISIONS


def candidates(board):
    """The precisions `board` can compute: float64 only where its double is 64-bit."""
    floats = ["float32"] + (["float64"] if board.get("double_bits", 64) >= 64 else [])
    return floats + list(FIXED_PRECISIONS)


def row(precision, report):
    """One line of the candidate table."""
    w = report.get("wcet") or {}
    return {"precision": precision, "wcet_cycles": w.get("wcet_cycles"), "wcet_ms": w.get("wcet_ms"),
            "measured_cycles": report.get("measured_cycles"), "max_abs_error": report.get("max_abs_error"),
            "flash_bytes": report.get("flash_bytes"), "ram_bytes": report.get("ram_bytes"),
            "violations": gates.violations(report)}


def choose(reports):
    """(winner, table, why): reports is {precision: report}; winner None when nobody qualifies."""
    table = [row(p, r) for p, r in sorted(reports.items())]
    ok = [r for r in table if not r["violations"] and r["wcet_cycles"] is not None]
    if not ok:
        return None, table, "no candidate meets every constraint"
    best = min(ok, key=lambda r: r["wcet_cycles"])
    others = [r["precision"] for r in ok if r is not best]
    why = (f"{best['precision']} has the smallest WCET ({best['wcet_ms']:.4g} ms) of the candidates that meet "
           f"the tolerance and the deadline" + (f" ({', '.join(others)} also qualify)" if others else ""))
    return best["precision"], table, why


def refusal(table):
    """One line naming the constraint each candidate broke."""
    parts = []
    for r in table:
        broken = r["violations"] or (["no WCET bound"] if r["wcet_cycles"] is None else [])
        parts.append(f"{r['precision']}: {broken[0] if broken else 'ok'}")
    return "precision=auto: no candidate qualifies; " + "; ".join(parts)


def install_winner(winner_firmware, destination):
    if winner_firmware:
        shutil.copyfile(winner_firmware, destination)
