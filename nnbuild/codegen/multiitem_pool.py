"""One memory for a multi-item system's static schedule (sync=schedule, single core): the tensors
crossing segments, the packed inputs of the segments that read several tensors, and every segment's
own activation arena, placed in one pool by their lifetimes over the schedule. A segment's arena
lives only while it runs (one segment runs at a time), a packed input from its copy to the end of
its run, a crossing tensor from the run that writes it to the last copy or run that reads it. Without
it every segment keeps its own arena and cifarnet split in two items needs 38 KB of RAM, more than
the ATmega1284's 16 KB, where the unsplit model needs 12.7 KB.

The segments' C is generated as for any model; their `static float <segment>_arena[N];` line
(`static int16_t` in fixed point, where the items hand int16 tensors on and the pool holds int16
values) is then replaced, on the same line (the flow facts name lines), by a constant pointer into
the pool (`<system>_mi_pool`, defined in the system's C).
"""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

from nnbuild import files

#: the arena declaration of the code shapes (v1, v2, v3 float templates; v2's fixed point: int16_t)
ARENA = re.compile(r"^static (float|int16_t) (\w+)_arena\[(\d+)\];$", re.M)


@dataclass
class Pool:
    symbol: str
    #: the C type of its values: float, or int16_t in fixed point
    ctype: str = "float"
    values: int = 0
    #: buffer symbol -> offset in values
    offsets: Dict[str, int] = field(default_factory=dict)

    def declaration(self, symbol, values, comment):
        """The C line of a buffer: a macro into the pool."""
        return f"#define {symbol} ({self.symbol} + {self.offsets[symbol]}) /* {values} values: {comment} */"


def _arena(text, seg, ctype):
    """The match of segment `seg`'s arena declaration of type `ctype` in its C, or None."""
    found = ARENA.search(text)
    return found if found and found.group(1) == ctype and found.group(2) == seg else None


def segment_arenas(outdir, system, ctype="float") -> Dict[str, int]:
    """Each segment's arena size in values of `ctype` (0 when its code needs none, or of another
    type), read from its C."""
    sizes = {}
    for item in system.items:
        for seg in item.segments:
            found = _arena((Path(outdir) / f"{seg}.c").read_text(), seg, ctype)
            sizes[seg] = int(found.group(3)) if found else 0
    return sizes


def lifetimes(system, order, views, size_of, arenas) -> List[Tuple[str, int, int, int]]:
    """(buffer symbol, values, first step, last step) of every pooled buffer. Step 2k is the k-th
    action's input copy, 2k + 1 its run (order: (item, kind, name) as the schedule runs them)."""
    born, last, sizes = {}, {}, {}
    spans = []
    for k, (item, kind, name) in enumerate(order):
        if kind != "run":
            continue
        seg = item.segments[name]
        view = views[item.name]
        packed = len(seg.inputs) > 1
        for t in seg.inputs:
            buffer = view.buffer(t)
            last[buffer] = max(last.get(buffer, 0), 2 * k if packed else 2 * k + 1)
        if packed:
            spans.append((f"{seg.name}_packed", sum(size_of(item, t) for t in seg.inputs), 2 * k, 2 * k + 1))
        if arenas.get(seg.name):
            spans.append((f"{seg.name}_arena", arenas[seg.name], 2 * k + 1, 2 * k + 1))
        out = view.buffer(seg.output)
        born.setdefault(out, 2 * k + 1)
        sizes[out] = size_of(item, seg.output)
    for buffer, start in born.items():
        if buffer.startswith("nn_mi_t_"):
            spans.append((buffer, sizes[buffer], start, max(last.get(buffer, start), start)))
    return spans


def plan(symbol, spans, ctype="float") -> Pool:
    """First fit, largest first (ties: by name): a buffer goes at the lowest offset where it
    overlaps no placed buffer alive at the same step."""
    pool = Pool(symbol, ctype)
    placed = []
    for name, values, start, end in sorted(spans, key=lambda s: (-s[1], s[0])):
        offset = 0
        for other_offset, other_values, other_start, other_end in sorted(
                (p for p in placed if p[2] <= end and start <= p[3]), key=lambda p: p[0]):
            if offset + values <= other_offset:
                break
            offset = max(offset, other_offset + other_values)
        placed.append((offset, values, start, end))
        pool.offsets[name] = offset
        pool.values = max(pool.values, offset + values)
    return pool


def redirect_arenas(outdir, system, pool):
    """Each segment's arena declaration replaced by its place in the pool."""
    for item in system.items:
        for seg in item.segments:
            path = Path(outdir) / f"{seg}.c"
            text = path.read_text()
            found = _arena(text, seg, pool.ctype)
            if found and f"{seg}_arena" in pool.offsets:
                # one line for one: the flow facts name the lines of the loops below it
                line = (f"extern {pool.ctype} {pool.symbol}[]; static {pool.ctype} *const {seg}_arena = "
                        f"{pool.symbol} + {pool.offsets[f'{seg}_arena']}; /* {found.group(3)} values of the "
                        f"schedule's pool, live while this segment runs */")
                files.write_text(path, text[:found.start()] + line + text[found.end():])
