"""cuBLAS workspaces and NCCL buffers: what the libraries a torch step calls hold on the
device besides its tensors. Derived from the libraries' source, not measured on a GPU.

**cuBLAS / cuBLASLt** (pytorch/pytorch ``aten/src/ATen/cuda/CublasHandlePool.cpp`` at
commit 26a39059ec58, the version read; the wheel ships no .cpp to check torch 2.13's against,
``parseChosenWorkspaceSize``, ``parseCUDABlasLtWorkspaceSize``,
``getCUDABlasLtWorkspaceSize``, ``setWorkspaceForHandle``, ``getCUDABlasLtWorkspace``):

* the cuBLAS workspace is ``CUBLAS_WORKSPACE_CONFIG`` summed over its ``:SIZE:COUNT``
  pairs (SIZE KiB × COUNT); unset, ``:4096:2:16:8`` = 8 MiB + 128 KiB, and on sm90
  (Hopper) ``:4096:8`` = 32 MiB; a value it cannot parse warns and uses the default;
* the cuBLASLt workspace is ``CUBLASLT_WORKSPACE_SIZE`` KiB (1,024 KiB unset), capped at
  the cuBLAS workspace; it is a buffer of its own unless
  ``TORCH_CUBLASLT_UNIFIED_WORKSPACE=1``, when Lt uses the cuBLAS one;
* both come from ``c10::cuda::CUDACachingAllocator::get()->allocate`` (``getNewWorkspace``,
  ``getNewCUDABlasLtWorkspace``): they are the caching allocator's blocks, counted in
  ``torch.cuda.memory_reserved()`` (and ``memory_allocated()``), not in the context, and
  held for the process's life, one per (handle, stream);
* handles are per thread (``DeviceThreadHandlePool``'s thread-local ``PoolWindow``): a
  training step's forward runs on the Python thread and its backward on the autograd
  engine's device thread, so two pairs (:data:`STEP_HANDLES`).

**NCCL** (NVIDIA/nccl ``src/init.cc``, ``computeBuffSizes``: ``DEFAULT_BUFFSIZE`` 4 MiB
for the Simple protocol, ``DEFAULT_LL_BUFFSIZE`` = 8 lines × 512 threads × 8 steps × 16 B
= 512 KiB, ``DEFAULT_LL128_BUFFSIZE`` = 120 × 640 × 8 × 8 B = 4,800 KiB; overridden by
``NCCL_BUFFSIZE``, ``NCCL_LL_BUFFSIZE``, ``NCCL_LL128_BUFFSIZE``): each channel's
connection to a peer holds one buffer per protocol on the receiving GPU, allocated by
NCCL itself (outside torch's allocator: in nvidia-smi, not in ``memory_reserved()``).
A sharded step (DDP's all-reduce, ZeRO's reduce-scatter / all-gather, FSDP's) runs over
one communicator, whose ring gives each rank one receiving connection per channel. The
channel count NCCL picks by topology (2 on a PCIe ring up to ``MAXCHANNELS`` = 32 over
NVSwitch); unknown here, it is ``NCCL_MIN_NCHANNELS`` when set, else 2
(:data:`NCCL_CHANNELS`). Tree and NVLS connections are not modelled.
"""

from __future__ import annotations

import re

from introspect._record import record

KiB, MiB = 2**10, 2**20
CUBLAS_DEFAULT = 4096 * KiB * 2 + 16 * KiB * 8  # :4096:2:16:8
CUBLAS_SM90 = 4096 * KiB * 8  # :4096:8
CUBLASLT_DEFAULT = 1024 * KiB
STEP_HANDLES = 2
CUBLAS_SOURCE = (
    "pytorch/pytorch@26a39059 aten/src/ATen/cuda/CublasHandlePool.cpp (parseChosenWorkspaceSize, "
    "getCUDABlasLtWorkspaceSize); through the caching allocator, so in reserved; derived "
    "from torch's source, not measured on a GPU"
)

NCCL_SIMPLE = 1 << 22
NCCL_LL = 8 * 512 * 8 * 16
NCCL_LL128 = 120 * 640 * 8 * 8
NCCL_CHANNELS = 2
NCCL_MAX_CHANNELS = 32
NCCL_SOURCE = (
    "NVIDIA/nccl src/init.cc computeBuffSizes (Simple 4 MiB, LL 512 KiB, LL128 4,800 KiB "
    "per channel per receiving peer), a ring of {channels} channels ({why}); outside "
    "torch's allocator; derived, not measured"
)


@record
class Workspaces:
    """The cuBLAS and cuBLASLt workspaces one handle holds, and notes on how they were
    read from the environment."""

    cublas: int
    cublaslt: int
    notes: tuple[str, ...] = ()

    @property
    def per_step(self) -> int:
        """Bytes a training step's handles hold (:data:`STEP_HANDLES`)."""
        return STEP_HANDLES * (self.cublas + self.cublaslt)


def _leading_int(text: str) -> int | None:
    """``std::stoi``: the leading digits (after whitespace), None when there are none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else None


def cublas_workspaces(capability: tuple[int, int], environ) -> Workspaces:
    """The workspaces torch gives a cuBLAS handle on a GPU of ``capability`` with the
    variables in ``environ``."""
    notes = []
    default = CUBLAS_SM90 if capability == (9, 0) else CUBLAS_DEFAULT
    text = environ.get("CUBLAS_WORKSPACE_CONFIG")
    cublas = default
    if text is not None:
        pairs = re.findall(r":([0-9]+):([0-9]+)", text)
        if pairs:
            cublas = sum(int(size) * KiB * int(count) for size, count in pairs)
            notes.append(f"read CUBLAS_WORKSPACE_CONFIG={text!r}, as torch would")
        else:
            notes.append(
                f"CUBLAS_WORKSPACE_CONFIG={text!r} is not :SIZE:COUNT pairs: torch warns "
                "and uses its default, as here"
            )
    lt_kib = CUBLASLT_DEFAULT // KiB
    text = environ.get("CUBLASLT_WORKSPACE_SIZE")
    if text is not None:
        value = _leading_int(text)
        if value is None:
            notes.append(
                f"CUBLASLT_WORKSPACE_SIZE={text!r} is not a number: torch warns and uses "
                "1024 KiB, as here"
            )
        else:
            lt_kib = value
            notes.append(f"read CUBLASLT_WORKSPACE_SIZE={text!r} (KiB), as torch would")
    cublaslt = min(lt_kib * KiB, cublas)
    if environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE", "").strip().lower() in ("1", "true"):
        cublaslt = 0  # Lt then uses the cuBLAS workspace itself
        notes.append("TORCH_CUBLASLT_UNIFIED_WORKSPACE: cuBLASLt shares the cuBLAS workspace")
    return Workspaces(cublas, cublaslt, tuple(notes))


def _nccl_size(environ, name: str, default: int) -> int:
    value = _leading_int(environ.get(name, "")) if environ.get(name) else None
    return value if value is not None and value > 0 else default


def nccl_buffers(devices: int, environ) -> tuple[int, str]:
    """Bytes NCCL's buffers hold on each of ``devices`` ranks (0 for one device), and
    the line saying how they were derived."""
    if devices <= 1:
        return 0, "one device: no communicator"
    per_connection = (
        _nccl_size(environ, "NCCL_BUFFSIZE", NCCL_SIMPLE)
        + _nccl_size(environ, "NCCL_LL_BUFFSIZE", NCCL_LL)
        + _nccl_size(environ, "NCCL_LL128_BUFFSIZE", NCCL_LL128)
    )
    given = _nccl_size(environ, "NCCL_MIN_NCHANNELS", 0)
    if given:
        channels = min(given, NCCL_MAX_CHANNELS)
        why = "NCCL_MIN_NCHANNELS"
    else:
        channels = NCCL_CHANNELS
        why = (
            f"NCCL picks 2 to {NCCL_MAX_CHANNELS} by topology; {NCCL_CHANNELS} assumed, "
            "set NCCL_MIN_NCHANNELS to price more"
        )
    return channels * per_connection, NCCL_SOURCE.format(channels=channels, why=why)
