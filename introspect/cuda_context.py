"""The CUDA context by GPU generation and module loading: published measurements only.

Data, no estimator: each :class:`ContextMeasurement` is one published run — the GPU,
its compute capability, the torch / CUDA / driver it ran, whether CUDA loaded its
modules lazily (``CUDA_MODULE_LOADING=LAZY``) or eagerly, what was run and read, and
the source. None of these was measured on a GPU by this project.

What the figure is: what ``nvidia-smi`` (NVML ``used``, or ``cudaMemGetInfo``'s
total − free) shows for a process that has created its CUDA context and, where the run
did, one tiny tensor. Where the run put a tensor on the device, that tensor's caching-
allocator segment is taken off (:attr:`ContextMeasurement.segment_bytes`: 2 MiB for a
tensor of at most 1 MiB, 20 MiB for one of 1–10 MiB; ``c10/cuda/CUDACachingAllocator.cpp``
``kSmallBuffer`` / ``kLargeBuffer``), so :attr:`ContextMeasurement.context_bytes` is the
context alone. With lazy loading the context grows as a step first calls kernels
(cuBLAS, attention, the optimizer's): that growth is not modelled here.

Lazy loading: CUDA 11.7 introduced it (off by default), CUDA 12.2 made it the default
on Linux (NVIDIA, CUDA Programming Guide, "Lazy Loading", change history:
https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/lazy-loading.html);
torch sets ``CUDA_MODULE_LOADING=LAZY`` when the variable is unset since 1.13
(pytorch/pytorch#86509, https://github.com/pytorch/pytorch/pull/86509).
"""

from __future__ import annotations

from introspect._record import record

MiB = 2**20
SMALL_SEGMENT = 2 * MiB  # kSmallBuffer: a tensor of at most 1 MiB
LARGE_SEGMENT = 20 * MiB  # kLargeBuffer: a tensor of 1–10 MiB

CUDA_GPUS = "https://developer.nvidia.com/cuda-gpus (NVIDIA's compute capability table)"

#: Compute capability of each CUDA device ``--gpu`` names (:mod:`introspect.devices`).
COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    "a100-40gb": (8, 0),
    "a100-80gb": (8, 0),
    "h100-80gb": (9, 0),
    "h200": (9, 0),
    "l4": (8, 9),
    "t4": (7, 5),
    "rtx-3090": (8, 6),
    "rtx-4090": (8, 9),
}

GENERATION = {
    (6, 1): "Pascal",
    (7, 0): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 9): "Ada",
    (9, 0): "Hopper",
}

#: When no GPU is named: taken as an H100 (sm90), whose cuBLAS workspace is the largest
#: torch picks and whose nearest published lazy context is the largest below.
UNNAMED = (9, 0)


@record
class ContextMeasurement:
    """One published measurement of a CUDA context."""

    gpu: str
    #: (major, minor); None where the source does not name the GPU.
    capability: tuple[int, int] | None
    loading: str  # "lazy" or "eager"
    stack: str  # torch / CUDA / driver, as the source states them
    run: str  # what was run, and what was read
    shown_bytes: int  # the figure the source printed
    segment_bytes: int  # the run's own tensor's allocator segment, taken off
    source: str

    @property
    def context_bytes(self) -> int:
        return self.shown_bytes - self.segment_bytes


HF_ANATOMY = (
    "https://huggingface.co/docs/transformers/model_memory_anatomy (transformers "
    "docs/source/en/model_memory_anatomy.md)"
)

MEASUREMENTS: tuple[ContextMeasurement, ...] = (
    ContextMeasurement(
        "Tesla V100-SXM2 16GB",
        (7, 0),
        "eager",
        "driver 460.91.03, CUDA 11.2 (before lazy loading)",
        "torch.ones((1, 1)).to('cuda'), then NVML used // 1024**2: 'GPU memory occupied: "
        "1343 MB' (nvidia-smi agrees)",
        1343 * MiB,
        SMALL_SEGMENT,
        HF_ANATOMY,
    ),
    ContextMeasurement(
        "GeForce GTX 1080",
        (6, 1),
        "eager",
        "torch 1.8.2+cu101",
        "torch.Tensor(1).cuda(), nvidia-smi: 721 MB",
        721 * MiB,
        SMALL_SEGMENT,
        "https://github.com/pytorch/pytorch/issues/55277 (comment by Sanster, 2022-04-12)",
    ),
    ContextMeasurement(
        "GeForce RTX 3090",
        (8, 6),
        "eager",
        "torch 1.8.2+cu111",
        "torch.Tensor(1).cuda(), nvidia-smi: 1687 MB",
        1687 * MiB,
        SMALL_SEGMENT,
        "https://github.com/pytorch/pytorch/issues/55277 (comment by Sanster, 2022-04-12)",
    ),
    ContextMeasurement(
        "GeForce RTX 3090",
        (8, 6),
        "lazy",
        "torch 2.7.1+cu128, driver 610.43.03",
        "a process that initialised CUDA at startup and ran nothing, nvidia-smi: 256 MiB",
        256 * MiB,
        0,
        "https://github.com/invoke-ai/InvokeAI/issues/9413",
    ),
    ContextMeasurement(
        "RTX 6000 Ada",
        (8, 9),
        "lazy",
        "torch 2.10.0+cu130",
        "torch.cuda.mem_get_info(0) (creates the context, no tensor), nvidia-smi: 426 MiB",
        426 * MiB,
        0,
        "https://github.com/unslothai/unsloth-zoo/pull/1053",
    ),
    ContextMeasurement(
        "not stated",
        None,
        "lazy",
        "torch 1.13 (CUDA_MODULE_LOADING=LAZY)",
        "torch.randn(20, 16, 50, 100).cuda() (6.4 MB: one 20 MiB segment), cudaMemGetInfo "
        "total − free: 287,047,680 bytes",
        287_047_680,
        LARGE_SEGMENT,
        "https://github.com/pytorch/pytorch/pull/86509",
    ),
    ContextMeasurement(
        "not stated",
        None,
        "eager",
        "torch 1.13 (CUDA_MODULE_LOADING=DEFAULT, CUDA 11.x: eager)",
        "the same, cudaMemGetInfo total − free: 666,632,192 bytes",
        666_632_192,
        LARGE_SEGMENT,
        "https://github.com/pytorch/pytorch/pull/86509",
    ),
)
