"""Decode a linked Thumb (ARMv6-M / ARMv7E-M) ELF for the builtin-thumb2 analyzer.

The board's `objdump -d` decodes (the same reading of the same program the qemu-system-arm runner
charges; literal pools are `.word` lines under the ELF's $d mapping symbols and are no
instructions), pyelftools gives the symbols and the DWARF line table. An instruction is decoded and costed when
the analysis first reaches it (Listing), its line read then from the line programs of the units
it needs: the work follows what the entry reaches, not the image. Every instruction carries its
(not taken, taken) clocks from the board's `instruction_timing` model in
nnbuild/runners/cortexm_timing.py, or None where the table has no row: the analysis stops if such
an instruction is reachable. Results are cached per ELF path, mtime, size and model.
"""

import bisect
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from nnbuild.compilers import elf as elf_file
from nnbuild.errors import NNBuildError
from nnbuild.runners import cortexm_timing as timing
from nnbuild.wcet.avr_decode import Program as _Program
from nnbuild.wcet.avr_decode import Symbol

ANALYZER = "builtin-thumb2"
_INSN = re.compile(r"^\s*([0-9a-f]+):\t((?:[0-9a-f]{4} ?){1,2}|[0-9a-f]{8})\s*\t(\S+)(?:\t(.*))?$")
_TARGET = re.compile(r"(?:^|[\s,])([0-9a-f]+) <[^>]*>\s*$")


@dataclass
class Insn:
    """One Thumb instruction: `base`/`cond` as cortexm_timing.split_mnemonic gives them, `cost`
    the (not taken, taken) clocks of the board's model (None: no row), `target` a direct branch
    or call's destination, `raw` its encoding (hex halfwords, as objdump prints them)."""

    addr: int
    size: int
    mnem: str
    operands: str
    base: str
    cond: Optional[str]
    raw: str
    cost: Optional[Tuple[int, int]]
    target: Optional[int] = None
    file: Optional[str] = None
    line: Optional[int] = None

    @property
    def end(self):
        return self.addr + self.size

    @property
    def ops(self):
        return tuple(o.strip() for o in re.split(r",(?![^{\[]*[}\]])", self.operands) if o.strip())


class Program(_Program):
    """The decoded text and the code symbols (Thumb bit cleared), as the AVR analyzer's Program."""

    def address_of(self, name):
        for s in self.symbols:
            if s.name == name:
                return s.addr
        raise NNBuildError(f"{ANALYZER}: symbol '{name}' not found", path=self.elf)

    def word(self, addr):
        """The 32-bit little-endian word the image holds at `addr` (a literal or a jump table), or None."""
        words = read_words(self.elf, addr, 1)
        return words[0] if words else None


_MEMORY: Dict[tuple, list] = {}


def read_words(elf, addr, count):
    """`count` little-endian words of the loaded image at `addr` (from the ELF's allocated,
    non-NOBITS sections), or [] when they are not all in one section."""
    data = read_bytes(elf, addr, 4 * count)
    return [int.from_bytes(data[4 * k:4 * k + 4], "little") for k in range(count)] if data is not None else []


def object_at(elf, addr) -> Optional[bytes]:
    """The image bytes of the file-local sized symbols that follow each other from `addr` (the
    static tables a routine's literal pool points to: gcc loads one anchor, newlib ef_exp.c's
    ln2HI, and reaches ln2LO and halF at fixed offsets from it), or None: what a digest of the
    routine's constants pins besides its literal words."""
    local = {s.addr: s.size for s in elf_file.symbols(elf) if s.size and s.kind.islower()}
    end = addr
    while end in local:
        end += local[end]
    return read_bytes(elf, addr, end - addr) if end > addr else None


def read_bytes(elf, addr, size) -> Optional[bytes]:
    """`size` bytes of the loaded image at `addr`, or None when they are not all in one section."""
    st = os.stat(elf)
    key = (os.path.realpath(elf), st.st_mtime_ns, st.st_size)   # a rebuilt ELF is read again
    if key not in _MEMORY:
        from elftools.elf.elffile import ELFFile
        spans = []
        with open(elf, "rb") as stream:
            for section in ELFFile(stream).iter_sections():
                if section["sh_flags"] & 2 and section["sh_type"] != "SHT_NOBITS" and section["sh_size"]:
                    spans.append((section["sh_addr"], section.data()))
        if len(_MEMORY) >= 8:
            _MEMORY.pop(next(iter(_MEMORY)))
        _MEMORY[key] = spans
    for start, data in _MEMORY[key]:
        if start <= addr and addr + size <= start + len(data):
            return bytes(data[addr - start:addr - start + size])
    return None


def parse_listing(text, model):
    """{address: Insn} from `objdump -d` (raw encodings shown) of a Thumb program."""
    return dict(Listing(text, model).items())


def _insn(m, model_cycles):
    """The Insn of one matched listing line."""
    mnem = m.group(3)
    raw = m.group(2).strip()
    body = (m.group(4) or "")
    operands = re.split(r"\s*[@;]", body, maxsplit=1)[0].strip()
    base, cond = timing.split_mnemonic(mnem)
    size = len(raw.replace(" ", "")) // 2
    target = _TARGET.search(operands)
    addr = int(m.group(1), 16)
    return Insn(addr, size, mnem, operands, base, cond, raw, model_cycles(mnem, operands),
                int(target.group(1), 16) if target else None)


class Listing(Mapping):
    """{address: Insn} of an `objdump -d` listing, each Insn decoded and costed when it is first
    asked for: an analysis pays for the functions it reaches, not for the whole image. `lines`
    (address -> (file, line), optional) gives each Insn its source line as it is built."""

    def __init__(self, text, model, lines=None):
        self._cycles = timing.MODELS[model]
        self._lines = lines
        self._matches = {}
        for line in text.splitlines():
            m = _INSN.match(line)
            if not m or m.group(3).startswith(".") or "UNDEFINED" in line:
                continue
            self._matches[int(m.group(1), 16)] = m   # a later line at the same address wins, as before
        self._built = {}
        self._sorted = sorted(self._matches)

    def __getitem__(self, addr):
        insn = self._built.get(addr)
        if insn is None:
            insn = _insn(self._matches[addr], self._cycles)   # KeyError: no instruction there
            if self._lines is not None:
                insn.file, insn.line = self._lines(addr)
            self._built[addr] = insn
        return insn

    def __contains__(self, addr):
        return addr in self._matches

    def __iter__(self):
        return iter(self._matches)

    def __len__(self):
        return len(self._matches)

    def between(self, lo, hi):
        """The instructions in [lo, hi), by address."""
        i, j = bisect.bisect_left(self._sorted, lo), bisect.bisect_left(self._sorted, hi)
        return [self[a] for a in self._sorted[i:j]]


def code_symbols(elf):
    """Function-like symbols of the text (code kinds T/t/W/w), Thumb bit cleared."""
    out = []
    for s in elf_file.symbols(elf):
        if s.kind in "TtWw" and not s.name.startswith("."):
            out.append(Symbol(s.name, s.addr & ~1, s.size, s.kind))
    return out


def insns_between(prog, lo, hi):
    """The program's instructions in [lo, hi), by address (a Listing finds them without a scan)."""
    if isinstance(prog.insns, Listing):
        return prog.insns.between(lo, hi)
    return [prog.insns[a] for a in sorted(a for a in prog.insns if lo <= a < hi)]


class _LazyLines:
    """The ELF's DWARF line rows, read when an instruction first asks for its line, and then only
    those of the compilation units the asked addresses need (elf.line_lookup)."""

    def __init__(self, elf):
        self.elf, self.lookup = elf, None

    def at(self, addr):
        if self.lookup is None:
            self.lookup = elf_file.line_lookup(self.elf)
        return self.lookup.at(addr)


_CACHE: Dict[tuple, Program] = {}


def load(elf, board):
    """Decode `elf` with the board's objdump and cost model (cached)."""
    model = board.get("instruction_timing")
    if model not in timing.MODELS:
        raise NNBuildError(f"{ANALYZER}: board '{board.get('name')}' instruction_timing {model!r} is no "
                           f"Cortex-M model (known: {', '.join(sorted(timing.MODELS))})")
    st = os.stat(elf)
    key = (os.path.realpath(elf), st.st_mtime_ns, st.st_size, model)
    if key in _CACHE:
        return _CACHE[key]
    objdump = board.get("objdump", "arm-none-eabi-objdump")
    try:
        done = subprocess.run([objdump, "-d", str(elf)], capture_output=True, text=True, errors="replace")
    except OSError as error:
        raise NNBuildError(f"{ANALYZER}: {objdump} could not run: {error}", path=elf) from None
    if done.returncode != 0:
        raise NNBuildError(f"{ANALYZER}: {objdump} failed: {done.stderr.strip()[:200]}", path=elf)
    insns = Listing(done.stdout, model, _LazyLines(elf).at)
    syms = code_symbols(elf)
    prog = Program(str(elf), insns, syms)
    names = {}
    for s in syms:
        names.setdefault(s.addr, []).append(s)
    for addr, group in names.items():
        group.sort(key=lambda s: (s.size is None, s.kind not in "TW", s.name.startswith("__") and s.size is None,
                                  s.name))
        prog.names[addr] = [s.name for s in group]
    prog.starts = sorted(names)
    if len(_CACHE) >= 8:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = prog
    return prog
