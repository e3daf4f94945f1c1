"""Line tables as GDB 13 reads them, for the shim's reverse stepping.

GDB's reverse-next and reverse-step stop where its line table says a
statement starts (`is_stmt`), and its table is not LLDB's: GDB keeps the
rows that are not statements, merges nothing, keeps one table per source
file, and drops some rows while it reads the DWARF line program. LLDB's SB
API has no `is_stmt`. The tables are read by the decoder
(`retrace_decoder::symbols::gdb_lines`, through the native bridge), the
way GDB's DWARF reader records them, and `find_pc_line` answers as GDB's
`find_pc_sect_line` does: the row an address is in, where it starts and
ends, its line and whether it starts a statement.
"""

import os

from retrace_shim.native import native


class Line:
    """What `find_pc_line` answers: the row's start `pc` and `end`, its
    `file` (a path) and `line` (0: none), and whether it starts a
    statement."""

    __slots__ = ("pc", "end", "file", "line", "is_stmt")

    def __init__(self, pc, end, file, line, is_stmt):
        self.pc, self.end, self.file, self.line, self.is_stmt = pc, end, file, line, is_stmt

    def __repr__(self):
        return "Line(%#x-%#x %s:%d%s)" % (self.pc, self.end or 0, os.path.basename(self.file or "?"), self.line, "" if self.is_stmt else " not stmt")


class LineTable:
    """A module's line tables, GDB's way, at file addresses."""

    def __init__(self, path):
        self.native = native().LineTable(path)

    def __bool__(self):
        return not self.native.is_empty()

    def find_pc_line(self, pc):
        """GDB's `find_pc_sect_line(pc, notcurrent=0)`; a `Line` with line
        0 where there is none."""
        return Line(*self.native.find_pc_line(pc))


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
