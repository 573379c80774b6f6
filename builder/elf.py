"""The one ELF reader: ELF64 little-endian headers, sections and DT_NEEDED; and the patcher for
splicing bytes in front of PyInstaller's archive.

Why in-house rather than pyelftools (or binutils' ``readelf``, which builder/wheel_libs.py used
to run): the patcher must know the byte offset of every field it rewrites, which is the same
few ``struct`` layouts the reader needs; the file is standard-library only, so ./dev can run
builder/wheel_libs.py with it before llmpack (or any dependency) is installed; and nothing
outside a Python install is needed (binutils is not on every build machine).

Users: :mod:`llmpack.builder.splice` (:class:`ElfStub`; the byte layout is documented in
packfile.py), the stub build (:func:`section_names`, :mod:`llmpack.builder.stub_bundle`) and
:mod:`llmpack.builder.wheel_libs` (:func:`needed`). On Linux, PyInstaller stores its archive in
a non-loaded section named ``pydata`` that ``objcopy`` places after every loaded segment; only
the section header table (``e_shoff``) and sections at or after the archive (``pydata``,
``.shstrtab``) refer to file offsets there. Inserting ``delta`` bytes at the archive start
therefore means: add ``delta`` to ``e_shoff`` and to ``sh_offset`` of those sections. Program
headers must lie wholly before the insertion point; otherwise we refuse.

Errors are :class:`ElfError` (a ValueError whose str() is one line for the user); splice.py
turns them into PackError. Keeping llmpack's own modules out of the imports is what lets
wheel_libs.py run from the source tree.
"""
from __future__ import annotations

import struct
from typing import Callable

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # e_ident .. e_shstrndx (64 bytes)
_PHDR = struct.Struct("<IIQQQQQQ")  # p_type p_flags p_offset p_vaddr p_paddr p_filesz p_memsz p_align
_SHDR = struct.Struct("<IIQQQQIIQQ")  # sh_name sh_type sh_flags sh_addr sh_offset sh_size sh_link ...
_DYN = struct.Struct("<qQ")           # d_tag d_val
_SHT_DYNAMIC, _SHT_NOBITS = 6, 8
_DT_NULL, _DT_NEEDED = 0, 1

Read = Callable[[int, int], bytes]


class ElfError(ValueError):
    """An ELF file llmpack cannot read or patch; str() is one line that says what to do."""


class _Elf:
    """The ELF header and section headers of an ELF64 little-endian file (no other checks)."""

    def __init__(self, read: Read, fail: Callable[[str], ElfError]) -> None:
        ehdr = read(0, _EHDR.size)
        if len(ehdr) < _EHDR.size or ehdr[:4] != b"\x7fELF":
            raise fail("truncated ELF header" if ehdr[:4] == b"\x7fELF" else "not an ELF file")
        if ehdr[4] != 2 or ehdr[5] != 1:
            raise fail("only 64-bit little-endian ELF executables can be packed")
        (_, _, _, _, _, self.phoff, self.shoff, _, _, self.phentsize, self.phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack(ehdr)
        self.sections: list[tuple[int, bytes]] = []  # (header file offset, raw header)
        if self.shoff:
            if shentsize < _SHDR.size:
                raise fail("section headers of an unknown size")
            if shnum == 0:  # extended numbering: the real count is in section 0's sh_size
                first = read(self.shoff, _SHDR.size)
                if len(first) < _SHDR.size:
                    raise fail("truncated section header table")
                shnum = _SHDR.unpack(first)[5]
            for i in range(shnum):
                at = self.shoff + i * shentsize
                raw = read(at, _SHDR.size)
                if len(raw) < _SHDR.size:
                    raise fail("truncated section header table")
                self.sections.append((at, raw))
        self.names = _names(read, self.sections, shstrndx)


class ElfStub:
    """Validated view of an ELF64 LE stub whose archive occupies [archive_offset, +archive_length)."""

    def __init__(self, read: Read, size: int, archive_offset: int, archive_length: int):
        def fail(what: str) -> ElfError:
            return ElfError(f"unsupported runtime stub: {what}; rebuild it with `llmpack stub`")

        e = _Elf(read, fail)
        self.shoff, self.sections, self.names = e.shoff, e.sections, e.names
        self.archive_offset, self.archive_length = archive_offset, archive_length
        insert_at = archive_offset

        for i in range(e.phnum):
            raw = read(e.phoff + i * e.phentsize, _PHDR.size)
            if len(raw) < _PHDR.size:
                raise fail("truncated program header table")
            p_type, _, p_offset, _, _, p_filesz, _, _ = _PHDR.unpack(raw)
            if p_filesz and p_offset + p_filesz > insert_at:
                raise fail(f"program header {i} (type {p_type:#x}) covers the archive")
        if e.phoff + e.phnum * e.phentsize > insert_at:
            raise fail("program header table lies after the archive")
        if self.sections:
            if archive_offset < self.shoff < archive_offset + archive_length:
                raise fail("section header table overlaps the archive")
            for _, raw in self.sections:
                f = _SHDR.unpack(raw)
                off, sz = f[4], (0 if f[1] == _SHT_NOBITS else f[5])
                if off < insert_at < off + sz and (off, sz) != (archive_offset, archive_length):
                    raise fail("a section straddles the archive start")

    def patches(self, delta: int) -> list[tuple[int, bytes]]:
        """(original file offset, new bytes) edits that keep the file valid after inserting
        `delta` bytes at the archive start."""
        at = self.archive_offset
        out: list[tuple[int, bytes]] = []
        if self.shoff >= at:
            out.append((0x28, struct.pack("<Q", self.shoff + delta)))  # e_shoff
        for hdr_at, raw in self.sections:
            f = list(_SHDR.unpack(raw))
            if f[4] >= at and f[4] != 0:
                f[4] += delta
                out.append((hdr_at, _SHDR.pack(*f)))
        return out


def _names(read: Read, sections: list[tuple[int, bytes]], shstrndx: int) -> dict[str, tuple[int, int]]:
    """name -> (sh_offset, sh_size) of every section, read through the `.shstrtab` section."""
    if not sections or shstrndx >= len(sections):
        return {}
    strtab = _SHDR.unpack(sections[shstrndx][1])
    table = read(strtab[4], strtab[5])
    out = {}
    for _, raw in sections:
        f = _SHDR.unpack(raw)
        end = table.find(b"\0", f[0])
        out[table[f[0]:end].decode("latin-1")] = (f[4], f[5])
    return out


def _file_reader(f) -> Read:
    def read(offset: int, n: int) -> bytes:
        f.seek(offset)
        return f.read(n)
    return read


def section_names(path) -> dict[str, tuple[int, int]]:
    """name -> (sh_offset, sh_size) of an ELF64 little-endian file's sections; {} for any other
    file (another format, 32-bit, truncated headers)."""
    with open(path, "rb") as f:
        try:
            return _Elf(_file_reader(f), ElfError).names
        except ElfError:
            return {}


def needed(path) -> list[str]:
    """The DT_NEEDED names of an ELF64 little-endian shared library or executable, in order
    (what ``readelf -d`` lists as NEEDED); ElfError for any other file."""
    def fail(what: str) -> ElfError:
        return ElfError(f"{path}: {what}; cannot list the libraries it needs")

    with open(path, "rb") as f:
        read = _file_reader(f)
        sections = _Elf(read, fail).sections
        out: list[str] = []
        for _, raw in sections:
            sh = _SHDR.unpack(raw)
            if sh[1] != _SHT_DYNAMIC:
                continue
            if sh[6] >= len(sections):
                raise fail("its .dynamic section links to no string table")
            strtab = _SHDR.unpack(sections[sh[6]][1])
            strings, table = read(strtab[4], strtab[5]), read(sh[4], sh[5])
            for tag, value in _DYN.iter_unpack(table[:len(table) - len(table) % _DYN.size]):
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    out.append(strings[value:strings.find(b"\0", value)].decode("utf-8", "replace"))
        return out
