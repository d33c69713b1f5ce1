"""What MLX's Metal backend does differently from the CPU stream the replay follows.

Everything MLX says about an MLX step in this project (the replay,
:mod:`introspect.measure.mlx_replay`; the closed form, :mod:`introspect.refined.mlx`) is
**verified on the CPU** (Linux, ``mlx/backend/no_gpu/allocator.cpp`` and
``backend/cpu``). On a Mac the same step runs on the Metal backend. What follows is
**derived for Metal from MLX's source, not measured** (ml-explore/mlx at 846d17622,
2026-08; line numbers are that commit's):

* **What ``mx.get_peak_memory()`` counts.** The largest ``active_memory_`` seen: the
  bytes of live buffers at the *buffer's* length (``metal/allocator.cpp:166-167``;
  ``mlx/memory.h:18-23``). Cached (freed, kept for reuse) buffers are not in it
  (``get_cache_memory``, ``memory.h:29-34``), so Activity Monitor can show far more
  than mlx-lm's "Peak mem". On the CPU the same counter is kept
  (``no_gpu/allocator.cpp:95-108``).
* **Page rounding.** A request above one page is rounded up to whole pages
  (``metal/allocator.cpp:123-126``; ``vm_page_size`` is 16 KiB on Apple silicon);
  requests under 256 bytes come from a 1 MiB heap (``metal/allocator.h:51-52``). The CPU
  allocator counts the request itself (``no_gpu/allocator.cpp:102-108``).
  :func:`page_rounded`; the step's weights, adapters and their state are priced by
  :func:`rounding_bytes` — the only difference applied to the estimate.
* **Cache reuse slack.** A freed buffer is reused for a request when its length is below
  ``min(2·size, size + 2·page)`` (``common/buffer_cache.h:30-35``) and the peak counts the
  reused buffer's whole length: up to two pages more per buffer than asked
  (:func:`reuse_slack_bound`). The CPU cache does the same with 4 KiB pages but keeps
  only 32 MB (``no_gpu/allocator.cpp:83-84``); Metal's cache may grow to the memory limit
  (``max_pool_size_ = block_limit_``, ``metal/allocator.cpp:63-65``): min(1.5 × the
  recommended working set, 0.95 × RAM), released when active + cache passes 0.95 × the
  working set (``gc_limit_``, ``allocator.cpp:64, 132-138``). A bound, not applied: which
  buffer a request reuses depends on the order of frees the closed form does not follow.
* **Command buffers keep inputs alive longer.** An op's inputs are held until its command
  buffer completes (``metal/eval.cpp:47-68``); a buffer commits after more than
  ``max_ops`` ops or ``max_mb`` MB of outputs — 20/40 (phone), 40/40 (base and Pro,
  arch ``g``), 50/50 (Max ``s``, Ultra ``d``), 40/40 otherwise (``metal/device.cpp:
  511-513, 600-626``; ``MLX_MAX_OPS_PER_BUFFER``, ``MLX_MAX_MB_PER_BUFFER``) — and the
  evaluator lets 10 committed buffers run before it waits (``transforms.cpp:25,
  271-283``). :func:`pinned_ops_bound`: up to 11 buffers' ops (440–550) may hold their
  inputs, where the CPU replay pins about 110 dispatches. Not applied: which inputs are
  still needed anyway is the graph's order, which only a Metal replay could follow.
* **Fused kernels.** On the GPU ``mx.fast.rms_norm``, ``layer_norm`` and ``rope`` are
  single primitives with their own VJP primitives (``fast.cpp:112-177``;
  ``metal/normalization.cpp:13-15``, ``metal/rope.cpp:10-12``: the fallback runs on the
  CPU only), so the norm's and rotary's elementwise intermediates the CPU counts are not
  kept: the estimate is high by those. Not applied: CPU steps with Metal's saved sets
  emulated (:mod:`introspect.measure.mlx_metal_kernels`, ``benchmarks/metal_kernels.py``)
  peak lower by 4.2–4.5 bytes per B·T·d element per RMSNorm in BF16 but 0.85 in FP32,
  where the source reading (the fallback's FP32 copy of x kept, ``fast.cpp:90-107``)
  predicts one figure for both: which moment holds the peak decides it, and only a graph
  of Metal's step would. Attention under ``value_and_grad`` runs the
  *unfused* graph on Metal since MLX 0.25.0 (``fast.cpp:826-843``;
  ``metal/scaled_dot_product_attention.cpp:739-743``; ml-explore/mlx e5d35aa18,
  2025-04-08), and before 0.24 the fused kernel took no mask, so its T×T probabilities
  are kept per layer as on the CPU; on 0.24.x the fused forward ran and its VJP
  recomputed one layer's attention at a time (:func:`attention_kept_in_training`,
  :func:`fused_attention_peak`: the T×T kinds at one layer). Not applied by ``profile``,
  which knows no MLX version: printed beside the estimate. The ``force_fused=True``
  argument (ml-explore/mlx 772bc8a00, 2026-08-18; in no release at 846d17622) takes the
  fused forward under grad again, and its VJP is still the fallback's
  (``ScaledDotProductAttentionVJP::use_fallback`` is true on Metal,
  ``scaled_dot_product_attention.cpp:918-920``; ``fast.cpp:872-883``): the 0.24.x case.
  mlx-lm does not pass it (ml-explore/mlx-lm d78bf58e). How much of the T×T the one
  layer holds is counted from that VJP (:data:`FUSED_VJP_T2_TENSORS`: three B·h·T²
  tensors, a CPU replay of 0.24.0's fallback VJP), not the L ≥ 4 line's intercept;
  :func:`t2_free_peak` gives the same step with no T×T at all.
* **mlx-lm's trainer, not Metal: eager or compiled.** ``mlx_lm.lora`` compiles its step
  (``@partial(mx.compile, inputs=state, outputs=state) def step``,
  ``mlx_lm/tuner/trainer.py``) since ml-explore/mlx-lm b92c8f3e (#53, 2025-03-25), and
  did from 93a8ac0f (#528, 2024-03-12) until 0cd45a2b (#608, 2024-03-24); in between
  (e.g. a5322574, 2025-03-22) the step ran eagerly (:func:`mlx_lm_step_compiled`): a
  published row takes ``--framework mlx-compiled`` or ``mlx`` by its date.
* **Limits.** ``set_memory_limit`` defaults to min(1.5 × recommendedMaxWorkingSetSize,
  0.95 × RAM) and past it the evaluator waits for buffers to finish
  (``transforms.cpp:272-283``); ``set_wired_limit`` (default 0, at most the working set,
  ``metal/allocator.cpp:254-261``; ``memory.h:66-78``) keeps that many bytes resident and
  changes speed (no paging), not the peak; the working set itself is
  :data:`introspect.overhead.METAL_WORKING_SET_FRACTION` of RAM.
"""

from __future__ import annotations

from introspect._record import record
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: ``vm_page_size`` on Apple silicon (arm64 macOS): 16 KiB; Metal rounds to it.
APPLE_PAGE = 16384
#: The CPU allocator's cache page (``no_gpu/allocator.cpp:84``).
CPU_PAGE = 4096
#: Requests below this come from the 1 MiB heap (``metal/allocator.h:51-52``).
HEAP_SMALL = 256
#: Committed command buffers the evaluator lets run before it waits (``transforms.cpp:25``).
MAX_ACTIVE_TASKS = 10
#: (max ops, max MB) per command buffer by the architecture name's last letter
#: (``metal/device.cpp:600-626``); anything else takes the default.
COMMIT_LIMITS = {"p": (20, 40), "g": (40, 40), "s": (50, 50), "d": (50, 50)}
DEFAULT_COMMIT = (40, 40)
#: The first MLX release whose fused Metal SDPA takes a causal mask (2025-03-20), and
#: the first whose SDPA falls back to the unfused graph under grad (2025-04-17).
FUSED_CAUSAL_ATTENTION = (0, 24, 0)
UNFUSED_TRAINING_ATTENTION = (0, 25, 0)
#: The days (from, until) mlx-lm's trainer compiled its step: ml-explore/mlx-lm 93a8ac0f
#: (#528) added ``mx.compile``, 0cd45a2b (#608, for MoE models) removed it, b92c8f3e (#53)
#: put it back.
MLX_LM_COMPILED_STEP = (("2024-03-12", "2024-03-24"), ("2025-03-25", None))

#: Fraction of unified memory Metal recommends as the GPU's working set (the figure
#: :mod:`introspect.overhead` budgets with).
WORKING_SET_FRACTION = 0.75

DERIVED = "derived for Metal from MLX's source (ml-explore/mlx 846d17622), not measured"
VERIFIED = "the MLX estimate is verified on the CPU stream (mx.get_peak_memory on Linux)"


def page_rounded(size: int, page: int = APPLE_PAGE) -> int:
    """The bytes Metal's allocator gives a ``size``-byte request: whole pages above one
    page, the request itself below (``metal/allocator.cpp:123-126``); 0 stays 0."""
    if size <= page:
        return max(size, 0)
    return -(-size // page) * page


def reuse_slack_bound(size: int, page: int = APPLE_PAGE) -> int:
    """The most a reused cached buffer can exceed a ``size``-byte request and still be
    taken: its length must be below ``min(2·size, size + 2·page)``
    (``common/buffer_cache.h:33-35``), so up to that less one byte more is counted."""
    return max(0, min(2 * size, size + 2 * page) - size - 1)


def commit_limits(arch: str | None) -> tuple[int, int]:
    """(max ops, max MB) per command buffer for a Metal architecture name such as
    ``applegpu_g15s`` (its last letter: p phone, g base/Pro, s Max, d Ultra)."""
    if not arch:
        return DEFAULT_COMMIT
    return COMMIT_LIMITS.get(arch.strip()[-1:].lower(), DEFAULT_COMMIT)


def pinned_ops_bound(arch: str | None = None) -> int:
    """Ops whose inputs one stream may hold at once: the open buffer and the
    :data:`MAX_ACTIVE_TASKS` committed ones, each committing after more than max ops."""
    max_ops, _ = commit_limits(arch)
    return (MAX_ACTIVE_TASKS + 1) * (max_ops + 1)


def memory_limits(memory_bytes: int, working_set: int) -> dict[str, int]:
    """Metal's defaults for a Mac (``metal/allocator.cpp:63-65``): the memory limit and
    cache limit min(1.5·working set, 0.95·RAM); cache released past 0.95·working set."""
    block = int(min(1.5 * working_set, 0.95 * memory_bytes))
    return {
        "memory_limit": block,
        "cache_limit": block,
        "gc_limit": min(int(0.95 * working_set), block),
    }


def _version(text: str) -> tuple[int, int, int]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def attention_kept_in_training(mlx_version: str | None, force_fused: bool = False) -> bool | None:
    """Whether Metal keeps each layer's T×T probabilities under ``value_and_grad`` as the
    CPU graph does (None when the version is not known). Before 0.24 the fused kernel
    took no mask (v0.23.2 ``fast.cpp:715``: ``!mask``), and a training step has a causal
    one, so the unfused graph ran; 0.24.x fused causal attention under grad too
    (v0.24.0 ``fast.cpp:728-733``: a causal mask is supported, no grad check; v0.24.2
    ``fast.cpp:743-783``); from 0.25.0 grad tracing takes the unfused graph again
    (:data:`UNFUSED_TRAINING_ATTENTION`) unless the caller passes ``force_fused=True``
    (``scaled_dot_product_attention.cpp:728-743``: checked before ``is_training``), whose
    VJP recomputes one layer at a time as on 0.24.x."""
    if force_fused:
        return False
    if not mlx_version:
        return None
    return not (FUSED_CAUSAL_ATTENTION <= _version(mlx_version) < UNFUSED_TRAINING_ATTENTION)


def mlx_lm_step_compiled(date: str | None) -> bool | None:
    """Whether ``mlx_lm.lora``'s trainer compiled its step on ``date`` (ISO
    ``YYYY-MM-DD``: the run's, or its mlx-lm checkout's): inside a window of
    :data:`MLX_LM_COMPILED_STEP` (``mlx_lm/tuner/trainer.py``: ``step`` under
    ``@partial(mx.compile, inputs=state, outputs=state)``; between the windows, e.g.
    a5322574 on 2025-03-22, a plain function). None when not known."""
    if not date:
        return None
    day = date[:10]
    return any(lo <= day and (hi is None or day < hi) for lo, hi in MLX_LM_COMPILED_STEP)


def buffer_sizes(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[int, int]]:
    """(bytes, count) of the step's long-lived buffers: each block's linears (their
    Hugging Face shapes, :func:`introspect.refined.lora.linear_shapes`, every expert's
    under MoE) and norms in the working dtype, the embedding and an untied head; for LoRA
    each adapter's A (d_in×r) and B (r×d_out) in FP32 with its gradient and Adam's two
    moments on the top K blocks; else each weight's gradient and two moments beside it."""
    from introspect.refined import lora
    from introspect.refined.precision import working_weight_bytes

    size = working_weight_bytes(setup)
    L, d = spec.num_hidden_layers, spec.hidden_size
    shapes = lora.linear_shapes(spec)
    experts = spec.num_local_experts or 1
    ffn = {"gate_proj", "up_proj", "down_proj", "gate_up_proj"}
    weights = [
        (d_in * d_out * size, L * (experts if name in ffn else 1))
        for name, (d_in, d_out) in shapes.items()
    ]
    weights.append((d * size, L * spec.norms_per_layer + 1))
    weights.append((spec.vocab_size * d * size, 1 if spec.tie_word_embeddings else 2))
    if setup.finetune not in ("lora", "qlora", "dora"):
        return weights + [(b, 3 * n) for b, n in weights]
    k, r = lora.adapted_layers(spec, setup), setup.lora_rank
    adapters = []
    for name in lora.targets(spec, setup):
        d_in, d_out = shapes[name]
        adapters += [(d_in * r * 4, 4 * k), (r * d_out * 4, 4 * k)]  # value, grad, m, v
    return weights + adapters


def rounding_bytes(spec: ModelSpec, setup: TrainingSetup, page: int = APPLE_PAGE) -> int:
    """Expected page rounding of the step's long-lived buffers (:func:`buffer_sizes`):
    each buffer above a page rounded up to whole pages (most shapes are whole pages: 0)."""
    return sum(
        count * (page_rounded(size, page) - size) for size, count in buffer_sizes(spec, setup)
    )


@record
class MetalView:
    """The CPU-verified estimate and what differs on Metal, each line with its source."""

    estimate: int
    rounding: int
    pinned_ops: int
    limits: dict[str, int] | None
    #: The peak with MLX 0.24.x's fused attention (:func:`fused_attention_peak`), or None.
    fused_024: int | None = None

    @property
    def allocated(self) -> int:
        """``mx.get_peak_memory()`` on Metal as derived: the estimate plus page rounding."""
        return self.estimate + self.rounding

    def lines(self) -> list[str]:
        from introspect.units import fmt_memory

        out = [
            f"on Apple silicon (Metal): {DERIVED}; {VERIFIED}",
            f"  estimate (the CPU stream's)                 {fmt_memory(self.estimate):>10}",
        ]
        out += [
            f"  + page rounding (16 KiB pages)              {fmt_memory(self.rounding):>10}"
            "  (metal/allocator.cpp:123-126; applied)",
            f"  = derived peak on Metal                     {fmt_memory(self.allocated):>10}",
            "  peak counts live buffers only, not MLX's cache (metal/allocator.cpp:166-167); "
            "Activity Monitor shows the cache too",
            f"  not applied: command buffers may hold inputs of up to {self.pinned_ops} ops "
            "(metal/eval.cpp:47-68, device.cpp:600-626, transforms.cpp:25) vs ~110 on the CPU "
            "(may raise the peak); fused rms_norm and rope keep less than the CPU fallback "
            "(fast.cpp:90-177; a CPU emulation of their saved sets, "
            "introspect/measure/mlx_metal_kernels.py, lowers the peak — not derived in closed "
            "form); attention under grad is unfused before MLX 0.24 and from 0.25 "
            "(scaled_dot_product_attention.cpp:739-743), as on the CPU",
        ]
        if self.fused_024 is not None and self.fused_024 != self.estimate:
            out.append(
                f"  on MLX 0.24.x (fused causal attention under grad, its VJP one layer at a "
                f"time: fast.cpp v0.24.2:738-783): {fmt_memory(self.fused_024 + self.rounding)}"
            )
        if self.limits:
            lim = self.limits
            out.append(
                f"  memory/cache limit {fmt_memory(lim['memory_limit'])}, cache released past "
                f"{fmt_memory(lim['gc_limit'])} (metal/allocator.cpp:63-65); wired limit changes "
                "residency, not the peak"
            )
        return out

    def to_json(self) -> dict:
        return {
            "estimate_bytes": self.estimate,
            "page_rounding_bytes": self.rounding,
            "allocated_peak_bytes": self.allocated,
            "mlx_0_24_fused_attention_bytes": (
                None if self.fused_024 is None else self.fused_024 + self.rounding
            ),
            "pinned_ops_bound": self.pinned_ops,
            "limits": self.limits,
            "status": DERIVED,
            "verified": VERIFIED,
        }


def metal_view(
    spec: ModelSpec, setup: TrainingSetup, estimate: int, memory_bytes: int | None = None
) -> MetalView:
    """The Metal view of an MLX estimate (``estimate`` bytes, the refined total) on a Mac
    with ``memory_bytes`` of unified memory (None: no limits shown)."""
    limits = None
    if memory_bytes is not None:
        working_set = int(WORKING_SET_FRACTION * memory_bytes)
        limits = memory_limits(memory_bytes, working_set)
    return MetalView(
        estimate,
        rounding_bytes(spec, setup),
        pinned_ops_bound(None),
        limits,
        fused_attention_peak(spec, setup),
    )


#: The shape kinds of the attention's T×T tensors (:data:`introspect.refined.mlx.KINDS`).
T2_KINDS = ("T²", "B·T²", "B·h·T²")


def _moment_totals(
    spec: ModelSpec, setup: TrainingSetup, t2_layers: int | None, t2_fixed: bool = True
) -> list[int]:
    """Each derived MLX moment's total (:func:`introspect.refined.mlx.moments`), with the
    T×T kinds counted at ``t2_layers`` layers on the same line (None: at the step's
    depth, as the closed form counts them); ``t2_fixed`` False drops the line's
    intercept for those kinds too (with ``t2_layers`` 0: no T×T at all)."""
    from introspect.refined import mlx
    from introspect.refined.lora import adapted_layers
    from introspect.refined.mlx_counts import candidates as counts

    structure = mlx.structure_of(spec, setup)
    lora = setup.finetune in ("lora", "dora")
    candidates = counts(mlx.counts_key(spec, setup))  # a LoRA step's keys included
    base = sum(mlx.state_terms(spec, setup).values())
    base += mlx.lora_upcast_bytes(spec, setup) if lora else 0
    base += sum(mlx.extra_terms(spec, setup).values())  # DoRA, dropout, accumulation
    depth = adapted_layers(spec, setup) if lora else spec.num_hidden_layers
    x = mlx.dims(spec, setup)
    mha = x.kv == x.h or structure in ("phi", "gpt2", "reference-standard")
    totals = []
    for c in candidates:
        per, fixed = mlx.segment(c, depth)
        total = base
        for kind in dict.fromkeys([*per, *fixed]):
            layers = t2_layers if (kind in T2_KINDS and t2_layers is not None) else depth
            size = mlx.numel(mlx.MHA_KIND.get(kind, kind) if mha else kind, x)
            intercept = fixed.get(kind, 0) if (t2_fixed or kind not in T2_KINDS) else 0
            total += round((layers * per.get(kind, 0) + intercept) * size)
        totals.append(total)
    return totals


def _derivable(spec: ModelSpec, setup: TrainingSetup) -> bool:
    from introspect.refined import mlx

    return mlx.applies(setup, spec) and not setup.activation_checkpointing


#: B·h·T² tensors (in the step's dtype) one layer's fused-attention VJP holds at once on
#: MLX 0.24.x: ``Custom::vjp`` (v0.24.0 ``fast.cpp:15-29``) differentiates the fallback
#: (``fast.cpp:667-717``) in the backward, and at ``Softmax::vjp`` (``primitives.cpp``
#: v0.24.0:4212-4224: ``s·g − s·sum(s·g)``) the recomputed probabilities s, their product
#: with the cotangent and ``s·sum(...)`` are alive together — three, the rest donated
#: into them. The CPU replay of that VJP (``introspect.measure.mlx_metal_kernels.
#: attention_vjp_t2_bytes``, least squares over ten small shapes) reads 6.13 bytes per
#: B·h·T² element in BF16 and 12.25 in FP32: 3.06 tensors. Metal runs the same graph in
#: the same order; its kernels, unlike the CPU's BF16 GEMM, make no FP32 copies.
FUSED_VJP_T2_TENSORS = 3


def fused_vjp_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The T×T bytes of one layer's fused-attention VJP on MLX 0.24.x:
    :data:`FUSED_VJP_T2_TENSORS` · B·h·T² · (2 in BF16, else 4) plus the T² bool mask
    the fallback builds (``q_idx >= k_idx``, v0.24.0 ``fast.cpp:686-695``)."""
    from introspect.refined import mlx

    x = mlx.dims(spec, setup)
    size = 2 if mlx.dtype_of(setup) == "bf16" else 4
    return FUSED_VJP_T2_TENSORS * size * mlx.numel("B·h·T²", x) + mlx.numel("T²", x)


def _phases(spec: ModelSpec, setup: TrainingSetup) -> list[str]:
    from introspect.refined import mlx
    from introspect.refined.mlx_counts import candidates as counts

    return [c.phase for c in counts(mlx.counts_key(spec, setup))]  # a LoRA step's keys too


def fused_attention_peak(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """The MLX peak as Metal ran it on MLX 0.24.x (:func:`attention_kept_in_training`):
    ``mx.fast.scaled_dot_product_attention`` under ``value_and_grad`` took the fused
    kernel (v0.24.2 ``fast.cpp:738-783``: head dims 64/80/128, causal or array mask, on
    the GPU), which keeps no T×T, and its VJP was ``Custom::vjp`` — the unfused graph's
    VJP built in the backward (``fast.cpp:15-26``), so T×T tensors exist for one layer
    at a time. Peak = max over the derived moments of the moment's T×T-free total
    (:func:`t2_free_peak`'s) plus, for a backward moment, one layer's VJP
    (:func:`fused_vjp_bytes`): the backward moment's other tensors taken as alive while
    that VJP runs, capped at the unfused step's peak (which holds that VJP and every
    layer's probabilities too). The one layer is counted from the VJP itself, not read off the
    L-layer line (whose L ≥ 4 intercept gave 6 tensors at one layer). An upper bound on
    the VJP's moment: real mlx-lm LoRA steps on the CPU with the 0.24.x attention
    emulated (``introspect.measure.mlx_metal_kernels.fused_attention_024``; BF16, B = 2,
    h = 4, d = 256) peak 1.93–2.56 B·h·T² tensors above :func:`t2_free_peak` (L = 2,
    T = 1024 and 2048; L = 4, T = 1536) where this derives 3.06: 8–12% above those
    steps, the backward moment's MLP and logits tensors being freed by the time the top
    layer's attention VJP runs (not modelled: that moment is not a derived candidate).
    None where the
    derived counts do not apply (other structures, checkpointing, torch's moments)."""
    if not _derivable(spec, setup):
        return None
    head_dim = spec.head_dim or spec.hidden_size // spec.num_attention_heads
    if head_dim not in (64, 80, 128):
        return None  # v0.24.2 fast.cpp:738-739: no fused kernel, the unfused graph ran
    vjp = fused_vjp_bytes(spec, setup)
    free = _moment_totals(spec, setup, 0, t2_fixed=False)
    fused = max(
        total + (vjp if phase == "backward" else 0)
        for phase, total in zip(_phases(spec, setup), free, strict=True)
    )
    # The unfused step runs the same VJP graph with every layer's probabilities kept
    # besides, so the fused one holds no more; above it (small T) the backward moment's
    # other tensors were over-counted as alive during the VJP.
    return min(fused, max(_moment_totals(spec, setup, None)))


def t2_free_peak(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """The derived MLX peak with no T×T tensor at all (every moment's T×T kinds dropped,
    per layer and fixed; every other kind as the closed form counts it): the floor under
    :func:`fused_attention_peak` whatever the one layer holds. None where the derived
    counts do not apply."""
    if not _derivable(spec, setup):
        return None
    return max(_moment_totals(spec, setup, 0, t2_fixed=False))
