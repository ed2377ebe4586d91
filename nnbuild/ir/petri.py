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

import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from nnbuild.errors import NNBuildError

#: exploration bound: beyond it a check fails (visibly) rather than guess. Real systems reach tens
#: to thousands of markings; a net this large takes seconds per exploration (five per system)
MAX_STATES = 200_000
#: above this many places a visited marking is stored compressed (a 1-safe net marks few places at
#: once) rather than as a bit set as long as the net
SPARSE_PLACES = 2048


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
    order = stable_order(instructions, defined)
    placed = set(order)
    return [instructions[i] for i in order] + [x for i, x in enumerate(instructions) if i not in placed]


def stable_order(steps, defined) -> List[int]:
    """Indices of `steps` (output, names read) in a dependency order, each time the first step in
    the list whose reads are all in `defined` or already produced (a heap: linear, not quadratic);
    steps that never become ready (a cycle, a name nothing produces) are left out."""
    import heapq
    waiting, readers = [], {}
    for i, (_, reads) in enumerate(steps):
        needed = {r for r in reads if r not in defined}
        waiting.append(len(needed))
        for r in needed:
            readers.setdefault(r, []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    done, order = set(defined), []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        out = steps[i][0]
        if out in done:
            continue
        done.add(out)
        for j in readers.get(out, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
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


class _Bits:
    """A net whose markings are bit sets (place i holds a token iff bit i is set): a marking of
    any size is one Python int, and a transition is enabled iff its input mask is in the marking.
    For nets whose initial marking and arcs can only make sense as 0/1 (no place read twice by a
    transition, no initial marking above 1); a second token in a place is reported as unsafety."""

    def __init__(self, net: Net):
        self.net = net
        self.inputs = [_mask(t.inputs) for t in net.transitions]
        self.outputs = [_mask(t.outputs) for t in net.transitions]
        consumers: List[List[int]] = [[] for _ in net.places]
        self.sourceless = []          # transitions with no input place: always enabled
        for i, t in enumerate(net.transitions):
            for p in set(t.inputs):
                consumers[p].append(i)
            if not t.inputs:
                self.sourceless.append(i)
        self.consumers = consumers
        self.sparse = len(net.places) > SPARSE_PLACES
        self.nbytes = (len(net.places) + 7) // 8

    @staticmethod
    def usable(net: Net) -> bool:
        return (all(v in (0, 1) for v in net.initial)
                and all(len(set(t.inputs)) == len(t.inputs) and len(set(t.outputs)) == len(t.outputs)
                        for t in net.transitions))

    def marking(self, net_marking) -> int:
        return sum(1 << p for p, v in enumerate(net_marking) if v)

    def key(self, m):
        """What the visited set stores: the bit set, or in a large net the bit set compressed (a
        1-safe net marks few of its places at once: a few bytes instead of one bit per place)."""
        if not self.sparse:
            return m
        return zlib.compress(m.to_bytes(self.nbytes, "little"), 1)

    def tuple(self, bits, extra=()) -> Tuple[int, ...]:
        m = [(bits >> p) & 1 for p in range(len(self.net.places))]
        for p in extra:
            m[p] += 1
        return tuple(m)

    def enabled(self, m) -> List[int]:
        found, rest, inputs, consumers = set(self.sourceless), m, self.inputs, self.consumers
        while rest:
            low = rest & -rest
            for t in consumers[low.bit_length() - 1]:
                if m & inputs[t] == inputs[t]:
                    found.add(t)
            rest ^= low
        return sorted(found)

    def enabled_after(self, m, before, t) -> List[int]:
        """enabled(m) where m is the marking firing `t` led to and `before` what was enabled
        there: only a reader of t's outputs can have become enabled (no scan of every token)."""
        inputs = self.inputs
        found = {u for u in before if u != t and m & inputs[u] == inputs[u]}
        rest = self.outputs[t]
        while rest:
            low = rest & -rest
            for u in self.consumers[low.bit_length() - 1]:
                if m & inputs[u] == inputs[u]:
                    found.add(u)
            rest ^= low
        return sorted(found)

    @staticmethod
    def unsafe(m):
        return False

    def is_enabled(self, m, t) -> bool:
        return m & self.inputs[t] == self.inputs[t]

    def fire(self, m, t):
        """(the next marking, the place that would hold a second token or -1)."""
        after = m & ~self.inputs[t]
        clash = after & self.outputs[t]
        if clash:
            return after | self.outputs[t], (clash & -clash).bit_length() - 1
        return after | self.outputs[t], -1


def _mask(places) -> int:
    mask = 0
    for p in places:
        mask |= 1 << p
    return mask


def _over_limit(what, limit, states=None, bound=None):
    if bound is not None:
        return NNBuildError(f"{what} has at least {bound[0]:,} reachable markings ({bound[1]}), above the "
                            f"limit of {limit:,} (MAX_STATES): not explored")
    return NNBuildError(f"{what} has more than {limit:,} reachable markings (MAX_STATES): "
                        f"exploration stopped there")


class _Counts:
    """The _Bits interface over token-count tuples, for nets _Bits cannot encode."""

    def __init__(self, net: Net):
        self.net = net

    def marking(self, net_marking):
        return tuple(net_marking)

    def tuple(self, marking, extra=()):
        return marking

    @staticmethod
    def key(m):
        return m

    def enabled(self, m):
        return self.net.enabled(m)

    def enabled_after(self, m, before, t):
        return self.net.enabled(m)

    def is_enabled(self, m, t) -> bool:
        return all(m[p] for p in self.net.transitions[t].inputs)

    def fire(self, m, t):
        nxt = self.net.fire(m, t)
        return nxt, -1

    @staticmethod
    def unsafe(m):
        return any(v > 1 for v in m)


def _coder(net: Net):
    return _Bits(net) if _Bits.usable(net) else _Counts(net)


def explore(net: Net, limit=MAX_STATES, what="the Petri net") -> Exploration:
    """Every marking reachable from the initial one (breadth first), counted as it is found: the
    exploration stops the moment the count passes `limit`, and a net `state_lower_bound` already
    proves larger is refused before any is explored."""
    bound = state_lower_bound(net)
    if bound is not None and bound[0] > limit:
        raise _over_limit(what, limit, bound=bound)
    code = _coder(net)
    start = code.marking(net.initial)
    seen, queue = {code.key(start)}, deque([(start, code.enabled(start))])
    edges, dead, unsafe = 0, [], None
    while queue:
        marking, enabled = queue.popleft()
        if unsafe is None and code.unsafe(marking):
            unsafe = marking
        if not enabled:
            dead.append(code.tuple(marking))
        for t in enabled:
            edges += 1
            nxt, clash = code.fire(marking, t)
            if clash >= 0:   # a second token, which a bit set cannot hold: exploration ends here
                return Exploration(len(seen), edges, dead, code.tuple(nxt, (clash,)))
            key = code.key(nxt)
            if key not in seen:
                seen.add(key)
                if len(seen) > limit:
                    raise _over_limit(what, limit)
                queue.append((nxt, code.enabled_after(nxt, enabled, t)))
    return Exploration(len(seen), edges, dead, unsafe)


# ------------------------------------------------------------------------- a bound before exploring

#: largest number of chains state_lower_bound compares (each costs one walk of the net)
MAX_BOUND_CHAINS = 64


def is_marked_graph(net: Net) -> bool:
    """Every place has at most one producer and one consumer, marked places none of the former,
    every transition an input place, every arc weight 1: the nets this module builds."""
    producers, consumers = [0] * len(net.places), [0] * len(net.places)
    for t in net.transitions:
        if not t.inputs or len(set(t.inputs)) != len(t.inputs) or len(set(t.outputs)) != len(t.outputs):
            return False
        for p in t.inputs:
            consumers[p] += 1
        for p in t.outputs:
            producers[p] += 1
    return (all(c <= 1 for c in consumers) and all(p <= 1 for p in producers)
            and all(v == 0 or (v == 1 and producers[p] == 0) for p, v in enumerate(net.initial)))


def state_lower_bound(net: Net):
    """(a number of markings the net certainly reaches, how it was found), or None.

    In a marked graph (is_marked_graph) each transition fires at most once and a reachable marking
    is exactly a set of fired transitions closed under 'fires before' (distinct sets, distinct
    markings: a least transition in which two sets differ has an input place marked in one only).
    So k chains of transitions none of which fires before another's (mutually concurrent) give at
    least (n1 + 1)(n2 + 1)...(nk + 1) markings: any prefix of each chain, independently. Chains are
    the net's maximal runs of transitions linked one to one; linear in the net's size, milliseconds."""
    if not net.transitions or not is_marked_graph(net):
        return None
    producer, consumer = {}, {}
    for i, t in enumerate(net.transitions):
        for p in t.outputs:
            producer[p] = i
        for p in t.inputs:
            consumer[p] = i
    succ = [sorted({consumer[p] for p in t.outputs if p in consumer}) for t in net.transitions]
    pred = [sorted({producer[p] for p in t.inputs if p in producer}) for t in net.transitions]
    fireable = _fireable(net, producer)
    best = None
    for chains in (_runs(succ, pred, fireable), _colour_paths(net, succ, pred, fireable)):
        found = _concurrent_product(chains, succ)
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    return best


def _runs(succ, pred, fireable) -> List[List[int]]:
    """The maximal runs of fireable transitions linked one to one (each the only reader of the
    one before, itself read only by the next)."""
    chains, placed = [], set()
    for start in range(len(succ)):
        if start in placed or start not in fireable:
            continue
        if len(pred[start]) == 1 and len(succ[pred[start][0]]) == 1 and pred[start][0] in fireable:
            continue   # inside a run: reached from its head
        chain, t = [start], start
        while len(succ[t]) == 1 and len(pred[succ[t][0]]) == 1 and succ[t][0] in fireable \
                and succ[t][0] not in placed and succ[t][0] != start:
            t = succ[t][0]
            chain.append(t)
        placed.update(chain)
        chains.append(chain)
    return chains


def _colour_paths(net, succ, pred, fireable) -> List[List[int]]:
    """Paths of one item's transitions (a program-order net links an item's steps in order): from
    each transition not yet on a path, in a firing order, to a same-coloured successor not on one."""
    waiting = {t: len([p for p in pred[t] if p in fireable]) for t in fireable}
    order = deque(t for t in sorted(fireable) if waiting[t] == 0)
    topo = []
    while order:
        t = order.popleft()
        topo.append(t)
        for u in succ[t]:
            if u in waiting:
                waiting[u] -= 1
                if waiting[u] == 0:
                    order.append(u)
    chains, placed = [], set()
    for start in topo:
        if start in placed:
            continue
        chain, t = [start], start
        placed.add(start)
        while True:
            colour = net.transitions[t].colour
            nxt = next((u for u in succ[t] if u in fireable and u not in placed
                        and net.transitions[u].colour == colour), None)
            if nxt is None:
                break
            chain.append(nxt)
            placed.add(nxt)
            t = nxt
        chains.append(chain)
    return chains


def _concurrent_product(chains, succ):
    """(the largest product of (length + 1) over mutually concurrent chains found, what they are),
    or None when no two are: from each of the longest chains in turn, the longer ones first."""
    chains = sorted(chains, key=len, reverse=True)[:MAX_BOUND_CHAINS]
    below = [_descendants(succ, c[0]) for c in chains]

    def concurrent(i, j):
        return chains[j][-1] not in below[i] and chains[i][-1] not in below[j]

    best = None
    for seed in range(len(chains)):
        chosen = [seed]
        for j in range(len(chains)):
            if j != seed and all(concurrent(i, j) for i in chosen):
                chosen.append(j)
        bound = 1
        for i in chosen:
            bound *= len(chains[i]) + 1
        if len(chosen) > 1 and (best is None or bound > best[0]):
            sizes = sorted(len(chains[i]) for i in chosen)
            lengths = f"{sizes[0]}" if sizes[0] == sizes[-1] else f"{sizes[0]} to {sizes[-1]}"
            best = (bound, f"{len(chosen)} concurrent chains of {lengths} transitions")
    return best


def _fireable(net: Net, producer) -> set:
    """Transitions that can fire at all: every input place marked or fed by one that can."""
    ready = {p for p, v in enumerate(net.initial) if v}
    waiting = {i: len(t.inputs) for i, t in enumerate(net.transitions)}
    feeds: Dict[int, List[int]] = {}
    for i, t in enumerate(net.transitions):
        for p in t.inputs:
            feeds.setdefault(p, []).append(i)
    queue = deque(p for p in ready)
    fired = set()
    while queue:
        p = queue.popleft()
        for i in feeds.get(p, ()):
            waiting[i] -= 1
            if waiting[i] == 0 and i not in fired:
                fired.add(i)
                queue.extend(net.transitions[i].outputs)
    return fired


def _descendants(succ, start) -> set:
    seen, stack = {start}, [start]
    while stack:
        for u in succ[stack.pop()]:
            if u not in seen:
                seen.add(u)
                stack.append(u)
    return seen


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


def check_live(net: Net, what="the multi-item net", limit=MAX_STATES) -> Exploration:
    """No deadlock and 1-safe, or one NNBuildError line naming the items and variables."""
    result = explore(net, limit, what)
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
    unsplit one, projected on instructions; explores their product and returns its state count
    (stopping, like explore, the moment it passes `limit`)."""
    op_of = {t.label: i for i, t in enumerate(unsplit.transitions)}
    mc, uc = _coder(multi), _coder(unsplit)
    final = uc.marking(unsplit.final)
    start = (mc.marking(multi.initial), uc.marking(unsplit.initial))
    seen = {(mc.key(start[0]), uc.key(start[1]))}
    queue = deque([(start[0], start[1], mc.enabled(start[0]), uc.enabled(start[1]))])
    while queue:
        m, u, enabled, u_enabled = queue.popleft()
        for t in enabled:
            tr = multi.transitions[t]
            nu, nu_enabled = u, u_enabled
            if tr.kind == "op":
                ut = op_of.get(tr.label)
                if ut is None or not uc.is_enabled(u, ut):
                    raise NNBuildError(f"trace inclusion fails: item {tr.colour} can compute '{tr.label}' "
                                       f"where the unsplit model cannot")
                nu, clash = uc.fire(u, ut)
                if clash >= 0:
                    raise NNBuildError(f"the unsplit net is not 1-safe: place {unsplit.places[clash]} "
                                       "can hold two tokens")
                nu_enabled = uc.enabled_after(nu, u_enabled, ut)
            nm, clash = mc.fire(m, t)
            if clash >= 0:
                raise NNBuildError(f"the multi-item net is not 1-safe: place {multi.places[clash]} "
                                   "can hold two tokens")
            key = (mc.key(nm), uc.key(nu))
            if key not in seen:
                seen.add(key)
                if len(seen) > limit:
                    raise NNBuildError(f"the product of the nets has more than {limit:,} states (MAX_STATES): "
                                       "exploration stopped there")
                queue.append((nm, nu, mc.enabled_after(nm, enabled, t), nu_enabled))
        if not enabled and u != final:
            raise NNBuildError("trace inclusion fails: the multi-item net stops before the unsplit model ends")
        if equivalence:
            for ut in u_enabled:
                label = unsplit.transitions[ut].label
                if not _reachable_by_syncs(multi, mc, m, enabled, label):
                    raise NNBuildError(f"equivalence fails: the unsplit model can compute '{label}' here "
                                       f"but no item can")
    return len(seen)


def _reachable_by_syncs(net: Net, code, marking, enabled, label) -> bool:
    """Can the op computing `label` fire after sync/get transitions only?"""
    seen, queue = {code.key(marking)}, deque([(marking, enabled)])
    while queue:
        m, now = queue.popleft()
        for t in now:
            tr = net.transitions[t]
            if tr.kind == "op" and tr.label == label:
                return True
            if tr.kind != "op":
                nxt, _ = code.fire(m, t)
                key = code.key(nxt)
                if key not in seen:
                    seen.add(key)
                    queue.append((nxt, code.enabled_after(nxt, now, t)))
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
    for net, what in ((data_net, "the data-flow net"), (code_net, "the items' program order"),
                      (whole, "the unsplit net")):   # milliseconds each: a huge net is refused first
        bound = state_lower_bound(net)
        if bound is not None and bound[0] > MAX_STATES:
            raise _over_limit(what, MAX_STATES, bound=bound)
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
