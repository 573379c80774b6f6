"""The RPC key: what a key must be (issue 46, finding 1), and the HMAC-SHA256 it is proved with,
as the built library computes it (RFC 4231's test vectors, through `ggml_rpc_hmac_sha256`).

A key is refused, in Python and in C, when it is longer than ggml-rpc takes (it used to be dropped
in C, which left a worker that said "only key holders can connect" open to anyone), or when a
user chose one that carries under 128 bits by its length and alphabet."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
from test_rpc import free_port

from llmpack.runtime.hardware import rpc_key
from llmpack.runtime.hardware.rpc import api, install_key, proc, rpc_reg
from llmpack.runtime.hardware.rpc_key import MAX_KEY_BYTES, RpcKeyError, head_key

GOOD = "0123456789abcdef" * 4   # what `llmpack rpc-worker` makes: 64 hex characters, 256 bits
_HMAC = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p)

# RFC 4231, section 4: (key, data, HMAC-SHA-256); test case 5's is truncated to 128 bits
RFC_4231 = [
    (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
    (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
    (b"\xaa" * 20, b"\xdd" * 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
    (bytes(range(1, 26)), b"\xcd" * 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
    (b"\x0c" * 20, b"Test With Truncation", "a3b6167473100ee06e0c796c2955552b"),
    (b"\xaa" * 131, b"Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
    (b"\xaa" * 131, b"This is a test using a larger than block-size key and a larger than block-size data. The key "
                    b"needs to be hashed before being used by the HMAC algorithm.",
     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
]


@pytest.fixture
def no_key(monkeypatch, tmp_path):
    for var in (rpc_key.KEY_FILE_ENV, rpc_key.KEY_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LLMPACK_DATA_DIR", str(tmp_path))
    return monkeypatch


@pytest.mark.parametrize("case", range(1, 8))
def test_the_built_librarys_hmac_sha256_gives_rfc_4231s_vectors(case):
    key, data, expected = RFC_4231[case - 1]
    g = api()
    address = proc(g, rpc_reg(g), "ggml_rpc_hmac_sha256")
    assert address, "the installed ggml-rpc is not llmpack's build (builder/patches/0004-rpc-key-handshake.patch)"
    out = ctypes.create_string_buffer(32)
    _HMAC(address)(key, len(key), data, len(data), out)
    assert out.raw.hex()[:len(expected)] == expected


@pytest.mark.parametrize("chosen, says", [
    ("0123456789abcdef", "carries at most 64 bits (16 characters from an alphabet of 16)"),
    ("correcthorsebattery", "carries at most 89 bits (19 characters from an alphabet of 26)"),
    ("Tr0ub4dor&3", "carries at most 72 bits (11 characters from an alphabet of 95)"),
])
def test_a_chosen_key_under_128_bits_is_refused_saying_why(no_key, chosen, says):
    no_key.setenv(rpc_key.KEY_ENV, chosen)
    with pytest.raises(RpcKeyError) as err:
        head_key()
    message = str(err.value)
    assert says in message and "needs 128, judged by its length and alphabet" in message, message
    assert "unset $LLMPACK_RPC_KEY and let `llmpack rpc-worker` make one" in message and "\n" not in message


def test_keys_of_128_bits_and_more_are_taken(no_key, tmp_path):
    for chosen in ("0123456789abcdef" * 2, "aZ3" * 8, GOOD):   # 128 bits of hex; 24 of 62 characters: 143
        no_key.setenv(rpc_key.KEY_ENV, chosen)
        assert head_key() == chosen.encode()


def test_a_key_over_the_maximum_is_refused_from_the_environment_and_from_a_file(no_key, tmp_path):
    no_key.setenv(rpc_key.KEY_ENV, "k" * 5000)
    with pytest.raises(RpcKeyError, match=f"is 5000 bytes; llama.cpp's RPC takes at most {MAX_KEY_BYTES}"):
        head_key()
    no_key.delenv(rpc_key.KEY_ENV)
    path = tmp_path / "key"
    path.write_text("k" * 5000 + "\n")
    path.chmod(0o600)
    no_key.setenv(rpc_key.KEY_FILE_ENV, str(path))
    with pytest.raises(RpcKeyError, match=f"{path} holds 5001 bytes; a key is at most {MAX_KEY_BYTES}"):
        head_key()


def test_ggml_rpc_refuses_a_key_over_its_maximum_instead_of_dropping_it():
    g = api()
    reg = rpc_reg(g)
    try:
        with pytest.raises(RpcKeyError, match="llama.cpp's RPC did not take the RPC key \\(5000 bytes"):
            install_key(g, reg, b"k" * 5000)
        with pytest.raises(RpcKeyError, match="did not take the RPC key \\(0 bytes"):
            install_key(g, reg, b"")
    finally:
        install_key(g, reg, GOOD.encode())   # this process's head side holds a usable key again


def test_a_worker_with_a_key_over_the_maximum_does_not_start(no_key, tmp_path):
    """From the environment (finding 1: it printed that only key holders could connect, then
    answered anyone) and, past Python's check, from ggml-rpc's own refusal."""
    port = free_port()
    env = {**os.environ, rpc_key.KEY_ENV: "k" * 5000}
    out = subprocess.run([sys.executable, "-m", "llmpack", "rpc-worker", "--port", str(port)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "lending" not in out.stdout, out.stdout
    assert out.stderr.strip().splitlines()[-1].startswith("llmpack: error: the RPC key in $LLMPACK_RPC_KEY is 5000 bytes")
    bypass = ("from llmpack.runtime.hardware import rpc_key, rpc_worker\n"
              "rpc_key.worker_key = lambda: (b'k' * 5000, 'a test', False)   # past Python's own check\n"
              f"rpc_worker.serve_worker(port={port}, say=lambda line: print('SAID', line))\n")
    out = subprocess.run([sys.executable, "-c", bypass], env=os.environ, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "SAID" not in out.stdout, out.stdout
    assert "RpcKeyError: llama.cpp's RPC did not take the RPC key (5000 bytes" in out.stderr, out.stderr[-2000:]


def test_the_insecure_bind_help_says_what_the_key_does():
    out = subprocess.run([sys.executable, "-m", "llmpack", "rpc-worker", "--help"], capture_output=True, text=True,
                         timeout=60)
    text = " ".join(out.stdout.split())
    assert "no password" not in text
    assert "--insecure-bind" in text and "the key keeps strangers out" in text and "not encrypted" in text, text
