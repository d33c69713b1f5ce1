"""What a device holds beyond the step's tensors, kept apart from them.

The refined estimate is the *allocated* peak: the bytes of live tensors. What
``nvidia-smi`` shows, and what an out-of-memory error counts against, is more:

* **CUDA caching allocator reserve** (torch ``c10/cuda/CUDACachingAllocator.cpp``, with
  its constants in ``c10/core/AllocatorConfig.h``, torch 2.13): every block is rounded
  up to a multiple of 512 bytes (``kMinBlockSize``); requests up to 1 MiB
  (``kSmallSize``) are carved from 2 MiB segments (``kSmallBuffer``); requests between
  1 and 10 MiB (``kMinLargeAlloc``) from 20 MiB segments (``kLargeBuffer``); larger ones
  get a segment of their own rounded up to 2 MiB (``kRoundLarge``), and a large block is
  split only when more than 1 MiB would be left. :func:`cuda_reserve` walks the closed
  form's moments in step order (forward, each backward layer, the update), turns each
  change of a term into frees and allocations of its tensors
  (:func:`introspect.allocator.synthetic.moment_stream`) and replays them through the
  allocator model with the given ``PYTORCH_CUDA_ALLOC_CONF`` (expandable segments on or
  off): blocks one phase frees and the next cannot use stay reserved. The reserve is
  the reserved peak less the allocated bytes. What happens between two moments (the
  operations' own temporaries, their order) is read only by replaying a recorded step
  (``measure --device fake``) (:data:`RESERVE_MODEL`).
* **CUDA context**: the driver's and runtime's own allocations, the loaded kernels
  (lazy module loading, ``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 11.7) and
  the cuBLAS workspace; none of it passes through torch's allocator.
  :data:`CUDA_CONTEXT_BYTES`, with its source.
* **MLX on a Mac**: the GPU may use only Metal's ``recommendedMaxWorkingSetSize``
  (``mx.metal.device_info()["max_recommended_working_set_size"]``; about 75% of the
  unified memory: 19,069 MB on a 24 GB Mac, about 6 GB on 8 GB — reports quoted in the
  module's source list); beyond it the step pages or fails. MLX's buffer cache keeps
  freed buffers for reuse (``mx.get_cache_memory()``) up to its cache limit, so the
  process's footprint stays at about the step's peak between steps rather than adding
  to it; ``mx.clear_cache()`` returns it.
"""

from __future__ import annotations

from introspect import metal
from introspect._record import record
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

MiB = 2**20
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_LARGE_BUFFER = 20 * MiB
K_ROUND_LARGE = 2 * MiB

#: The CUDA context of a torch process, outside the caching allocator. Until a GPU
#: measurement replaces it: about 500 MiB, the order torch issues report for a process
#: that has initialised CUDA and run one kernel (pytorch/pytorch#34323: 781 MB in
#: nvidia-smi before lazy loading).
CUDA_CONTEXT_BYTES = 500 * MiB
CUDA_CONTEXT_SOURCE = (
    "assumed ~500 MiB (torch CUDA context with lazy module loading; pytorch/pytorch#34323 "
    "reports 781 MB with eager loading); measure with nvidia-smi on the target GPU"
)
RESERVE_MODEL = (
    "the step's moments replayed through a model of torch 2.13's CUDACachingAllocator "
    "(512 B blocks, 2 MiB / 20 MiB segments, splitting, expandable segments {expandable}); "
    "derived from torch's source, not measured on a GPU"
)
#: Fraction of a Mac's unified memory Metal recommends as the GPU's working set.
METAL_WORKING_SET_FRACTION = metal.WORKING_SET_FRACTION
METAL_SOURCE = (
    "Metal's recommendedMaxWorkingSetSize, about 75% of unified memory (19,069 MB reported "
    "on a 24 GB Mac); raise with sudo sysctl iogpu.wired_limit_mb"
)


@record
class DeviceView:
    """The allocated peak and what the device shows, each with its source."""

    allocated: int
    reserve: int
    context: int
    usable: int | None
    sources: dict[str, str]

    @property
    def shown(self) -> int:
        """What ``nvidia-smi`` (or the Mac's GPU) will show at the peak."""
        return self.allocated + self.reserve + self.context

    def to_json(self) -> dict:
        return {
            "allocated_peak_bytes": self.allocated,
            "allocator_reserve_bytes": self.reserve,
            "context_bytes": self.context,
            "shown_bytes": self.shown,
            "usable_bytes": self.usable,
            "sources": dict(self.sources),
        }


def tensor_count(spec: ModelSpec) -> int:
    """Parameter tensors: per block its linears and their biases (every expert's),
    norms and q/k norms; the embedding, the final norm and an untied head."""
    ffn = (3 if spec.ffn == "gated" else 2) * (spec.num_local_experts or 1)
    biases = (3 if spec.qkv_bias else 0) + (1 if spec.o_bias else 0)
    biases += ffn if spec.mlp_bias else 0
    norms = spec.norms_per_layer * (2 if spec.norm == "layernorm" and spec.norm_bias else 1)
    qk = 2 if spec.qk_norm != "none" else 0
    per_layer = 4 + ffn + biases + norms + qk
    return spec.num_hidden_layers * per_layer + 2 + (0 if spec.tie_word_embeddings else 1)


def block_bytes(size: int) -> int:
    """A request's block: rounded up to 512 bytes (``round_size``)."""
    return max(K_MIN_BLOCK, -(-size // K_MIN_BLOCK) * K_MIN_BLOCK)


def segment_waste(size: int) -> int:
    """Expected bytes a large request's own segment adds beyond its block: half of
    2 MiB for requests above 10 MiB (their segments are rounded to 2 MiB); requests
    below share pooled segments (counted once in :func:`cuda_reserve`)."""
    return K_ROUND_LARGE // 2 if size >= K_MIN_LARGE_ALLOC else 0


def cuda_reserve(
    spec: ModelSpec, setup: TrainingSetup, peak_terms: dict[str, int], allocator=None
) -> int:
    """The caching allocator's reserve at the peak, beyond the allocated bytes: the
    reserved peak of the step's moments replayed through the allocator model with
    ``allocator`` (an :class:`introspect.allocator.config.AllocatorConfig`; None: torch's
    defaults), less the peak's bytes (``peak_terms``)
    (:func:`introspect.allocator.synthetic.moment_stream`)."""
    from introspect.allocator import synthetic
    from introspect.allocator.config import AllocatorConfig

    cfg = allocator if allocator is not None else AllocatorConfig()
    replayed = synthetic.moment_reserve(spec, step_moments(spec, setup), cfg)
    return max(0, replayed.reserved_peak - sum(v for v in peak_terms.values() if v > 0))


def step_moments(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, dict[str, int]]]:
    """The closed form's moments in step order, each on the largest model-parallel rank,
    as :func:`introspect.refined.execution_estimate` builds them for torch."""
    from introspect.refined import execution, memo, model_parallel
    from introspect.refined.implementations import resolve_attention

    setup = resolve_attention(spec, setup)
    with memo.scope():
        moments = execution.moments(spec, setup, None)
    return [(ph, model_parallel.model_parallel(spec, setup, t)) for ph, t in moments]


def rounding_reserve(spec: ModelSpec, peak_terms: dict[str, int]) -> int:
    """The earlier rule of thumb, kept for comparison: half of 2 MiB per large tensor
    alive and one partly used segment of each pool."""
    params = tensor_count(spec)
    big = 0
    for name, value in peak_terms.items():
        if value <= 0:
            continue
        if name.startswith("activations/layer/"):
            count = spec.num_hidden_layers
        elif name.startswith(("weights", "grads", "optimizer/adam", "optimizer/m")):
            count = params
        else:
            count = 1
        each = value // count
        big += count * segment_waste(each) if each else 0
    return big + K_LARGE_BUFFER + K_SMALL_BUFFER


def metal_usable(device) -> int:
    """The GPU working set Metal recommends on a Mac with ``device``'s memory."""
    return int(METAL_WORKING_SET_FRACTION * device.memory_bytes)


def device_view(spec: ModelSpec, setup: TrainingSetup, device=None, allocator=None) -> DeviceView:
    """The refined estimate's allocated peak and what ``device`` (an
    :class:`introspect.devices.Device`, or the setup's own kind when None) shows;
    ``allocator`` is the caching allocator's config (None: torch's defaults)."""
    from introspect import refined

    # The execution layer alone: its total is the refined estimate's (RefinedEstimate.total)
    est = refined.execution_estimate(spec, setup, notes=False)
    kind = (
        device.kind
        if device is not None
        else ("metal" if setup.framework.startswith("mlx") else "cuda")
    )
    if kind == "metal" or setup.framework.startswith("mlx"):
        usable = metal_usable(device) if device is not None else None
        view = metal.metal_view(spec, setup, est.total)
        return DeviceView(
            view.allocated,
            0,
            0,
            usable,
            {
                "allocated": "refined estimate (mx.get_peak_memory(), verified on the CPU) with "
                f"Metal's page rounding ({metal.DERIVED})",
                "cache": "MLX buffer cache reuses freed buffers; footprint ≈ peak",
                "usable": METAL_SOURCE,
            },
        )
    reserve = cuda_reserve(spec, setup, dict(est.terms), allocator)
    expandable = bool(allocator is not None and allocator.expandable_segments)
    return DeviceView(
        est.total,
        reserve,
        CUDA_CONTEXT_BYTES,
        device.memory_bytes if device is not None else None,
        {
            "allocated": "refined estimate (torch.cuda.max_memory_allocated())",
            "reserve": RESERVE_MODEL.format(expandable="on" if expandable else "off"),
            "context": CUDA_CONTEXT_SOURCE,
        },
    )
