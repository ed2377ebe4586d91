"""Memory report and gate: flash = text + data, RAM = data + bss + a static stack bound where the
board has a stack analyzer (AVR, Cortex-M); the bound held to the stack a run measured (Cortex-M
under qemu-system-arm); placement check for data read with 16-bit flash pointers."""

import json

from nnbuild.compilers import elf as elf_file
from nnbuild.errors import NNBuildError

NEAR_FLASH_END = 0x10000


def usage(board, sizes, stack_bytes=None):
    flash = sizes["text"] + sizes["data"]
    ram = sizes["data"] + sizes["bss"] + (stack_bytes or 0)
    return {"flash_bytes": flash, "ram_bytes": ram, "stack_bytes": stack_bytes,
            "flash_capacity": board.get("flash_bytes"), "ram_capacity": board.get("ram_bytes"),
            **{f"{k}_bytes": v for k, v in sizes.items()}}


def over_capacity(use, board_name):
    """The needed vs available bytes of every memory that overflows, as one clause (None when the
    image fits): the memory gate's line, and a precision=auto candidate's reason not to qualify."""
    over = []
    for kind in ("flash", "ram"):
        cap = use.get(f"{kind}_capacity")
        if cap and use[f"{kind}_bytes"] > cap:
            over.append(f"{kind} {use[f'{kind}_bytes']:,} bytes needed > {cap:,} bytes")
    return f"{' and '.join(over)} on {board_name}" if over else None


def gate_memory(board, use):
    """Fail with the needed vs available bytes (every memory that overflows, one line) when the
    image cannot fit the board."""
    over = over_capacity(use, board["name"])
    if over:
        raise NNBuildError(over)


def bar(used, capacity, width=10):
    """PlatformIO-style `[===       ]  30.1% (used 123 bytes from 456 bytes)`."""
    if not capacity:
        return f"used {used:,} bytes"
    frac = used / capacity
    filled = min(width, int(round(frac * width)))
    return f"[{'=' * filled}{' ' * (width - filled)}] {100 * frac:5.1f}% (used {used:,} bytes from {capacity:,} bytes)"


def stack_bound(board, elf, entries, flowfacts=None):
    """The static stack bound of the first entry that can be bounded (main first: it covers the
    firmware's own frame too), or None on boards without a stack analyzer."""
    from nnbuild import wcet
    analyzer = wcet.stack_analyzer_for(board)
    if analyzer is None:
        return None
    reasons, found = [], None
    for entry in entries:
        try:
            result = analyzer.stack_bound(elf, entry, board, flowfacts)
        except NNBuildError as error:
            if found is None:
                reasons.append(f"{entry}: {error}")
            continue
        if found is None:
            found = {"entry": entry, "bytes": int(result["bytes"]), "path": result["path"],
                     "not_bounded": reasons, "entries": {}}
        found["entries"][entry] = int(result["bytes"])   # each entry's own bound: a run of it is held to it
    if found is None:
        raise NNBuildError(f"no stack bound: {'; '.join(reasons) or 'no entry given'}", path=elf)
    return found


def measured_stack_bound(record):
    """(bound, entry) the run's stack is held to: the static bound of the measured function itself
    where the memory report has it, else the bound counted in RAM (of `main`, which calls it)."""
    stack = record.get("stack") or {}
    entry = record.get("measured_stack_entry")
    if entry and entry in (stack.get("entries") or {}):
        return stack["entries"][entry], entry
    return record.get("stack_bytes"), stack.get("entry")


def stack_violation(record):
    """One clause when the stack a run measured exceeds the static bound (the analysis missed
    something: the build must not trust the RAM figure), else None."""
    measured = record.get("measured_stack_bytes")
    bound, entry = measured_stack_bound(record)
    if measured is None or bound is None or measured <= bound:
        return None
    return (f"measured stack {measured:,} bytes > static stack bound {bound:,} bytes"
            f"{f' of {entry}' if entry else ''}: the bound is unsound for this program")


def stack_gate_detail(record):
    """The stack soundness gate's verdict and text: (verdict, detail), or None without a measurement."""
    measured = record.get("measured_stack_bytes")
    bound, entry = measured_stack_bound(record)
    if measured is None:
        return None
    if bound is None:
        return "na", f"measured {measured:,} bytes; no static stack bound on this board"
    broken = stack_violation(record)
    return ("fail", broken) if broken else (
        "pass", f"measured {measured:,} bytes <= static bound {bound:,} bytes{f' of {entry}' if entry else ''}")


def check_near_flash(board, elf, trace_path):
    """Data the code reads with 16-bit LPM pointers (trace "near_flash_symbols": storage
    avr-progmem-near, or small fixed-point models on avr-progmem-far) must end below 64 KB of flash.
    On a chip with at most 64 KB of flash (ATmega328P) data past 64 KB means the image does not fit
    at all: the memory gate, which follows, says so with the bytes needed vs available."""
    with open(trace_path) as f:
        names = set(json.load(f).get("near_flash_symbols", []))
    if not names:
        return
    for symbol in elf_file.symbols(elf):
        if symbol.name in names and symbol.size and symbol.addr + symbol.size > NEAR_FLASH_END:
            capacity = board.get("flash_bytes")
            if capacity and capacity <= NEAR_FLASH_END:
                sizes = board.compiler.section_sizes(board, elf)
                if sizes["text"] + sizes["data"] > capacity:
                    return
            raise NNBuildError(f"'{symbol.name}' ends beyond 64 KB of flash but is read with 16-bit pointers; "
                               "too much other constant data precedes it", path=elf)
