"""Optimizers whose state is not a fixed number of bytes per parameter: Adafactor, and
bitsandbytes' paged AdamW (state outside torch's allocator).

**Adafactor** (``--optimizer adafactor``) is transformers' ``Adafactor`` as the HF
Trainer's ``optim="adafactor"`` builds it (``transformers/trainer_optimizer.py``
``_get_adafactor``: ``scale_parameter=False, relative_step=False``, ``beta1=None``).
Its state (``transformers/optimization.py``, ``Adafactor.step``), per parameter with a
gradient, at the dtype of the FP32 view of the gradient (``grad.float()`` for a 16-bit
gradient, so always FP32):

* a parameter of ≥ 2 dims, shape ``(..., R, C)``: ``exp_avg_sq_row`` of shape
  ``(..., R)`` and ``exp_avg_sq_col`` of shape ``(..., C)`` — ``prod(s[:-1]) +
  prod(s[:-2])·C`` values;
* a 1-D parameter: ``exp_avg_sq``, its own size;
* ``RMS``: ``_rms(p)``, a 0-d FP32 tensor, kept in the state after every step;
* no ``exp_avg`` (``beta1=None``: no first moment); ``step`` is a Python int.

Its update's temporaries, per parameter of ``n`` values in ``model.parameters()`` order
(the previous parameter's ``update`` is still bound until the new one replaces it, as
in torch's single-tensor Adam loop):

* ``update = (grad**2) + eps``: ``grad**2`` and the sum alive together beside the
  previous ``update``: ``n_prev + 2n``;
* factored: ``_approx_sq_grad`` makes ``r_factor`` (``prod(s[:-1])``), ``c_factor``
  (``prod(s[:-2])·C``) and their product (``n``) while the old ``update`` (``n``) is
  still bound: ``2n + rows + cols``; 1-D: ``exp_avg_sq.rsqrt()`` beside ``update``: ``2n``;
* ``p_data_fp32.add_(-update)``: ``-update`` beside ``update``: ``2n``;
* a 16-bit parameter (pure BF16): ``grad.float()`` and ``p.float()`` (``n`` each) alive
  through the whole of its update, on top.

All FP32; the largest over the loop is the term. ``torch.optim.Adafactor`` (torch ≥ 2.5)
is a different implementation (``row_var``/``col_var`` kept with singleton dims, a
tensor ``step``) and is not what the flag runs.

**Paged AdamW** (``--optimizer paged_adamw_8bit | paged_adamw_32bit``, the HF Trainer's
names for bitsandbytes' ``PagedAdamW8bit`` / ``PagedAdamW32bit``): the same m and v as
``adam8bit`` (1 + 1 bytes) or AdamW (4 + 4), but each state buffer is made by
``bitsandbytes/functional.py`` ``get_paged`` — ``cudaMallocManaged`` unified memory,
registered with ``GlobalPageManager`` — outside torch's caching allocator:
``torch.cuda.memory_allocated`` never counts it, ``nvidia-smi`` does while its pages are
resident on the device. It is counted where the device holds it (resident: the
worst case), as its own term :data:`PAGED_STATE`. Which buffers are paged
(``bitsandbytes/optim/optimizer.py`` ``get_state_buffer``): those of parameters of at
least 1e5 values; a smaller parameter's state is an ordinary device tensor, counted by
torch (``optimizer/adam_m``, ``optimizer/adam_v``). ``PagedAdamW8bit`` keeps 32-bit state
for parameters under ``min_8bit_size`` (4096) values (``Optimizer2State.init_state``); its
block-wise absmax (one FP32 per 256 values) and 256-value quantization maps are left
out (under 2% of its state). The update runs in place in bitsandbytes' CUDA kernels.
"""

from __future__ import annotations

import math

from introspect import applies
from introspect.refined import sharding
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4

ADAFACTOR_FACTORED = "optimizer/adafactor_factored"
ADAFACTOR_SECOND_MOMENT = "optimizer/adafactor_second_moment"
ADAFACTOR_RMS = "optimizer/adafactor_rms"
PAGED_STATE = "optimizer/paged_state"

#: bytes per parameter of each paged optimizer's m + v (see the module docstring).
PAGED_STATE_BYTES = {"paged_adamw_8bit": 2, "paged_adamw_32bit": 8}

#: What the output says beside a paged optimizer's term.
PAGED_NOTE = applies.PAGED_NOTE

Shape = tuple[int, ...]


def is_adafactor(setup: TrainingSetup) -> bool:
    return setup.optimizer == "adafactor"


def is_paged(setup: TrainingSetup) -> bool:
    return setup.optimizer in PAGED_STATE_BYTES


def trainable_shapes(spec: ModelSpec, setup: TrainingSetup) -> list[Shape]:
    """The shapes of the parameters the optimizer updates, in its loop order: every
    parameter tensor (``model.parameters()`` order, :func:`sharding.parameter_tensors`)
    under full training; under LoRA on a dense model, each layer's adapters in peft's
    order (``lora_A`` (r, d_in) then ``lora_B`` (d_out, r) of each target, in the block's
    module order), the embedding's and the head's adapters (``--lora-targets ... lm_head
    embed_tokens``) before and after them, and the embedding and head under
    ``train_embeddings``."""
    if setup.finetune == "full":
        return sharding.parameter_tensors(spec)
    from introspect.errors import IntrospectError
    from introspect.refined import lora

    if lora.peft_moe(spec, setup):
        raise IntrospectError(
            f"--optimizer {setup.optimizer.replace('_', '-')} with LoRA on an MoE model: "
            "the experts' parameter adapters' shapes are not modelled for it; use "
            "--optimizer adam or adamw"
        )
    r = setup.lora_rank
    if lora.per_kind(spec, setup):
        # A hybrid stack (lora.hybrid): each layer's own linears, layer by layer.
        out = []
        for run in spec.runs:
            kind = spec.for_kind(run.kind)
            shapes = lora.module_shapes(kind)
            one: list[Shape] = []
            for t in lora._kind_targets(kind, setup):
                d_in, d_out = shapes[t]
                one += [(r, d_in), (d_out, r)]
            out += one * run.count
    else:
        shapes = lora.linear_shapes(spec)
        per_layer: list[Shape] = []
        for t in lora.targets(spec, setup):
            d_in, d_out = shapes[t]
            per_layer += [(r, d_in), (d_out, r)]
        out = per_layer * spec.num_hidden_layers
    heads = lora.head_shapes(spec, setup)  # embed_tokens before the blocks, lm_head after
    out = [*heads.get("embed_tokens", ()), *out, *heads.get("lm_head", ())]
    if setup.train_embeddings:
        V, d = spec.vocab_size, spec.hidden_size
        out = [(V, d), *out] + ([] if spec.tie_word_embeddings else [(V, d)])
    return out


def factored(shape: Shape) -> bool:
    """``Adafactor._get_options``: ``len(shape) >= 2``."""
    return len(shape) >= 2


def row_col(shape: Shape) -> tuple[int, int]:
    """Values of ``exp_avg_sq_row`` (``shape[:-1]``) and ``exp_avg_sq_col``
    (``shape[:-2] + shape[-1:]``) of a factored parameter."""
    return math.prod(shape[:-1]), math.prod(shape[:-2]) * shape[-1]


def adafactor_state(shapes: list[Shape]) -> dict[str, int]:
    """Adafactor's persistent state over ``shapes``, by term (bytes; see the module
    docstring): the factored row/column vectors, the full second moment of 1-D
    parameters, and the 0-d ``RMS`` of each."""
    rows_cols = full = 0
    for s in shapes:
        if factored(s):
            rows_cols += sum(row_col(s))
        else:
            full += math.prod(s)
    return {
        ADAFACTOR_FACTORED: FP32 * rows_cols,
        ADAFACTOR_SECOND_MOMENT: FP32 * full,
        ADAFACTOR_RMS: FP32 * len(shapes),
    }


def adafactor_temporaries(shapes: list[Shape], sixteen_bit: bool) -> int:
    """Bytes of the update's temporaries at their largest over the loop (module
    docstring): per parameter ``max(n_prev + 2n, 2n + rows + cols)`` (factored) or
    ``n_prev + 2n`` (1-D), plus ``2n`` for the FP32 copies of a 16-bit parameter and
    its gradient."""
    best = prev = 0
    for s in shapes:
        n = math.prod(s)
        here = prev + 2 * n
        if factored(s):
            here = max(here, 2 * n + sum(row_col(s)))
        if sixteen_bit:
            here += 2 * n
        best = max(best, here)
        prev = n
    return FP32 * best


#: ``get_state_buffer``: a parameter's state is paged from this many values.
PAGED_FROM = 100_000
#: ``Optimizer2State``: 8-bit state from this many values (``min_8bit_size``).
MIN_8BIT_SIZE = 4096


def paged_state(sizes: list[int], optimizer: str, wide: list[bool] | None = None) -> dict[str, int]:
    """The paged optimizer's m and v over parameters of ``sizes`` values: the paged
    buffers as :data:`PAGED_STATE`, the rest as ordinary m and v (module docstring).
    ``wide`` flags tensors kept at 32 bits whatever their size (the HF Trainer's
    ``nn.Embedding`` override: :mod:`introspect.refined.trainers`); their state is paged
    like any other (``get_state_buffer`` is asked for it)."""
    from introspect.terms import ADAM_M, ADAM_V

    paged = small = 0
    for i, n in enumerate(sizes):
        eight = optimizer == "paged_adamw_8bit" and n >= MIN_8BIT_SIZE and not (wide and wide[i])
        value = (2 if eight else 8) * n
        if n >= PAGED_FROM:
            paged += value
        else:
            small += value
    terms = {PAGED_STATE: paged, ADAM_M: small // 2, ADAM_V: small // 2}
    return {k: v for k, v in terms.items() if v or k == PAGED_STATE}


def state_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The optimizer-state terms :func:`introspect.refined.execution.optimizer_state`'s
    per-parameter bytes cannot express: Adafactor's (:func:`adafactor_state`) and the
    paged AdamW's (:func:`paged_state`; over the largest rank's tensors where the state is
    sharded, :func:`sharding.local_tensors`); under the HF Trainer, bitsandbytes' 8-bit
    AdamW per tensor with its ``nn.Embedding`` override
    (:func:`introspect.refined.trainers.bnb_state`). Empty for every other optimizer."""
    from introspect.refined import trainers

    if is_adafactor(setup):
        return adafactor_state(trainable_shapes(spec, setup))
    if is_paged(setup):
        shapes = local_shapes(spec, setup)
        wide = None
        if trainers.exact_state(spec, setup):  # whole tensors: the Trainer's override
            wide = trainers.paged_embeddings(spec, setup, trainable_shapes(spec, setup))
        return paged_state([math.prod(s) for s in shapes], setup.optimizer, wide)
    if trainers.embedding_override(setup) and trainers.exact_state(spec, setup):
        # the Trainer's bitsandbytes AdamW8bit, per tensor
        return trainers.bnb_state(spec, setup, trainable_shapes(spec, setup))
    return {}


def local_shapes(spec: ModelSpec, setup: TrainingSetup) -> list[Shape]:
    """The tensors the largest rank's optimizer updates: the adapters' under LoRA
    (:func:`trainable_shapes`; on an MoE model under peft, whose expert adapters are
    parameters of their own, one lump), else :func:`sharding.local_tensors` (as 1-D
    sizes)."""
    if setup.finetune != "full":
        from introspect.refined import lora

        if lora.peft_moe(spec, setup):  # the experts' adapters: one size per layer kind
            return [(lora.trainable_parameters(spec, setup),)]
        return trainable_shapes(spec, setup)
    return [(n,) for n in sharding.local_tensors(spec, setup)]


def temporaries(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Adafactor's update temporaries (:func:`adafactor_temporaries`) at the precision's
    parameter dtype: 16-bit parameters under pure BF16 (the master is FP32 under
    ``mixed``); 0 for the other optimizers here (bitsandbytes' paged update runs in
    place in its CUDA kernel)."""
    if not is_adafactor(setup):
        return 0
    from introspect.refined import trainers

    shapes = trainers.adafactor_order(setup, trainable_shapes(spec, setup))
    return adafactor_temporaries(shapes, setup.precision == "bf16")
