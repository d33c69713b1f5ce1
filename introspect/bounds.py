"""Sanity bounds on what a user (or a file) can ask for, and flags that contradict.

Every estimator is closed form, so a huge value costs nothing to compute — but a config
with 10³⁰ layers or a sequence of 10¹² tokens is almost surely a typo or a broken file,
and an estimate for it would be a confident answer to the wrong question. Each bound is
far above any published model (the largest dense models have ~10² layers, d ~ 10⁴,
V ~ 10⁶, N ~ 10¹²); crossing one is one line naming the value, where it came from and
that ``--force`` accepts it.
"""

from __future__ import annotations

from introspect.errors import IntrospectError

#: Field of a ModelSpec → (the most that is plausible, the unit in words).
SPEC_LIMITS: dict[str, tuple[int, str]] = {
    "num_hidden_layers": (10**6, "layers"),
    "hidden_size": (10**7, "hidden size"),
    "num_attention_heads": (10**6, "attention heads"),
    "num_key_value_heads": (10**6, "K/V heads"),
    "head_dim": (10**6, "head width"),
    "intermediate_size": (10**8, "feed-forward width"),
    "vocab_size": (10**9, "vocabulary entries"),
    "max_position_embeddings": (10**9, "positions"),
    "num_local_experts": (10**6, "experts"),
    "num_experts_per_tok": (10**6, "experts per token"),
    "norms_per_layer": (10**3, "norms per layer"),
}
#: The parameter count N.
MAX_PARAMETERS = 10**15
#: Field of a TrainingSetup → (the most that is plausible, its flag).
SETUP_LIMITS: dict[str, tuple[int, str]] = {
    "seq_len": (10**8, "--seq"),
    "batch_size": (10**7, "--batch"),
    "devices": (10**6, "--devices"),
}

FORCE_HINT = "pass --force to accept it"

#: The longest ``--timeout`` / ``INTROSPECT_TIMEOUT`` (seconds, a day): the deadline is
#: waited on with ``threading.Thread.join``, which refuses more than
#: ``threading.TIMEOUT_MAX`` (about 9.2e9 s on Linux) with an OverflowError.
MAX_TIMEOUT_S = 86_400
#: The most devices ``fit --max-devices`` spreads the state over: ``--devices``' bound.
MAX_FIT_DEVICES = SETUP_LIMITS["devices"][0]
#: The most bytes ``--act-bytes`` gives one activation value: FP64's 8, the widest dtype
#: a tensor holds (:data:`introspect.units.DTYPE_BYTES` tops out at FP32's 4).
MAX_ACT_BYTES = 8
#: The most micro-batches ``--grad-accum`` accumulates per optimizer step: every one
#: from the second on holds the same memory, and a measured step runs each of them.
MAX_GRAD_ACCUM = 1024
#: The most measured MLX steps ``measure --repeats`` runs (each a full training step).
MAX_REPEATS = 100


def fmt_big(n: int) -> str:
    """An integer for a message: exact with separators up to 15 digits, else ``1.00e30``
    (an approximate magnitude past 4000 digits, which Python will not print)."""
    if abs(n) < 10**15:
        return f"{n:,}"
    if n.bit_length() < 13_000:
        digits = str(abs(n))
        return f"{'-' if n < 0 else ''}{digits[0]}.{digits[1:3]}e{len(digits) - 1}"
    return f"about 1e{int(n.bit_length() * 0.30103)}"


def check_spec(spec, where: str, *, force: bool = False, flags: dict[str, str] | None = None):
    """Raise :class:`IntrospectError` on the first implausible field of ``spec``.

    ``where`` names the file (or "the flags"); ``flags`` maps a field to the flag that set
    it, named instead when given. Nothing is checked with ``force``."""
    if force:
        return spec
    flags = flags or {}
    check_fields(_fields(spec), where, flags=flags)
    n = spec.n_params
    if n > MAX_PARAMETERS:
        origin = flags.get("num_parameters", f"{where}: the parameter count =")
        raise IntrospectError(
            f"{origin} {fmt_big(n)} is implausible (over {MAX_PARAMETERS:.0e} parameters); "
            f"check the shape, or {FORCE_HINT}"
        )
    return spec


def _fields(spec) -> dict:
    return {name: getattr(spec, name, None) for name in SPEC_LIMITS}


def check_fields(values: dict, where: str, *, flags: dict[str, str] | None = None) -> None:
    """Raise :class:`IntrospectError` on the first field of ``values`` (ModelSpec field →
    value) over its :data:`SPEC_LIMITS`, as :func:`check_spec` (which calls it) words it:
    also for values not yet in a spec (measure's shape flags, before ModelSpec checks
    that they divide)."""
    flags = flags or {}
    for name, (limit, what) in SPEC_LIMITS.items():
        value = values.get(name)
        if isinstance(value, int) and value > limit:
            origin = f"{flags[name]} " if name in flags else f"{where}: {name} = "
            raise IntrospectError(
                f"{origin}{fmt_big(value)} is implausible (over {limit:,} {what}); "
                f"check the value, or {FORCE_HINT}"
            )


def check_setup(setup, *, force: bool = False) -> None:
    """Raise :class:`IntrospectError` on an implausible --seq, --batch or --devices."""
    if force:
        return
    for name, (limit, flag) in SETUP_LIMITS.items():
        value = getattr(setup, name)
        if value > limit:
            raise IntrospectError(
                f"{flag} {fmt_big(value)} is implausible (over {limit:,}); {FORCE_HINT}"
            )


def contradictions(
    *,
    precision: str,
    weights_dtype: str | None,
    zero_stage: int,
    devices: int,
) -> None:
    """Flags that contradict each other: :func:`introspect.applies.contradictions` (the one
    definition of which flags apply to which setup)."""
    from introspect import applies

    applies.contradictions(
        precision=precision, weights_dtype=weights_dtype, zero_stage=zero_stage, devices=devices
    )


def check_rotary(spec, *, flags: dict[str, str] | None = None) -> None:
    """Raise :class:`IntrospectError` when rotary positions cannot rotate ``spec``'s heads.

    Rotary embeddings turn pairs of channels: transformers' ``rotate_half``
    (``transformers/models/llama/modeling_llama.py``) splits the rotated width in two
    halves and the default ``inv_freq`` (``modeling_rope_utils.py``) has one frequency per
    pair, ``int(head_dim · partial_rotary_factor)`` wide; an odd width makes the step fail
    with a shape mismatch inside the attention. ``flags`` names the flags that set the
    shape (measure's), as in :func:`check_spec`."""
    if spec.position_embedding != "rope":
        return
    width = spec.head_size
    rotated = int(width * spec.partial_rotary_factor)
    if rotated % 2 == 0:
        return
    flags = flags or {}
    if spec.head_dim is not None:
        origin = f"{flags.get('head_dim', 'head_dim =')} {width}"
    else:
        d = f"{flags.get('hidden_size', 'hidden_size')} {spec.hidden_size}"
        h = f"{flags.get('num_attention_heads', 'heads')} {spec.num_attention_heads}"
        origin = f"a head width of {width} ({d} / {h})"
    part = "" if rotated == width else f" ({spec.partial_rotary_factor:g} of it: {rotated})"
    raise IntrospectError(
        f"{origin}: rotary positions rotate pairs of channels, so the rotated width{part} "
        "must be even; give an even head width"
    )
