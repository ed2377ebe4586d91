"""GEGELATI `.dot` front-end: trained Tangled Program Graphs (docs tpg.md sections 1-2).

Reads the export of GEGELATI v0.5 to v1.4 (with or without the `// File exported with GEGELATI
vX.Y.Z` header lines of v1.1+) and v2.0 files whose programs and actions are discrete (float
constants, `label="0"` on program nodes). One statement per line:

    T<id> [...]                                   team
    P<pid> [... shape=point] //c0|c1|...|         program and its constants
    I<pid> [shape=box style=invis label="LINE&#92;nLINE&#92;n"]   program body
    P<pid> -> I<pid>[style=invis]
    A<n> [... label="<actionId>"]                 action node
    T<src> -> P<pid> -> A<n> | T<dst>             edge, or
    T<src> -> P<pid>                              edge sharing P<pid> (and its first destination)
    { rank= same ... }                            cosmetic

An instruction line is `instr|dest&src|loc#src|loc...`. The file holds no instruction semantics:
the environment description (nnbuild.ir.tpg.Environment) gives them, so `load` needs one. Every
statement nnbuild does not understand is an error naming the file and line (GEGELATI's own importer
stops silently there), and so is every graph the environment cannot run (nnbuild.ir.tpg.validate).
"""

from __future__ import annotations

import re
from pathlib import Path

from nnbuild.errors import NNBuildError
from nnbuild.names import c_identifier
from nnbuild.ir import tpg_template
from nnbuild.ir.tpg import TPG, Edge, Environment, Line, Operand, Program, Team, validate

#: what nnbuild.frontends.kind_of reports for this format
KIND = "tpg"
SUPPORTED_MAJOR = (0, 1, 2)

_HEADER_VERSION = re.compile(r"^//\s*File exported with GEGELATI v(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?")
# Numbers are at most 9 digits (ids, indices): a longer one is an unrecognised statement, never a
# 5,000-digit int() (ValueError) or an index no C int holds.
_N = r"(\d{1,9})"
_TEAM = re.compile(rf"^T{_N}\s*\[[^\]]*\]$")
_PROGRAM = re.compile(rf"^P{_N}\s*\[(?P<attrs>[^\]]*)\]\s*(?P<comment>//.*)?$")
_BODY = re.compile(rf"^I{_N}\s*\[(?P<attrs>.*)\]$")
_LINK = re.compile(rf"^P{_N}\s*->\s*I{_N}\s*(\[[^\]]*\])?$")
_ACTION = re.compile(rf"^A{_N}\s*\[(?P<attrs>[^\]]*)\]$")
_EDGE = re.compile(rf"^T{_N}\s*->\s*P{_N}(?:\s*->\s*([TA]){_N})?\s*(\[[^\]]*\])?$")
_ACTION_PROGRAM = re.compile(r"^A(\d+)\s*->\s*P(\d+)")
_RANK = re.compile(r"^\{\s*rank\s*=\s*same\b[^}]*\}$")
_STYLE = re.compile(r"^(graph|node|edge)\s*\[.*\]$")
_LABEL = re.compile(r'\blabel\s*=\s*"([^"]*)"')
_INSTRUCTION = re.compile(rf"^{_N}\|{_N}&(.*)$")
_OPERAND = re.compile(rf"^{_N}\|{_N}$")
LINE_SEPARATOR = "&#92;n"


def load(path, environment=None):
    """The TPG of a GEGELATI `.dot` file, validated against `environment` (an Environment, a path
    to an environment JSON file, or the name of one shipped with nnbuild, e.g. 'sips22-atari')."""
    path = Path(path)
    if environment is None:
        raise NNBuildError("a GEGELATI .dot file carries no instruction set: give its environment "
                           "description, a JSON file or a shipped name such as sips22-atari (--environment, "
                           "scons environment=, or \"environment\" in example.json)", path=path)
    env = environment if isinstance(environment, Environment) else _environment(environment)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NNBuildError(f"cannot read: {' '.join(str(exc).split())}", path=path) from None
    tpg = parse(text, env, path)
    return validate(tpg, path)


def _environment(spec) -> Environment:
    """Environment.load, with anything it failed to check (JSON nested 100,000 deep) made one line
    naming the environment file. Its C templates are parsed there (nnbuild.ir.tpg_template): only
    the template grammar reaches the generated C."""
    try:
        env = Environment.load(spec)
    except NNBuildError:
        raise
    except (ValueError, TypeError, LookupError, AttributeError, RecursionError, MemoryError) as exc:
        message = " ".join(str(exc).split())[:200]
        raise NNBuildError(f"malformed TPG environment ({type(exc).__name__}: {message})", path=spec) from None
    return env


def parse(text, env, path=None):
    """Statements of the file -> TPG (not yet validated against the environment's semantics)."""
    def err(number, message):
        return NNBuildError(message, path=path, item=f"line {number}")

    version, state = None, "header"
    teams, programs, bodies, links, actions, edge_lines = {}, {}, {}, {}, {}, []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if state == "header":
            if line.startswith("//"):
                m = _HEADER_VERSION.match(line)
                if m:
                    version = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
                    if version[0] not in SUPPORTED_MAJOR:
                        raise err(number, f"GEGELATI v{'.'.join(map(str, version))} export is not supported "
                                          "(v0.5 to v2.0 are)")
                continue
            if re.match(r"^digraph\s*\{$", line):
                state = "body"
                continue
            raise err(number, f"expected 'digraph{{' (a GEGELATI .dot export), found {_short(line)}")
        if state == "end":
            raise err(number, f"statement after the closing '}}': {_short(line)}")
        if line == "}":
            state = "end"
            continue
        if _STYLE.match(line) or _RANK.match(line):
            continue
        m = _TEAM.match(line)
        if m:
            tid = int(m.group(1))
            if tid in teams:
                raise err(number, f"team T{tid} declared twice")
            teams[tid] = number
            continue
        m = _PROGRAM.match(line)
        if m:
            pid = int(m.group(1))
            if pid in programs:
                raise err(number, f"program P{pid} declared twice")
            programs[pid] = (number, _constants(m, version, number, err))
            continue
        m = _BODY.match(line)
        if m:
            pid = int(m.group(1))
            label = _LABEL.search(m.group("attrs"))
            if label is None:
                raise err(number, f"I{pid} has no label (the program's instructions)")
            bodies[pid] = (number, _lines(label.group(1), number, pid, err))
            continue
        m = _LINK.match(line)
        if m:
            if m.group(1) != m.group(2):
                raise err(number, f"P{m.group(1)} linked to the body of another program I{m.group(2)}")
            links[int(m.group(1))] = number
            continue
        m = _ACTION.match(line)
        if m:
            aid = int(m.group(1))
            label = _LABEL.search(m.group("attrs"))
            if label is None or not re.fullmatch(r"\d{1,9}", label.group(1).strip()):
                what = label.group(1) if label else "no label"
                raise err(number, f"action A{aid} label '{what}' is not an action id "
                                  "(continuous or multi-action GEGELATI v2 graphs are not supported)")
            if aid in actions:
                raise err(number, f"action node A{aid} declared twice")
            actions[aid] = int(label.group(1))
            continue
        m = _EDGE.match(line)
        if m:
            edge_lines.append((number, int(m.group(1)), int(m.group(2)), m.group(3),
                               int(m.group(4)) if m.group(4) else None))
            continue
        if _ACTION_PROGRAM.match(line):
            raise err(number, "action programs (A -> P, continuous actions of GEGELATI v2) are not supported")
        raise err(number, f"unrecognised statement {_short(line)}")
    if state == "header":
        raise NNBuildError("no 'digraph{' found: not a GEGELATI .dot export", path=path)
    if state != "end":
        raise NNBuildError("file ends before the closing '}' (truncated?)", path=path)
    if not teams:
        raise NNBuildError("no team in the graph", path=path)

    # programs: every declared program needs its body
    order = sorted(programs, key=lambda p: programs[p][0])
    index = {pid: k for k, pid in enumerate(order)}
    prog_list = []
    for pid in order:
        number, consts = programs[pid]
        if pid not in bodies:
            raise NNBuildError("program has no instruction node I" + str(pid), path=path, item=f"P{pid}")
        prog_list.append(Program(pid, consts, bodies[pid][1], bodies[pid][0]))
    for pid, (number, _) in bodies.items():
        if pid not in programs:
            raise err(number, f"instructions I{pid} of an undeclared program P{pid}")

    team_order = sorted(teams, key=lambda t: teams[t])
    team_index = {tid: k for k, tid in enumerate(team_order)}
    team_list = [Team(tid) for tid in team_order]
    destination, edges = {}, []
    for number, src, pid, kind, dst in edge_lines:
        if src not in team_index:
            raise err(number, f"edge from undeclared team T{src}")
        if pid not in index:
            raise err(number, f"edge with undeclared program P{pid}")
        if kind is None:
            if pid not in destination:
                raise err(number, f"T{src} -> P{pid} shares program P{pid} before any edge gave it a destination")
            target = destination[pid]
        elif kind == "T":
            if dst not in team_index:
                raise err(number, f"edge to undeclared team T{dst}")
            target = ("team", team_index[dst])
        else:
            if dst not in actions:
                raise err(number, f"edge to undeclared action node A{dst}")
            target = ("action", actions[dst])
        destination.setdefault(pid, target)
        if target == ("team", team_index[src]):
            raise err(number, f"self-loop T{src} -> P{pid} -> T{src}")
        edge = Edge(team_index[src], index[pid], file_line=number)
        if target[0] == "team":
            edge.team = target[1]
        else:
            edge.action = target[1]
        team_list[edge.source].edges.append(len(edges))
        edges.append(edge)

    name = c_identifier(path.stem if path else "tpg")
    meta = {"format": "gegelati-dot",
            "gegelati_version": ".".join(map(str, version)) if version else "unknown (no header, v0.5-v1.0)",
            "environment": env.name, "environment_file": env.path}
    return TPG(name, env, team_list, prog_list, edges, root=0,
               source_files=(str(path),) if path else (), meta=meta)


def _constants(match, version, number, err):
    attrs = match.group("attrs")
    label = _LABEL.search(attrs)
    if label is not None:
        if version is None or version[0] < 2:
            raise err(number, "label on a program node without a GEGELATI v2 header")
        if label.group(1).strip() != "0":
            raise err(number, "action program (label != 0, continuous actions of GEGELATI v2) is not supported")
    comment = match.group("comment")
    if comment is None:
        raise err(number, "program without its '//' constants comment: pre-v0.5 GEGELATI export, not supported")
    fields = comment[2:].strip().split("|")
    if fields and fields[-1] == "":
        fields = fields[:-1]
    values = []
    for f in fields:
        if re.fullmatch(r"[-+]?\d{1,10}", f.strip()):
            value = int(f)
            if not -2 ** 31 <= value < 2 ** 31:
                raise err(number, f"program constant {value} is outside the int32 range")
        else:
            try:
                value = float(f)
            except ValueError:
                raise err(number, f"program constant '{f[:40]}' is not a number") from None
            if value != value or value in (float("inf"), float("-inf")):
                raise err(number, f"program constant '{f.strip()[:40]}' is not finite")
            if value and not tpg_template.FLOAT32_MIN <= abs(value) <= tpg_template.FLOAT32_MAX:
                raise err(number, f"program constant '{f.strip()[:40]}' is not 0 or a normal 32-bit float "
                                  "(AVR's double): its C literal would not compile there")
        values.append(value)
    return tuple(values)


def _lines(label, number, pid, err):
    """The program's instruction lines from the I<pid> label."""
    pieces = label.split(LINE_SEPARATOR)
    if pieces and pieces[-1].strip() == "":
        pieces = pieces[:-1]
    lines = []
    for n, text in enumerate(pieces, start=1):
        m = _INSTRUCTION.match(text.strip())
        operands = []
        if m:
            for op in m.group(3).split("#"):
                o = _OPERAND.match(op)
                if not o:
                    m = None
                    break
                operands.append(Operand(int(o.group(1)), int(o.group(2))))
        if not m:
            raise err(number, f"P{pid} line {n}: '{text[:60]}' is not 'instr|dest&src|loc#src|loc...' "
                              "(per-line parameters of pre-v0.5 exports are not supported)")
        lines.append(Line(int(m.group(1)), int(m.group(2)), tuple(operands)))
    return tuple(lines)


def _short(line):
    return repr(line if len(line) <= 60 else line[:57] + "...")
