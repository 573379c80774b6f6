"""llmpack's patches to the vendored llama.cpp (builder/patches/*.patch): each says why, they apply
to the pinned sdist all or nothing, a patch that no longer fits stops the build naming itself, and
the wheel's and the Windows DLLs' cache keys follow the patch files' bytes."""
from __future__ import annotations

import os
import shutil
import tarfile
from pathlib import Path

import pytest

from llmpack.builder import llama_source
from llmpack.builder.llama_source import SourceError, apply_patch_files, parse_patch, patch_files

CACHE = Path(os.environ.get("LLMPACK_CACHE") or Path.home() / ".cache" / "llmpack")
ALL = patch_files() + patch_files(llama_source.PATCHES / "windows")


@pytest.fixture(scope="module")
def vendored(tmp_path_factory) -> Path:
    """The files the patches touch, from the pinned sdist (fetched once, as ./dev does)."""
    sdist = llama_source.fetch_sdist(llama_source.NAME, llama_source.VERSION, llama_source.SHA256, CACHE / "sources")
    wanted = {f"{llama_source.VENDORED}/{fp.path}" for p in ALL for fp in parse_patch(p.read_text(), p.name)}
    dest = tmp_path_factory.mktemp("sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if m.name in wanted], filter="data")
    return dest / llama_source.VENDORED


def test_each_patch_says_why_and_what_upstream_it_answers():
    names = [p.name for p in patch_files()]
    assert names == sorted(names) and len(names) == 7, names
    for patch in ALL:
        header = patch.read_text().split("\n---\n", 1)[0]
        assert "Subject: " in header and "\nWhy: " in header and "\nUpstream: " in header, patch.name


def test_the_patches_apply_to_the_pinned_sources(vendored, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(vendored, tree)
    apply_patch_files(tree, ALL)
    rpc = (tree / "ggml/src/ggml-rpc/ggml-rpc.cpp").read_text()
    assert '#include "hash/sha256/sha256.h"' in rpc and "struct sha256 {" not in rpc   # the vendored SHA-256 only
    assert "llmpack_refuse_reports" in rpc and "recv_data_before" in rpc
    cmake = (tree / "ggml/src/ggml-rpc/CMakeLists.txt").read_text()
    assert "target_link_libraries(ggml-rpc PRIVATE vendor::hash)" in cmake


def test_a_patch_that_no_longer_fits_stops_naming_itself_and_changes_nothing(vendored, tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(vendored, tree)
    target = tree / "ggml/src/ggml-rpc/ggml-rpc.cpp"
    moved = target.read_text().replace("    rpc_server server(backends, cache_dir);", "    rpc_server srv(backends, cache_dir);")
    target.write_text(moved)   # as if upstream had renamed a line the key patch's hunk holds
    before = {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()}
    with pytest.raises(SourceError, match=r"0004-rpc-key-handshake.patch does not apply: hunk \d+ of "
                                          r"ggml/src/ggml-rpc/ggml-rpc.cpp \(line \d+\) matches nowhere"):
        apply_patch_files(tree, patch_files())
    assert {p: p.read_bytes() for p in tree.rglob("*") if p.is_file()} == before   # nothing half-applied


def test_the_cache_keys_follow_the_patch_files_bytes(tmp_path, monkeypatch):
    before = llama_source.key()
    copy = tmp_path / "patches"
    shutil.copytree(llama_source.PATCHES, copy)
    monkeypatch.setattr(llama_source, "PATCHES", copy)
    assert llama_source.key() == before
    first = sorted(copy.glob("*.patch"))[0]
    first.write_bytes(first.read_bytes().replace(b"Why: ", b"Why:  ", 1))
    assert llama_source.key() != before
