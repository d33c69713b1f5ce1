"""Does it fit, and what must change? A search over the refined closed form.

Everything here is arithmetic on :func:`introspect.refined.estimate` (microseconds to
milliseconds a call), so the verdict, the largest T and B (a bracketing search that
relies only on the peak never falling as T or B grows: :func:`largest`) and the
combinations that fit (a bounded search over the
changes below) are fast and exact for the model they describe. What the device adds
beyond the tensors (CUDA context, allocator reserve) is :mod:`introspect.overhead`'s;
``need`` is whatever the caller compares with the budget.

Each :class:`Change` says what it costs, in the coin it is paid in: recompute time,
communication, host-device traffic, or quality.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from introspect._record import record
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: Largest T and B :func:`largest` tries unless told a cap (2²⁴; far beyond any context
#: window). The command passes the model's own caps instead (:func:`search_cap`).
SEARCH_LIMIT = 1 << 24
#: Combinations of at most this many non-free changes are searched.
MAX_COMBINATION = 3

#: Cost tiers, cheapest first: free, recompute/compute, quality, communication over
#: several devices, host-device traffic, training something smaller than the model.
TIERS = ("free", "compute", "quality", "devices", "offload", "adapters")

Need = Callable[[ModelSpec, TrainingSetup], int]


def peak(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The refined estimate of the step's peak (allocated tensors), bytes: the execution
    layer's total (:attr:`introspect.refined.RefinedEstimate.total`)."""
    from introspect import refined

    return refined.execution_estimate(spec, setup, notes=False).total


@record
class Change:
    """One change to a setup: ``apply`` returns the changed setup, or None where the
    change does not apply (already made, or meaningless here). ``group`` names changes
    that exclude each other (one ZeRO stage, one precision, one fine-tuning method)."""

    key: str
    label: str
    cost: str
    tier: str
    apply: Callable[[TrainingSetup], TrainingSetup | None]
    group: str = ""


def _if(cond: bool, setup: TrainingSetup, **changes) -> TrainingSetup | None:
    """The changed setup, or None where ``cond`` fails or the change does not apply to
    the rest of the setup (:mod:`introspect.applies`, the flags' own rules: fit never
    proposes what the flags would refuse)."""
    if not cond:
        return None
    from introspect.applies import NotApplicable

    try:
        return setup.replace(**changes)
    except NotApplicable:
        return None


def _bf16(setup: TrainingSetup) -> TrainingSetup | None:
    act = "bf16" if setup.activation_bytes == 4 else setup.activation_dtype
    return _if(
        setup.precision != "bf16",
        setup,
        precision="bf16",
        weights_dtype="bf16",
        activation_dtype=act,
    )


def changes(devices: int = 8, lora_rank: int = 16, framework: str = "torch") -> tuple[Change, ...]:
    """The changes the fit finder weighs for ``framework``; ZeRO/FSDP over ``devices``
    devices, LoRA and QLoRA at rank ``lora_rank`` on every block linear. A change that
    does not apply to ``framework``'s default setup (:mod:`introspect.applies`: on MLX
    the fused and 8-bit optimizers, the optimizer in backward, a chunked loss, sharding
    and offload) is left out."""
    # Eager in the probe: the attention change applies wherever a setup runs eager.
    probe = TrainingSetup(framework=framework, attention="eager")
    return tuple(c for c in _changes(devices, lora_rank) if c.apply(probe) is not None)


def _changes(devices: int, lora_rank: int) -> tuple[Change, ...]:
    D, r = devices, lora_rank

    def zero(stage: int) -> Callable[[TrainingSetup], TrainingSetup | None]:
        # Stage 3 is FSDP full sharding, as its label says; stages 1-2 ZeRO's.
        how = "fsdp" if stage == 3 else "zero"
        return lambda s: _if(
            D > 1 and (s.devices, s.zero_stage) != (D, stage),
            s,
            devices=D,
            zero_stage=stage,
            sharding=how,
        )

    full = ("full",)
    return (
        Change(
            "attention",
            "memory-efficient attention",
            "none: flash/SDPA recomputes the scores inside its backward (usually faster)",
            "free",
            lambda s: _if(s.attention == "eager", s, attention="memory_efficient"),
        ),
        Change(
            "cross_entropy",
            "fused / chunked cross-entropy",
            "little: the loss in chunks of 1024 tokens (e.g. Liger's fused linear CE)",
            "free",
            lambda s: _if(s.cross_entropy == "standard", s, cross_entropy="fused"),
        ),
        Change(
            "fused_optimizer",
            "fused optimizer (fused=True)",
            "none: torch's fused Adam updates in place (CUDA)",
            "free",
            lambda s: _if(
                s.optimizer in ("adam", "adamw")
                and s.resolved_optimizer_impl in ("foreach", "single_tensor"),
                s,
                optimizer_impl="fused",
            ),
        ),
        Change(
            "checkpointing",
            "activation checkpointing",
            "recompute: one more forward per step (about +33% step time)",
            "compute",
            lambda s: _if(not s.activation_checkpointing, s, activation_checkpointing=True),
        ),
        Change(
            "optimizer_in_backward",
            "optimizer in backward",
            "little: no gradient accumulation or global-norm clipping across parameters",
            "compute",
            lambda s: _if(
                not s.optimizer_in_backward and s.optimizer != "none", s, optimizer_in_backward=True
            ),
        ),
        Change(
            "bf16",
            "pure BF16 (weights, grads, Adam state)",
            "quality: no FP32 master copy; small updates round away (use Kahan summation "
            "or stochastic rounding)",
            "quality",
            _bf16,
            group="precision",
        ),
        Change(
            "adam8bit",
            "8-bit Adam",
            "quality: state 4× smaller (block-wise 8-bit m and v, bitsandbytes); close to "
            "32-bit Adam in Dettmers et al. 2022",
            "quality",
            lambda s: _if(s.optimizer in ("adam", "adamw"), s, optimizer="adam8bit"),
        ),
        *(
            Change(
                f"zero{stage}",
                f"ZeRO-{stage} over {D} devices"
                if stage < 3
                else f"FSDP full shard over {D} devices",
                "communication: "
                + (
                    "as DDP (reduce-scatter + all-gather instead of all-reduce)"
                    if stage < 3
                    else "1.5× DDP's (weights all-gathered in forward and again in backward)"
                ),
                "devices",
                zero(stage),
                group="zero",
            )
            for stage in (1, 2, 3)
        ),
        Change(
            "offload_optimizer",
            "CPU offload of optimizer state",
            "host traffic: gradients to the CPU and weights back every step; the update "
            "runs on the CPU (ZeRO-Offload)",
            "offload",
            lambda s: _if(s.offload == "none" and s.optimizer != "none", s, offload="optimizer"),
            group="offload",
        ),
        Change(
            "offload_parameters",
            "CPU offload of parameters and optimizer state",
            "host traffic: every block's weights cross PCIe in forward and backward "
            "(ZeRO-Infinity, FSDP CPUOffload); often several times slower",
            "offload",
            lambda s: _if(s.offload != "parameters", s, offload="parameters"),
            group="offload",
        ),
        Change(
            "lora",
            f"LoRA r={r} (all linear)",
            "quality: trains r·(d_in+d_out) per block linear; the base stays frozen",
            "adapters",
            lambda s: _if(s.finetune in full, s, finetune="lora", lora_rank=r),
            group="finetune",
        ),
        Change(
            "qlora",
            f"QLoRA r={r} (NF4 base, double quant)",
            "quality and time: the base in 4 bits, dequantized for every matmul (slower); "
            "LoRA adapters on top",
            "adapters",
            lambda s: _if(s.finetune != "qlora", s, finetune="qlora", lora_rank=r),
            group="finetune",
        ),
        # MLX's QLoRA: mlx_lm.lora over a 4-bit mlx-community (mlx_lm.convert -q) base.
        Change(
            "lora_affine4",
            f"LoRA r={r} over a 4-bit base (mx.quantize affine, groups of 64)",
            "quality and time: the base in 4 bits (an mlx_lm.convert -q checkpoint), "
            "quantized_matmul for every matmul; LoRA adapters on top",
            "adapters",
            lambda s: _if(
                s.base_quant != "affine4" or s.finetune != "lora",
                s,
                finetune="lora",
                lora_rank=s.lora_rank if s.finetune == "lora" else r,
                base_quant="affine4",
            ),
            group="finetune",
        ),
    )


@record
class Row:
    """One change (or combination) and its effect: ``need`` bytes per device."""

    label: str
    cost: str
    tier: str
    need: int
    saving: int
    fits: bool
    setup: TrainingSetup

    def to_json(self) -> dict:
        return {
            "change": self.label,
            "cost": self.cost,
            "tier": self.tier,
            "need_bytes": self.need,
            "saving_bytes": self.saving,
            "fits": self.fits,
        }


def search_cap(spec: ModelSpec, field: str) -> tuple[int, str]:
    """The largest T or B (``field``) the fit command searches, and where it comes from:
    T up to the model's context window (``max_position_embeddings``) where the config
    gives one, else the sanity bound on --seq (:data:`introspect.bounds.SETUP_LIMITS`);
    B up to the sanity bound on --batch. So the search takes at most about
    2·log₂(cap) needs, whatever the budget."""
    from introspect.bounds import SETUP_LIMITS

    if field == "seq_len" and spec.max_position_embeddings:
        return spec.max_position_embeddings, "the model's max_position_embeddings"
    limit, flag = SETUP_LIMITS[field]
    return limit, f"introspect's sanity bound on {flag}"


def largest(
    spec: ModelSpec,
    setup: TrainingSetup,
    budget: int,
    field: str,
    need: Need = peak,
    limit: int = SEARCH_LIMIT,
) -> int | None:
    """The largest ``seq_len`` or ``batch_size`` (``field``) up to ``limit`` whose need
    fits ``budget``, the others as in ``setup``; None when even 1 does not fit. An answer
    equal to ``limit`` means it fits at every value up to it (nothing above is tried).

    Exact, by the one property the search relies on: the need never falls as T or B
    grows. The answer is the ``x`` with ``need(x) ≤ budget < need(x + 1)``, found by
    keeping a bracket, ``lo`` (fits) < ``hi`` (does not), and closing it. It starts at
    the setup's own value (already asked for), and grows from the largest value that
    fits by where the line through the last two points reaches the budget, at least one
    step and at most doubling. The need is nearly a parabola in T (eager attention's T²
    terms; a line in B), so each guess inside the bracket is where the parabola through
    the last three points reaches the budget (:func:`_guess`), which lands next to the
    answer in a few evaluations; a guess outside the bracket, or two guesses in a row
    that moved the same end, is followed by a halving step, so it never takes many more
    steps than bisection's log₂."""
    asked: list[tuple[int, int]] = []

    def value(x: int) -> int:
        n = need(spec, setup.replace(**{field: x}))
        asked.append((x, n))
        return n

    lo, n_lo = 1, value(1)
    if n_lo > budget:
        return None
    hi = None
    start = min(getattr(setup, field), limit)
    if start > 1:
        if value(start) <= budget:
            lo = start
        else:
            hi = start
    while hi is None:
        if lo == limit:
            return lo
        step = lo  # doubling, unless the last two points give a line that rises
        if len(asked) >= 2:
            (x0, n0), (x1, n1) = sorted(asked)[-2:]
            if n1 > n0:
                step = (budget - n1) * (x1 - x0) // (n1 - n0) + 1
        x = min(lo + max(1, min(step, lo)), limit)
        if value(x) <= budget:
            lo = x
        else:
            hi = x
    same_end, last_end = 0, ""
    while hi - lo > 1:
        guess = _guess(asked[-3:], budget) if same_end < 2 else None
        if guess is not None and lo < guess < hi:
            mid = guess
        elif guess is not None and guess <= lo:
            mid = lo + 1  # the answer is next to lo, or the guess is off: either way a step
        else:
            mid, same_end = (lo + hi) // 2, 0
        end = "lo" if value(mid) <= budget else "hi"
        same_end = same_end + 1 if end == last_end else 1
        last_end = end
        if end == "lo":
            lo = mid
        else:
            hi = mid
    return lo


def _guess(points: list[tuple[int, int]], budget: int) -> int | None:
    """Where the polynomial through ``points`` (two or three ``(x, need)``; a line or a
    parabola, Newton's divided differences) reaches ``budget``, rounded down; None where
    it does not (flat, or no real crossing). Only a guess: :func:`largest` checks it."""
    if len(points) < 2:
        return None
    (x1, y1), (x2, y2) = points[-2:]
    if x1 == x2:
        return None
    f12 = (y2 - y1) / (x2 - x1)
    a = 0.0
    if len(points) == 3 and len({points[0][0], x1, x2}) == 3:
        x0, y0 = points[0]
        a = (f12 - (y1 - y0) / (x1 - x0)) / (x2 - x0)
    b = f12 + a * (x2 - x1)  # in u = x - x2: need ≈ y2 + b·u + a·u²
    c = y2 - budget
    if abs(a) * max(abs(x2 - x1), 1) ** 2 < 1e-9 * max(abs(b) * abs(x2 - x1), 1.0):
        if b <= 0:
            return None
        u = -c / b
    else:
        disc = b * b - 4 * a * c
        if disc < 0:
            return None
        root = disc**0.5
        # the crossing on the rising side: the larger root of a cup, the smaller of a cap
        u = (-b + root) / (2 * a) if a > 0 else (-b - root) / (2 * a)
    x = x2 + u
    if x != x or abs(x) > 4 * SEARCH_LIMIT:
        return None
    return int(x // 1)


def rank_changes(
    spec: ModelSpec,
    setup: TrainingSetup,
    budget: int,
    candidates: tuple[Change, ...],
    need: Need = peak,
) -> list[Row]:
    """Each applicable change alone, ranked by its need (smallest first)."""
    base = need(spec, setup)
    rows = []
    for c in candidates:
        changed = c.apply(setup)
        if changed is None:
            continue
        n = need(spec, changed)
        if n >= base:
            continue
        rows.append(Row(c.label, c.cost, c.tier, n, base - n, n <= budget, changed))
    return sorted(rows, key=lambda r: r.need)


def combinations(
    spec: ModelSpec,
    setup: TrainingSetup,
    budget: int,
    candidates: tuple[Change, ...],
    need: Need = peak,
    limit: int = 5,
    floor: Need | None = None,
) -> tuple[list[Change], list[Row]]:
    """The free changes taken, and the cheapest combinations that fit on top of them.

    Every free change that helps is taken first; then subsets of at most
    :data:`MAX_COMBINATION` other changes (one per group) are tried. Only minimal ones
    are kept (no smaller subset of the same changes fits), ranked by their costliest
    tier, their size, then their need. ``floor`` is a cheap bound the need never goes
    below: a combination whose floor is over the budget cannot fit and is not priced
    (the answer is the same, without the need's cost)."""
    base = need(spec, setup)
    free = [c for c in candidates if c.tier == "free"]
    start, taken = setup, []
    for c in free:
        changed = c.apply(start)
        if changed is not None and need(spec, changed) < need(spec, start):
            start, taken = changed, [*taken, c]
    others = [c for c in candidates if c.tier != "free"]
    found: list[tuple[tuple, Row, frozenset]] = []
    if need(spec, start) <= budget:
        return taken, [_row([], start, need(spec, start), base, budget)]
    for size in range(1, MAX_COMBINATION + 1):
        for combo in itertools.combinations(others, size):
            groups = [c.group for c in combo if c.group]
            if len(groups) != len(set(groups)):
                continue
            keys = frozenset(c.key for c in combo)
            if any(prev <= keys for _, _, prev in found):
                continue
            s: TrainingSetup | None = start
            for c in combo:
                s = c.apply(s) if s is not None else None
            if s is None:
                continue
            if floor is not None and floor(spec, s) > budget:
                continue
            n = need(spec, s)
            if n <= budget:
                worst = max(TIERS.index(c.tier) for c in combo)
                row = _row(list(combo), s, n, base, budget)
                found.append(((worst, size, n), row, keys))
    found.sort(key=lambda f: f[0])
    return taken, [row for _, row, _ in found[:limit]]


def _row(chosen: list[Change], setup: TrainingSetup, n: int, base: int, budget: int) -> Row:
    label = " + ".join(c.label for c in chosen) or "the free changes alone"
    tier = max((c.tier for c in chosen), key=TIERS.index, default="free")
    cost = "; ".join(c.cost.split(":")[0] for c in chosen) or "none"
    return Row(label, cost, tier, n, base - n, n <= budget, setup)


def quadratic_takeover(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """The T at which the saved T² terms (eager attention's probabilities) reach the
    rest of the saved activations (at the end of forward, all of them alive); None when
    nothing quadratic is kept."""
    from introspect.refined.execution import saved_terms

    def split(T: int) -> tuple[int, int]:
        saved = saved_terms(spec, setup.replace(seq_len=T))
        quad = sum(v for k, v in saved.items() if "/quadratic/" in k)
        return quad, sum(saved.values()) - quad

    quad, _ = split(2)
    if quad == 0:
        return None
    lo, hi = 1, 2
    while hi <= SEARCH_LIMIT:
        q, rest = split(hi)
        if q >= rest:
            break
        lo, hi = hi, hi * 2
    else:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        q, rest = split(mid)
        lo, hi = (lo, mid) if q >= rest else (mid, hi)
    return hi
