"""Memory a real step may use on this machine: free CUDA memory, or the OS's available
RAM under the cgroup's and ``ulimit -v``'s limits. Shared by ``introspect measure``
(:mod:`introspect.commands.measure`, which refuses a step too big for it) and its sharded
runs (:mod:`introspect.commands._sharded`)."""

from __future__ import annotations

import os


def available_bytes(device: str) -> int | None:
    """Memory a real step may use: free CUDA memory, else the least of the OS's
    available RAM, the cgroup's limit less its usage and this process's address-space
    limit (:func:`process_limit_bytes`)."""
    if device == "cuda":
        import torch

        return torch.cuda.mem_get_info()[0]
    found = [n for n in (_mem_available(), process_limit_bytes()) if n is not None]
    return min(found) if found else None


def _kib_field(path: str, key: str) -> int | None:
    """Bytes of the ``key:  N kB`` line of a /proc file, or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _mem_available() -> int | None:
    found = _kib_field("/proc/meminfo", "MemAvailable")
    if found is not None:
        return found
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


#: cgroup v2 (memory.max, memory.current) and v1 (limit and usage) files.
CGROUP_FILES = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
)


def process_limit_bytes() -> int | None:
    """What this process may still allocate under its limits: the cgroup memory limit
    less the cgroup's usage (v2 ``memory.max``/``memory.current``, or v1), and
    ``RLIMIT_AS`` (``ulimit -v``) less this process's address space. None when neither
    is set. MemAvailable alone misses both: a container or ``ulimit -v`` kills or fails
    a step long before the machine runs out."""
    limits = []
    for limit_file, usage_file in CGROUP_FILES:
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and limit < 2**60:  # v1 says "no limit" with a huge number
            limits.append(limit - (usage or 0))
            break
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            limits.append(soft - _address_space_bytes())
    except (ImportError, OSError, ValueError):
        pass
    return max(0, min(limits)) if limits else None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text != "max" else None
    except (OSError, ValueError):
        return None


def _address_space_bytes() -> int:
    """This process's virtual size (``VmSize`` in /proc/self/status), 0 if unknown."""
    return _kib_field("/proc/self/status", "VmSize") or 0
