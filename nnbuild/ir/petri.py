"""The Petri-net semantics of NNEF graphs and multi-item systems (seed 002, translations 1 and 2),
and the checks run on them before any code exists.

One transition per instruction; places are arcs: one place per (producer, consumer read), so a
tensor read by k instructions puts one token in each of k places (the paper puts k tokens in one
place; per-arc places make the net 1-safe and keep one consumer from taking another's token).
Sources (the input and the parameters) start with one token per read; the output instruction
fills one final place. In a multi-item net every place and transition has the colour of its item,
and each `send_var` is a sync transition taking the writer's tensor and marking one place per
reading instruction of each reader (translation 2: no place for the variable, no transition for
`get_var`).

The program-order net (`program_order=True`) is what the generated code does: it adds a control
place chain per item (its thread's program counter: one coloured token) and a get transition per
(variable, reader), so a get placed before a send in an item's text can deadlock there even when
the data flow alone cannot.

Checks (by exploring every reachable marking; the count is reported): no deadlock (every dead
marking is the final one), 1-safety (no place ever holds two tokens), trace inclusion (every firing
sequence of the multi-item net, projected on instructions, is one of the unsplit net) and, for the
data-flow net, equivalence (every unsplit sequence is a projection of a multi-item one).
"""

from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from nnbuild.errors import NNBuildError

#: exploration bound: beyond it a check fails (visibly) rather than guess
MAX_STATES = 2_000_000


@dataclass(frozen=True)
class Transition:
    name: str
    colour: str          # the item ("" in an uncoloured net)
    kind: str            # "op" | "sync" | "get"
    label: str           # the instruction's output tensor, or the sync variable
    inputs: Tuple[int, ...]
    outputs: Tuple[int, ...]


@dataclass
class Net:
    places: List[str] = field(default_factory=list)
    colours: List[str] = field(default_factory=list)
    transitions: List[Transition] = field(default_factory=list)
    initial: List[int] = field(default_factory=list)
    final: List[int] = field(default_factory=list)

    def place(self, name, colour="", tokens=0, final=0) -> int:
        self.places.append(name)
        self.colours.append(colour)
        self.initial.append(tokens)
        self.final.append(final)
        return len(self.places) - 1

    def enabled(self, marking) -> List[int]:
        return [i for i, t in enumerate(self.transitions) if all(marking[p] for p in t.inputs)]

    def fire(self, marking, index) -> Tuple[int, ...]:
        m = list(marking)
        t = self.transitions[index]
        for p in t.inputs:
            m[p] -= 1
        for p in t.outputs:
            m[p] += 1
        return tuple(m)

    def index(self, name) -> int:
        return next(i for i, t in enumerate(self.transitions) if t.name == name)


class _NetBuilder:
    """Per-arc places: `read(consumer_key, tensor)` makes the place a consumer reads; producers
    are told their output places once every consumer is known."""

    def __init__(self):
        self.net = Net()
        self.producer: Dict[Tuple[str, str], object] = {}   # (colour, tensor) -> "source" | transition key
        self.arcs: Dict[object, List[int]] = {}             # producer key -> its output places
        self.specs: List[dict] = []

    def source(self, colour, tensor):
        self.producer[(colour, tensor)] = ("source", colour, tensor)

    def produce(self, colour, tensor, key):
        self.producer[(colour, tensor)] = key

    def read(self, colour, tensor, consumer):
        key = self.producer.get((colour, tensor))
        if key is None:
            raise NNBuildError(f"'{tensor}' is read by {consumer} but never produced"
                               + (f" in item {colour}" if colour else ""))
        tokens = 1 if key[0] == "source" else 0
        prefix = f"{colour}:" if colour else ""
        place = self.net.place(f"{prefix}{tensor}->{consumer}", colour, tokens)
        self.arcs.setdefault(key, []).append(place)
        return place

    def transition(self, key, name, colour, kind, label, inputs, extra_outputs=()):
        self.specs.append(dict(key=key, name=name, colour=colour, kind=kind, label=label,
                               inputs=tuple(inputs), extra=tuple(extra_outputs)))

    def finish(self) -> Net:
        for spec in self.specs:
            outputs = tuple(self.arcs.get(spec["key"], [])) + spec["extra"]
            self.net.transitions.append(Transition(spec["name"], spec["colour"], spec["kind"], spec["label"],
                                                   spec["inputs"], outputs))
        return self.net


def graph_net(instructions: Sequence[Tuple[str, Sequence[str]]], sources: Sequence[str], output: str) -> Net:
    """Translation 1: the net of one graph, from its instructions (output, tensors read) in a
    valid order and its sources (input and parameters)."""
    b = _NetBuilder()
    for s in sources:
        b.source("", s)
    for out, _ in instructions:
        b.produce("", out, ("op", out))
    for out, reads in instructions:
        inputs = [b.read("", r, out) for r in reads]
        extra = (b.net.place(out, "", 0, 1),) if out == output else ()
        b.transition(("op", out), out, "", "op", out, inputs, extra)
    return b.finish()


def unsplit_net(system) -> Net:
    """The net of the unsplit model: every item's instructions, get_var names replaced by the
    sent tensor, sources merged by name (the paper's P = union of the P_i)."""
    rename = {item.name: {} for item in system.items}
    for sync in system.syncs.values():
        for reader, local in sync.readers:
            rename[reader][local] = sync.tensor
    sources = sorted({s for item in system.items for s in item.sources})
    instructions = [(i.output, [rename[item.name].get(r, r) for r in i.inputs])
                    for item in system.items for i in item.instructions]
    return graph_net(_ordered(instructions, set(sources)), sources, system.output)


def _ordered(instructions, defined):
    """Instructions in a dependency order (the items' text order need not be one globally);
    a dependency cycle keeps its instructions last, where the exploration finds them dead."""
    done, order, pending = set(defined), [], list(instructions)
    while pending:
        ready = [x for x in pending if all(r in done for r in x[1])]
        if not ready:
            return order + pending
        order.append(ready[0])
        done.add(ready[0][0])
        pending.remove(ready[0])
    return order


def item_net(system, program_order=False) -> Net:
    """Translation 2: the coloured net of a multi-item system (see the module doc)."""
    b = _NetBuilder()
    controls: Dict[str, int] = {}
    for item in system.items:
        for s in item.sources:
            b.source(item.name, s)
    # producers first: a reader's get-local names come from the sync (or get) transition
    for sync in system.syncs.values():
        for reader, local in sync.readers:
            key = ("get", sync.name, reader) if program_order else ("sync", sync.name)
            b.produce(reader, local, key)
    for item in system.items:
        for ins in item.instructions:
            b.produce(item.name, ins.output, ("op", item.name, ins.output))
    for item in system.items:
        by_output = {i.output: i for i in item.instructions}
        if program_order:
            controls[item.name] = b.net.place(f"{item.name}:pc0", item.name, 1)
        step = 0
        for kind, name in _program(item):
            step += 1
            control_in, control_out = (), ()
            if program_order:
                control_in = (controls[item.name],)
                controls[item.name] = b.net.place(f"{item.name}:pc{step}", item.name)
                control_out = (controls[item.name],)
            if kind == "op":
                ins = by_output[name]
                inputs = [b.read(item.name, r, name) for r in ins.inputs]
                extra = (b.net.place(f"{item.name}:{name}", item.name, 0, 1),) if name == system.output else ()
                b.transition(("op", item.name, name), f"{item.name}.{name}", item.name, "op", name,
                             inputs + list(control_in), extra + control_out)
            elif kind == "send":
                sync = system.syncs[name]
                b.transition(("sync", name), f"sync.{name}", item.name, "sync", name,
                             [b.read(item.name, sync.tensor, f"sync.{name}")] + list(control_in), control_out)
            elif kind == "get" and program_order:
                key = ("get", name, item.name)
                arrived = b.net.place(f"{item.name}:{name}", item.name)
                b.arcs.setdefault(("sync", name), []).append(arrived)
                b.transition(key, f"get.{name}@{item.name}", item.name, "get", name,
                             [arrived] + list(control_in), control_out)
            elif kind == "get":
                step -= 1
    net = b.finish()
    if program_order:
        for place in controls.values():
            net.final[place] = 1
    return net


def _program(item):
    """The item's actions with each segment expanded into its instructions, in program order."""
    for kind, name in item.actions:
        if kind == "run":
            for ins in item.segments[name].instructions:
                yield "op", ins
        else:
            yield kind, name


# --------------------------------------------------------------------------------- exploration

@dataclass
class Exploration:
    states: int
    edges: int
    dead: List[Tuple[int, ...]]
    unsafe: Optional[Tuple[int, ...]] = None


def explore(net: Net, limit=MAX_STATES) -> Exploration:
    """Every marking reachable from the initial one (breadth first)."""
    start = tuple(net.initial)
    seen = {start}
    queue = deque([start])
    edges, dead, unsafe = 0, [], None
    while queue:
        marking = queue.popleft()
        if unsafe is None and any(v > 1 for v in marking):
            unsafe = marking
        enabled = net.enabled(marking)
        if not enabled:
            dead.append(marking)
        for t in enabled:
            edges += 1
            nxt = net.fire(marking, t)
            if nxt not in seen:
                if len(seen) >= limit:
                    raise NNBuildError(f"the Petri net has more than {limit} reachable markings: not explored")
                seen.add(nxt)
                queue.append(nxt)
    return Exploration(len(seen), edges, dead, unsafe)


def waits(net: Net, marking) -> List[str]:
    """Who waits on what in a dead marking: 'ITEM waits for VAR' per item blocked on a variable."""
    found = []
    for t in net.transitions:
        if t.kind == "sync" or all(marking[p] for p in t.inputs):
            continue
        for p in t.inputs:
            if marking[p]:
                continue
            for s in net.transitions:
                if s.kind == "sync" and p in s.outputs and t.colour != s.colour:
                    found.append(f"{t.colour} waits for {s.label} from {s.colour}")
    return sorted(set(found))


def check_live(net: Net, what="the multi-item net") -> Exploration:
    """No deadlock and 1-safe, or one NNBuildError line naming the items and variables."""
    result = explore(net)
    final = tuple(net.final)
    for marking in result.dead:
        if marking != final:
            blocked = waits(net, marking)
            cause = "; ".join(blocked) if blocked else "transitions " + ", ".join(
                t.name for t in net.transitions if any(marking[p] for p in t.inputs))
            raise NNBuildError(f"deadlock in {what} ({result.states} states explored): {cause}")
    if result.unsafe is not None:
        place = next(net.places[i] for i, v in enumerate(result.unsafe) if v > 1)
        raise NNBuildError(f"{what} is not 1-safe: place {place} can hold two tokens")
    return result


def check_traces(multi: Net, unsplit: Net, equivalence=True, limit=MAX_STATES) -> int:
    """Trace inclusion (and, with `equivalence`, the converse) between a multi-item net and the
    unsplit one, projected on instructions; explores their product and returns its state count."""
    op_of = {t.label: i for i, t in enumerate(unsplit.transitions)}
    start = (tuple(multi.initial), tuple(unsplit.initial))
    seen, queue = {start}, deque([start])
    while queue:
        m, u = queue.popleft()
        enabled = multi.enabled(m)
        for t in enabled:
            tr = multi.transitions[t]
            nu = u
            if tr.kind == "op":
                ut = op_of.get(tr.label)
                if ut is None or not all(u[p] for p in unsplit.transitions[ut].inputs):
                    raise NNBuildError(f"trace inclusion fails: item {tr.colour} can compute '{tr.label}' "
                                       f"where the unsplit model cannot")
                nu = unsplit.fire(u, ut)
            nxt = (multi.fire(m, t), nu)
            if nxt not in seen:
                if len(seen) >= limit:
                    raise NNBuildError(f"the product of the nets has more than {limit} states: not explored")
                seen.add(nxt)
                queue.append(nxt)
        if not enabled and u != tuple(unsplit.final):
            raise NNBuildError("trace inclusion fails: the multi-item net stops before the unsplit model ends")
        if equivalence:
            for ut in unsplit.enabled(u):
                label = unsplit.transitions[ut].label
                if not _reachable_by_syncs(multi, m, label):
                    raise NNBuildError(f"equivalence fails: the unsplit model can compute '{label}' here "
                                       f"but no item can")
    return len(seen)


def _reachable_by_syncs(net: Net, marking, label) -> bool:
    """Can the op computing `label` fire after sync/get transitions only?"""
    seen, queue = {marking}, deque([marking])
    while queue:
        m = queue.popleft()
        for t in net.enabled(m):
            tr = net.transitions[t]
            if tr.kind == "op" and tr.label == label:
                return True
            if tr.kind != "op":
                nxt = net.fire(m, t)
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
    return False


def replay(net: Net, names: Sequence[str]) -> Optional[str]:
    """None when `names` (transition names) is a firing sequence of `net` from its initial
    marking ending in the final marking; else why not (one line)."""
    index = {t.name: i for i, t in enumerate(net.transitions)}
    marking = tuple(net.initial)
    for step, name in enumerate(names):
        t = index.get(name)
        if t is None:
            return f"event {step} '{name}' is no transition of the net"
        if not all(marking[p] for p in net.transitions[t].inputs):
            return f"event {step} '{name}' fires while not enabled"
        marking = net.fire(marking, t)
    if marking != tuple(net.final):
        return f"the {len(names)} events stop before the final marking"
    return None


def verify(system) -> dict:
    """Every check of a multi-item system; the record report.json carries (or one error line)."""
    data_net = item_net(system)
    code_net = item_net(system, program_order=True)
    whole = unsplit_net(system)
    data = check_live(data_net, "the data-flow net")
    code = check_live(code_net, "the items' program order")
    single = check_live(whole, "the unsplit net")
    product = check_traces(data_net, whole, equivalence=True)
    code_product = check_traces(code_net, whole, equivalence=False)
    return {"items": [i.name for i in system.items], "syncs": sorted(system.syncs),
            "places": len(data_net.places), "transitions": len(data_net.transitions),
            "initial_tokens": sum(data_net.initial), "states": data.states,
            "program_order_states": code.states, "unsplit_states": single.states,
            "product_states": product, "program_order_product_states": code_product,
            "deadlock_free": True, "one_safe": True, "trace_inclusion": True, "equivalence": True}
