"""The Windows side of the sandbox (pool.py): a job object, and the worker's
committed memory as the parent sees it.

A job object with JOB_OBJECT_LIMIT_PROCESS_MEMORY makes a worker's allocations past the cap fail
on Windows (Python raises MemoryError, the worker says so and ends), and KILL_ON_JOB_CLOSE ends
the worker with the server. Under Wine 8 the job is accepted (SetInformationJobObject succeeds)
but only KILL_ON_JOB_CLOSE is enforced: a worker capped at 512 MB allocated 3 GB and lived, and
QueryInformationJobObject reads the limit back as 0. So the parent also watches the worker's
committed memory (`committed`, PagefileUsage: the commit charge on Windows; under Wine the
process's private memory from /proc) while it reads a file, and kills it past the cap: the
nearest equivalent that holds under Wine (docs/PORTABILITY.md), overshooting by at most what the
worker allocates in one POLL_S.
"""
from __future__ import annotations

import ctypes
import functools
import subprocess
from ctypes import wintypes
from typing import Any

JOB_OBJECT_LIMIT_PROCESS_MEMORY = 0x100
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9   # the JOBOBJECTINFOCLASS


class _Limits(ctypes.Structure):   # JOBOBJECT_EXTENDED_LIMIT_INFORMATION (ctypes lays out the 64-bit padding)
    _fields_ = [("PerProcessUserTimeLimit", ctypes.c_int64), ("PerJobUserTimeLimit", ctypes.c_int64),
                ("LimitFlags", wintypes.DWORD), ("MinimumWorkingSetSize", ctypes.c_size_t),
                ("MaximumWorkingSetSize", ctypes.c_size_t), ("ActiveProcessLimit", wintypes.DWORD),
                ("Affinity", ctypes.c_size_t), ("PriorityClass", wintypes.DWORD),
                ("SchedulingClass", wintypes.DWORD), ("IoCounters", ctypes.c_uint64 * 6),
                ("ProcessMemoryLimit", ctypes.c_size_t), ("JobMemoryLimit", ctypes.c_size_t),
                ("PeakProcessMemoryUsed", ctypes.c_size_t), ("PeakJobMemoryUsed", ctypes.c_size_t)]


class _MemoryCounters(ctypes.Structure):   # PROCESS_MEMORY_COUNTERS
    _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD),
                ("PeakWorkingSetSize", ctypes.c_size_t), ("WorkingSetSize", ctypes.c_size_t),
                ("QuotaPeakPagedPoolUsage", ctypes.c_size_t), ("QuotaPagedPoolUsage", ctypes.c_size_t),
                ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t), ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
                ("PagefileUsage", ctypes.c_size_t), ("PeakPagefileUsage", ctypes.c_size_t)]


@functools.cache
def _kernel32() -> Any:
    """kernel32, loaded once: `committed` runs every POLL_S while a file is read."""
    k = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    k.CreateJobObjectW.restype = wintypes.HANDLE
    return k


def limit_memory(proc: subprocess.Popen, memory: int) -> int | None:
    """A job object that caps the worker's committed memory and kills it with the job's last
    handle (so it cannot outlive the server); its handle, or None where it cannot be set up."""
    k = _kernel32()
    job = k.CreateJobObjectW(None, None)
    if not job:
        return None
    limits = _Limits(LimitFlags=JOB_OBJECT_LIMIT_PROCESS_MEMORY | JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
                     ProcessMemoryLimit=memory)
    ok = k.SetInformationJobObject(wintypes.HANDLE(job), JOB_OBJECT_EXTENDED_LIMIT_INFORMATION,
                                   ctypes.byref(limits), ctypes.sizeof(limits)) \
        and k.AssignProcessToJobObject(wintypes.HANDLE(job), wintypes.HANDLE(int(proc._handle)))  # type: ignore[attr-defined]
    if not ok:
        k.CloseHandle(wintypes.HANDLE(job))
        return None
    return job   # kept open for the worker's life: closing it kills the worker


def close(job: int) -> None:
    _kernel32().CloseHandle(wintypes.HANDLE(job))


def committed(proc: subprocess.Popen) -> int:
    """The worker's committed memory in bytes (PagefileUsage), or 0 if it cannot be read (gone)."""
    counters = _MemoryCounters(cb=ctypes.sizeof(_MemoryCounters))
    ok = _kernel32().K32GetProcessMemoryInfo(wintypes.HANDLE(int(proc._handle)),  # type: ignore[attr-defined]
                                             ctypes.byref(counters), counters.cb)
    return counters.PagefileUsage if ok else 0
