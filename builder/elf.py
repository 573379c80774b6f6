"""ELF64 little-endian reader/patcher for splicing bytes in front of PyInstaller's archive.

Used by :mod:`llmpack.builder.splice` (the byte layout is documented in packfile.py) and, for
:func:`section_names`, by the stub build (:mod:`llmpack.builder.stub_bundle`). On Linux,
PyInstaller stores its archive in a non-loaded section named ``pydata`` that ``objcopy`` places
after every loaded segment; only the section header table (``e_shoff``) and sections at or after
the archive (``pydata``, ``.shstrtab``) refer to file offsets there. Inserting ``delta`` bytes at
the archive start therefore means: add ``delta`` to ``e_shoff`` and to ``sh_offset`` of those
sections. Program headers must lie wholly before the insertion point; otherwise we refuse.
"""
from __future__ import annotations

import struct
from typing import Callable

from llmpack.builder.packfile import PackError

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # e_ident .. e_shstrndx (64 bytes)
_PHDR = struct.Struct("<IIQQQQQQ")  # p_type p_flags p_offset p_vaddr p_paddr p_filesz p_memsz p_align
_SHDR = struct.Struct("<IIQQQQIIQQ")  # sh_name sh_type sh_flags sh_addr sh_offset sh_size ...
_SHT_NOBITS = 8


class ElfStub:
    """Validated view of an ELF64 LE stub whose archive occupies [archive_offset, +archive_length)."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, archive_offset: int, archive_length: int):
        def fail(what: str) -> PackError:
            return PackError(f"unsupported runtime stub: {what}; rebuild it with `llmpack stub`")

        ehdr = read(0, _EHDR.size)
        if len(ehdr) < _EHDR.size:
            raise fail("truncated ELF header")
        ident = ehdr[:16]
        if ident[4] != 2 or ident[5] != 1:
            raise fail("only 64-bit little-endian ELF executables can be packed")
        (_, _, _, _, _, self.phoff, self.shoff, _, _, phentsize, phnum,
         shentsize, shnum, shstrndx) = _EHDR.unpack(ehdr)
        self.archive_offset, self.archive_length = archive_offset, archive_length
        insert_at = archive_offset

        for i in range(phnum):
            p_type, _, p_offset, _, _, p_filesz, _, _ = _PHDR.unpack(read(self.phoff + i * phentsize, _PHDR.size))
            if p_filesz and p_offset + p_filesz > insert_at:
                raise fail(f"program header {i} (type {p_type:#x}) covers the archive")
        if self.phoff + phnum * phentsize > insert_at:
            raise fail("program header table lies after the archive")

        self.shentsize = shentsize
        self.sections: list[tuple[int, bytes]] = []  # (header file offset, raw header)
        if self.shoff:
            if shnum == 0:  # extended numbering: the real count is in section 0's sh_size
                shnum = _SHDR.unpack(read(self.shoff, _SHDR.size))[5]
            for i in range(shnum):
                at = self.shoff + i * shentsize
                raw = read(at, _SHDR.size)
                if len(raw) < _SHDR.size:
                    raise fail("truncated section header table")
                self.sections.append((at, raw))
            if archive_offset < self.shoff < archive_offset + archive_length:
                raise fail("section header table overlaps the archive")
            for _, raw in self.sections:
                f = _SHDR.unpack(raw)
                off, sz = f[4], (0 if f[1] == _SHT_NOBITS else f[5])
                if off < insert_at < off + sz and (off, sz) != (archive_offset, archive_length):
                    raise fail("a section straddles the archive start")
        self.names = _names(read, self.sections, shstrndx)

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


def _names(read: Callable[[int, int], bytes], sections: list[tuple[int, bytes]],
           shstrndx: int) -> dict[str, tuple[int, int]]:
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


def section_names(path) -> dict[str, tuple[int, int]]:
    """name -> (sh_offset, sh_size) of an ELF64 little-endian file's sections; {} for any other
    file (another format, 32-bit, truncated headers)."""
    with open(path, "rb") as f:
        def read(offset: int, n: int) -> bytes:
            f.seek(offset)
            return f.read(n)

        ehdr = read(0, _EHDR.size)
        if len(ehdr) < _EHDR.size or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:
            return {}
        *_, shoff, _, _, _, _, shentsize, shnum, shstrndx = _EHDR.unpack(ehdr)
        if not shoff or shentsize < _SHDR.size:
            return {}
        sections = []
        for i in range(shnum):
            raw = read(shoff + i * shentsize, _SHDR.size)
            if len(raw) < _SHDR.size:
                return {}
            sections.append((shoff + i * shentsize, raw))
        return _names(read, sections, shstrndx)
