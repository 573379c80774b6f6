"""Authenticode-signing a finished Windows program (`llmpack build --sign-pfx FILE`).

An Authenticode signature lives at the end of the PE file and covers every byte before it; a
byte appended afterwards breaks it ("Ignoring PE signature not at the end of the file"). So
the *finished* program is signed, model included, as the last step of the build, never the
stub. The manifest trailer stays readable (packfile finds it just before the certificate
table), and the bootloader still finds its archive (it scans back from the end of the file).

The certificate's password comes from ``LLMPACK_SIGN_PASSWORD`` and reaches osslsigncode on its
standard input, never on a command line, where other users of the computer could read it.
``LLMPACK_SIGN_TIMESTAMP=URL`` adds an RFC 3161 timestamp (it needs the network), which keeps
the signature valid after the certificate expires. What Windows does with signed and unsigned
files is in docs/PORTABILITY.md.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from llmpack.errors import LlmpackError

PASSWORD_ENV = "LLMPACK_SIGN_PASSWORD"
TIMESTAMP_ENV = "LLMPACK_SIGN_TIMESTAMP"


class SignError(LlmpackError):
    """The program cannot be signed; the message says what to change."""


def check_signing(pfx: Path) -> None:
    """Everything signing needs is here (checked before the build, not after)."""
    if shutil.which("osslsigncode") is None:
        raise SignError("--sign-pfx needs osslsigncode: sudo apt-get install osslsigncode")
    if not pfx.is_file():
        raise SignError(f"--sign-pfx {pfx}: no such file; pass a PKCS#12 (.pfx/.p12) code-signing certificate")
    if PASSWORD_ENV not in os.environ:
        raise SignError(f"--sign-pfx needs the certificate's password in {PASSWORD_ENV} "
                        "(set it to an empty string for a certificate without one)")


def sign_exe(path: Path, pfx: Path, *, name: str | None = None) -> None:
    """Sign `path` in place (SHA-256 Authenticode, with `name` as the description Windows shows)."""
    check_signing(pfx)
    tmp = path.with_name(f".{path.name}.signing-{os.getpid()}")
    cmd = ["osslsigncode", "sign", "-pkcs12", str(pfx), "-readpass", "-", "-h", "sha256", "-in", str(path),
           "-out", str(tmp)]
    if name:
        cmd += ["-n", name]
    if os.environ.get(TIMESTAMP_ENV):
        cmd += ["-ts", os.environ[TIMESTAMP_ENV]]
    try:
        proc = subprocess.run(cmd, input=os.environ[PASSWORD_ENV], capture_output=True, text=True)
        if proc.returncode != 0 or not tmp.is_file():
            lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
            raise SignError(f"osslsigncode could not sign {path.name}: {lines[-1] if lines else 'no reason given'}; "
                            f"check the certificate and {PASSWORD_ENV}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
