"""The stack-depth walk the builtin stack analyzers share (nnbuild.wcet.avr_stack,
nnbuild.wcet.thumb2_stack give the instruction facts).

Each function reachable from the entry is analysed once (memoised; a function met again on its own
call chain is recursion, refused) by a forward data flow over its instructions whose value is the
SP depth below the function's entry SP plus a small abstract register file. Two paths must meet
at the same depth; their register files join (what they disagree on becomes unknown). A function's
bound is its deepest own depth, or a callee's bound on top of the depth at the call, whichever is
deeper; the call chain to the deepest point is kept for the report.

An instruction set subclasses `Analysis` (its walk, how a function is named) and `FlowWalk` (decode, the
effect of one instruction: `step`, the register join: `join`, and optionally the entry state:
`initial`, a walk key other than the address: `key`/`address`).
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from nnbuild.errors import NNBuildError


@dataclass
class Func:
    """Result of one analysed function (entered at `start`)."""

    start: int
    name: str
    own: int = 0                       # deepest own depth below the entry SP, callees excluded
    inner: int = 0                     # deepest depth below the entry SP, callees included
    critical: Optional[int] = None     # callee start on the deepest chain (None: own frame)


@dataclass(frozen=True)
class State:
    """The walk's value at one instruction."""

    depth: int
    regs: Tuple
    pending: Optional[Tuple] = None    # first half of a two-instruction SP write (AVR)


class Analysis:
    """Memoised per-function analyses of one program."""

    def __init__(self, prog):
        self.prog = prog
        self.done: Dict[int, Func] = {}

    def name(self, addr):
        return self.prog.describe(addr)

    def walk(self, func, chain):
        """The instruction set's FlowWalk over the function `func`."""
        raise NotImplementedError

    def error(self, addr, msg):
        return NNBuildError(f"stack: {msg} in {self.name(addr)} at 0x{addr:x}", path=self.prog.elf)

    def function(self, start, chain):
        """The analysis of the function entered at `start` (`chain`: callers, for recursion)."""
        if start in self.done:
            return self.done[start]
        if start in chain:
            names = " -> ".join(self.name(a) for a in chain + (start,))
            raise self.error(start, f"recursion ({names}): no static stack bound")
        func = Func(start, self.name(start))
        self.walk(func, chain + (start,)).run()
        self.done[start] = func
        return func

    def bound(self, start, return_address_bytes):
        """stack_bound's result for a call of the function at `start`: {"bytes", "path" (call chain
        to the maximum), "per_function" (own frame bytes of each function reached), and
        "return_address_bytes" (what the call itself pushes, counted in "bytes")}."""
        root = self.function(start, ())
        path, f = [root.name], root
        while f.critical is not None:
            f = self.done[f.critical]
            path.append(f.name)
        return {"bytes": return_address_bytes + root.inner, "path": path,
                "per_function": {f.name: f.own for f in self.done.values()},
                "return_address_bytes": return_address_bytes}


class FlowWalk:
    """Forward data flow over one function's instructions; fills in its Func."""

    def __init__(self, analysis, func, chain):
        self.a, self.prog, self.func, self.chain = analysis, analysis.prog, func, chain
        self.states: Dict[object, State] = {}

    def key(self, addr, state):
        """Where the walk keeps `state` arriving at `addr` (one state per key)."""
        return addr

    @staticmethod
    def address(key):
        return key

    def initial(self):
        """The state at the function's entry: its entry SP, nothing known of the registers."""
        return State(0, ())

    def run(self):
        initial = self.initial()
        start = self.key(self.func.start, initial)
        work = [start]
        self.states[start] = initial
        while work:
            key = work.pop()
            addr = self.address(key)
            for succ, state in self.step(addr, self.states[key]):
                nxt = self.key(succ, state)
                if self.merge(nxt, state, addr):
                    work.append(nxt)

    def merge(self, key, state, src):
        """Join `state` into the state at `key`; True when it changed."""
        old = self.states.get(key)
        if old is None:
            self.states[key] = state
            return True
        if old.depth != state.depth or old.pending != state.pending:
            raise self.a.error(self.address(key), f"paths meet with SP depths {old.depth} and {state.depth} "
                               f"(from 0x{src:x})")
        regs = self.join(old.regs, state.regs)
        if regs == old.regs:
            return False
        self.states[key] = State(old.depth, regs, old.pending)
        return True

    def fetch(self, addr):
        insn = self.decode(addr)
        if insn is None:
            raise self.a.error(addr, "no instruction decoded")
        return insn

    def peak(self, depth, callee=None):
        f = self.func
        if callee is None:
            f.own = max(f.own, depth)
        if depth > f.inner:
            f.inner, f.critical = depth, callee

    def call(self, target, depth):
        """Account for a callee entered at `depth` (with any return address already counted)."""
        callee = self.a.function(target, self.chain)
        self.peak(depth + callee.inner, callee.start)

    def decode(self, addr):
        """The instruction at `addr`, or None."""
        raise NotImplementedError

    def join(self, old, new):
        """The register file where two paths meet."""
        raise NotImplementedError

    def step(self, addr, state):
        """Successors of one instruction: [(address, State)]."""
        raise NotImplementedError
