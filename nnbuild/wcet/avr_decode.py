"""Decode a linked AVR ELF into instructions (with DWARF source lines) and text symbols.

`avr-objdump -d` is the instruction decoder (AVR has no other: sizes, operands, branch targets);
the symbols and the DWARF line table are read with pyelftools (nnbuild.compilers.elf), which reads
avr-gcc 5.4's version 2 line programs (avr-readelf 2.26 cannot). Should pyelftools fail on a line
table, the listing is made again with `avr-objdump -dl` and its lines are used, with a note on
stderr. Results are cached per ELF path + mtime + size because every analysed region needs the
same listing.
"""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from nnbuild.compilers import elf as elf_file
from nnbuild.errors import NNBuildError

_INSN = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{2} )+)\s*\t(\S+)(?:\t([^;]*?))?\s*(?:;\s*(.*))?$")
_LABEL = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_LINE = re.compile(r"^(\S.*?):(\d+)(?: \(discriminator \d+\))?$")
_FUNCNAME = re.compile(r"^\S+\(\):$")
_TARGET = re.compile(r"^(0x[0-9a-f]+)")

#: flash addresses below this are code; avr-nm shows data at 0x800000+ and eeprom at 0x810000+
_DATA_BASE = 0x800000


@dataclass
class Insn:
    """One decoded instruction; `addr` and `target` are byte addresses in flash."""

    addr: int
    size: int
    mnem: str
    ops: Tuple[str, ...]
    target: Optional[int] = None
    file: Optional[str] = None
    line: Optional[int] = None

    @property
    def end(self):
        return self.addr + self.size


@dataclass
class Symbol:
    name: str
    addr: int
    size: Optional[int]
    kind: str


@dataclass
class Program:
    """All of an ELF's decoded text: instructions by address and the text symbols."""

    elf: str
    insns: Dict[int, Insn]
    symbols: List[Symbol]
    #: sorted distinct start addresses of function symbols (region intervals are cut there)
    starts: List[int] = field(default_factory=list)
    names: Dict[int, List[str]] = field(default_factory=dict)

    def symbol_at(self, addr):
        """The best name for a symbol starting at `addr`, or None."""
        names = self.names.get(addr)
        return names[0] if names else None

    def describe(self, addr):
        """`name+0xoff (0xaddr)` for error messages and reports."""
        import bisect
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            return f"0x{addr:x}"
        base = self.starts[i]
        name = self.symbol_at(base)
        off = f"+0x{addr - base:x}" if addr != base else ""
        return f"{name}{off} (0x{addr:x})"

    def function_of(self, addr):
        """Name of the symbol whose interval contains `addr`."""
        import bisect
        i = bisect.bisect_right(self.starts, addr) - 1
        return self.symbol_at(self.starts[i]) if i >= 0 else f"0x{addr:x}"

    def interval(self, addr):
        """[start, end) of the function-symbol interval that contains `addr`."""
        import bisect
        i = bisect.bisect_right(self.starts, addr) - 1
        lo = self.starts[i] if i >= 0 else 0
        hi = self.starts[i + 1] if i + 1 < len(self.starts) else 1 << 24
        return lo, hi

    def address_of(self, name):
        for s in self.symbols:
            if s.name == name:
                return s.addr
        raise NNBuildError(f"builtin-avr: symbol '{name}' not found", path=self.elf)


_CACHE: Dict[tuple, Program] = {}


def tool(board, key, default):
    """Path of a binutils tool from the board dict, or NNBuildError naming it when missing."""
    name = (board or {}).get(key, default)
    path = shutil.which(name)
    if not path:
        raise NNBuildError(f"{name}: not found on PATH (install binutils-avr)")
    return path


def _run(argv):
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NNBuildError(f"{os.path.basename(argv[0])} failed: {proc.stderr.strip()[:200]}", path=argv[-1])
    return proc.stdout


def is_code_symbol(symbol):
    """A text symbol of the program: code (T/t), weak code (W/w) below the data base; __stack (weak,
    = RAMEND, e.g. 0x40ff) is a RAM address, not code: code symbols are even."""
    return (symbol.kind in "TtWw" and symbol.addr < _DATA_BASE and not symbol.name.startswith(".")
            and symbol.addr % 2 == 0 and symbol.name != "__stack")


def parse_symbols(text):
    """Text symbols from `avr-nm -n -S` output (data/eeprom/absolute symbols dropped)."""
    syms = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4:
            symbol = Symbol(parts[3], int(parts[0], 16), int(parts[1], 16), parts[2])
        elif len(parts) == 3:
            symbol = Symbol(parts[2], int(parts[0], 16), None, parts[1])
        else:
            continue
        if is_code_symbol(symbol):
            syms.append(symbol)
    return syms


def elf_symbols(elf):
    """Text symbols of `elf`, read with pyelftools, as parse_symbols takes them from avr-nm."""
    return [Symbol(s.name, s.addr, s.size, s.kind) for s in elf_file.symbols(elf) if is_code_symbol(s)]


def _target(mnem, ops, comment):
    """Branch/call target byte address: absolute operand for call/jmp, objdump's comment otherwise."""
    if mnem in ("call", "jmp") and ops:
        return int(ops[0], 16)
    if comment and (mnem in ("rcall", "rjmp") or mnem.startswith("br")):
        m = _TARGET.match(comment)
        if m:
            return int(m.group(1), 16)
    return None


def parse_listing(text):
    """Instructions from `avr-objdump -dl` output, each with its source file and line (if any)."""
    insns = {}
    cur_file = cur_line = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        m = _INSN.match(line)
        if m:
            addr = int(m.group(1), 16)
            size = len(m.group(2).split())
            mnem = m.group(3)
            ops = tuple(o.strip() for o in (m.group(4) or "").split(",") if o.strip())
            insns[addr] = Insn(addr, size, mnem, ops, _target(mnem, ops, m.group(5)), cur_file, cur_line)
            continue
        if _LABEL.match(line):
            cur_file = cur_line = None
            continue
        if _FUNCNAME.match(line):
            continue
        m = _LINE.match(line)
        if m:
            cur_file, cur_line = m.group(1), int(m.group(2))
    return insns


def decode(elf, board=None):
    """{address: Insn} of the .text section: avr-objdump decodes, the DWARF line table (pyelftools)
    gives each instruction its file and line."""
    objdump = tool(board, "objdump", "avr-objdump")
    try:
        lines = elf_file.line_table(elf)
    except NNBuildError as error:
        print(f"builtin-avr: {error}; taking the lines from avr-objdump -dl", file=sys.stderr)
        return parse_listing(_run([objdump, "-dl", "-j", ".text", str(elf)]))
    insns = parse_listing(_run([objdump, "-d", "-j", ".text", str(elf)]))
    for insn in insns.values():
        insn.file, insn.line = lines.at(insn.addr)
    return insns


def load(elf, board=None):
    """Decode `elf` (cached by path, mtime and size)."""
    st = os.stat(elf)
    key = (os.path.realpath(elf), st.st_mtime_ns, st.st_size)
    if key in _CACHE:
        return _CACHE[key]
    syms = elf_symbols(elf)
    prog = Program(str(elf), decode(elf, board), syms)
    names = {}
    for s in syms:
        names.setdefault(s.addr, []).append(s)
    # preferred name at an address: a global symbol with a size, then any global, then local
    for addr, group in names.items():
        group.sort(key=lambda s: (s.size is None, s.kind not in "TW", s.name.startswith("__") and s.size is None, s.name))
        prog.names[addr] = [s.name for s in group]
    prog.starts = sorted(names)
    if len(_CACHE) >= 16:  # bounded: listings of large firmware are big
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = prog
    return prog
