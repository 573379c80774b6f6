"""The key an llmpack head (`--rpc`) and its RPC workers share, and the handshake that proves it.

llama.cpp's RPC has no authentication: whoever reaches a worker's port can allocate memory and run
graphs on it. llmpack's builds of ggml-rpc (builder/patches/0004-rpc-key-handshake.patch) prove a
shared key in both directions before any command: the worker sends ``llmpkey1`` and a random nonce, the head answers
its own nonce and HMAC-SHA256(key, "llmpack-rpc head" || both nonces), the worker answers
HMAC(key, "llmpack-rpc worker" || both nonces). A connection that fails is closed by the worker
before it reads a command. This module finds the key, hands it to ggml
(``ggml_backend_rpc_set_key``), and does the same handshake in Python for the head's probe.

Where the key comes from, first found wins (never the command line, which every user of the
computer can read): ``--rpc-key-file PATH`` (the CLI puts it in $LLMPACK_RPC_KEY_FILE),
$LLMPACK_RPC_KEY_FILE, $LLMPACK_RPC_KEY (the key itself), the default file ``rpc-key`` in llmpack's
data folder. A worker that finds none creates that default file (0600, 32 random bytes as hex) and
prints its path: on one computer the head then reads the same file with no flag at all; for two,
copy it to the head's computer (`scp`) and pass `--rpc-key-file`.

What a key must be: one line without spaces, at most 4,096 bytes (what ggml-rpc takes: a longer
one is refused here and there, never dropped), and at least 128 bits judged by its length and its
alphabet (``key_bits``: 32 hex characters, 22 letters and digits), since one sniffed handshake lets
anyone guess the key offline. The key a worker makes is 64 hex characters: 256 bits.
"""
from __future__ import annotations

import ctypes
import hashlib
import hmac
import math
import os
import secrets
import socket
import stat
from pathlib import Path

from llmpack.errors import LlmpackError

KEY_FILE_ENV, KEY_ENV = "LLMPACK_RPC_KEY_FILE", "LLMPACK_RPC_KEY"
MAGIC, NONCE, TAG = b"llmpkey1", 32, 32
MAX_KEY_BYTES = 4096   # ggml-rpc's limit (0004-rpc-key-handshake.patch: MAX_KEY)
MIN_KEY_BITS = 128
_SET_KEY = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_char_p, ctypes.c_size_t)


class RpcKeyError(LlmpackError):
    pass


def default_key_path() -> Path:
    from llmpack.paths import data_dir   # lazy: only where a key is looked for

    return data_dir() / "rpc-key"


def _read(path: Path, origin: str) -> bytes:
    try:
        st = path.stat()
        if st.st_size > MAX_KEY_BYTES + 2:   # the key and a line end
            raise RpcKeyError(f"the RPC key file {path} holds {st.st_size} bytes; a key is at most {MAX_KEY_BYTES}: "
                              "delete it and let `llmpack rpc-worker` make one (256 bits)")
        text = path.read_text("utf-8").strip()
    except FileNotFoundError:
        raise RpcKeyError(f"{origin} {path}: no such file; copy the worker's key file here "
                          "(the worker prints where it is)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RpcKeyError(f"cannot read the RPC key from {path} ({getattr(exc, 'strerror', None) or exc})") from None
    if os.name != "nt" and stat.S_IMODE(st.st_mode) & 0o077:
        raise RpcKeyError(f"the RPC key file {path} can be read by other users of this computer; "
                          f"run `chmod 600 {path}` and start again")
    return _checked(text, str(path))


def key_bits(text: str) -> tuple[float, int]:
    """(bits, alphabet size): what a key carries judged by its length and its alphabet, the
    smallest usual one that holds all its characters (digits 10, hex 16, otherwise the sum of the
    classes it uses: lower 26, upper 26, digits 10, anything else 33). An upper bound, reached by
    a random key; a chosen phrase carries less."""
    if text and all(c in "0123456789" for c in text):
        size = 10
    elif text and all(c in "0123456789abcdef" for c in text.lower()):
        size = 16
    else:
        size = sum(n for test, n in ((str.islower, 26), (str.isupper, 26), (str.isdigit, 10)) if any(map(test, text)))
        size += 33 if any(not (c.isascii() and c.isalnum()) for c in text) else 0
    return len(text) * math.log2(max(size, 2)), size


def _checked(text: str, where: str) -> bytes:
    fix = (f"unset ${KEY_ENV}" if where == f"${KEY_ENV}" else "delete it") + \
        " and let `llmpack rpc-worker` make one (256 bits)"
    if not text or any(c.isspace() for c in text):
        raise RpcKeyError(f"the RPC key in {where} must be one line without spaces; {fix}")
    key = text.encode()
    if len(key) > MAX_KEY_BYTES:
        raise RpcKeyError(f"the RPC key in {where} is {len(key)} bytes; llama.cpp's RPC takes at most "
                          f"{MAX_KEY_BYTES}: {fix}")
    bits, size = key_bits(text)
    if bits < MIN_KEY_BITS:
        raise RpcKeyError(f"the RPC key in {where} carries at most {bits:.0f} bits ({len(text)} characters from an "
                          f"alphabet of {size}); a key needs {MIN_KEY_BITS}, judged by its length and alphabet "
                          f"(e.g. 32 random hex characters): {fix}, or choose a longer random one")
    return key


def find_key() -> tuple[bytes, str] | None:
    """(key, where it came from), or None when there is none anywhere."""
    if path := os.environ.get(KEY_FILE_ENV, "").strip():
        return _read(Path(path), "--rpc-key-file"), path
    if text := os.environ.get(KEY_ENV, "").strip():
        return _checked(text, f"${KEY_ENV}"), f"${KEY_ENV}"
    path = default_key_path()
    return (_read(path, "the key file"), str(path)) if path.is_file() else None


def head_key() -> bytes:
    """The key a head proves to its workers; one line saying where to get it when there is none."""
    found = find_key()
    if found is None:
        raise RpcKeyError(f"no RPC key here: `llmpack rpc-worker` prints where its key file is; on the same "
                          f"computer it is {default_key_path()} and found without a flag; from another computer, "
                          "copy it here and pass --rpc-key-file PATH")
    return found[0]


def worker_key() -> tuple[bytes, str, bool]:
    """(key, where, created): the key a worker asks for, created in the data folder if there is none."""
    found = find_key()
    if found is not None:
        return found[0], found[1], False
    from llmpack.paths import private_file, private_folder   # lazy: only for a worker

    path = default_key_path()
    private_folder(path.parent)
    private_file(path)
    path.write_text(secrets.token_hex(32) + "\n", "utf-8")
    return _read(path, "the key file"), str(path), True


def install(proc_address: int, key: bytes) -> None:
    """Give ggml-rpc the key (both directions of this process: head and worker). ggml-rpc refuses
    a key it cannot use (empty, over MAX_KEY_BYTES) and then refuses every connection; here that
    is an RpcKeyError, so a worker whose key did not take never starts."""
    if not proc_address:
        raise RpcKeyError("this llama.cpp's RPC backend cannot check a key (it is not llmpack's build): "
                          "reinstall llmpack's llama-cpp-python with ./dev setup")
    if not _SET_KEY(proc_address)(key, len(key)):
        raise RpcKeyError(f"llama.cpp's RPC did not take the RPC key ({len(key)} bytes; it takes 1 to "
                          f"{MAX_KEY_BYTES}): nothing would connect with it; use the key `llmpack rpc-worker` makes")


def tag(key: bytes, label: bytes, worker_nonce: bytes, head_nonce: bytes) -> bytes:
    """HMAC-SHA256(key, label NUL worker nonce head nonce): what each side proves (0004-rpc-key-handshake.patch)."""
    return hmac.new(key, label + b"\0" + worker_nonce + head_nonce, hashlib.sha256).digest()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """`n` bytes, or fewer when the peer closes first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def prove(sock: socket.socket, key: bytes, endpoint: str) -> None:
    """The head's side of the handshake on a connected socket; RpcKeyError naming the worker if it fails."""
    challenge = recv_exactly(sock, len(MAGIC) + NONCE)
    if len(challenge) < len(MAGIC) or challenge[:len(MAGIC)] != MAGIC:
        raise RpcKeyError(f"the RPC worker at {endpoint} asks no key: it is not an llmpack worker of this "
                          "version (a stock llama.cpp rpc-server is refused: it lets anyone in)")
    if len(challenge) != len(MAGIC) + NONCE:
        raise RpcKeyError(f"the RPC worker at {endpoint} closed the connection during the key handshake")
    worker_nonce, head_nonce = challenge[len(MAGIC):], secrets.token_bytes(NONCE)
    sock.sendall(head_nonce + tag(key, b"llmpack-rpc head", worker_nonce, head_nonce))
    proof = recv_exactly(sock, TAG)
    if not proof:
        raise RpcKeyError(f"the RPC worker at {endpoint} refused this computer's RPC key: give the head the "
                          "worker's key file (--rpc-key-file PATH; the worker prints where it is)")
    if not hmac.compare_digest(proof, tag(key, b"llmpack-rpc worker", worker_nonce, head_nonce)):
        raise RpcKeyError(f"the RPC worker at {endpoint} could not prove the key: it is not the worker you "
                          "started; check the address")
