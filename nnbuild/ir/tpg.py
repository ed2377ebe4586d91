"""Tangled Program Graphs: the second model kind (beside the neural-network Model of ir/graph.py).

A TPG is a directed acyclic graph of *teams* whose outgoing *edges* each carry a *program* (a
straight-line list of instructions over registers, program constants and the input data) and lead
to another team or to an *action*. Inference (nnbuild.ir.tpg_reference, docs tpg.md section 3):
from the root team, run every outgoing edge's program in file order on zeroed registers; the bid is
register 0; a NaN bid counts as -infinity; the last edge with the highest bid wins; follow it until
an action is reached.

The `.dot` file carries the graph and each program's bytecode but no instruction semantics: those
come from an *environment description* (JSON, see `Environment.load`), so a TPG trained with
another instruction set needs a new environment file, not new code.

Everything here is plain data; `validate()` checks a graph against its environment and raises one
NNBuildError line naming the file and the team or program.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from nnbuild.errors import NNBuildError
from nnbuild.ir import tpg_template
from nnbuild.names import MAX_NAME_LENGTH, is_c_identifier

#: The environment files shipped with nnbuild, usable by name (`sips22-atari`).
ENVIRONMENTS_DIR = Path(__file__).resolve().parent / "tpg_environments"
#: The environment file format this module reads ("nnbuild_tpg_environment" key).
ENVIRONMENT_FORMAT = 1
#: Operand / data types: C type of one element and whether it is a program constant.
TYPES = {"double": "double", "constant": "int32_t"}
#: Names the generated TPG code declares or uses beside a data source's (its locals, <math.h>'s
#: macros): a data source of one of these names would not compile. `v<N>` locals are refused too.
CODE_NAMES = frozenset(("best", "next", "state", "visit", "sh", "isnan", "isinf",
                        "isfinite", "NAN", "INFINITY", "HUGE_VAL", "errno", "main") + tuple(tpg_template.FUNCTIONS))


def name_problem(name, taken):
    """Why an environment's data source or action name cannot be a C name in the generated code
    (None if it can): a C identifier of at most MAX_NAME_LENGTH characters, not a keyword, not one
    of the code's own names, distinct from the other names ignoring case (they become macros)."""
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        return f"name of {len(name):,} characters: at most {MAX_NAME_LENGTH}"
    if not isinstance(name, str) or not is_c_identifier(name) or name.startswith(("NN_", "nn_")):
        return f"{_shown(name)} is not a usable C name (letters, digits and '_', not a keyword)"
    if name in CODE_NAMES or re.fullmatch(r"v[0-9]+", name):
        return f"'{name}' is a name of the generated code itself"
    if name.upper() in taken:
        return f"'{name}' is given twice (names become macros: case does not separate them)"
    taken.add(name.upper())
    return None


def _shown(value):
    text = str(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return ascii(text)


# ----------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class Instruction:
    """One instruction: `$0 = <expression over $1..$n>;` of the template grammar (ir/tpg_template).
    `tree` is the parsed template: the generated C and the reference both come from it."""

    name: str
    operand_types: Tuple[str, ...]
    c: str
    python: Optional[str]
    tree: tpg_template.Node

    @classmethod
    def parse(cls, name, operand_types, c, python=None) -> "Instruction":
        """The instruction of an environment file's entry (NNBuildError naming it if its template
        is not one of the grammar, or its python form is another expression)."""
        tree = tpg_template.check(name, c, python, len(operand_types))
        return cls(name, tuple(operand_types), c, python, tree)

    @property
    def arity(self) -> int:
        return len(self.operand_types)

    @property
    def c_expression(self) -> str:
        """The C expression over $1..$n, re-emitted from the tree (`$1 - $2` for `$0 = $1 - $2;`)."""
        return tpg_template.to_c(self.tree)

    @property
    def libm(self) -> bool:
        """True when the C code calls a <math.h> function (costly: worth sharing)."""
        return tpg_template.calls(self.tree)


@dataclass(frozen=True)
class DataSource:
    """A data source of the programs: registers, program constants, or one input array."""

    name: str
    type: str
    shape: Tuple[int, ...]
    role: str  # "registers", "constants" or "input"

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def provides(self, operand_type: str) -> bool:
        return self.type == operand_type

    def address_space(self, operand_type: str) -> int:
        """Locations an operand of `operand_type` can read (scalars: every element)."""
        return self.size if self.provides(operand_type) else 0


@dataclass
class Environment:
    """What the `.dot` file leaves out: instruction set, registers, constants, input data sources."""

    name: str
    registers: int
    constants: int
    inputs: Tuple[DataSource, ...]
    #: every instruction declared in the file, in order
    declared: Tuple[Instruction, ...]
    actions: Optional[int] = None
    action_names: Tuple[str, ...] = ()
    path: Optional[str] = None
    about: str = ""
    #: (lo, hi): tabulate one-operand <math.h> instructions on the integers lo..hi (code generation
    #: only: the generated C looks integer arguments up instead of calling libm, same doubles)
    integer_tables: Optional[Tuple[int, int]] = None

    @cached_property
    def sources(self) -> Tuple[DataSource, ...]:
        """All data sources in GEGELATI's order: registers, constants (if any), then the inputs."""
        out = [DataSource("registers", "double", (self.registers,), "registers")]
        if self.constants:
            out.append(DataSource("constants", "constant", (self.constants,), "constants"))
        return tuple(out) + tuple(self.inputs)

    @cached_property
    def instructions(self) -> Tuple[Instruction, ...]:
        """The instruction set as GEGELATI indexes it: declared instructions whose operand types
        some data source provides (GEGELATI's Environment drops the others before indexing)."""
        return tuple(i for i in self.declared
                     if all(any(s.provides(t) for s in self.sources) for t in i.operand_types))

    @cached_property
    def max_operands(self) -> int:
        return max((i.arity for i in self.instructions), default=0)

    @cached_property
    def input_size(self) -> int:
        return sum(s.size for s in self.inputs)

    @staticmethod
    def resolve(spec) -> Path:
        """A path to an environment file, or the name of one shipped with nnbuild."""
        path = Path(spec)
        if path.is_file():
            return path
        shipped = ENVIRONMENTS_DIR / f"{str(spec).replace('-', '_')}.json"
        if not path.suffix and shipped.is_file():
            return shipped
        known = ", ".join(sorted(p.stem.replace("_", "-") for p in ENVIRONMENTS_DIR.glob("*.json")))
        raise NNBuildError(f"TPG environment description not found (a JSON file, or one of: {known})",
                           path=spec)

    @classmethod
    def load(cls, spec) -> "Environment":
        """Read and check an environment description (JSON); every problem is one line naming the key.

        {"nnbuild_tpg_environment": 1, "name": "...", "registers": 8, "constants": 0,
         "data_sources": [{"name": "screen", "type": "double", "shape": [42, 32]}],
         "actions": 18, "action_names": [...], "integer_tables": {"min": -255, "max": 255},
         "instructions": [{"name": "sub", "operands": ["double", "double"],
                           "c": "$0 = $1 - $2;", "python": "$1 - $2"}, ...]}

        "c" is a statement of the template grammar (nnbuild.ir.tpg_template); "python", optional,
        must spell the same expression in Python.
        """
        path = cls.resolve(spec)
        try:
            with open(path) as f:
                raw = json.load(f)
        except (OSError, ValueError) as exc:
            raise NNBuildError(f"cannot read TPG environment: {' '.join(str(exc).split())}", path=path)
        return cls.from_dict(raw, path)

    @classmethod
    def from_dict(cls, raw, path=None) -> "Environment":
        def err(message, key=None):
            return NNBuildError(message, path=path, item=f"'{key}'" if key else None)

        if not isinstance(raw, dict) or raw.get("nnbuild_tpg_environment") != ENVIRONMENT_FORMAT:
            raise err(f"not an nnbuild TPG environment (needs \"nnbuild_tpg_environment\": {ENVIRONMENT_FORMAT})")
        for key in ("name", "registers", "data_sources", "instructions"):
            if key not in raw:
                raise err("missing", key)
        registers, constants = raw["registers"], raw.get("constants", 0)
        for key, value, low in (("registers", registers, 1), ("constants", constants, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise err(f"must be an integer >= {low}", key)
        inputs, source_names = [], set()
        if not isinstance(raw["data_sources"], list) or not raw["data_sources"]:
            raise err("must be a non-empty list of {name, type, shape}", "data_sources")
        for k, src in enumerate(raw["data_sources"]):
            key = f"data_sources[{k}]"
            if not isinstance(src, dict) or not {"name", "type", "shape"} <= set(src):
                raise err("needs name, type and shape", key)
            if src["type"] != "double":
                raise err(f"type '{src['type']}' is not supported (input data sources are 'double')", key)
            shape = src["shape"]
            if (not isinstance(shape, list) or not shape
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
                raise err("shape must be a list of positive integers", key)
            problem = name_problem(src["name"], source_names)
            if problem:
                raise err(f"data source {problem}", key)
            inputs.append(DataSource(src["name"], src["type"], tuple(shape), "input"))
        declared = []
        if not isinstance(raw["instructions"], list) or not raw["instructions"]:
            raise err("must be a non-empty list", "instructions")
        for k, ins in enumerate(raw["instructions"]):
            key = f"instructions[{k}]"
            if not isinstance(ins, dict) or not {"name", "operands", "c"} <= set(ins):
                raise err("needs name, operands and c (python is optional)", key)
            types = ins["operands"]
            if not isinstance(types, list) or not types or any(t not in TYPES for t in types):
                raise err(f"operands must be a non-empty list of {sorted(TYPES)} "
                          "(array operands are not supported)", key)
            for field_name in ("c", "python"):
                if field_name in ins and not isinstance(ins[field_name], str):
                    raise err(f"{field_name} must be a string", key)
            try:
                instruction = Instruction.parse(str(ins["name"]), types, ins["c"], ins.get("python"))
            except NNBuildError as exc:
                raise err(str(exc), key) from None
            declared.append(instruction)
        actions = raw.get("actions")
        if actions is not None and (not isinstance(actions, int) or isinstance(actions, bool) or actions < 1):
            raise err("must be a positive integer (the number of action ids)", "actions")
        names = raw.get("action_names", [])
        if names and (actions is None or not isinstance(names, list) or len(names) != actions):
            raise err("must list one C identifier per action id", "action_names")
        action_names = set()
        for k, action_name in enumerate(names):
            problem = name_problem(action_name, action_names)
            if problem:
                raise err(f"action {problem}", f"action_names[{k}]")
        tables = raw.get("integer_tables")
        if tables is not None:
            lo, hi = (tables.get("min"), tables.get("max")) if isinstance(tables, dict) else (None, None)
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)) \
                    or not -32767 <= lo <= hi <= 32767 or hi - lo >= 4096:
                raise err("must be {\"min\": lo, \"max\": hi}, integers in -32767..32767, at most 4096 "
                          "values", "integer_tables")
            tables = (lo, hi)
        env = cls(str(raw["name"]), registers, constants, tuple(inputs), tuple(declared), actions,
                  tuple(names), str(path) if path else None, str(raw.get("about", "")), tables)
        if not env.instructions:
            raise err("no instruction can read any data source", "instructions")
        return env


# ----------------------------------------------------------------------------- graph


@dataclass(frozen=True)
class Operand:
    source: int  # data-source index (0 = registers, ...)
    location: int  # raw location as in the file (reduced modulo the address space at run time)


@dataclass(frozen=True)
class Line:
    instruction: int
    destination: int
    operands: Tuple[Operand, ...]


@dataclass
class Program:
    pid: int  # id in the file (P<pid>)
    constants: Tuple[float, ...]
    lines: Tuple[Line, ...]
    file_line: int = 0  # line of the I<pid> statement, for error messages and traces

    @property
    def label(self) -> str:
        return f"P{self.pid}"


@dataclass
class Edge:
    source: int  # team index
    program: int  # program index
    team: Optional[int] = None  # destination team index, or
    action: Optional[int] = None  # destination action id
    file_line: int = 0

    @property
    def target(self) -> Tuple[str, int]:
        return ("team", self.team) if self.team is not None else ("action", self.action)


@dataclass
class Team:
    tid: int  # id in the file (T<tid>)
    edges: List[int] = field(default_factory=list)  # edge indices, in file order

    @property
    def label(self) -> str:
        return f"T{self.tid}"


@dataclass
class TPG:
    """A loaded, validated Tangled Program Graph with its environment."""

    name: str
    environment: Environment
    teams: List[Team]
    programs: List[Program]
    edges: List[Edge]
    root: int
    source_files: Tuple[str, ...] = ()
    meta: dict = field(default_factory=dict)

    kind = "tpg"

    @property
    def input_shape(self) -> Tuple[int, ...]:
        return (self.environment.input_size,)

    @property
    def input_size(self) -> int:
        return self.environment.input_size

    @property
    def output_size(self) -> int:
        return 1

    @property
    def output_shape(self) -> Tuple[int, ...]:
        return (1,)

    def reachable(self) -> List[int]:
        """Teams reachable from the root, in a topological order (root first)."""
        order, seen = [], set()

        def visit(t):
            stack = [(t, iter(self.teams[t].edges))]
            seen.add(t)
            while stack:
                node, it = stack[-1]
                for e in it:
                    d = self.edges[e].team
                    if d is not None and d not in seen:
                        seen.add(d)
                        stack.append((d, iter(self.teams[d].edges)))
                        break
                else:
                    stack.pop()
                    order.append(node)

        visit(self.root)
        return order[::-1]

    def depth(self) -> int:
        """Most teams on any path from the root (the number of team visits of one inference)."""
        longest = {}
        for t in reversed(self.reachable()):
            longest[t] = 1 + max((longest[self.edges[e].team] for e in self.teams[t].edges
                                  if self.edges[e].team is not None), default=0)
        return longest[self.root]

    def stats(self) -> Dict[str, int]:
        reach = self.reachable()
        edges = [e for t in reach for e in self.teams[t].edges]
        programs = {self.edges[e].program for e in edges}
        return {"teams": len(reach), "edges": len(edges), "programs": len(programs),
                "lines": sum(len(self.programs[p].lines) for p in programs),
                "actions": len({self.edges[e].action for e in edges if self.edges[e].action is not None}),
                "depth": self.depth()}


def validate(tpg: TPG, path=None):
    """Check the graph against its environment: one NNBuildError line naming file and team/program.

    A missing root, several roots, a cycle reachable from the root, a team without edges, an
    instruction index outside the set, a destination outside the registers, an operand source that
    does not exist or cannot provide the operand's type, a constants count or an action id that
    does not match the environment: all are errors.
    """
    env = tpg.environment
    sources, instructions = env.sources, env.instructions
    where = path or (tpg.source_files[0] if tpg.source_files else None)
    for team in tpg.teams:
        if not team.edges:
            raise NNBuildError("team has no outgoing edge", path=where, item=team.label)
    for prog in tpg.programs:
        if len(prog.constants) != env.constants:
            raise NNBuildError(f"program has {len(prog.constants)} constants, environment "
                               f"'{env.name}' has {env.constants} (wrong environment?)",
                               path=where, item=prog.label)
        for n, line in enumerate(prog.lines, start=1):
            item = f"{prog.label} line {n}"
            if not 0 <= line.instruction < len(instructions):
                raise NNBuildError(f"instruction index {line.instruction} outside the "
                                   f"{len(instructions)} instructions of environment '{env.name}'",
                                   path=where, item=item)
            if not 0 <= line.destination < env.registers:
                raise NNBuildError(f"destination register {line.destination} outside the "
                                   f"{env.registers} registers of environment '{env.name}'",
                                   path=where, item=item)
            if len(line.operands) != env.max_operands:
                raise NNBuildError(f"{len(line.operands)} operands, but the widest instruction of "
                                   f"environment '{env.name}' takes {env.max_operands} (wrong environment?)",
                                   path=where, item=item)
            ins = instructions[line.instruction]
            for k, (op, typ) in enumerate(zip(line.operands, ins.operand_types), start=1):
                if not 0 <= op.source < len(sources):
                    raise NNBuildError(f"operand {k} reads data source {op.source}, environment "
                                       f"'{env.name}' has {len(sources)} (0..{len(sources) - 1})",
                                       path=where, item=item)
                if not sources[op.source].provides(typ):
                    raise NNBuildError(f"operand {k} of '{ins.name}' needs a {typ}, data source "
                                       f"{op.source} ({sources[op.source].name}) holds {sources[op.source].type}",
                                       path=where, item=item)
    for edge in tpg.edges:
        if edge.action is not None and env.actions is not None and not 0 <= edge.action < env.actions:
            raise NNBuildError(f"action {edge.action} outside the {env.actions} actions of environment "
                               f"'{env.name}'", path=where, item=f"edge {tpg.teams[edge.source].label} -> "
                               f"{tpg.programs[edge.program].label}")
    incoming = {e.team for e in tpg.edges if e.team is not None}
    roots = [t for t in range(len(tpg.teams)) if t not in incoming]
    if not roots:
        raise NNBuildError("no root team: every team has an incoming edge (the graph is cyclic)", path=where)
    if len(roots) > 1:
        names = ", ".join(tpg.teams[t].label for t in roots[:8]) + (", ..." if len(roots) > 8 else "")
        raise NNBuildError(f"{len(roots)} root teams ({names}): nnbuild infers single-root TPGs "
                           "(export the champion's subgraph)", path=where)
    tpg.root = roots[0]
    cycle = find_cycle(tpg)
    if cycle:
        raise NNBuildError("cycle reachable from the root: " + " -> ".join(tpg.teams[t].label for t in cycle),
                           path=where, item=f"root {tpg.teams[tpg.root].label}")
    return tpg


def find_cycle(tpg: TPG) -> Optional[List[int]]:
    """A cycle of teams reachable from the root (first team repeated at the end), or None."""
    state = {}  # 1 = on the DFS stack, 2 = done
    stack = [(tpg.root, iter(tpg.teams[tpg.root].edges))]
    path = [tpg.root]
    state[tpg.root] = 1
    while stack:
        node, it = stack[-1]
        for e in it:
            d = tpg.edges[e].team
            if d is None:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                state[d] = 1
                path.append(d)
                stack.append((d, iter(tpg.teams[d].edges)))
                break
        else:
            stack.pop()
            path.pop()
            state[node] = 2
    return None
