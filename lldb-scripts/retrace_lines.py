"""Line tables as GDB 13 reads them, for the shim's reverse stepping.

GDB's reverse-next and reverse-step stop where its line table says a
statement starts (`is_stmt`), and its table is not LLDB's: GDB keeps the
rows that are not statements, merges nothing, keeps one table per source
file, and drops some rows while it reads the DWARF line program. LLDB's SB
API has no `is_stmt`. So the program's `.debug_line` is read here, from the
module's file (or its separate debug file), the way GDB's DWARF reader
records it (`lnp_state_machine::record_line`, `buildsym_compunit::
record_line`), and `find_pc_line` answers as GDB's `find_pc_sect_line`
does: the row an address is in, where it starts and ends, its line and
whether it starts a statement.

Plain Python (no LLDB here): ELF sections (zlib-compressed ones too) and
DWARF 2-5 line programs.
"""

import bisect
import os
import struct
import zlib

# DWARF forms a version-5 line table header uses.
DW_FORM_block = 0x09
DW_FORM_block1 = 0x0A
DW_FORM_block2 = 0x03
DW_FORM_block4 = 0x04
DW_FORM_data1 = 0x0B
DW_FORM_data2 = 0x05
DW_FORM_data4 = 0x06
DW_FORM_data8 = 0x07
DW_FORM_data16 = 0x1E
DW_FORM_line_strp = 0x1F
DW_FORM_sdata = 0x0D
DW_FORM_strp = 0x0E
DW_FORM_string = 0x08
DW_FORM_strx = 0x1A
DW_FORM_udata = 0x0F

DW_LNCT_path = 1
DW_LNCT_directory_index = 2

SHF_COMPRESSED = 0x800


class Row:
    """One row of a source file's table: address, line (0: an end of a
    sequence), whether it starts a statement."""

    __slots__ = ("pc", "line", "is_stmt")

    def __init__(self, pc, line, is_stmt):
        self.pc, self.line, self.is_stmt = pc, line, is_stmt

    def __repr__(self):
        return "Row(%#x, %d%s)" % (self.pc, self.line, "" if self.is_stmt else ", not stmt")


class Line:
    """What `find_pc_line` answers: the row's start `pc` and `end`, its
    `file` (a path) and `line` (0: none), and whether it starts a
    statement."""

    __slots__ = ("pc", "end", "file", "line", "is_stmt")

    def __init__(self, pc, end, file, line, is_stmt):
        self.pc, self.end, self.file, self.line, self.is_stmt = pc, end, file, line, is_stmt

    def __repr__(self):
        return "Line(%#x-%#x %s:%d%s)" % (self.pc, self.end or 0, os.path.basename(self.file or "?"), self.line, "" if self.is_stmt else " not stmt")


def elf_sections(data):
    """{name: bytes} of an ELF64 little-endian file's sections, compressed
    ones inflated."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return {}
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(shnum):
        name, kind, flags, _, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        headers.append((name, kind, flags, offset, size))
    if shstrndx >= len(headers):
        return {}
    names = data[headers[shstrndx][3]:headers[shstrndx][3] + headers[shstrndx][4]]
    sections = {}
    for name, kind, flags, offset, size in headers:
        if kind == 8:  # SHT_NOBITS
            continue
        text = names[name:names.index(b"\0", name)].decode("latin-1")
        body = data[offset:offset + size]
        if flags & SHF_COMPRESSED and len(body) >= 24:
            ch_type, = struct.unpack_from("<I", body, 0)
            if ch_type == 1:  # ELFCOMPRESS_ZLIB
                try:
                    body = zlib.decompress(body[24:])
                except zlib.error:
                    continue
        sections[text] = body
    return sections


class Reader:
    """A cursor over bytes."""

    def __init__(self, data, at=0):
        self.data, self.at = data, at

    def u(self, size):
        if self.at + size > len(self.data):
            raise IndexError("past the end of the section")
        value = int.from_bytes(self.data[self.at:self.at + size], "little")
        self.at += size
        return value

    def s8(self):
        value, = struct.unpack_from("<b", self.data, self.at)
        self.at += 1
        return value

    def uleb(self):
        value = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    def sleb(self):
        value = shift = 0
        while True:
            byte = self.data[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if byte & 0x40:
                    value -= 1 << shift
                return value

    def cstring(self):
        end = self.data.index(b"\0", self.at)
        text = self.data[self.at:end].decode("utf-8", "replace")
        self.at = end + 1
        return text


def string_at(section, offset):
    if section is None or offset >= len(section):
        return ""
    end = section.find(b"\0", offset)
    return section[offset:end if end >= 0 else len(section)].decode("utf-8", "replace")


def read_form(reader, form, offset_size, strings, line_strings):
    """One attribute value of a version-5 entry format."""
    if form == DW_FORM_string:
        return reader.cstring()
    if form == DW_FORM_line_strp:
        return string_at(line_strings, reader.u(offset_size))
    if form == DW_FORM_strp:
        return string_at(strings, reader.u(offset_size))
    if form == DW_FORM_udata:
        return reader.uleb()
    if form == DW_FORM_sdata:
        return reader.sleb()
    sizes = {DW_FORM_data1: 1, DW_FORM_data2: 2, DW_FORM_data4: 4, DW_FORM_data8: 8, DW_FORM_data16: 16, DW_FORM_strx: None}
    if form in sizes and sizes[form]:
        return reader.u(sizes[form])
    if form in (DW_FORM_block, DW_FORM_block1, DW_FORM_block2, DW_FORM_block4):
        length = {DW_FORM_block: None, DW_FORM_block1: 1, DW_FORM_block2: 2, DW_FORM_block4: 4}[form]
        n = reader.uleb() if length is None else reader.u(length)
        reader.at += n
        return None
    raise ValueError("unsupported form %#x in a line table header" % form)


def entries(reader, offset_size, strings, line_strings):
    """A version-5 directory or file name list."""
    formats = [(reader.uleb(), reader.uleb()) for _ in range(reader.u(1))]
    listed = []
    for _ in range(reader.uleb()):
        entry = {}
        for content, form in formats:
            entry[content] = read_form(reader, form, offset_size, strings, line_strings)
        listed.append(entry)
    return listed


class Unit:
    """One line program's tables: {file path: [Row]} sorted as GDB sorts
    them, the files in GDB's order of its symtabs (the unit's primary file
    first), and the address ranges its sequences cover."""

    def __init__(self):
        self.tables = {}
        self.order = []
        self.sequences = []


def decode_unit(data, at, strings, line_strings):
    """The unit starting at `at` of `.debug_line`; returns it and the next
    unit's offset."""
    reader = Reader(data, at)
    length = reader.u(4)
    offset_size = 4
    if length == 0xFFFFFFFF:
        length = reader.u(8)
        offset_size = 8
    end = reader.at + length
    if end > len(data):
        raise ValueError("a unit longer than the section")
    version = reader.u(2)
    if version >= 5:
        reader.u(1)  # address_size
        reader.u(1)  # segment_selector_size
    header_length = reader.u(offset_size)
    program = reader.at + header_length
    min_length = reader.u(1)
    if version >= 4:
        reader.u(1)  # maximum_operations_per_instruction
    default_is_stmt = reader.u(1) != 0
    line_base = reader.s8()
    line_range = reader.u(1)
    opcode_base = reader.u(1)
    lengths = [reader.u(1) for _ in range(opcode_base - 1)]
    files = {}
    if version >= 5:
        directories = [d.get(DW_LNCT_path, "") for d in entries(reader, offset_size, strings, line_strings)]
        # Directory 0 is the compilation's; the others are relative to it.
        directories = [d if i == 0 or os.path.isabs(d) else os.path.join(directories[0], d) for i, d in enumerate(directories)]
        for index, entry in enumerate(entries(reader, offset_size, strings, line_strings)):
            name = entry.get(DW_LNCT_path, "")
            directory = entry.get(DW_LNCT_directory_index, 0) or 0
            base = directories[directory] if directory < len(directories) else ""
            files[index] = name if os.path.isabs(name) else os.path.join(base, name)
        primary = files.get(0) or files.get(1)
    else:
        directories = [""]
        while reader.data[reader.at] != 0:
            directories.append(reader.cstring())
        reader.at += 1
        index = 1
        while reader.data[reader.at] != 0:
            name = reader.cstring()
            directory = reader.uleb()
            reader.uleb()
            reader.uleb()
            base = directories[directory] if directory < len(directories) else ""
            files[index] = name if os.path.isabs(name) else os.path.join(base, name)
            index += 1
        primary = files.get(1)
    unit = Unit()
    vectors = {}
    first_use = []

    def vector(index):
        path = files.get(index, "?%d" % index)
        if path not in vectors:
            vectors[path] = []
            first_use.append(path)
        return vectors[path]

    def record(rows, line, pc, is_stmt):
        # buildsym_compunit::record_line: an end marker drops the rows at
        # its address, and one ending an empty sequence is not kept.
        if line == 0:
            last_line = None
            while rows:
                last_line = rows[-1].line
                if rows[-1].pc != pc:
                    break
                rows.pop()
            if last_line is None or last_line == 0:
                return
        rows.append(Row(pc, line, is_stmt))

    # lnp_state_machine.
    reader.at = program
    state = {}

    def reset():
        # (The last file carries over from the sequence before, as GDB's
        # current subfile does.)
        state.update(address=0, file=1, line=1, is_stmt=default_is_stmt, discriminator=0, nonzero_disc=False,
                     last_line=0, last_address=0, stmt_at_address=False)

    state["last_file"] = None
    sequence_start = None
    reset()
    vector(1 if version < 5 else state["file"])

    def record_line(end_sequence):
        file_changed = state["last_file"] != state["file"]
        ignore = (file_changed and not end_sequence and state["last_address"] == state["address"] and not state["is_stmt"]
                  and state["stmt_at_address"]) or (not end_sequence and state["line"] == 0)
        if (file_changed and not ignore) or end_sequence:
            if state["last_file"] is not None:
                record(vector(state["last_file"]), 0, state["address"], True)
        if not end_sequence and not ignore:
            if file_changed or state["line"] != state["last_line"] or not state["nonzero_disc"]:
                record(vector(state["file"]), state["line"], state["address"], state["is_stmt"])
            state["last_file"] = state["file"]
            state["last_line"] = state["line"]
        if state["last_address"] != state["address"]:
            state["stmt_at_address"] = False
            state["last_address"] = state["address"]
        state["stmt_at_address"] |= state["is_stmt"]

    def advance_line(delta):
        state["line"] += delta
        if delta != 0:
            state["nonzero_disc"] = state["discriminator"] != 0

    while reader.at < end:
        opcode = reader.u(1)
        if opcode >= opcode_base:
            adjusted = opcode - opcode_base
            state["address"] += (adjusted // line_range) * min_length
            advance_line(line_base + adjusted % line_range)
            record_line(False)
            state["discriminator"] = 0
        elif opcode == 0:
            size = reader.uleb()
            after = reader.at + size
            extended = reader.u(1) if size else 0
            if extended == 1:  # end_sequence
                record_line(True)
                if sequence_start is not None and sequence_start < state["address"]:
                    unit.sequences.append((sequence_start, state["address"]))
                sequence_start = None
                reset()
                vector(state["file"])
            elif extended == 2:  # set_address
                state["address"] = reader.u(size - 1)
                if sequence_start is None:
                    sequence_start = state["address"]
            elif extended == 4:  # set_discriminator
                state["discriminator"] = reader.uleb()
                state["nonzero_disc"] |= state["discriminator"] != 0
            reader.at = after
        elif opcode == 1:  # copy
            record_line(False)
            state["discriminator"] = 0
        elif opcode == 2:  # advance_pc
            state["address"] += reader.uleb() * min_length
        elif opcode == 3:  # advance_line
            advance_line(reader.sleb())
        elif opcode == 4:  # set_file
            state["file"] = reader.uleb()
            vector(state["file"])
        elif opcode == 5:  # set_column
            reader.uleb()
        elif opcode == 6:  # negate_stmt
            state["is_stmt"] = not state["is_stmt"]
        elif opcode == 7:  # set_basic_block
            pass
        elif opcode == 8:  # const_add_pc
            state["address"] += ((255 - opcode_base) // line_range) * min_length
        elif opcode == 9:  # fixed_advance_pc
            state["address"] += reader.u(2)
        else:
            for _ in range(lengths[opcode - 1]):
                reader.uleb()
    for path, rows in vectors.items():
        # End markers first among rows at one address; otherwise stable.
        ordered = sorted(enumerate(rows), key=lambda ir: (ir[1].pc, 0 if ir[1].line == 0 else 1, ir[0]))
        unit.tables[path] = [row for _, row in ordered]
    # GDB's symtabs in its order (`maint info line-table`): the unit's own
    # file first, then the others newest first. Where two files have rows
    # at one address, the first in this order names it.
    unit.order = [p for p in [primary] if p in unit.tables] + [p for p in reversed(first_use) if p != primary and p in unit.tables]
    return unit, end


class LineTable:
    """A module's line tables, GDB's way, at file addresses."""

    def __init__(self, path):
        self.units = []
        self.ranges = []  # (low, high, unit index) of every sequence, sorted
        self.lows = []
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return
        try:
            sections = elf_sections(data)
        except (ValueError, IndexError, struct.error):
            return  # not an ELF file this reads: no lines
        debug_line = sections.get(".debug_line")
        if not debug_line:
            return
        strings, line_strings = sections.get(".debug_str"), sections.get(".debug_line_str")
        at = 0
        while at + 4 <= len(debug_line):
            try:
                unit, at = decode_unit(debug_line, at, strings, line_strings)
            except (ValueError, IndexError, TypeError, KeyError, struct.error):
                break  # a damaged unit: the units before it are kept
            for low, high in unit.sequences:
                self.ranges.append((low, high, len(self.units)))
            self.units.append(unit)
        self.ranges.sort()
        self.lows = [low for low, _, _ in self.ranges]

    def __bool__(self):
        return bool(self.units)

    def unit_for(self, pc):
        """The unit one of whose sequences covers `pc`."""
        # (Sequences do not overlap but where units repeat code: a few
        # earlier ones are looked at.)
        i = bisect.bisect_right(self.lows, pc)
        for low, high, index in reversed(self.ranges[max(0, i - 8):i]):
            if low <= pc < high:
                return self.units[index]
        return None

    def find_pc_line(self, pc):
        """GDB's `find_pc_sect_line(pc, notcurrent=0)` within the unit
        covering `pc`; a `Line` with line 0 where there is none."""
        unit = self.unit_for(pc)
        if unit is None:
            return Line(pc, None, None, 0, False)
        best = best_path = None
        best_end = 0
        alt = None
        for path in unit.order:
            rows = unit.tables[path]
            if not rows:
                continue
            keys = [row.pc for row in rows]
            item = bisect.bisect_right(keys, pc)
            if item == 0:
                if alt is None or rows[0].pc < alt:
                    alt = rows[0].pc
                continue
            prev = item - 1
            # (An end marker, line 0, is never the best: a file whose row
            # there is one leaves the address to the others.)
            if rows[prev].line != 0 and (best is None or rows[prev].pc > best.pc):
                chosen = prev
                if not rows[chosen].is_stmt:
                    tmp = chosen
                    while tmp > 0 and rows[tmp - 1].pc == rows[tmp].pc and rows[tmp - 1].line != 0 and not rows[tmp].is_stmt:
                        tmp -= 1
                    if rows[tmp].is_stmt:
                        chosen = tmp
                best, best_path = rows[chosen], path
                if best_end <= best.pc:
                    best_end = 0
            if best is not None and item < len(rows) and rows[item].pc > best.pc and (best_end == 0 or best_end > rows[item].pc):
                best_end = rows[item].pc
        if best is None or best.line == 0:
            return Line(pc, None, None, 0, False)
        end = best_end if best_end and (alt is None or best_end < alt) else alt
        return Line(best.pc, end, best_path, best.line, best.is_stmt)


TABLES = {}


def table_for(path):
    """The (cached) line table of the module file at `path`."""
    if path not in TABLES:
        TABLES[path] = LineTable(path)
    return TABLES[path]


def same_file(a, b):
    """Whether two paths name one source file: equal, or one relative and
    the other ending with it (a version-4 table's paths are relative to a
    compilation directory it does not name)."""
    if a is None or b is None:
        return a is b
    a, b = os.path.normpath(a), os.path.normpath(b)
    return a == b or (not os.path.isabs(a) and b.endswith(os.sep + a)) or (not os.path.isabs(b) and a.endswith(os.sep + b))


def same_line(a, b):
    """Whether two (file, line) pairs are one source line."""
    return a[1] == b[1] and same_file(a[0], b[0])
