"""The key an llmpack head (`--rpc`) and its RPC workers share, and the handshake that proves it.

llama.cpp's RPC has no authentication: whoever reaches a worker's port can allocate memory and run
graphs on it. llmpack's builds of ggml-rpc (builder/llama_rpc_patch.py) prove a shared key in both
directions before any command: the worker sends ``llmpkey1`` and a random nonce, the head answers
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
"""
from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
import secrets
import socket
import stat
from pathlib import Path

from llmpack.errors import LlmpackError

KEY_FILE_ENV, KEY_ENV = "LLMPACK_RPC_KEY_FILE", "LLMPACK_RPC_KEY"
MAGIC, NONCE, TAG = b"llmpkey1", 32, 32
MIN_KEY_CHARS = 16
_SET_KEY = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_size_t)


class RpcKeyError(LlmpackError):
    pass


def default_key_path() -> Path:
    from llmpack.paths import data_dir   # lazy: only where a key is looked for

    return data_dir() / "rpc-key"


def _read(path: Path, origin: str) -> bytes:
    try:
        st = path.stat()
        text = path.read_text("utf-8").strip() if st.st_size <= 4096 else ""
    except FileNotFoundError:
        raise RpcKeyError(f"{origin} {path}: no such file; copy the worker's key file here "
                          "(the worker prints where it is)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RpcKeyError(f"cannot read the RPC key from {path} ({getattr(exc, 'strerror', None) or exc})") from None
    if os.name != "nt" and stat.S_IMODE(st.st_mode) & 0o077:
        raise RpcKeyError(f"the RPC key file {path} can be read by other users of this computer; "
                          f"run `chmod 600 {path}` and start again")
    return _checked(text, str(path))


def _checked(text: str, where: str) -> bytes:
    if len(text) < MIN_KEY_CHARS or any(c.isspace() for c in text):
        raise RpcKeyError(f"the RPC key in {where} must be one line of at least {MIN_KEY_CHARS} characters "
                          "without spaces; delete it and let `llmpack rpc-worker` write a new one")
    return text.encode()


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
    """Give ggml-rpc the key (both directions of this process: head and worker)."""
    if not proc_address:
        raise RpcKeyError("this llama.cpp's RPC backend cannot check a key (it is not llmpack's build): "
                          "reinstall llmpack's llama-cpp-python with ./dev setup")
    _SET_KEY(proc_address)(key, len(key))


def tag(key: bytes, label: bytes, worker_nonce: bytes, head_nonce: bytes) -> bytes:
    """HMAC-SHA256(key, label NUL worker nonce head nonce): what each side proves (llama_rpc_patch.py)."""
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
