"""TRL's DPOTrainer's step (``--trainer dpo``), read from TRL 1.16.0
``trl/trainer/dpo_trainer.py``:

* the collator (``DataCollatorForPreference``) stacks each pair's chosen and rejected
  prompt+completion as two rows, padded to the batch's longest (at most ``max_length``,
  dpo_config.py:195), so the policy's one forward and backward are over 2·B rows
  (``_compute_loss``, :1299: ``chosen_logps, rejected_logps = logps.chunk(2)``) through
  the same fused LM head as SFTTrainer (``add_fused_lm_head``, :960; its per-token outputs
  add only N-long tensors): :func:`policy_setup`;
* the reference log-probabilities: without ``precompute_ref_log_probs``, each step runs
  the reference under ``torch.no_grad()`` after the policy's forward (:1327-1338): a
  separate ``ref_model`` (full fine-tuning: loaded from the policy's path with its dtype,
  :916-927), or under PEFT the policy itself with its adapters disabled (``use_adapter``,
  :1328; ``ref_model`` is None, :909). Under ``no_grad`` it keeps nothing for backward,
  and its forward's transients (one layer's, and its own fused head's tiles, the
  same size as the policy's) come while the policy's saved set is alive but before the
  loss's backward allocates its accumulators: measured, the peak stays at the policy's
  backward start. What stays is the copy's weights, ``P·w``:
  :func:`reference_state`; precomputed (not under FSDP, :909) holds no reference.

Checked against the real ``DPOTrainer`` on CPU (``tests/test_trl_trainers.py``).
"""

from __future__ import annotations

from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: The term of the reference copy's weights.
REFERENCE = "weights/reference"


def policy_setup(setup: TrainingSetup) -> TrainingSetup:
    """The policy's step: under ``trainer="dpo"``, 2·B rows (chosen and rejected)."""
    if setup.trainer != "dpo":
        return setup
    return setup.replace(batch_size=2 * setup.batch_size)


def holds_reference(setup: TrainingSetup) -> bool:
    """Whether the step holds a reference copy: DPO with a reference model (not
    precomputed) and full fine-tuning (under LoRA the reference is the adapter-free
    base, the policy's own weights)."""
    return setup.trainer == "dpo" and setup.dpo_reference == "model" and setup.finetune == "full"


def reference_state(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The reference copy's weights, ``P·w`` at the policy's loaded dtype
    (``ref_model_init_kwargs.setdefault("dtype", self.model.dtype)``, dpo_trainer.py:924):
    a whole copy per process under DDP and ZeRO-1/2 (``accelerator.prepare_model(...,
    evaluation_mode=True)``, :990), sharded ÷D as the policy under ZeRO-3 and FSDP
    (``prepare_deepspeed`` / ``prepare_fsdp``, :984-988); none otherwise. An offload of
    the policy's parameters does not move it (not modelled: priced on the device)."""
    if not holds_reference(setup):
        return {}
    import math

    from introspect.params import parameter_count
    from introspect.refined.precision import working_weight_bytes

    n = parameter_count(spec)
    how = setup.resolved_sharding
    if how == "fsdp" or (how == "zero" and setup.zero_stage == 3):
        n = math.ceil(n / setup.devices)
    return {REFERENCE: n * working_weight_bytes(setup)}
