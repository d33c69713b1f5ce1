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
  off): blocks one phase frees and the next cannot use stay reserved. Under a sharded
  wrapper the replay starts with what the wrapper allocated and freed building its state
  (:func:`introspect.allocator.synthetic.load_stream`: the cache it leaves is the step's
  first; ``reset_peak_memory_stats`` does not free it), and what the wrapper gathers is
  allocated on its all-gather stream, whose cached blocks no other stream reuses
  (:func:`introspect.allocator.synthetic.side_terms`); under ZeRO-3 backward's gradients
  are handed to the IPG bucket under ``record_stream`` and each bucket's reduce-scatter
  buffer is made on the reduce stream, and the step's gradient norm takes a float64 copy
  of each gradient partition (:mod:`introspect.allocator.zero3`). The reserve is
  the reserved peak less the allocated bytes. What happens between two moments (the
  operations' own temporaries, their order) is read only by replaying a recorded step
  (``measure --device fake``) (:data:`RESERVE_MODEL`).
* **cuBLAS / cuBLASLt workspaces**: blocks of the caching allocator itself, one pair per
  handle (forward and backward threads), held for the process's life
  (:func:`introspect.cuda_libraries.cublas_workspaces`); allocated at the first moment
  (forward) and the first backward moment of the replay, so they are in the reserved peak.
* **CUDA context**: the driver's and runtime's own allocations and the loaded kernels,
  outside torch's allocator: a published measurement for the GPU's generation and
  module loading (``CUDA_MODULE_LOADING``, read as torch and CUDA read it;
  :mod:`introspect.cuda_context`), the nearest generation where none is published.
* **NCCL buffers** (``--devices`` > 1): per rank, outside torch's allocator
  (:func:`introspect.cuda_libraries.nccl_buffers`).
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
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

MiB = 2**20
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_LARGE_BUFFER = 20 * MiB
K_ROUND_LARGE = 2 * MiB

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
    """The allocated peak and what the device shows, each with its source.

    On CUDA: ``allocated`` (the step's tensors) + ``workspaces`` (cuBLAS's, the
    allocator's blocks) + ``reserve`` (the allocator's fragmentation) is
    ``torch.cuda.max_memory_reserved()``; + ``context`` + ``nccl`` (outside the allocator)
    is what ``nvidia-smi`` shows."""

    allocated: int
    reserve: int
    context: int
    usable: int | None
    sources: dict[str, str]
    workspaces: int = 0
    nccl: int = 0

    @property
    def reserved(self) -> int:
        """``torch.cuda.max_memory_reserved()`` at the peak."""
        return self.allocated + self.workspaces + self.reserve

    @property
    def shown(self) -> int:
        """What ``nvidia-smi`` (or the Mac's GPU) will show at the peak."""
        return self.reserved + self.context + self.nccl

    def to_json(self) -> dict:
        return {
            "allocated_peak_bytes": self.allocated,
            "cublas_workspace_bytes": self.workspaces,
            "allocator_reserve_bytes": self.reserve,
            "reserved_peak_bytes": self.reserved,
            "context_bytes": self.context,
            "nccl_buffer_bytes": self.nccl,
            "shown_bytes": self.shown,
            "usable_bytes": self.usable,
            "sources": dict(self.sources),
        }


def module_loading(environ) -> tuple[str, str]:
    """``lazy`` or ``eager``, and why: torch sets ``CUDA_MODULE_LOADING=LAZY`` when unset
    (pytorch/pytorch#86509); ``DEFAULT`` is lazy since CUDA 12.2 (every current torch
    wheel's CUDA); ``EAGER`` loads every module at start. Any other value is refused:
    CUDA documents only these three."""
    text = environ.get("CUDA_MODULE_LOADING")
    if text is None:
        return "lazy", "CUDA_MODULE_LOADING unset: torch sets LAZY"
    value = text.strip().upper()
    if value in ("LAZY", "DEFAULT"):
        return "lazy", f"read CUDA_MODULE_LOADING={text!r}: lazy (CUDA >= 12.2)"
    if value == "EAGER":
        return "eager", f"read CUDA_MODULE_LOADING={text!r}: eager"
    raise IntrospectError(
        f"CUDA_MODULE_LOADING={text!r}: CUDA takes DEFAULT, LAZY or EAGER; fix the "
        "setting or unset it"
    )


def capability(device) -> tuple[tuple[int, int], str]:
    """The compute capability of ``device`` (None: no GPU named) and how it was chosen."""
    from introspect import cuda_context as cc

    if device is None:
        return cc.UNNAMED, "GPU not named: taken as an H100 (sm90)"
    cap = cc.COMPUTE_CAPABILITY.get(device.name)
    if cap is None:
        return cc.UNNAMED, f"{device.name}: compute capability not listed, taken as sm90"
    return cap, f"{device.description}: sm{cap[0]}{cap[1]} ({cc.GENERATION[cap]})"


def cuda_context(device, environ) -> tuple[int, str]:
    """The CUDA context for ``device`` (an :class:`introspect.devices.Device`, None: not
    named) with ``environ``'s module loading: the published measurement of the same
    compute capability and loading, else the nearest capability's (a tie: the larger),
    with the line saying which and from where."""
    from introspect import cuda_context as cc

    cap, chosen = capability(device)
    loading, why = module_loading(environ)
    rows = [m for m in cc.MEASUREMENTS if m.loading == loading and m.capability is not None]

    def distance(m) -> tuple[int, int]:
        a, b = cap[0] * 10 + cap[1], m.capability[0] * 10 + m.capability[1]
        return abs(a - b), -m.context_bytes

    best = min(rows, key=distance)
    same = best.capability == cap
    where = (
        "published for this compute capability:"
        if same
        else f"no published figure for sm{cap[0]}{cap[1]}; nearest:"
    )
    line = (
        f"{chosen}; {why}; {where} {best.gpu} (sm{best.capability[0]}{best.capability[1]}, "
        f"{best.stack}): {best.run}"
    )
    if best.segment_bytes:
        line += f", less its tensor's {best.segment_bytes // MiB} MiB segment"
    line += f" [{best.source}]"
    if loading == "lazy":
        line += "; kernels the step loads on first use add to it (not modelled)"
    return best.context_bytes, line


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
    spec: ModelSpec,
    setup: TrainingSetup,
    peak_terms: dict[str, int],
    allocator=None,
    workspaces: tuple[int, ...] = (),
) -> int:
    """The caching allocator's reserve at the peak, beyond the allocated bytes: the
    reserved peak of the step's moments replayed through the allocator model with
    ``allocator`` (an :class:`introspect.allocator.config.AllocatorConfig`; None: torch's
    defaults), less the peak's bytes (``peak_terms``) and the cuBLAS workspaces
    (``workspaces``: each handle's requests, cuBLAS's and cuBLASLt's; two handles,
    allocated at the forward's first moment and the backward's, held to the end)
    (:func:`introspect.allocator.synthetic.moment_stream`)."""
    from introspect.allocator import synthetic, zero3
    from introspect.allocator.config import AllocatorConfig
    from introspect.allocator.replay import replay

    cfg = allocator if allocator is not None else AllocatorConfig()
    moments = step_moments(spec, setup)
    events = synthetic.moment_stream(
        spec, moments, synthetic.side_terms(setup), synthetic.load_stream(spec, setup)
    )
    events = zero3.with_gradient_handoff(events, spec, setup)
    events = synthetic.with_overflow_check(events, spec, setup)
    events = zero3.with_grad_norm(events, spec, setup)
    if workspaces:
        events = _with_workspaces(events, workspaces)
    replayed = replay(events, cfg)
    held = sum(v for v in peak_terms.values() if v > 0) + 2 * sum(workspaces)
    return max(0, replayed.reserved_peak - held)


def cuda_reserve_steps(
    spec: ModelSpec,
    setup: TrainingSetup,
    seq_lens: list[int],
    allocator=None,
    workspaces: tuple[int, ...] = (),
):
    """The replay of consecutive steps whose sequence length changes (``seq_lens``, one
    per step, e.g. each batch padded to its longest sample): each step's closed-form
    moments (:func:`step_moments` at that T) walked in order, the state held across steps
    (:func:`introspect.allocator.synthetic.steps_stream`), with the cuBLAS workspaces as
    in :func:`cuda_reserve`. Returns the :class:`introspect.allocator.replay.Replay`: its
    ``allocated_peak`` is the longest step's, its ``reserved_peak`` what
    ``torch.cuda.max_memory_reserved()`` reads after the run. Not modelled: the order of
    operations inside a moment and their temporaries (as :func:`cuda_reserve`)."""
    from introspect.allocator import synthetic
    from introspect.allocator.config import AllocatorConfig
    from introspect.allocator.replay import replay

    if not seq_lens:
        raise IntrospectError("cuda_reserve_steps needs at least one sequence length")
    cfg = allocator if allocator is not None else AllocatorConfig()
    steps = [step_moments(spec, setup.replace(seq_len=t)) for t in seq_lens]
    events = synthetic.steps_stream(
        spec, steps, synthetic.side_terms(setup), synthetic.load_stream(spec, setup)
    )
    if workspaces:
        events = _with_workspaces(events, workspaces)
    return replay(events, cfg)


def _with_workspaces(events: list[tuple], sizes: tuple[int, ...]) -> list[tuple]:
    """``events`` with one handle's workspaces (``sizes``) allocated before the first
    event and another's before the first backward event (the autograd thread's)."""
    first = [("alloc", ("workspace", 0, i), n, "forward") for i, n in enumerate(sizes)]
    out, added = first, False
    for event in events:
        if not added and event[0] == "alloc" and event[3].startswith("backward"):
            out += [("alloc", ("workspace", 1, i), n, event[3]) for i, n in enumerate(sizes)]
            added = True
        out.append(event)
    if not added:
        out += [("alloc", ("workspace", 1, i), n, "backward") for i, n in enumerate(sizes)]
    return out


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


def device_view(
    spec: ModelSpec, setup: TrainingSetup, device=None, allocator=None, environ=None
) -> DeviceView:
    """The refined estimate's allocated peak and what ``device`` (an
    :class:`introspect.devices.Device`, or the setup's own kind when None) shows, per
    rank; ``allocator`` is the caching allocator's config (None: torch's defaults),
    ``environ`` the variables CUDA, cuBLAS and NCCL read (None: ``os.environ``)."""
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
    import os

    from introspect import cuda_libraries

    environ = os.environ if environ is None else environ
    cap, _ = capability(device)
    spaces = cuda_libraries.cublas_workspaces(cap, environ)
    each = tuple(n for n in (spaces.cublas, spaces.cublaslt) if n)
    reserve = cuda_reserve(spec, setup, dict(est.terms), allocator, each)
    expandable = bool(allocator is not None and allocator.expandable_segments)
    context, context_line = cuda_context(device, environ)
    nccl, nccl_line = cuda_libraries.nccl_buffers(setup.devices, environ)
    workspace_line = (
        f"{cuda_libraries.STEP_HANDLES} handles (forward and backward threads) × "
        f"(cuBLAS {spaces.cublas:,} + cuBLASLt {spaces.cublaslt:,} bytes) on sm{cap[0]}{cap[1]}; "
        f"{cuda_libraries.CUBLAS_SOURCE}"
    )
    if spaces.notes:
        workspace_line += "; " + "; ".join(spaces.notes)
    return DeviceView(
        est.total,
        reserve,
        context,
        device.memory_bytes if device is not None else None,
        {
            "allocated": "refined estimate (torch.cuda.max_memory_allocated())",
            "workspaces": workspace_line,
            "reserve": RESERVE_MODEL.format(expandable="on" if expandable else "off"),
            "context": context_line,
            "nccl": nccl_line,
        },
        spaces.per_step,
        nccl,
    )


def device_floor(spec: ModelSpec, setup: TrainingSetup, device=None, environ=None) -> int:
    """What :func:`device_view` shows less the allocator's reserve (never negative): the
    allocated peak, the cuBLAS workspaces, the context and NCCL's buffers — a lower bound
    of ``device_view(...).shown`` without the replay."""
    from introspect import refined

    allocated = refined.execution_estimate(spec, setup, notes=False).total
    kind = device.kind if device is not None else "cuda"
    if kind == "metal" or setup.framework.startswith("mlx"):
        return allocated
    import os

    from introspect import cuda_libraries

    environ = os.environ if environ is None else environ
    cap, _ = capability(device)
    spaces = cuda_libraries.cublas_workspaces(cap, environ)
    context, _ = cuda_context(device, environ)
    nccl, _ = cuda_libraries.nccl_buffers(setup.devices, environ)
    return allocated + spaces.per_step + context + nccl
