"""Does this CPU really execute AMX, across context switches? Asked in a child process.

Some of our VMs' CPUs advertise AMX in CPUID and even run AMX instructions, but the kernel
does not keep the tile state when it switches threads: ARCH_GET_XCOMP_SUPP lacks XTILEDATA.
ggml's `sapphirerapids` CPU variant wins the CPU scoring there, configures the tiles once per
thread, and dies a few matrix products later with SIGILL (`tilezero` on tiles that are no
longer configured) in `ggml_backend_amx_mul_mat`. CPUID cannot tell, so a forked child checks
what ggml relies on:
1. the kernel lists XTILEDATA among the features it saves (ARCH_GET_XCOMP_SUPP) and grants it
   (ARCH_REQ_XCOMP_PERM), as ggml_amx_init asks;
2. tiles configured before a sleep (the thread gives up the CPU) are still configured after
   it: tile zero, load, int8 dot product, store and release then run.
The instructions are 40 bytes of machine code in an executable page: no compiler, no extra
file, a few tens of milliseconds. Anything unusual (no fork, no executable memory, not x86-64
Linux) counts as "no AMX": the other variants lose some prompt speed on real Sapphire Rapids
CPUs, never correctness. docs/PORTABILITY.md explains the choice.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import platform
import sys
import time
import warnings

# cfg:  ldtilecfg (%rdi); ret
# use:  tilezero %tmm0; tileloadd (%rsi,%rdx,1),%tmm1; tileloadd (%rsi,%rdx,1),%tmm2;
#       tdpbssd %tmm2,%tmm1,%tmm0; tilestored %tmm0,(%rsi,%rdx,1); tilerelease; ret
# (assembled with GNU as from these mnemonics: the instructions ggml's AMX kernels use)
_CODE = bytes.fromhex("c4e2784907c3c4e27b49c0c4e27b4b0c16c4e27b4b1416c4e26b5ec1c4e27a4b0416c4e27849c0c3")
_USE_OFFSET = 6
_ARCH_GET_XCOMP_SUPP, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA, _SYS_ARCH_PRCTL = 0x1022, 0x1023, 18, 158


def _tile_config() -> ctypes.Array:
    """Palette 1, tiles 0-2 of 16 rows x 64 bytes (the shape ggml's int8 kernels use)."""
    cfg = (ctypes.c_uint8 * 64)()
    cfg[0] = 1
    for tile in range(3):
        cfg[16 + 2 * tile] = 64          # colsb (little-endian uint16)
        cfg[48 + tile] = 16              # rows
    return cfg


def _run_probe() -> None:
    """In the child: the kernel checks, then configure, sleep, compute; exit 0 if all ran."""
    libc = ctypes.CDLL(None, use_errno=True)
    supported = ctypes.c_uint64()
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_GET_XCOMP_SUPP, ctypes.byref(supported)) != 0 \
            or not supported.value >> _XFEATURE_XTILEDATA & 1:
        os._exit(5)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) != 0:
        os._exit(3)
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_CODE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    configure = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr)
    use = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(addr + _USE_OFFSET)
    cfg, buf = _tile_config(), (ctypes.c_int32 * 256)()    # both alive during the calls
    configure(ctypes.addressof(cfg))
    for _ in range(3):
        time.sleep(0.005)            # off the CPU: the kernel must save and restore the tile state
        use(None, ctypes.addressof(buf), 64)
        configure(ctypes.addressof(cfg))
    os._exit(0)


def amx_works() -> bool:
    """True when a child process ran AMX tile instructions and exited normally."""
    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    with warnings.catch_warnings():   # Python 3.12 warns about fork() with threads running:
        warnings.simplefilter("ignore", DeprecationWarning)   # the child only runs the probe
        try:
            pid = os.fork()
        except OSError:
            return False
    if pid == 0:   # pragma: no cover - the child never returns
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            _run_probe()
        finally:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
