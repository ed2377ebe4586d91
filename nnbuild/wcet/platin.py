"""Patmos backend: patmos-clang writes the PML, `platin wcet` bounds it, we read its YAML report.

Loop bounds reach platin through the code, not through a file of ours: for Patmos the generator's
NN_LOOPBOUND(n) expands to `_Pragma("loopbound min 0 max n")` before each loop, patmos-clang puts
those bounds into the PML, and platin's IPET uses them. The flow-facts JSON is therefore only
counted here (details), never re-emitted.

File convention: the PML of `prog` (or `prog.elf`) is `<elf>.pml`, i.e. the ELF path plus `.pml`
(`prog.pml`, `prog.elf.pml`). compile_command() writes it there; analyze() expects it there.

YAML: the report is parsed by a tiny strict reader of exactly the shape platin writes (Ruby
`YAML::dump` of a list of flat mappings with scalar values). Anything else is an error, so no
new dependency (pyyaml) is needed and no unexpected shape is silently misread.
"""

import json
import re
import shutil
from pathlib import Path
from typing import List, Optional, Tuple

from nnbuild.errors import NNBuildError
from nnbuild.compilers.clang_patmos import build_executable, compile_command, pml_path  # noqa: F401 (re-exported)
from nnbuild.wcet import WcetResult, tools

COMPILER = "patmos-clang"
TOOL = "platin"
INSTALL_HINT = ("install the T-CREST toolchain (github.com/t-crest: patmos-llvm, platin, "
                "patmos-simulator; or a T-CREST release tarball) and add its bin/ to PATH")


# ---------------------------------------------------------------- platin wcet


def wcet_command(platin, pml, binary, entry, report, board) -> List[str]:
    """`platin wcet -i prog.pml [-i config.pml] -b prog -e ENTRY --disable-ait --enable-wca --report R`.

    `--enable-trace-analysis` (board `platin_trace`) also simulates with pasim and adds the
    measured cycles (a `trace` entry) to the report.
    """
    cmd = [str(platin), "wcet", "-i", str(pml)]
    if board.get("platin_config"):
        cmd += ["-i", str(board["platin_config"])]
    cmd += ["-b", str(binary), "-e", entry, "--disable-ait", "--enable-wca"]
    if board.get("platin_trace"):
        cmd.append("--enable-trace-analysis")
    return cmd + ["--report", str(report)]


def parse_report(text, entry) -> Tuple[int, Optional[int], list]:
    """(bound, measured or None, entries) from a platin `--report` YAML text.

    The bound is the minimum `cycles` over non-`trace` entries (each is a sound analysis); a
    `trace` entry is a pasim measurement, never a bound. Negative or zero cycles, a bound built
    on trace facts (`trace/platin`, --use-trace-facts) and a bound below the measurement all
    raise NNBuildError.
    """
    entries = [e for e in parse_yaml_list(text) if e.get("analysis-entry", entry) == entry]
    for e in entries:
        if not isinstance(e.get("cycles"), int) or isinstance(e.get("cycles"), bool):
            raise NNBuildError(f"platin report entry without integer cycles: {e}", item=entry)
        if not isinstance(e.get("source"), str):
            raise NNBuildError(f"platin report entry without a source: {e}", item=entry)
    bounds = [e for e in entries if e["source"] != "trace"]
    traces = [e["cycles"] for e in entries if e["source"] == "trace"]
    unsafe = [e["source"] for e in bounds if "trace" in e["source"].split("/")]
    if unsafe:
        raise NNBuildError(f"platin bound '{unsafe[0]}' uses trace flow facts (unsafe), not used", item=entry)
    measured = max(traces) if traces else None
    if not bounds:
        seen = f" (only a trace measurement: {measured} cycles)" if traces else ""
        raise NNBuildError(f"platin report has no WCET bound{seen}", item=entry)
    negative = [e for e in bounds if e["cycles"] < 0]
    if negative:
        raise NNBuildError(f"platin: unbounded: {negative[0].get('source')} cycles = "
                           f"{negative[0]['cycles']}", item=entry)
    bound = min(e["cycles"] for e in bounds)
    if bound == 0:
        raise NNBuildError("platin: a bound of 0 cycles is not a bound", item=entry)
    if measured is not None and bound < measured:
        raise NNBuildError(f"platin bound {bound} < pasim measurement {measured}: unsound, not used",
                           item=entry)
    return bound, measured, entries


# ---------------------------------------------------------------- tiny strict YAML reader

KEY_RE = re.compile(r"^(?P<key>[A-Za-z0-9_][A-Za-z0-9_.\-/]*|'[^']*'|\"[^\"]*\"):(?:[ \t]+(?P<value>.*))?$")
INT_RE = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
FLOAT_RE = re.compile(r"^[-+]?(\d[\d_]*\.\d*|\.\d+|\d[\d_]*)([eE][-+]?\d+)?$")
SPECIAL_FLOATS = {".inf": "inf", "+.inf": "inf", "-.inf": "-inf", ".nan": "nan"}


def parse_yaml_list(text) -> List[dict]:
    """Block sequence of flat mappings (`- key: value` / `  key: value`), `---`/`...` allowed.

    Several documents (platin `--report-append`) are concatenated.
    """
    items: List[dict] = []
    current = None
    for number, raw in enumerate(text.replace("\r", "").splitlines(), start=1):
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped in ("---", "...", "--- []", "[]"):
            current = None
            continue
        if line.startswith("- "):
            current = {}
            items.append(current)
            body = line[2:]
        elif line.startswith("  ") and not line.startswith("   ") and current is not None:
            body = line[2:]
        else:
            raise yaml_error(number, raw)
        key, value = parse_pair(body, number)
        if key in current:
            raise yaml_error(number, raw, f"duplicate key '{key}'")
        current[key] = value
    return items


def parse_pair(body, number):
    """`key: scalar` -> (key, python value); nested values are outside the documented shape."""
    m = KEY_RE.match(body.strip())
    if not m or m.group("value") is None:
        raise yaml_error(number, body)
    key = m.group("key")
    if key[0] in "'\"":
        key = key[1:-1]
    return key, parse_scalar(m.group("value"), number)


def parse_scalar(text, number):
    """Plain, single- or double-quoted scalar: int, float, bool, null or str."""
    text = text.strip()
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2 or "'" in text[1:-1].replace("''", ""):
            raise yaml_error(number, text)
        return text[1:-1].replace("''", "'")
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            raise yaml_error(number, text)
        if not isinstance(value, str):
            raise yaml_error(number, text)
        return value
    text = re.split(r"\s+#", text, maxsplit=1)[0]
    if not text or text[0] in "[]{}&*!|>%@`,?":
        raise yaml_error(number, text, "unsupported YAML construct")
    if text in ("~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return text.lower() == "true"
    if INT_RE.match(text):
        return int(text.replace("_", ""))
    if FLOAT_RE.match(text):
        return float(text.replace("_", ""))
    if text.lower() in SPECIAL_FLOATS:
        return float(SPECIAL_FLOATS[text.lower()])
    return text


def yaml_error(number, text, why="not the documented platin report shape"):
    return NNBuildError(f"platin report line {number}: {why}: {tools.one_line(text, 80)!r}")


# ---------------------------------------------------------------- the analyzer


#: board keys this analyzer reads (Board.check refuses a board without them)
BOARD_NEEDS = ("clock_hz",)


def analyze(elf, entry, flowfacts, board, workdir) -> WcetResult:
    """WCET of `entry` by platin on `elf` and `<elf>.pml` (bounds from the loopbound pragmas)."""
    platin = tools.which(TOOL, target=board.get("name"), hint=INSTALL_HINT)
    pml = pml_path(elf)
    if not pml.is_file():
        raise NNBuildError(f"no PML beside the ELF: compile with {COMPILER} -mserialize={pml.name}",
                           path=pml)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    report = workdir / f"{Path(elf).name}.report.yml"
    if report.exists():
        report.unlink()
    cmd = wcet_command(platin, pml.resolve(), Path(elf).resolve(), entry, report.resolve(), board)
    done = tools.run(cmd, timeout=tools.timeout_of(board), cwd=workdir, what=TOOL)
    (workdir / "platin.stdout").write_text(done.stdout)
    (workdir / "platin.stderr").write_text(done.stderr)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or ["no message"])[-1]
        raise NNBuildError(f"platin wcet failed (exit {done.returncode}): {tools.one_line(last)}",
                           item=entry)
    if not report.is_file():
        raise NNBuildError("platin wcet wrote no report", path=report)
    bound, measured, entries = parse_report(report.read_text(), entry)
    facts = tools.load_flowfacts(flowfacts)
    return WcetResult(
        analyzer="platin", entry=entry, cycles=bound,
        details={"command": cmd, "report": str(report), "entries": entries,
                 "measured_cycles": measured, "pml": str(pml),
                 "source_loop_bounds": len(facts.get("loops", [])),
                 "per_layer_note": "platin reports one bound per entry; no per-layer split"},
        tool_version=tools.version([shutil.which(COMPILER) or COMPILER, "--version"]))

