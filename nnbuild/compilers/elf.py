"""Linked ELF files read with pyelftools, for every compiler family: section sizes as binutils'
`size -B` counts them, defined symbols as `nm -S --defined-only` lists them, and the DWARF line
table as `objdump -l` prints it (each instruction address to the file and line of the row that
covers it). One reader instead of parsing the text of three tools per toolchain.

The DWARF of avr-gcc 5.4 under -gdwarf-4 (version 2 line programs in version 4 units, what the
shipped AVR boards compile with) is read by pyelftools as it is. avr-gcc's plain `-g` writes STABS,
which pyelftools does not read: line_table then raises NNBuildError naming the ELF, as it does for
a line program pyelftools cannot decode, and callers that can fall back to the toolchain's
objdump say so (see wcet/avr_decode.py)."""

import bisect
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from nnbuild.errors import NNBuildError


def _elf(stream, path):
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        return ELFFile(stream)
    except ELFError as error:
        raise NNBuildError(f"not a readable ELF file: {error}", path=path)


def section_sizes(path):
    """{"text", "data", "bss"} bytes as Berkeley `size` counts them: allocated sections that are code
    or read-only are text, other allocated sections with contents are data, the rest bss."""
    from elftools.elf.constants import SH_FLAGS
    sizes = {"text": 0, "data": 0, "bss": 0}
    with open(path, "rb") as stream:
        for section in _elf(stream, path).iter_sections():
            flags = section["sh_flags"]
            if not flags & SH_FLAGS.SHF_ALLOC:
                continue
            if flags & SH_FLAGS.SHF_EXECINSTR or not flags & SH_FLAGS.SHF_WRITE:
                sizes["text"] += section["sh_size"]
            elif section["sh_type"] != "SHT_NOBITS":
                sizes["data"] += section["sh_size"]
            else:
                sizes["bss"] += section["sh_size"]
    return sizes


@dataclass(frozen=True)
class ElfSymbol:
    """A defined symbol: `size` is None where the ELF gives none (nm prints no size column), `kind`
    nm's letter (T/t code, W weak, D/d data, B/b bss, R/r read-only, A/a absolute)."""

    name: str
    addr: int
    size: Optional[int]
    kind: str


def _kind(symbol, sections):
    """nm's one-letter class of a defined symbol (binutils' bfd_decode_symclass, defined symbols)."""
    from elftools.elf.constants import SH_FLAGS
    bind, shndx = symbol["st_info"]["bind"], symbol["st_shndx"]
    if shndx == "SHN_COMMON":
        return "C"
    if bind == "STB_WEAK":
        return "V" if symbol["st_info"]["type"] == "STT_OBJECT" else "W"
    if shndx == "SHN_ABS":
        letter = "a"
    else:
        section = sections[shndx]
        flags = section["sh_flags"]
        if flags & SH_FLAGS.SHF_EXECINSTR:
            letter = "t"
        elif section["sh_type"] == "SHT_NOBITS":
            letter = "b"
        elif not flags & SH_FLAGS.SHF_ALLOC:
            letter = "n"
        elif not flags & SH_FLAGS.SHF_WRITE:
            letter = "r"
        else:
            letter = "d"
    return letter.upper() if bind == "STB_GLOBAL" else letter


def _file_key(path):
    """What a per-file cache is keyed on: a rebuilt ELF (new mtime or size) is read again."""
    st = os.stat(path)
    return os.path.realpath(path), st.st_mtime_ns, st.st_size


def _cached(cache, path, read):
    """read(path), kept per file (the analyzers of one process read the same image several times)."""
    key = _file_key(path)
    if key not in cache:
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[key] = read(path)
    return cache[key]


_SYMBOLS: dict = {}
_LINES: dict = {}
_LOOKUPS: dict = {}


def symbols(path) -> List[ElfSymbol]:
    """Defined symbols of the symbol table, by address (section and file symbols left out, as nm does)."""
    return list(_cached(_SYMBOLS, path, _read_symbols))


def _read_symbols(path):
    found = []
    with open(path, "rb") as stream:
        elf = _elf(stream, path)
        table = elf.get_section_by_name(".symtab")
        if table is None:
            return found
        sections = list(elf.iter_sections())
        for symbol in table.iter_symbols():
            if (symbol["st_shndx"] == "SHN_UNDEF" or not symbol.name or is_mapping_symbol(symbol.name)
                    or symbol["st_info"]["type"] in ("STT_SECTION", "STT_FILE")):
                continue
            found.append(ElfSymbol(symbol.name, symbol["st_value"], symbol["st_size"] or None,
                                   _kind(symbol, sections)))
    found.sort(key=lambda s: (s.addr, s.name))
    return found


def is_mapping_symbol(name):
    """ARM's mapping symbols ($a, $t, $d and $x, with an optional .suffix) mark code and data in a
    section; nm leaves them out (they are no names of the program)."""
    return name[:2] in ("$a", "$t", "$d", "$x") and (len(name) == 2 or name[2] == ".")


class LineTable:
    """Address -> (file, line) from the DWARF line programs: the row whose address range
    [row, next row) covers the address; (None, None) outside every row, as `objdump -l` prints no
    line for code compiled without debug information."""

    def __init__(self, rows: List[Tuple[int, int, str, int]]):
        self.rows = sorted(rows)
        self.starts = [row[0] for row in self.rows]

    def at(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.rows[i][1]:
            return self.rows[i][2], self.rows[i][3]
        return None, None

    def __len__(self):
        return len(self.rows)


def line_table(path) -> LineTable:
    """The ELF's DWARF line table (empty without debug information); one table per file and
    process, shared by its callers (read it, do not change it)."""
    return _cached(_LINES, path, _read_line_table)


def _read_line_table(path):
    rows = []
    with open(path, "rb") as stream:
        elf = _elf(stream, path)
        stabs = elf.get_section_by_name(".stab") is not None
        if not elf.has_dwarf_info() and not stabs:
            return LineTable(rows)
        try:
            dwarf = elf.get_dwarf_info()
            for unit in dwarf.iter_CUs():
                program = dwarf.line_program_for_CU(unit)
                if program is not None:
                    rows += _rows(program, _comp_dir(unit))
        except _dwarf_errors() as error:
            raise _unreadable(error, path)
    if not rows and stabs:
        raise NNBuildError("line information is STABS (avr-gcc's plain -g), which pyelftools does not read: "
                           "compile with -gdwarf-4", path=path)
    return LineTable(rows)


def _dwarf_errors():
    """What pyelftools raises on a line program it cannot decode."""
    from elftools.common.exceptions import DWARFError, ELFParseError
    return DWARFError, ELFParseError, KeyError, IndexError, ValueError


def _unreadable(error, path):
    """The one line for a line program pyelftools cannot decode."""
    return NNBuildError(f"DWARF line table not readable by pyelftools: {error}", path=path)


def line_lookup(path):
    """An object whose at(addr) is line_table(path).at(addr), reading only the line programs of the
    compilation units an asked address needs (one per file and process): an analysis that reaches
    a few functions does not decode the line rows of the whole C library."""
    return _cached(_LOOKUPS, path, _LineLookup)


class _LineLookup:
    """LineTable.at over the units read so far. The answer for `addr` is the row with the highest
    start <= addr among all units' rows; every unit's rows lie inside its .debug_aranges ranges, so
    once the units whose ranges hold `addr` give a row starting at b <= addr, only the units whose
    ranges meet [b, addr] can hold a better one. A unit without aranges is read at once; an image
    without .debug_aranges, with STABS, or an address no read unit has a row below, reads them all."""

    def __init__(self, path):
        import io
        self.path, self.table, self.rows = path, None, []
        with open(path, "rb") as stream:
            self.stream = io.BytesIO(stream.read())
        elf = _elf(self.stream, path)
        self.pending = []                            # (begin, end, unit offset) not read yet
        self.read_units = set()
        if not elf.has_dwarf_info() or elf.get_section_by_name(".stab") is not None:
            self._read_all()
            return
        try:
            self.dwarf = elf.get_dwarf_info()
            aranges = self.dwarf.get_aranges()
            if aranges is None:
                self._read_all()
                return
            listed = set()
            for entry in aranges.entries:
                self.pending.append((entry.begin_addr, entry.begin_addr + entry.length, entry.info_offset))
                listed.add(entry.info_offset)
            for unit in self.dwarf.iter_CUs():
                if unit.cu_offset not in listed:
                    self._read_unit(unit.cu_offset)
        except _dwarf_errors() as error:
            raise _unreadable(error, path)

    def _read_all(self):
        self.table, self.pending = line_table(self.path), []

    def _read_unit(self, offset):
        if offset in self.read_units:
            return
        self.read_units.add(offset)
        unit = self.dwarf.get_CU_at(offset)
        program = self.dwarf.line_program_for_CU(unit)
        if program is not None:
            self.rows += _rows(program, _comp_dir(unit))
            self.table = None

    def _read_meeting(self, low, high):
        """Read the pending units whose ranges meet [low, high]."""
        meeting = [p for p in self.pending if p[0] <= high and p[1] > low]
        if meeting:
            self.pending = [p for p in self.pending if not (p[0] <= high and p[1] > low)]
            try:
                for _begin, _end, offset in meeting:
                    self._read_unit(offset)
            except _dwarf_errors() as error:
                raise _unreadable(error, self.path)

    def _current(self):
        if self.table is None:
            self.table = LineTable(self.rows)
        return self.table

    def at(self, addr):
        if self.pending:
            self._read_meeting(addr, addr)
            table = self._current()
            i = bisect.bisect_right(table.starts, addr) - 1
            if i < 0:
                self._read_all()
            else:
                self._read_meeting(table.starts[i], addr)
        return self._current().at(addr)


def _comp_dir(unit):
    attribute = unit.get_top_DIE().attributes.get("DW_AT_comp_dir")
    return attribute.value.decode(errors="replace") if attribute else ""


def _rows(program, comp_dir):
    """(low, high, file, line) per row of one line program; a row ends where the next begins. File
    names are completed as binutils' objdump completes them (its dwarf2.c concat_filename): a
    relative name is joined to its include directory, a relative directory to the unit's comp_dir."""
    files, dirs = program["file_entry"], program["include_directory"]
    first_index = 0 if program["version"] >= 5 else 1
    names = {}
    states = [entry.state for entry in program.get_entries() if entry.state is not None]
    rows = []
    for state, following in zip(states, states[1:]):
        if state.end_sequence:
            continue
        if state.file not in names:
            names[state.file] = _file_name(files[state.file - first_index], dirs, first_index, comp_dir)
        rows.append((state.address, following.address, names[state.file], state.line))
    return rows


def _file_name(entry, dirs, first_index, comp_dir):
    name = entry.name.decode(errors="replace")
    if os.path.isabs(name):
        return name
    index = entry.dir_index - first_index
    folder = dirs[index].decode(errors="replace") if entry.dir_index >= first_index and index < len(dirs) else ""
    if first_index == 1 and entry.dir_index == 0:
        folder = comp_dir
    if folder and not os.path.isabs(folder) and comp_dir:
        folder = os.path.join(comp_dir, folder)
    return os.path.join(folder, name) if folder else name
