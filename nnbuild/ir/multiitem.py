"""Multi-item systems (seed 002): one network split into items, each run by its own core or
accelerator, exchanging tensors through `variablesync` variables (one writer, any readers).

The IR holds what the Petri net, the code generator and the checks need, and nothing of the text
format: each item's instructions (one per computed tensor: the net's transitions), the tensors it
declares (input and parameters: the net's initially marked places), its actions in program order
(run a segment, send a variable, get a variable), the segments as IR models the existing code shapes
generate, and the unsplit model the split must behave as.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from nnbuild.ir.graph import Model

#: the name of a segment's input packing several tensors; each part T is sliced out as PACKED_T_flat
#: and viewed as PACKED_T (a tensor held in another layout is received as PACKED_T alone)
PACKED = "mi_packed"


@dataclass(frozen=True)
class Instruction:
    """`output = op(inputs...)` in one item: a transition of the item's net."""
    output: str
    op: str
    #: item-local tensors and parameters read, one entry per read (a tensor read twice appears twice)
    inputs: Tuple[str, ...]
    line: int = field(default=0, compare=False)


@dataclass(frozen=True)
class Sync:
    """A `variablesync`: `writer` sends its tensor `tensor`; each reader gets it as a local name."""
    name: str
    writer: str
    tensor: str
    shape: Tuple[int, ...]
    #: (reader item, the reader's local name of the value), in the writer's `send_var` order
    readers: Tuple[Tuple[str, str], ...]

    @property
    def reader_items(self) -> Tuple[str, ...]:
        return tuple(r for r, _ in self.readers)


@dataclass
class Segment:
    """Consecutive instructions of one item, compiled as one function by an existing code shape:
    it reads `inputs` (item-local tensors, packed in this order into one flat vector when several)
    and writes `output`."""
    name: str
    instructions: Tuple[str, ...]
    inputs: Tuple[str, ...]
    output: str
    model: Optional[Model] = None


@dataclass
class Item:
    name: str
    graph: str
    #: tensors the item declares without computing them: name -> "external" | "variable" | "constant"
    sources: Dict[str, str]
    instructions: List[Instruction]
    #: program order: ("run", segment name) | ("send", sync name) | ("get", sync name)
    actions: List[Tuple[str, str]]
    segments: Dict[str, Segment] = field(default_factory=dict)
    #: the system outputs this item computes
    outputs: Tuple[str, ...] = ()

    #: tensor -> the syncs that send it
    sends: Dict[str, Tuple[str, ...]] = field(default_factory=dict)

    def uses(self, tensor) -> int:
        """How many times the item reads `tensor` (instructions and sends): its place's tokens."""
        return self._reads().get(tensor, 0) + len(self.sends.get(tensor, ()))

    def _reads(self) -> Dict[str, int]:
        """tensor -> reads by the instructions, counted once per instruction list (uses() is
        asked per instruction: counting on every call made a long item quadratic)."""
        key = (id(self.instructions), len(self.instructions))
        if getattr(self, "_read_key", None) != key:
            counts: Dict[str, int] = {}
            for instruction in self.instructions:
                for name in instruction.inputs:
                    counts[name] = counts.get(name, 0) + 1
            self._read_counts, self._read_key = counts, key
        return self._read_counts


@dataclass
class MultiItem:
    """A multi-item system: its items in document order, its sync variables, the system input and
    output, tensor shapes (NNEF layout), and the unsplit model it must equal."""
    name: str
    items: List[Item]
    syncs: Dict[str, Sync]
    input: str
    output: str
    shapes: Dict[str, Tuple[int, ...]]
    whole: Optional[Model] = None
    source_files: Tuple[str, ...] = ()
    #: facts for the report: the Petri-net checks' record ("petri")
    meta: dict = field(default_factory=dict)
    kind: str = "multiitem"

    def item(self, name) -> Item:
        return next(i for i in self.items if i.name == name)

    @property
    def input_shape(self):
        return self.shapes[self.input]

    @property
    def output_shape(self):
        return self.shapes[self.output]

