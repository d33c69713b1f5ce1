"""Which MLX setups the derived step describes: predicates on the setup alone.

:mod:`introspect.applies` (the flag rules the setup checks itself against) needs them,
and it sits below the estimators, so they live here, importing nothing of
:mod:`introspect.refined`; :mod:`introspect.refined.mlx` and
:mod:`introspect.refined.mlx_dora` re-export them. The structure half of the question
(whether mlx-lm's block is one of the derived ones) needs the spec and stays in
:func:`introspect.refined.mlx.applies`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from introspect.setup import TrainingSetup


def lora_applies(setup: TrainingSetup) -> bool:
    """mlx-lm's LoRA as ``mlx_lm.lora`` runs it by default and the counts were derived
    for: adapters on every block with mlx-lm's default keys (every nn.Linear of a block:
    ``all-linear``), any dropout (``lora_parameters`` default 0.0; a dropout's mask and
    dropped copies are :func:`introspect.refined.mlx_dora.dropout_terms`), LoRA or DoRA
    (``fine_tune_type``; DoRA's extra is :mod:`introspect.refined.mlx_dora`'s), Adam or
    AdamW over the adapters, checkpointing for LoRA without dropout only, mlx-lm's class,
    one device (:func:`lora_unmodelled_flag`). Named keys (and checkpointing) are derived
    for some structures only: :func:`introspect.refined.mlx.lora_not_derived` asks."""
    return (
        setup.framework in ("mlx", "mlx_compiled")
        and "all-linear" in setup.lora_targets
        and lora_unmodelled_flag(setup) is None
    )


def lora_unmodelled_flag(setup: TrainingSetup) -> str | None:
    """The first flag of an MLX LoRA setup that no LoRA counts describe, whatever the
    structure and keys (None when there is none): the counts are read off mlx-lm's own
    LoRA step (``mlx_lm/tuner/trainer.py`` ``train``: ``nn.value_and_grad`` over the
    adapters, Adam's update, ``default_loss``) — not the reference model's
    (``--impl reference``: MLX's LoRA is mlx-lm's ``LoRALinear``,
    ``mlx_lm/tuner/lora.py``), not with trained embeddings (not part of mlx-lm's LoRA),
    checkpointed (``grad_checkpoint``, ``mlx_lm/tuner/trainer.py``: ``mx.checkpoint``
    around every layer's ``__call__``) only under LoRA without dropout — those counts are
    read off the hand-built checkpointed step (:mod:`introspect.measure.mlx_replay_ckpt`)
    for the structures :func:`introspect.refined.mlx.lora_not_derived` names; DoRA's
    terms and a dropout's masks are not read under it —, Adam or AdamW only (another
    optimizer's state and update differ), the
    standard loss, one device, nothing offloaded."""
    if setup.implementation != "mlx_lm":
        return f"--impl {setup.implementation.replace('_', '-')}"
    if setup.train_embeddings:
        return "--train-embeddings"
    if setup.activation_checkpointing and setup.finetune != "lora":
        return "--checkpointing"
    if setup.activation_checkpointing and setup.lora_dropout:
        # the dropout's masks and dropped copies are remade in each layer's recompute
        # (mx.checkpoint runs the layer again): not read off the checkpointed replays
        return "--checkpointing and --lora-dropout"
    if setup.optimizer not in ("adam", "adamw"):
        return f"--optimizer {setup.optimizer}"
    if setup.cross_entropy != "standard":
        return f"--cross-entropy {setup.cross_entropy}"
    if setup.devices != 1:
        return f"--devices {setup.devices}"
    if setup.offload != "none":
        return f"--offload {setup.offload}"
    if setup.optimizer_in_backward:
        return "--optimizer-in-backward"
    return None


def step_derived(setup: TrainingSetup) -> bool:
    """Whether MLX's derived counts describe the step, whatever the structure: MLX, full
    fine-tuning with Adam (or AdamW: the same graph and one more multiply), a standard
    cross-entropy, one device, nothing offloaded — or mlx-lm's LoRA/DoRA
    (:func:`lora_applies`)."""
    if setup.finetune in ("lora", "dora"):
        return lora_applies(setup)
    return (
        setup.framework in ("mlx", "mlx_compiled")
        and setup.finetune == "full"
        and setup.optimizer in ("adam", "adamw")
        and setup.cross_entropy == "standard"
        and setup.devices == 1
        and setup.offload == "none"
        and not setup.optimizer_in_backward
    )


def dora_unmodelled_flag(setup: TrainingSetup) -> str | None:
    """The first flag of an MLX DoRA setup that the derivation does not cover (None when
    it covers them all): :func:`lora_applies`'s conditions, and a float base (DoRA
    dequantizes a quantized one on every call: not modelled)."""
    if setup.implementation != "mlx_lm":
        return f"--impl {setup.implementation.replace('_', '-')}"
    if "all-linear" not in setup.lora_targets:
        return "--lora-targets " + " ".join(setup.lora_targets)
    if setup.train_embeddings:
        return "--train-embeddings"
    if setup.activation_checkpointing:
        return "--checkpointing"
    if setup.base_quant not in ("auto", "fp32", "bf16", "fp16"):
        return f"--base-quant {setup.base_quant}"
    if setup.optimizer not in ("adam", "adamw"):
        return f"--optimizer {setup.optimizer}"
    if setup.cross_entropy != "standard":
        return f"--cross-entropy {setup.cross_entropy}"
    return None
