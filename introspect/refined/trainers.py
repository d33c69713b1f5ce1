"""What transformers' ``Trainer`` (and TRL's ``SFTTrainer``, its subclass) holds at a step
that a hand-written loop does not (``--trainer hf|trl``), read from transformers 5.24.0
``trainer.py``, ``trainer_optimizer.py`` and bitsandbytes 0.50.2 ``optim/optimizer.py``.

Measured against real ``Trainer.train()`` runs on CPU (two steps under the project's live
tracker, :mod:`introspect.measure.live_tracker`; ``tests/test_trainer_terms.py``) beside
``introspect measure``'s own loop on the same setup, every byte of the difference at the
peak is one of:

* **the bitsandbytes embedding override** (:func:`bnb_state`): ``create_optimizer``
  (``trainer.py:1328-1340``) registers ``{"optim_bits": 32}`` for the ``weight`` of every
  ``nn.Embedding`` when the optimizer class is bitsandbytes' with ``optim_bits == 8``
  (``adamw_bnb_8bit``, ``adamw_8bit``, ``paged_adamw_8bit``:
  ``trainer_optimizer.py:256-257`` sets ``optim_bits = 8 if "8bit" in optim_name``), so a
  trainable embedding (GPT-2's ``wpe`` too; a tied embedding is one parameter) keeps two
  FP32 moments: 8 bytes a value, not 2. A frozen embedding (LoRA) is in no parameter
  group and gets nothing. Beside it the state is bitsandbytes' own per tensor
  (``Optimizer2State.init_state``, ``optimizer.py:492-532``): a tensor under
  ``min_8bit_size`` = 4096 values keeps FP32 m and v (8n); a larger one uint8 m and v (2n)
  and two FP32 ``absmax`` of ``⌈n/256⌉`` blocks, and the two 256-value FP32 quantization
  maps ``qmap1``/``qmap2`` are one shared pair (``name2qmap``) — the sum is the state of a
  real step to the byte.
* **the collated batch** (:func:`batch_bytes`): ``get_batch_samples`` (``trainer.py:2289``)
  pulls all ``gradient_accumulation_steps`` micro-batches of the step before the first
  forward and ``batch_samples`` (and ``inputs``) stay bound through every forward,
  backward and the optimizer step: ``input_ids``, ``attention_mask`` and ``labels``, B·T
  int64 each, per micro-batch (what ``DataCollatorForLanguageModeling`` and a tokenized
  dataset give; a loop that makes its ids before the step holds them outside it).
* **the parameter groups** (:func:`decay_groups`): ``create_optimizer``
  (``trainer.py:1273-1286``) splits the parameters into a weight-decay group (names
  without ``bias``/``norm``, ``get_decay_parameter_names``:1408) and the rest, each group
  in ``named_parameters`` order. torch's single-tensor and foreach Adam run once per group
  (``torch/optim/adam.py`` ``step``: one ``adam(...)`` call per ``param_group``), so the
  previous tensor's ``denom`` is not carried from one group to the next, and a foreach
  update's FP32 copies are one group's (:func:`optimizer_temporaries`); transformers'
  Adafactor loops over the groups in one ``step`` frame, its previous ``update`` carried.

Measured and left out, each under 64 bytes: the 0-d ``tr_loss`` accumulator
(``torch.tensor(0.0)``), the step's loss and ``grad_norm``; the clipping
(``max_grad_norm`` 1.0, accelerate's ``clip_grad_norm_`` → ``torch.nn.utils.
clip_grad_norm_``) makes one 0-d norm per gradient and scales in place (a few bytes per
tensor); ``num_items_in_batch`` (``_get_num_items_in_batch``) is a 0-d count and turns the
loss's reduction into ``sum`` (the same saved tensors). Gradient accumulation's live
gradients are :mod:`introspect.refined.accumulation`'s (the Trainer's loop is the one it
models). Not modelled: a padded batch (a real ``attention_mask`` makes the SDPA mask
B×1×T×T), and the override under ZeRO/FSDP sharding (a note says so).
"""

from __future__ import annotations

import math

from introspect.refined import sharding
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

INT64 = 4 + 4
FP32 = 4

EMBEDDING_STATE = "optimizer/bnb_embedding_state"
BLOCK_SCALES = "optimizer/bnb_block_scales"
BATCH = "activations/trainer/batch"

#: ``Optimizer2State.init_state``: 8-bit state from this many values (``min_8bit_size``).
MIN_8BIT_SIZE = 4096
#: Values per block-wise ``absmax`` (``blocksize = 256``).
BLOCK = 256
#: The collated tensors of one micro-batch: input_ids, attention_mask, labels.
BATCH_TENSORS = 3

Shape = tuple[int, ...]


def applies(setup: TrainingSetup) -> bool:
    """The step is the HF Trainer's (or SFTTrainer's)."""
    return setup.trainer in ("hf", "trl")


def embedding_override(setup: TrainingSetup) -> bool:
    """``create_optimizer``'s 32-bit override applies: the Trainer's 8-bit bitsandbytes
    optimizers (``adam8bit`` is ``adamw_bnb_8bit``/``adamw_8bit``)."""
    return applies(setup) and setup.optimizer in ("adam8bit", "paged_adamw_8bit")


def whole_tensors(setup: TrainingSetup) -> bool:
    """Every rank's optimizer holds whole tensors (one device, or DDP)."""
    return sharding.strategy(setup) in ("none", "ddp") and setup.offload == "none"


def trainable_tensors(
    spec: ModelSpec, setup: TrainingSetup, shapes: list[Shape]
) -> list[tuple[int, bool]]:
    """``(values, is an nn.Embedding weight)`` of each of ``shapes``, the tensors the
    optimizer updates in ``named_parameters`` order
    (:func:`introspect.refined.optimizers.trainable_shapes`): under full training the
    embedding first and GPT-2's learned positions second
    (:func:`sharding.parameter_tensors`); under LoRA the adapters (frozen embeddings have
    no state) and, under ``--train-embeddings``, the embedding first (peft's
    ``modules_to_save`` copy, an ``nn.Embedding``) and an untied head last (an
    ``nn.Linear``)."""
    if setup.finetune == "full":
        embeddings = 2 if spec.position_embedding == "learned" else 1
    else:
        embeddings = 1 if setup.train_embeddings else 0
    return [(math.prod(s), i < embeddings) for i, s in enumerate(shapes)]


def exact_state(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether the per-tensor state can be written: whole tensors, no frozen tower, and
    under LoRA a dense model (peft's MoE expert adapters are one lump here)."""
    if not whole_tensors(setup) or setup.freeze_tower or spec.tower_parameters:
        return False
    if setup.finetune != "full":
        from introspect.refined import lora

        return not lora.peft_moe(spec, setup)
    return True


def bnb_state(spec: ModelSpec, setup: TrainingSetup, shapes: list[Shape]) -> dict[str, int]:
    """bitsandbytes' 8-bit AdamW state under the Trainer over the trainable ``shapes``
    (:func:`trainable_tensors`), by term (module docstring):

    * ``optimizer/adam_m``, ``optimizer/adam_v``: Σ n (uint8, n ≥ 4096) or 4n (FP32 below);
    * :data:`BLOCK_SCALES`: Σ 2·4·⌈n/256⌉ over the 8-bit tensors, plus 2·256·4 once for
      the shared quantization maps;
    * :data:`EMBEDDING_STATE`: 8·n for each trainable ``nn.Embedding`` weight.

    Empty where :func:`exact_state` is false (the flat 2 bytes a value stand)."""
    if not exact_state(spec, setup):
        return {}
    m = scales = embedding = 0
    eight = False
    for n, is_embedding in trainable_tensors(spec, setup, shapes):
        if is_embedding:
            embedding += 2 * FP32 * n
        elif n < MIN_8BIT_SIZE:
            m += FP32 * n
        else:
            m += n
            scales += 2 * FP32 * math.ceil(n / BLOCK)
            eight = True
    from introspect.terms import ADAM_M, ADAM_V

    return {
        ADAM_M: m,
        ADAM_V: m,
        BLOCK_SCALES: scales + (2 * BLOCK * FP32 if eight else 0),
        EMBEDDING_STATE: embedding,
    }


def paged_embeddings(spec: ModelSpec, setup: TrainingSetup, shapes: list[Shape]) -> list[bool]:
    """Which of the paged optimizer's tensors (``shapes``, whole) are ``nn.Embedding``
    weights with 32-bit state under the Trainer (all False without the override)."""
    if setup.optimizer != "paged_adamw_8bit" or not embedding_override(setup):
        return [False] * len(shapes)
    return [e for _, e in trainable_tensors(spec, setup, shapes)]


def decay_groups(shapes: list[Shape]) -> list[list[Shape]]:
    """The Trainer's two parameter groups, each in ``named_parameters`` order: weights
    (≥ 2 dims: the embeddings, linears, experts, routers) then biases and norms (1-D),
    empty groups dropped. ``ndim ≥ 2`` stands for ``get_decay_parameter_names``' name
    rule (``bias``, ``layernorm``, ``rmsnorm``, ``norm``, ``_norm``, and ``nn.LayerNorm``'s
    parameters: ``trainer.py:1416``), the same split for the families here."""
    groups = [[s for s in shapes if len(s) >= 2], [s for s in shapes if len(s) < 2]]
    return [g for g in groups if g]


def optimizer_temporaries(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """torch Adam's update temporaries (bytes) under the Trainer's two groups, or None
    where the loop's own rule stands (LoRA's adapters are one group already; sharded or
    offloaded states):

    * single-tensor: ``max`` over groups of ``max(prev + 2·cur)`` with ``prev`` = 0 at each
      group's first tensor (``_single_tensor_adam`` runs once per group);
    * foreach: the largest group's values (``_multi_tensor_adam``'s FP32 copies, per
      group);
    * fused: none.

    At the state's bytes per value (FP32, BF16 under pure BF16)."""
    if setup.optimizer not in ("adam", "adamw") or not applies(setup):
        return None
    if setup.finetune != "full" or not exact_state(spec, setup):
        return None
    impl = setup.resolved_optimizer_impl
    width = 2 if setup.precision == "bf16" else FP32
    groups = [[math.prod(s) for s in g] for g in decay_groups(sharding.parameter_tensors(spec))]
    if impl == "single_tensor":
        return width * max(
            max(p + 2 * c for p, c in zip([0, *sizes], sizes, strict=False)) for sizes in groups
        )
    if impl == "foreach":
        return width * max(sum(sizes) for sizes in groups)
    return 0


def adafactor_order(setup: TrainingSetup, shapes: list[Shape]) -> list[Shape]:
    """Adafactor's tensors (``shapes``, in model order) in the order its ``step`` visits
    them: under the Trainer the weight-decay group, then the rest (the previous
    ``update`` carried across, one ``step`` frame); else as given."""
    if not applies(setup):
        return shapes
    return [s for g in decay_groups(shapes) for s in g]


def batch_bytes(setup: TrainingSetup) -> int:
    """``gradient_accumulation_steps`` collated micro-batches, each :data:`BATCH_TENSORS`
    B·T int64 tensors (module docstring): 8·3·B·T·M."""
    return INT64 * BATCH_TENSORS * setup.tokens * setup.grad_accum


def extra_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the Trainer holds through every moment of its step beyond the loop's: the
    collated batch (:func:`batch_bytes`). Empty for the loop."""
    if not applies(setup):
        return {}
    return {BATCH: batch_bytes(setup)}
