"""The build's gates in one place: tolerance, deadline, bound soundness (cycles and stack), judged
from a report.

The gate step and precision=auto both use `violations`, so a candidate is rejected for exactly the
reasons a single build would fail.
"""

from nnbuild.checks.deadline import deadline_violation, fmt_ms, soundness_violation, waiver_hint
from nnbuild.checks.semantic import error_violation


def violations(report, interface=None):
    """Every broken constraint of a report, each as one short clause (empty when all hold); a
    waiver hint in the syntax of `interface` (deadline.WAIVER_SYNTAX: scons, nnmodel, cmake, cli)."""
    found = []
    tolerance = report["tolerance"]
    wording = report.get("error_violation")
    for label, error in sorted(report["max_abs_error_by_run"].items()):
        if wording and not error <= tolerance:
            found.append(wording.format(error=error, tolerance=tolerance, label=label, cases=report["check_inputs"]))
        else:
            found.append(error_violation(error, tolerance, f"{label} run vs float64 reference"))
    record = report.get("wcet")
    deadline_ms = report.get("deadline_ms")
    if record:
        found += [soundness_violation(record), deadline_violation(record)]
    elif deadline_ms is not None:
        # a deadline nobody can check fails: passing it silently would claim what was never shown
        why = report.get("wcet_error") or report.get("wcet_unavailable") or "no WCET bound"
        origin = f" (deadline from the {report['deadline_origin']})" if report.get("deadline_origin") else ""
        found.append(f"deadline {fmt_ms(deadline_ms)} cannot be checked: {why}{origin}; "
                     f"{waiver_hint(interface)}")
    for entry, fields in sorted((report.get("entries") or {}).items()):
        if fields.get("wcet"):
            found += [soundness_violation(fields["wcet"]), deadline_violation(fields["wcet"])]
        elif fields.get("deadline_ms") is not None:
            found.append(f"deadline {fmt_ms(fields['deadline_ms'])} cannot be checked for {entry}: "
                         f"{fields.get('wcet_error') or fields.get('wcet_unavailable')}")
    from nnbuild.checks.memory import over_capacity, stack_violation
    found.append(stack_violation(report))
    if report.get("flash_bytes") is not None:   # a candidate of precision=auto that does not fit
        found.append(over_capacity(report, report.get("target")))
    return [clause for clause in found if clause]
