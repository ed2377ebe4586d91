"""Multi-item NNEF (seed 002): several `graphitem` blocks in one document, exchanging tensors
through `variablesync` variables with `send_var` / `get_var`; NNEF operations in the bodies and
weights in `<label>.dat` files beside the document (the NNEF front-end's own parser and
translator do the NNEF part).

    version 1.0;
    graphitem ITEM1 DNN1([e1, vsync2]) -> ([vsync1, out]) {
        e1 = external(shape = [1, 2, 8, 8]);
        vsync1 = variablesync(shape = [1, 4, 6, 6]);
        o1 = conv(e1, v1, v2);
        vsync1 = send_var([ITEM2], o1);
        o3 = get_var(ITEM2, vsync2);
        ...
    }

Also here: `split` (a single-graph NNEF model and a map tensor -> item, to a multi-item document)
and `write` (a document back to text: parse(write(d)) == d). Every failure is one line naming the
file, the item and the variable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from nnbuild import files, names
from nnbuild.errors import NNBuildError
from nnbuild.frontends import nnef_text as nnef
from nnbuild.frontends.nnef_text import Ref, Statement
from nnbuild.ir import petri
from nnbuild.ir.petri import stable_order
from nnbuild.ir import multiitem as multiitem_ir
from nnbuild.ir.multiitem import Instruction, Item, MultiItem, Segment, Sync
from nnbuild.frontends.nnef_layers import native_layers

KIND = "multiitem"
#: the document of a multi-item model folder
GRAPH_FILE = nnef.GRAPH_FILE
SOURCES = ("external", "variable", "constant")
SYNC_OPS = ("variablesync", "send_var", "get_var")
#: names the segment packing uses; a model may not use them
PACKED = multiitem_ir.PACKED


# ------------------------------------------------------------------------------- document

@dataclass
class ItemBlock:
    """One `graphitem ITEM GRAPH(inputs) -> (outputs) { statements }`."""
    item: str
    graph: str
    inputs: List[str]
    outputs: List[str]
    statements: List[Statement] = field(default_factory=list)
    line: int = 0


@dataclass
class Document:
    items: List[ItemBlock]
    version: str = "1.0"
    extensions: List[str] = field(default_factory=list)

    def key(self):
        """The document without source positions (what parse(write(d)) == d compares)."""
        return (self.version, tuple(self.extensions),
                tuple((b.item, b.graph, tuple(b.inputs), tuple(b.outputs),
                       tuple((tuple(s.outputs), s.op, s.dtype, repr(s.args), repr(sorted(s.kwargs.items())))
                             for s in b.statements)) for b in self.items))

    def __eq__(self, other):
        return isinstance(other, Document) and self.key() == other.key()


class _ItemParser(nnef._Parser):
    def document(self) -> Document:
        extensions = self.header()[1]
        items = []
        while self.peek().kind != "end":
            items.append(self.item())
        if not items:
            self.fail("no graphitem in the document")
        return Document(items, "1.0", extensions)

    def io_list(self):
        """`(a, b)` or the paper's `([a, b])`."""
        self.expect("(")
        if self.accept("["):
            names_ = self.id_list("]")
            self.expect(")")
            return names_
        return self.id_list(")")

    def item(self) -> ItemBlock:
        token = self.expect("graphitem")
        item, graph = self.ident(), self.ident()
        inputs = self.io_list()
        self.expect("->")
        outputs = self.io_list()
        self.expect("{")
        block = ItemBlock(item, graph, inputs, outputs, line=token.line)
        while not self.accept("}"):
            if self.peek().kind == "end":
                self.fail(f"missing '}}' at the end of item {item}")
            if len(block.statements) >= nnef.MAX_STATEMENTS:
                self.fail(f"more than {nnef.MAX_STATEMENTS} statements")
            block.statements.append(self.statement())
        return block


def parse(text: str) -> Document:
    """The Document of a multi-item text (raises nnef_text.ParseError with line:column)."""
    return _ItemParser(text).document()


# --------------------------------------------------------------------------------- writer

def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NNBuildError(f"value {value} has no NNEF text form")
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(value, str):
        if "'" in value and '"' in value or "\n" in value:
            raise NNBuildError(f"string {value!r} has no NNEF text form")
        return f"'{value}'" if "'" not in value else f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ", ".join(_value(v) for v in value) + ")"
    raise NNBuildError(f"value of type {type(value).__name__} has no NNEF text form")


def _statement(st: Statement) -> str:
    lhs = st.outputs[0] if len(st.outputs) == 1 else "[" + ", ".join(st.outputs) + "]"
    args = [_value(a) for a in st.args] + [f"{k} = {_value(v)}" for k, v in st.kwargs.items()]
    dtype = f"<{st.dtype}>" if st.dtype else ""
    return f"    {lhs} = {st.op}{dtype}({', '.join(args)});"


def write(document: Document) -> str:
    """The document as multi-item NNEF text (byte-identical for identical documents)."""
    lines = [f"version {document.version};"]
    if document.extensions:
        lines.append(f"extension {', '.join(document.extensions)};")
    for block in document.items:
        lines.append("")
        lines.append(f"graphitem {block.item} {block.graph}([{', '.join(block.inputs)}]) -> "
                     f"([{', '.join(block.outputs)}])")
        lines.append("{")
        lines.extend(_statement(st) for st in block.statements)
        lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(graph: nnef.Graph) -> str:
    """A single NNEF graph as text (the unsplit model of a document, a split's input)."""
    lines = [f"version {graph.version or '1.0'};"]
    if graph.extensions:
        lines.append(f"extension {', '.join(graph.extensions)};")
    lines += [f"graph {graph.name}({', '.join(graph.inputs)}) -> ({', '.join(graph.outputs)})", "{"]
    lines += [_statement(st) for st in graph.statements]
    return "\n".join(lines + ["}"]) + "\n"


def unsplit(document: Document, path, name="unsplit") -> nnef.Graph:
    """The single graph a document splits: its items' instructions merged, get_var names replaced
    by the sent tensors, in a topological order."""
    folder, doc_path = _folder_and_document(path)
    builder = _Builder(document, folder, doc_path, name)
    scans = {item: builder.scan(block) for item, block in builder.blocks.items()}
    return builder.merged_graph(scans, builder.match_syncs(scans))[0]


# ---------------------------------------------------------------------------------- split

def _refs(value) -> List[str]:
    """Tensor names a statement argument reads, in order (a name read twice appears twice)."""
    if isinstance(value, Ref):
        return [value.name]
    if isinstance(value, (list, tuple)):
        return [name for v in value for name in _refs(v)]
    return []


def statement_reads(st: Statement) -> List[str]:
    return _refs(st.args) + _refs(list(st.kwargs.values()))


def split(graph: nnef.Graph, assignment: Dict[str, str], path="<split>") -> Document:
    """A single-graph NNEF model split by `assignment` (computed tensor -> item name): each item
    gets its instructions in the graph's order, the sources they read, a send right after a tensor
    another item reads is computed, and a get right before its first use."""
    sources = {st.outputs[0]: st for st in graph.statements if st.op in SOURCES}
    computed = [st for st in graph.statements if st.op not in SOURCES]
    for st in computed:
        if st.outputs[0] not in assignment:
            raise NNBuildError(f"instruction '{st.outputs[0]}' ({st.op}) is assigned to no item", path=path)
    unknown = set(assignment) - {st.outputs[0] for st in computed}
    if unknown:
        raise NNBuildError(f"the map names '{sorted(unknown)[0]}', which the graph does not compute", path=path)
    for item in assignment.values():
        if names.too_long(item, "item name"):
            raise NNBuildError(names.too_long(item, "item name"), path=path)
        if not names.is_c_identifier(item):
            raise NNBuildError(f"item name {item!r} is not a C identifier", path=path)
    order = list(dict.fromkeys(assignment[st.outputs[0]] for st in computed))
    owner = {name: assignment[name] for name in assignment}
    readers: Dict[str, List[str]] = {}
    for st in computed:
        for name in statement_reads(st):
            if name in owner and owner[name] != assignment[st.outputs[0]]:
                readers.setdefault(name, [])
                if assignment[st.outputs[0]] not in readers[name]:
                    readers[name].append(assignment[st.outputs[0]])
    shapes = _shapes_of(graph, path)
    blocks = []
    for item in order:
        mine = [st for st in computed if assignment[st.outputs[0]] == item]
        reads = [n for st in mine for n in statement_reads(st)]
        body = [sources[n] for n in dict.fromkeys(reads) if n in sources]
        gets = [n for n in dict.fromkeys(reads) if n in owner and owner[n] != item]
        sends = [st.outputs[0] for st in mine if st.outputs[0] in readers]
        body += [Statement([f"sync_{n}"], "variablesync", None, [], {"shape": list(shapes[n])}, 0, 0)
                 for n in list(dict.fromkeys(sends + gets))]
        got = set()
        for st in mine:
            for name in statement_reads(st):
                if name in gets and name not in got:
                    got.add(name)
                    body.append(Statement([name], "get_var", None, [Ref(owner[name]), Ref(f"sync_{name}")], {}, 0, 0))
            body.append(st)
            if st.outputs[0] in readers:
                dests = [Ref(r) for r in readers[st.outputs[0]]]
                body.append(Statement([f"sync_{st.outputs[0]}"], "send_var", None,
                                      [dests, Ref(st.outputs[0])], {}, 0, 0))
        inputs = [n for n in dict.fromkeys(reads) if n in sources and sources[n].op == "external"]
        inputs += [f"sync_{n}" for n in gets]
        outputs = [f"sync_{n}" for n in sends] + [n for n in graph.outputs if owner.get(n) == item]
        blocks.append(ItemBlock(item, f"{graph.name}_{item}", inputs, outputs, body))
    return Document(blocks, graph.version or "1.0", list(graph.extensions))


def split_model(model_path, map_path) -> Document:
    """split() of a single-graph NNEF model by a JSON map file {"tensor": "ITEM", ...}."""
    folder, graph_path = _folder_and_document(model_path)
    assignment = files.read_json(map_path, "item map")
    if not isinstance(assignment, dict) or not all(isinstance(v, str) for v in assignment.values()):
        raise NNBuildError('item map must be a JSON object {"tensor": "ITEM", ...}', path=map_path)
    return split(nnef._read_graph(graph_path), assignment, graph_path)


#: largest search of `auto_split` (assignments of instructions to items)
MAX_SPLIT_SEARCH = 300_000


def instruction_costs(graph: nnef.Graph, path="<graph>") -> Dict[str, int]:
    """Multiply-accumulates per instruction (one per output element for the others): the cost
    `auto_split` balances when no measured or bounded costs are given."""
    shapes = _shapes_of(graph, path)
    costs = {}
    for st in graph.statements:
        if st.op in SOURCES:
            continue
        out = int(np.prod(shapes.get(st.outputs[0], (1,))))
        reads = statement_reads(st)
        weight = shapes.get(reads[1]) if len(reads) > 1 else None
        if st.op == "conv" and weight and len(weight) >= 2:
            costs[st.outputs[0]] = out * int(np.prod(weight[1:]))
        elif st.op in ("linear", "matmul") and weight:
            costs[st.outputs[0]] = out * int(weight[-1])
        else:
            costs[st.outputs[0]] = out
    return costs


def split_makespan(graph: nnef.Graph, assignment: Dict[str, str], costs: Dict[str, int], sync_cost=0) -> int:
    """End-to-end time of a split with each item on its own core: instructions in the graph's
    order per item, a tensor from another item available `sync_cost` after it is computed."""
    return _makespan(_steps(graph), assignment, costs, sync_cost)


def _steps(graph: nnef.Graph):
    """(instruction, the names it reads) in the graph's order: what _makespan walks."""
    return [(st.outputs[0], statement_reads(st)) for st in graph.statements if st.op not in SOURCES]


def _makespan(steps, assignment, costs, sync_cost) -> int:
    finish, item_free = {}, {}
    for out, reads in steps:
        item = assignment[out]
        ready = item_free.get(item, 0)
        for name in reads:
            if name in finish:
                ready = max(ready, finish[name] + (sync_cost if assignment[name] != item else 0))
        finish[out] = item_free[item] = ready + costs[out]
    return max(finish.values(), default=0)


def auto_split(graph: nnef.Graph, items: int, costs=None, sync_cost=0, path="<graph>", units=None) -> Document:
    """items=N: the split of a single graph whose end-to-end time (split_makespan) is smallest
    (see auto_assignment)."""
    return split(graph, auto_assignment(graph, items, costs, sync_cost, path, units)[0], path)


def auto_assignment(graph: nnef.Graph, items: int, costs=None, sync_cost=0, path="<graph>",
                    units=None) -> Tuple[Dict[str, str], str]:
    """(the assignment instruction -> ITEMk of smallest split_makespan, how it was searched).
    Exhaustive up to MAX_SPLIT_SEARCH assignments (first unit on ITEM1; ties: fewer
    synchronisations, then the first found); beyond, greedy: each unit in graph order on the item
    (one already used, or the next new one) that ends the split so far earliest. `units`
    (instruction -> unit name) keeps the instructions of one unit (a model layer) on one item; by
    default each instruction is its own unit. Costs default to instruction_costs (MAC counts)."""
    import itertools
    computed = [st.outputs[0] for st in graph.statements if st.op not in SOURCES]
    unit_of = {n: (units or {}).get(n, n) for n in computed}
    unit_names = list(dict.fromkeys(unit_of[n] for n in computed))
    if items < 1:
        raise NNBuildError(f"items={items}: at least one item", path=path)
    costs = costs or instruction_costs(graph, path)
    steps = _steps(graph)
    readers = [(n, r) for n, reads in steps for r in reads if r in unit_of]

    def score(by_unit):
        """(makespan, synchronisations) of the units assigned so far, and the named assignment."""
        named = {n: f"ITEM{by_unit[unit_of[n]] + 1}" for n in computed if unit_of[n] in by_unit}
        syncs = len({r for n, r in readers if n in named and named[n] != named[r]})
        return (_makespan([s for s in steps if s[0] in named], named, costs, sync_cost), syncs), named

    if items ** max(len(unit_names) - 1, 0) <= MAX_SPLIT_SEARCH:
        best = min((score(dict(zip(unit_names, (0,) + rest)))
                    for rest in itertools.product(range(items), repeat=len(unit_names) - 1)), key=lambda s: s[0])
        return best[1], "exhaustive"
    by_unit = {}
    for unit in unit_names:
        choices = range(min(items, len(set(by_unit.values())) + 1))
        by_unit[unit] = min(choices, key=lambda k: (score({**by_unit, unit: k})[0], k))
    return score(by_unit)[1], (f"greedy (an exhaustive search would try {items}^{len(unit_names) - 1} "
                               f"> {MAX_SPLIT_SEARCH:,} splits)")


def _shapes_of(graph: nnef.Graph, path) -> Dict[str, Tuple[int, ...]]:
    """Every tensor's shape (NNEF layout), from the NNEF translator's shape inference."""
    translator = nnef._Translator(graph, Path(path).parent, Path(path))
    translator.run()
    try:
        translator._infer()
    except nnef._Refuse as exc:
        raise NNBuildError(str(exc), path=path) from None
    return dict(translator.shapes)


# ------------------------------------------------------------------------------ to the IR

class _Builder:
    """Document -> MultiItem: checks items and syncs, builds segments and the unsplit model."""

    def __init__(self, document: Document, folder: Path, path: Path, name: str):
        self.doc, self.folder, self.path, self.name = document, folder, path, name
        self.blocks = {}
        if names.too_long(name, "system name"):
            raise NNBuildError(names.too_long(name, "system name") + " (rename the model)", path=path)
        for block in document.items:
            if names.too_long(block.item, "item name"):
                raise NNBuildError(names.too_long(block.item, "item name"), path=path)
            if block.item in self.blocks:
                self.fail(block.item, f"is declared twice (lines {self.blocks[block.item].line} and {block.line})")
            if not names.is_c_identifier(block.item) or block.item == PACKED:
                self.fail(block.item, "item name is not a C identifier")
            self.blocks[block.item] = block

    def fail(self, item, message):
        raise NNBuildError(message, path=self.path, item=f"item {item}")

    # --- pass 1: statements -> declarations, instructions, sync uses
    def scan(self, block):
        declared, sources, sends, gets, instructions, actions = {}, {}, {}, {}, [], []
        defined = set()
        for st in block.statements:
            where = f"line {st.line}: " if st.line else ""
            if len(st.outputs) != 1:
                self.fail(block.item, f"{where}{st.op}: one result per instruction")
            out = st.outputs[0]
            if not names.is_c_identifier(out):
                self.fail(block.item, f"{where}name {out!r} is not a C identifier (it names C symbols)")
            if st.op == "variablesync":
                shape = st.kwargs.get("shape", st.args[0] if st.args else None)
                if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
                    self.fail(block.item, f"{where}variablesync '{out}' needs shape = [positive integers]")
                if math.prod(shape) > nnef.MAX_ELEMENTS:
                    self.fail(block.item, f"{where}variablesync '{out}' of shape {shape} has {math.prod(shape):,} "
                                          f"elements, above the limit of {nnef.MAX_ELEMENTS:,} per tensor "
                                          "(limits.MAX_TENSOR_ELEMENTS)")
                declared[out] = tuple(shape)
                continue
            if st.op == "send_var":
                if len(st.args) != 2 or not isinstance(st.args[0], list) or not isinstance(st.args[1], Ref) \
                        or not all(isinstance(d, Ref) for d in st.args[0]):
                    self.fail(block.item, f"{where}send_var '{out}': expected send_var([ITEM, ...], tensor)")
                if out not in declared:
                    self.fail(block.item, f"{where}send_var '{out}': no variablesync '{out}' declared in the item")
                if out in sends:
                    self.fail(block.item, f"{where}variable '{out}' is sent twice")
                tensor = st.args[1].name
                if tensor not in defined:
                    self.fail(block.item, f"{where}send_var '{out}' sends '{tensor}' before it is computed")
                sends[out] = (tuple(d.name for d in st.args[0]), tensor)
                actions.append(("send", out))
                continue
            if out in defined:
                self.fail(block.item, f"{where}'{out}' is assigned twice")
            if st.op == "get_var":
                if len(st.args) != 2 or not all(isinstance(a, Ref) for a in st.args):
                    self.fail(block.item, f"{where}get_var '{out}': expected get_var(ITEM, variable)")
                source, var = st.args[0].name, st.args[1].name
                if var not in declared:
                    self.fail(block.item, f"{where}get_var of '{var}': no variablesync '{var}' declared in the item")
                if var in gets:
                    self.fail(block.item, f"{where}variable '{var}' is got twice")
                gets[var] = (source, out)
                actions.append(("get", var))
                defined.add(out)
                continue
            if st.op in SOURCES:
                sources[out] = st
                defined.add(out)
                continue
            reads = statement_reads(st)
            for name in reads:
                if name not in defined:
                    self.fail(block.item, f"{where}{st.op} '{out}' reads '{name}' before it is defined")
            instructions.append(Instruction(out, st.op, tuple(reads), st.line))
            actions.append(("op", out))
            defined.add(out)
        return declared, sources, sends, gets, instructions, actions

    def build(self) -> MultiItem:
        scans = {item: self.scan(block) for item, block in self.blocks.items()}
        syncs = self.match_syncs(scans)
        externals = sorted({n for s in scans.values() for n, st in s[1].items() if st.op == "external"})
        if len(externals) != 1:
            raise NNBuildError(f"a multi-item system needs exactly one external input (found {externals})",
                               path=self.path)
        system_outputs = [o for block in self.doc.items for o in block.outputs if o not in syncs]
        if len(system_outputs) != 1:
            raise NNBuildError(f"a multi-item system needs exactly one output that is not a variablesync "
                               f"(found {system_outputs})", path=self.path)
        items = []
        for item, block in self.blocks.items():
            declared, sources, sends, gets, instructions, actions = scans[item]
            sent = {}
            for var, (_, tensor) in sends.items():
                sent[tensor] = sent.get(tensor, ()) + (var,)
            outputs = tuple(o for o in block.outputs if o in system_outputs)
            it = Item(item, block.graph, {n: st.op for n, st in sources.items()}, instructions, [],
                      outputs=outputs, sends=sent)
            self.plan_segments(it, actions)
            items.append(it)
        system = MultiItem(self.name, items, syncs, externals[0], system_outputs[0], {},
                           source_files=(str(self.path),))
        merged, renames = self.merged_graph(scans, syncs)
        try:
            system.meta["petri"] = petri.verify(system)
        except NNBuildError as error:
            raise NNBuildError(str(error), path=self.path) from None
        shapes = _shapes_of(merged, self.path)
        for sync in syncs.values():
            actual = shapes.get(sync.tensor)
            if actual is not None and tuple(actual) != sync.shape:
                self.fail(sync.writer, f"variablesync '{sync.name}' has shape {list(sync.shape)} but "
                                       f"'{sync.tensor}' is {list(actual)}")
        system.whole, layouts = _whole_model(merged, self.path, self.name)
        for it in items:
            _, sources, _, gets, instructions, _ = scans[it.name]
            names_ = list(sources) + [i.output for i in instructions] + [g[1] for g in gets.values()]
            rename = renames[it.name]
            local = {n: tuple(shapes[rename.get(n, n)]) for n in names_ if rename.get(n, n) in shapes}
            perms = {n: layouts[rename.get(n, n)] for n in names_ if rename.get(n, n) in layouts}
            self.compile_segments(it, self.blocks[it.name], sources, local, perms)
        boundaries = {renames[it.name].get(n, n) for it in items for seg in it.segments.values()
                      for n in tuple(seg.inputs) + (seg.output,)}
        system.whole, _ = native_layers(system.whole, keep=boundaries)   # as the segments read it
        system.shapes = {n: tuple(s) for n, s in shapes.items()}
        return system

    def match_syncs(self, scans) -> Dict[str, Sync]:
        """Every get_var has its send_var (same variable, the right items) and the reverse."""
        syncs = {}
        for item, (_, _, sends, _, _, _) in scans.items():
            for var, (dests, tensor) in sends.items():
                if var in syncs:
                    self.fail(item, f"variable '{var}' is also sent by item {syncs[var][0]} (one writer only)")
                for dest in dests:
                    if dest not in self.blocks:
                        self.fail(item, f"send_var '{var}' names unknown item {dest}")
                    if dest == item:
                        self.fail(item, f"send_var '{var}' sends to its own item")
                syncs[var] = (item, dests, tensor)
        readers: Dict[str, List[Tuple[str, str]]] = {}
        for item, (declared, _, _, gets, _, _) in scans.items():
            for var, (source, local) in gets.items():
                if source not in self.blocks:
                    self.fail(item, f"get_var({source}, {var}): unknown item {source}")
                if var not in syncs or syncs[var][0] != source:
                    self.fail(item, f"get_var({source}, {var}) has no matching send_var in item {source}")
                if item not in syncs[var][1]:
                    self.fail(item, f"get_var({source}, {var}): item {source} does not send '{var}' to {item}")
                if declared[var] != scans[source][0][var]:
                    self.fail(item, f"variablesync '{var}' is declared {list(declared[var])} here and "
                                    f"{list(scans[source][0][var])} in item {source}")
                readers.setdefault(var, []).append((item, local))
        out = {}
        for var, (writer, dests, tensor) in syncs.items():
            got = {r for r, _ in readers.get(var, [])}
            for dest in dests:
                if dest not in got:
                    self.fail(dest, f"send_var '{var}' of item {writer} has no matching get_var in item {dest}")
            order = {d: i for i, d in enumerate(dests)}
            out[var] = Sync(var, writer, tensor, scans[writer][0][var],
                            tuple(sorted(readers[var], key=lambda r: order[r[0]])))
        return out

    def merged_graph(self, scans, syncs):
        """The unsplit graph: every item's instructions with get_var names replaced by the sent
        tensor, in a topological order; sources declared once (identically wherever repeated)."""
        renames = {item: {} for item in scans}
        for sync in syncs.values():
            for reader, local in sync.readers:
                renames[reader][local] = sync.tensor
        sources, owner, statements = {}, {}, []
        for item, block in self.blocks.items():
            rename = renames[item]
            for st in block.statements:
                if st.op in SYNC_OPS:
                    continue
                out = st.outputs[0]
                if st.op in SOURCES:
                    if out in sources and _source_key(sources[out][1]) != _source_key(st):
                        self.fail(item, f"'{out}' is declared differently in item {sources[out][0]}")
                    sources.setdefault(out, (item, st))
                    continue
                if out in owner:
                    self.fail(item, f"'{out}' is also computed by item {owner[out]} (tensor names are global)")
                owner[out] = item
                statements.append(_renamed(st, rename))
        ordered = _topological([s for _, s in sources.values()] + statements, self.path)
        inputs = [n for n, (_, st) in sources.items() if st.op == "external"]
        outputs = [o for block in self.doc.items for o in block.outputs if o not in syncs]
        return nnef.Graph(self.name, inputs, outputs, ordered, "1.0", list(self.doc.extensions)), renames

    def plan_segments(self, item: Item, actions):
        """Cut the item's instructions into chains between sync actions (one segment each): an
        instruction joins the previous one when it reads only that one's tensor, its sole reader."""
        by_output = {i.output: i for i in item.instructions}
        params = {n for n, op in item.sources.items() if op != "external"}
        chains: List[List[str]] = []
        previous = None
        for kind, name in actions:
            if kind != "op":
                item.actions.append((kind, name))
                previous = None
                continue
            tensors = [n for n in by_output[name].inputs if n not in params]
            if not tensors:
                self.fail(item.name, f"'{name}' reads no tensor (only parameters)")
            if (previous is not None and tensors == [previous] and item.uses(previous) == 1
                    and previous not in item.outputs):
                chains[-1].append(name)
            else:
                chains.append([name])
                item.actions.append(("run", f"{self.name}_{item.name}_{len(chains) - 1}"))
            previous = name
        for index, chain in enumerate(chains):
            seg_name = f"{self.name}_{item.name}_{index}"
            inputs = tuple(dict.fromkeys(n for n in by_output[chain[0]].inputs if n not in params))
            item.segments[seg_name] = Segment(seg_name, tuple(chain), inputs, chain[-1])

    def compile_segments(self, item: Item, block, sources, shapes, perms):
        """Each segment as an IR model through the NNEF translator. A tensor crossing a segment
        boundary is held in the layout the unsplit model holds it in (`perms`), so each layer runs
        the unsplit model's code; several inputs are packed into one flat vector (the code shapes
        take one input)."""
        by_output = {i.output: i for i in item.instructions}
        params = {n for n, op in item.sources.items() if op != "external"}
        statements = {st.outputs[0]: st for st in block.statements if st.op not in SYNC_OPS}
        for seg_name, segment in item.segments.items():
            chain, inputs = segment.instructions, segment.inputs
            body = []
            packed = len(inputs) > 1
            if packed:
                total = sum(int(np.prod(shapes[n])) for n in inputs)
                body.append(Statement([PACKED], "external", None, [], {"shape": [1, total]}, 0, 0))
            start = 0
            for n in inputs:
                held = _held_shape(shapes[n], perms.get(n))
                name = f"{PACKED}_{n}" if perms.get(n) else n    # held, then transposed into n
                if packed:
                    size = int(np.prod(shapes[n]))
                    flat = f"{PACKED}_{n}_flat"
                    body.append(Statement([flat], "slice", None, [Ref(PACKED)],
                                          {"axes": [1], "begin": [start], "end": [start + size]}, 0, 0))
                    body.append(Statement([name], "reshape", None, [Ref(flat)], {"shape": held}, 0, 0))
                    start += size
                else:
                    body.append(Statement([name], "external", None, [], {"shape": held}, 0, 0))
                if name != n:
                    body.append(Statement([n], "transpose", None, [Ref(name)],
                                          {"axes": _from_held(perms.get(n), len(shapes[n]))}, 0, 0))
            used = [p for n in chain for p in by_output[n].inputs if p in params]
            body += [sources[p] for p in dict.fromkeys(used)]
            body += [statements[n] for n in chain]
            output = chain[-1]
            if perms.get(output):
                body.append(Statement([f"{PACKED}_{output}"], "transpose", None, [Ref(output)],
                                      {"axes": [0] + [p + 1 for p in perms[output]]}, 0, 0))
                output = f"{PACKED}_{output}"
            first = PACKED if packed else next(st.outputs[0] for st in body if st.op == "external")
            graph = nnef.Graph(seg_name, [first], [output], body, "1.0", list(self.doc.extensions))
            proto = nnef._Translator(graph, self.folder, self.path).run()
            from nnbuild.frontends import onnx_graph
            segment.model, _ = native_layers(onnx_graph.convert(proto, self.path, seg_name))
            segment.model.meta["item"] = item.name


def _whole_model(merged, path, name):
    """The unsplit model, and the layout it holds each tensor in: tensor -> the permutation of its
    sample axes (None for NNEF order)."""
    from nnbuild.frontends import onnx_graph
    proto = nnef._Translator(merged, path.parent, path).run()
    converter = onnx_graph._Converter(proto, path)
    try:
        whole = converter.run(name)
    except onnx_graph.Problem as problem:
        raise NNBuildError(" ".join(str(problem).split()), path=path) from None
    layouts = {}
    for tensor, entry in converter.tensors.items():
        if entry[0] == "ir":
            perm = tuple(int(p) for p in entry[3])
            layouts[tensor] = None if perm == tuple(range(len(perm))) else perm
    return whole, layouts


def _held_shape(shape, perm):
    """The NNEF shape (batch first) of a tensor held with `perm` over its sample axes."""
    if not perm:
        return list(shape)
    return [shape[0]] + [shape[p + 1] for p in perm]


def _from_held(perm, rank):
    """transpose axes turning a held tensor back into NNEF order."""
    inverse = [perm.index(j) for j in range(rank - 1)]
    return [0] + [k + 1 for k in inverse]


def _source_key(st: Statement):
    return (st.op, st.dtype, repr(st.args), repr(sorted(st.kwargs.items())))


def _rename_value(value, rename):
    if isinstance(value, Ref):
        return Ref(rename.get(value.name, value.name))
    if isinstance(value, list):
        return [_rename_value(v, rename) for v in value]
    if isinstance(value, tuple):
        return tuple(_rename_value(v, rename) for v in value)
    return value


def _renamed(st: Statement, rename) -> Statement:
    if not rename:
        return st
    return Statement(list(st.outputs), st.op, st.dtype, _rename_value(st.args, rename),
                     {k: _rename_value(v, rename) for k, v in st.kwargs.items()}, st.line, st.column)


def _topological(statements, path) -> List[Statement]:
    """Statements in dependency order (stable: a ready statement keeps its document position)."""
    order = stable_order([(st.outputs[0], statement_reads(st)) for st in statements], set())
    ordered = [statements[i] for i in order]
    if len(ordered) < len(statements):
        placed = set(order)
        pending = [st for i, st in enumerate(statements) if i not in placed]
        defined = {st.outputs[0] for st in ordered}
        produced = {p.outputs[0] for p in pending}
        missing = [n for st in pending for n in statement_reads(st) if n not in defined and n not in produced]
        if missing:
            raise NNBuildError(f"'{missing[0]}' is read but never computed nor declared", path=path)
        return ordered + pending   # a dependency cycle: the Petri-net check names it
    return ordered


# ---------------------------------------------------------------------------------- loading

_folder_and_document = nnef._folder_and_graph


def read_document(path) -> Document:
    return nnef.read_parsed(_folder_and_document(path)[1], parse, "multi-item document", "document")


def build(document: Document, path, name=None) -> MultiItem:
    """The MultiItem of a parsed document whose `.dat` files sit beside `path`."""
    folder, doc_path = _folder_and_document(path)
    name = name or names.c_identifier(folder.stem if doc_path.name == GRAPH_FILE else doc_path.stem)
    return _Builder(document, folder, doc_path, name).build()


def load(path, name=None) -> MultiItem:
    """The multi-item system of a document (a folder holding graph.nnef, or the file itself)."""
    return build(read_document(path), path, name)


def implicit_dependencies(path) -> List[str]:
    """The document and every variable's .dat."""
    return nnef.document_dependencies(path, read_document, _variable_labels)


def _variable_labels(document) -> List[str]:
    """Every item's variable labels, once each, sorted."""
    labels = {st.kwargs.get("label") for b in document.items for st in b.statements if st.op == "variable"}
    return sorted(l for l in labels if isinstance(l, str))
