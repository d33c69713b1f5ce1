"""The execution layer: what a framework actually holds at its peak for a TrainingSetup.

The phases of a steady-state step (after a warm-up step, gradients set to ``None`` by
``zero_grad``, Adam's state already allocated) are modelled as explicit moments, each a
full breakdown; the largest is the execution total and its name the peak phase:

* ``forward`` — transformers' classes only: the loss's forward inside the model's
  (:func:`loss_forward`: the logits, their FP32 upcast, autocast's weight cache).
* ``forward_end`` — end of forward / start of backward, inside the loss's backward:
  weights and optimizer state, every saved activation (:mod:`introspect.refined.saved`),
  the logits the training loop still holds, and the gradient of the log-probabilities
  and of the logits (two FP32 B·T·V tensors alive at once while the log-softmax's saved
  output is still needed). No gradients are allocated yet.
* ``backward`` — each layer's attention backward, top to bottom: gradients of
  everything above (and of this layer's feed-forward) allocated, activations of
  everything above freed, plus the attention backward's own transients (eager: the
  gradients of the probabilities and of the scores, two B·h·T² FP32 tensors).
* ``optimizer_step`` — weights, full gradients, optimizer state and the update's
  temporaries (see :func:`optimizer_temporaries`), the loop's logits still held.

What differs between the implementations that run the step (our reference model,
transformers' classes) — each layer kind's saved set, the loss's and the softmax
backward's dtypes, what the attention backward holds — is asked of the one
:func:`~introspect.refined.implementations.implementation_of` chooses; the timeline
itself is the same for all. Setup features compose over it as modules of their own:
LoRA/QLoRA :mod:`~introspect.refined.lora`, offload :mod:`~introspect.refined.offload`.
Sharding (DDP, ZeRO-1/2/3, FSDP2) is :mod:`introspect.refined.sharding`: the per-rank
state, each moment's gathered weights and communication buffers, FSDP2's post-backward
moments; B is the per-device micro-batch. Figures are per device, the largest rank's.

Checked against torch 2.13 on CPU — the reference model of ``introspect.measure``, FP32
Adam after a warm-up step, peak from live storages (``PhaseMemTracker``): L=4, d=256,
h=8, V=8000, standard and Llama-style, eager and SDPA, T = 256–2048, with and without
per-block ``torch.utils.checkpoint``: every peak within 0.5%, and the same phase; the
seed's 40M and 100M shapes (fake-tensor dry runs, T = 256 and 2048): within 0.15%.
DDP, ZeRO-1 and FSDP2 (FP32 and mixed) are measured in several gloo processes
(``benchmarks/sharded_accuracy.py``); CUDA mixed precision follows the libraries' source
and is not measured here.

transformers' own classes (``implementation="transformers"``, the default; saved set in
:mod:`introspect.refined.hf_saved`, for one dense full-attention layer kind): checked
against real CPU steps of llama, qwen2, qwen3, gemma, phi, gpt2, mistral and olmo2
(``tests/hf_steps.py``; B=2, T=256; eager, SDPA and eager with checkpointing; labels and
logits loops; FP32, BF16 and autocast: 144 rows, all within ±1%,
``benchmarks/results/transformers-terms.txt``) and FakeTensorMode dry runs of
Qwen2.5-0.5B and Mistral-7B at T=2048 (within 0.01%); the single-tensor, foreach and
fused optimizer steps, FP32 and BF16 state, to the byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from introspect.params import (
    attention_params,
    block_per_layer_input_params,
    norm_params,
    qk_norm_params,
)
from introspect.refined import (
    accumulation,
    activation_offload,
    buffers,
    deepspeed,
    dpo,
    hf_saved,
    lora,
    lora_moe,
    lora_sharded,
    losses,
    offload,
    optimizers,
    saved,
    saved_feed_forward,
    sharding,
    shared_block,
    trainers,
)
from introspect.refined.implementations import REFERENCE, implementation_of
from introspect.refined.memo import per_estimate
from introspect.refined.precision import working_weight_bytes
from introspect.refined.reference import is_mlx
from introspect.refined.transformers_classes import facts
from introspect.setup import OPTIMIZER_STATE_BYTES, TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import (
    ADAM_M,
    ADAM_V,
    EMBEDDING,
    GRADS,
    LOG_SOFTMAX,
    LOGITS_GRAD,
    LOGITS_OUTPUT,
    MOMENTUM,
    OPTIMIZER_TEMPORARIES,
)

FP32 = 4
BF16 = 2

#: Tokens per chunk of a chunked or fused cross-entropy (an assumption: Liger's fused
#: linear cross-entropy and most chunked losses work on chunks of this order).
CE_CHUNK_TOKENS = 1024


def master_bytes(setup: TrainingSetup) -> int:
    """Bytes per parameter of the FP32 master copy: mixed precision (or 16-bit working
    weights under ``fp32`` precision, as the seed arranges it) keeps one; pure BF16 and
    plain FP32 do not; a frozen model has no optimizer to keep it for."""
    if setup.optimizer == "none":
        return 0
    ds = deepspeed.master_bytes(setup)  # DeepSpeed ZeRO-2 clones its FP32 partition
    if ds is not None:
        return ds
    if setup.precision == "mixed" or (setup.precision == "fp32" and setup.weight_bytes < FP32):
        return FP32
    return 0


def optimizer_state(setup: TrainingSetup) -> dict[str, int]:
    """Optimizer state bytes per parameter, by term: Adam/AdamW m and v (FP32, 4 + 4;
    BF16 under pure BF16), 8-bit Adam 1 + 1, SGD with momentum one buffer, SGD and a
    frozen model nothing."""
    per = OPTIMIZER_STATE_BYTES[setup.optimizer]
    if setup.precision == "bf16" and setup.optimizer != "adam8bit":
        per //= 2
    if setup.optimizer in ("adam", "adamw", "adam8bit"):
        return {ADAM_M: per // 2, ADAM_V: per // 2}
    if setup.optimizer == "sgd_momentum":
        return {MOMENTUM: per}
    return {}


@per_estimate
def layer_parameters(spec: ModelSpec) -> int:
    """Parameters of one block: attention, feed-forward (every expert) and router, its
    norms and q/k norms — for a heterogeneous stack the mean over its layers
    (:func:`introspect.params.layer_parameters` per kind, each kind once)."""
    from introspect.params import layer_parameters as kind_parameters

    total = sum(count * kind_parameters(spec, kind) for kind, count in spec.kinds)
    return total // spec.num_hidden_layers


def largest_tensor(spec: ModelSpec) -> int:
    """Elements of the largest parameter tensor: the embedding V·d or one projection."""
    d = spec.hidden_size
    P = spec.num_hidden_layers * spec.per_layer_input_size  # Gemma 4's per-layer table
    return max(
        spec.vocab_size * d, d * spec.ffn_dim, d * spec.q_dim, spec.per_layer_input_vocab * P
    )


def optimizer_temporaries(spec: ModelSpec, setup: TrainingSetup, local_params: int) -> int:
    """Bytes the optimizer step allocates on top of its state, by the implementation
    torch runs (:attr:`TrainingSetup.resolved_optimizer_impl`):

    * ``single_tensor`` (torch's CPU default: foreach kernels exist only for
      cuda/xpu/mtia, ``torch/utils/_foreach_utils.py``): per parameter, ``_single_tensor_adam``
      makes ``exp_avg_sq.sqrt()`` and its division while the previous parameter's
      ``denom`` is still bound: prev + 2·cur over the loop
      (:func:`sharding.single_tensor_temporaries`). Measured: 2·V·d·4 bytes at the peak
      when V·d dwarfs its neighbours, 3 tensors when equal-sized ones follow each other.
    * ``foreach`` (the CUDA default, ``_multi_tensor_adam``): ``_foreach_mul(grads, 1-β2)``
      and then ``_foreach_sqrt(exp_avg_sq)`` each allocate one FP32 copy of every local
      parameter, one at a time: ``4·N_local``.
    * ``fused`` (``torch._fused_adam_``): updates in place, no temporaries.
    * MLX: the update is part of the step's graph; see :mod:`introspect.refined.mlx`.
    SGD (with or without momentum) and 8-bit Adam update in place. Adafactor:
    :func:`optimizers.temporaries`. Under the HF Trainer the update runs once per
    parameter group (weights, then biases and norms):
    :func:`trainers.optimizer_temporaries`.
    """
    if optimizers.is_adafactor(setup):
        return optimizers.temporaries(spec, setup)
    if setup.optimizer not in ("adam", "adamw") or setup.offload != "none":
        return 0
    grouped = trainers.optimizer_temporaries(spec, setup)  # the HF Trainer's two groups
    if grouped is not None:
        return grouped
    impl = setup.resolved_optimizer_impl
    state = state_value_bytes(setup)
    if impl == "single_tensor":
        if _lora(setup):
            return 2 * lora.largest_trainable(spec, setup) * state
        return sharding.single_tensor_temporaries(spec, setup) * state
    if impl == "foreach":
        return local_params * state
    return 0


def state_value_bytes(setup: TrainingSetup) -> int:
    """Bytes per value of Adam's m and v, and so of the update's temporaries
    (``exp_avg_sq.sqrt()`` has exp_avg_sq's dtype): 2 under pure BF16, else FP32."""
    return 2 if setup.precision == "bf16" else FP32


@per_estimate
def _trainable(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters with gradients and optimizer state (a frozen tower has neither)."""
    from introspect.params import trainable_parameter_count

    return trainable_parameter_count(spec, freeze_tower=setup.freeze_tower)


@per_estimate
def _with_grads(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters the backward gives a gradient: the trainable ones, less a multimodal
    tower (``ModelSpec.tower_parameters``) in a text-only step (no ``--images``). The
    tower is on no path from the loss then — GOT-OCR2's ``GotOcr2Model.forward`` and
    MOSS-Transcribe-Diarize's ``MossTranscribeDiarizeModel.forward`` (``models/got_ocr2/
    modeling_got_ocr2.py``, ``models/moss_transcribe_diarize/
    modeling_moss_transcribe_diarize.py`` l. 485-498) run the tower only when
    ``pixel_values`` / ``input_features`` are given — so its ``.grad`` stays None, while
    its optimizer state is still counted (:func:`_trainable`: the dry run primes AdamW's
    state for every trainable parameter, ``introspect/measure/optimizer_state.py``)."""
    n = _trainable(spec, setup)
    if spec.tower_parameters and not setup.freeze_tower and not setup.images:
        n -= spec.tower_parameters - spec.tower_frozen_parameters
    return n


def _share(n: int, devices: int, sharded: bool) -> int:
    return math.ceil(n / devices) if sharded else n


def _lora(setup: TrainingSetup) -> bool:
    return setup.finetune != "full"


@per_estimate
def _unit_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Working-weight bytes of the largest unit FSDP/ZeRO-3 gathers: a block or V·d."""
    unit = max(layer_parameters(spec), spec.vocab_size * spec.hidden_size)
    return unit * working_weight_bytes(setup)


@per_estimate
def state_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Per-device persistent state: working weights, FP32 master weights, optimizer state
    and DDP's buckets, as the largest rank holds them (:func:`sharding.state_terms`);
    LoRA's frozen base and adapters (:mod:`~introspect.refined.lora`); less what is
    offloaded (:mod:`~introspect.refined.offload`)."""
    wb = working_weight_bytes(setup)
    if _lora(setup):
        terms = lora.state_terms(spec, setup, wb, optimizer_state(setup))
        terms = lora_sharded.state(spec, setup, terms)  # the frozen base sharded too
    else:
        terms = sharding.state_terms(
            spec, setup, working=wb, master=master_bytes(setup), state=optimizer_state(setup)
        )
    terms.update(optimizers.state_terms(spec, setup))  # Adafactor, paged AdamW
    terms.update(dpo.reference_state(spec, setup))  # DPO's reference copy
    return offload.state(spec, setup, terms, _unit_bytes(spec, setup))


def grad_bytes(spec: ModelSpec, setup: TrainingSetup, n_params: int) -> int:
    """Bytes of the gradients of ``n_params`` parameters on one device (÷D from
    ZeRO-2; none for a frozen model)."""
    if setup.optimizer == "none":
        return 0
    wb = working_weight_bytes(setup)
    if _lora(setup):
        value = lora.grad_bytes(spec, setup, n_params, wb)
        value = lora_sharded.grad_bytes(spec, setup, n_params, value)
    else:
        value = sharding.grad_bytes(spec, setup, n_params, wb)
    if not offload.caps_grads(setup):
        return value
    if _lora(setup):
        largest = lora.largest_trainable(spec, setup) * FP32
    else:
        largest = largest_tensor(spec) * wb
    return offload.grads(setup, value, largest, _unit_bytes(spec, setup))


def step_grad_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of the gradients the optimizer step reads.

    Under mixed precision on one unsharded device the update runs over the FP32 master:
    after backward each BF16 gradient is copied into an FP32 gradient of its master
    tensor and freed, one tensor at a time (DeepSpeed's ``BF16_Optimizer``:
    ``update_hp_grads`` then ``clear_lp_grads``; ``introspect/measure/torch_step.py``'s
    ``TorchStep``), so the step holds 4 bytes per trainable parameter, not 2. The
    sharded strategies hold theirs as :func:`sharding.grad_bytes` says (FSDP2's
    ``reduce_dtype`` is FP32 already); LoRA's adapters are FP32 throughout; an offloaded
    optimizer updates its master on the host."""
    if deepspeed.applies(setup):  # ZeRO-2 steps on its FP32 partition's gradient
        return deepspeed.step_grad_bytes(spec, setup)
    n = _with_grads(spec, setup)
    return FP32 * n if copies_to_master_grads(setup) else grad_bytes(spec, setup, n)


def copies_to_master_grads(setup: TrainingSetup) -> bool:
    """Whether the step copies its BF16 gradients into FP32 gradients of the master
    before the update (:func:`step_grad_bytes`): mixed precision, full training, one
    unsharded device, the update on the device."""
    return (
        setup.precision == "mixed"
        and setup.optimizer != "none"
        and not _lora(setup)
        and sharding.strategy(setup) == "none"
        and offload.steps_on_device(setup)
    )


def master_gradients(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The end of the copy into the master's gradients, before the update runs (mixed
    precision on one unsharded device; None otherwise).

    ``TorchStep`` copies each BF16 gradient into an FP32 gradient of its master tensor
    and then frees it, in parameter order (DeepSpeed's ``update_hp_grads`` then
    ``clear_lp_grads``). With ``n_j`` the elements of tensor j, the live gradient bytes
    after tensor j's copy are ``2N + 2·S_{j-1} + 4·n_j``, largest at the last tensor:
    ``4N + 2·n_last``. The last parameter of a causal LM is the root's last tensor
    (:func:`sharding.root_tensors`, in ``model.parameters()`` order: lm_head's bias, else
    its weight, else — tied — the final norm's). Exceeds the optimizer step wherever the
    update's temporaries are smaller than that BF16 gradient (fused or foreach updates)."""
    if not copies_to_master_grads(setup):
        return None
    last = sharding.numel(sharding.root_tensors(spec)[-1])
    terms = dict(state_terms(spec, setup))
    terms[GRADS] = step_grad_bytes(spec, setup)
    terms["grads/last_bf16"] = working_weight_bytes(setup) * last
    if rglru_retained_total(spec, setup):
        terms[RGLRU_RETAINED] = rglru_retained_total(spec, setup)
    saved_all = saved_terms(spec, setup)
    if LOGITS_OUTPUT in saved_all:
        terms[LOGITS_OUTPUT] = saved_all[LOGITS_OUTPUT]
    return terms


@per_estimate
def layer_saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """One layer's saved bytes (:func:`saved.per_layer`; under LoRA, what a frozen base
    still keeps for the adapters: :func:`lora.per_layer`)."""
    full = saved.per_layer(spec, setup)
    return lora.per_layer(spec, setup, full) if _lora(setup) else full


@per_estimate
def embedding_saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What is kept before the first layer (:func:`saved.embedding`: the embedding output,
    and for transformers' classes the embedding dropout's mask and the shared rotary
    tables). A frozen embedding's output needs no gradient, so under LoRA (embeddings
    frozen) nothing keeps the output itself — unless layer 0 is checkpointed: the
    checkpoint keeps its input to recompute it, gradient or not (``torch/utils/
    checkpoint.py``, non-reentrant: the recompute closure keeps ``args``; measured under
    the HF Trainer, ``tests/test_trainer_terms.py``, and in a GPT-2 LoRA census: the
    dropout's output beside its mask, B·T·d each)."""
    terms = saved.embedding(spec, setup)
    frozen = not setup.train_embeddings and not lora.embedding_terms(spec, setup)
    if _lora(setup) and frozen and not setup.activation_checkpointing:
        terms = dict(terms) | {EMBEDDING: 0}
    if _lora(setup):  # LoRA on embed_tokens: its own saved tensor
        terms = dict(terms) | lora.embedding_terms(spec, setup)
    held = pixel_input(setup)
    if held:
        terms = dict(terms) | {PIXEL_VALUES: held}
    return terms


#: The image batch's FP32 pixel_values, held by the training loop through the step.
PIXEL_VALUES = "activations/inputs/pixel_values"


def pixel_input(setup: TrainingSetup) -> int:
    """Bytes of the batch's FP32 ``pixel_values`` (:func:`introspect.vision.pixel_bytes`)
    a step's meter holds through forward and backward. On CUDA the training loop moves
    the batch to the device, so it is allocated whatever the precision. The live-storage
    tracker of a CPU step or a dry run (and torch's MemTracker, by the same rule) counts a
    storage from its first sight as an operation's output: an FP32 tower reads the input
    through a view (``pixel_values.type(fp32)`` is the tensor itself, then ``view``), so
    it is counted; a BF16 tower casts it to a new tensor and the FP32 original is never
    an output (``modeling_qwen3_vl.py``: ``Qwen3VLVisionModel.forward``,
    ``Qwen3VLVisionPatchEmbed.forward``)."""
    if not setup.image_input_bytes:
        return 0
    on_cuda = setup.device in ("cuda", "auto")
    return setup.image_input_bytes if on_cuda or working_weight_bytes(setup) == 4 else 0


def _prefixed(terms: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in terms.items():
        key = name if name.startswith("activations/") else f"activations/{name}"
        out[key] = out.get(key, 0) + value
    return out


#: The store layers' K and V (and, once recomputed, their graphs) ``shared_kv_states``
#: holds (:func:`kv_store`).
KV_STORE = "activations/layer/attention/kv_store"


def kv_store(spec: ModelSpec, setup: TrainingSetup, layer: int | None = None) -> dict[str, int]:
    """What Gemma 4's ``shared_kv_states`` holds under checkpointing at a moment of the
    step (:func:`hf_saved.kv_store_layers`; empty elsewhere: no store layers, no
    checkpointing, LoRA, offloaded activations). ``layer`` None: the forward and the
    backward's start, every store layer's K and V from its forward
    (:func:`hf_saved.kv_store_outputs`; the checkpoint saved nothing else of them). At
    layer ``i``'s backward moments: a store layer above ``i`` has been recomputed and its
    recomputed K/V graph stays (:func:`hf_saved.kv_store_graph`); the one at ``i`` holds
    its recomputed K and V beside the layer's saved set; one below still its forward's."""
    if not setup.activation_checkpointing or _lora(setup) or setup.offload_activations:
        return {}
    stores = hf_saved.kv_store_layers(spec, setup)
    if not stores:
        return {}
    total = 0
    for index, kind in stores:
        one = spec.for_kind(kind)
        recomputed = layer is not None and index > layer
        total += (hf_saved.kv_store_graph if recomputed else hf_saved.kv_store_outputs)(one, setup)
    return {KV_STORE: total}


@per_estimate
def saved_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """Every saved activation at the end of forward, as breakdown terms (all layers).

    Checkpointed transformers' classes: the embedding's output is layer 0's checkpointed
    input and each layer's output the next one's, so L - 1 layer outputs are kept by
    checkpoints; the last layer's output is kept by the final norm alone
    (``final_norm/input``: the stream itself, or its FP32 copy with the 16-bit stream
    freed). L outputs double-counted the last one: measured on real CPU steps of the
    llama, qwen2, qwen3, gemma, phi, gpt2, mistral and olmo2 classes (``tests/hf_steps.py``
    configs, B=2, T=128, FP32 eager, autocast and BF16 SDPA), ~+1% before and within 0.1%
    after wherever the peak is forward's end (GPT-2's is in backward), and under the HF
    Trainer, full and LoRA (``tests/test_trainer_terms.py``)."""
    L = spec.num_hidden_layers
    if setup.activation_checkpointing:
        kept = L - 1 if setup.implementation == "transformers" else L
        layers = {k: kept * v for k, v in saved.checkpointed_layer(spec, setup).items()}
    elif _lora(setup):
        layers = {}  # each kind's LoRA set, times its count among the recorded blocks
        for kind, count in lora.recorded_kinds(spec, setup):
            if not count:
                continue  # (--num-layers: the frozen blocks below keep nothing)
            for k, v in layer_saved(spec.for_kind(kind), setup).items():
                layers[k] = layers.get(k, 0) + count * v
            gone = count * _layer_released(kind.attention, setup)
            if gone:  # (what the recorded DeltaNet layers' forwards freed again)
                layers[RELEASED] = layers.get(RELEASED, 0) - gone
    else:
        layers = saved.stack(spec, setup)  # each layer kind once, times its count
        gone = deltanet_released(spec, setup)
        if gone:
            layers = _add(layers, {RELEASED: -gone})
    terms = embedding_saved(spec, setup)
    terms.update(_prefixed({f"layer/{k}": v for k, v in layers.items()}))
    if _lora(setup) and not setup.activation_checkpointing:
        for name, value in lora.first_layer_saving(spec, setup).items():
            terms[f"activations/layer/{name}"] -= value
    final = saved.final(spec, setup)
    terms.update(_prefixed(lora.final_terms(spec, setup, final) if _lora(setup) else final))
    terms.update(_prefixed(saved.logits_saved(spec, setup)))
    return terms


#: What the Gated DeltaNet layers' forwards freed again of their saved sets, negative
#: (:func:`deltanet_released`).
RELEASED = "attention/deltanet/released"


def deltanet_released(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of the stack's saved set (:func:`saved.stack`, the census's strong-reference
    definition, :func:`introspect.refined.deltanet.saved`) that its Gated DeltaNet layers'
    forwards free again before backward: each such layer's
    :func:`introspect.refined.deltanet.released`, what only the last chunk's dropped state
    update saved (``torch_chunk_gated_delta_rule``, ``last_recurrent_state = None``,
    ``transformers/models/qwen3_next/modeling_qwen3_next.py`` l. 503: no path from the
    loss reaches that node, so autograd frees it and what it saved when the forward drops
    its output). Every moment after a layer's forward — the forward's end and the
    backward's — holds the saved set less this. Zero under checkpointing (each layer keeps
    its input alone), and where :func:`_deltanet_forward_applies` does not hold
    (offloaded activations). Under LoRA the same (the dropped update's key is made from
    projections whose adapters need a gradient): :func:`saved_terms` takes it off each
    recorded DeltaNet layer."""
    return sum(run.count * _layer_released(run.kind.attention, setup) for run in spec.runs)


def _recomputed_released(att, setup: TrainingSetup) -> int:
    """Under checkpointing, what the recomputed Gated DeltaNet layer does not keep of its
    saved set once its recomputation has run (0 for other mixers, or where
    :func:`_deltanet_forward_applies` does not hold): the same
    :func:`introspect.refined.deltanet.released`. ``torch/utils/checkpoint.py``'s
    recomputation pack hook stores a tensor only where the original forward's holder is
    still alive (``target_frame.weak_holders[recompute_idx]()``), and the dropped last
    state update's holders died with its node."""
    return _released(att, setup, checkpointed=True)


def _layer_released(att, setup: TrainingSetup) -> int:
    """One layer's share of :func:`deltanet_released` (0 unless ``att`` is a Gated
    DeltaNet's)."""
    return _released(att, setup, checkpointed=False)


def _released(att, setup: TrainingSetup, *, checkpointed: bool) -> int:
    """:func:`introspect.refined.deltanet.released` for a Gated DeltaNet layer when the
    step's checkpointing is ``checkpointed`` and :func:`_deltanet_forward_applies`, else 0."""
    if att.kind != "linear" or setup.activation_checkpointing != checkpointed:
        return 0
    if not _deltanet_forward_applies(setup):
        return 0
    from introspect.refined import deltanet

    return deltanet.released(att, setup)


def logits_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The loss backward's transient: with a standard cross-entropy, the gradient of the
    log-probabilities and then of the logits, two FP32 B·T·V tensors alive together
    (measured: exactly 2·B·T·V·4 of 'temporary' at the start of backward); a chunked or
    fused loss holds one chunk's logits, log-softmax and gradient instead."""
    V = spec.vocab_size
    if setup.cross_entropy == "standard":
        return 2 * setup.tokens * V * implementation_of(spec, setup).loss_bytes(setup)
    if losses.is_library(setup):
        return losses.backward_start(spec, setup)
    return 3 * min(setup.tokens, CE_CHUNK_TOKENS) * V * FP32


def _attention_own(term: str) -> bool:
    """Whether a layer's saved term is its attention's own — what the attention's
    backward frees — rather than a parallel mixer's or a weight cast's."""
    return term.startswith("attention/quadratic/") or term in (
        "attention/linear/q",
        "attention/linear/k",
        "attention/linear/v",
    )


def attention_transient(
    spec: ModelSpec, setup: TrainingSetup, *, mixer: bool = True, current: dict | None = None
) -> int:
    """One layer's attention backward transient: eager softmax backward holds the
    gradient of the probabilities and of the scores (two B·h·T² FP32 tensors); SDPA's
    backward makes the gradients of Q, K and V. Either way the residual stream's gradient
    and grad-of-V (two B·T·d tensors) are alive too. With a parallel mixer (Falcon-H1;
    ``mixer=False``: the attention's alone) the larger of its backward and the
    attention's, the mixer's less the attention's own terms of the moment ``current``
    (its backward ran first)."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    impl = implementation_of(spec, setup)
    att = spec.kinds[0][0].attention
    if att.kind == "none":  # a feed-forward-only block: no mixer backward
        return 0
    beside = spec.kinds[0][0].mixer
    if mixer and beside is not None:
        # Falcon-H1: the attention's backward and then the parallel mixer's, one after
        # the other; the larger of the two moments (its saved set is attention side).
        from introspect.refined import falcon_h1
        from introspect.refined.stream import residual_bytes

        stream = B * T * spec.hidden_size * residual_bytes(setup)
        scan = falcon_h1.backward_transient(beside, setup, spec.hidden_size) + stream
        # The attention ran after the mixer, so its backward ran first: by the scan's
        # moment it has freed its own saved set (Q, K, V, the probabilities) of the
        # moment's terms ``current``.
        scan -= sum(v for k, v in (current or {}).items() if _attention_own(k))
        return max(scan, attention_transient(spec, setup, mixer=False))
    if att.kind in ("mamba1", "mamba2", "rglru"):
        # A Mamba-2 mixer: its gated norm's backward; a Mamba-1 mixer and RecurrentGemma's
        # RG-LRU block: their recurrence's backward; beside the residual stream's
        # gradient (no V).
        from introspect.refined import mamba1, mamba2, rglru
        from introspect.refined.stream import residual_bytes

        mixer = {"mamba1": mamba1, "mamba2": mamba2, "rglru": rglru}[att.kind]
        # An FP32 stream's gradient in a 16-bit step (ModelSpec.residual_in_fp32).
        r = FP32 if spec.residual_in_fp32 else residual_bytes(setup)
        stream = B * T * spec.hidden_size * r
        return mixer.backward_transient(att, setup, spec.hidden_size) + stream
    stream = impl.attention_stream(spec, setup)
    if impl.keeps_t2(spec, setup):
        probs = impl.probs_bytes(spec, setup)
        return 2 * B * spec.num_attention_heads * T * T * probs + stream
    return B * T * (spec.q_dim + 2 * spec.kv_dim) * s + stream


#: B·T·f tensors an activation's backward holds beyond a one-op activation's (its input's
#: gradient beside the output's). ``relu2`` (``ReLUSquaredActivation``,
#: ``transformers/activations.py``: ``torch.square(relu(x))``): ``square`` is ``pow(x,
#: 2)``, whose backward (``pow_backward``, ``torch/csrc/autograd/FunctionsManual.cpp``:
#: ``grad * (exponent * self.pow(exponent - 1))``) makes ``x.pow(1)`` and ``2·x`` beside
#: the product: two more (a CPU step of up → relu2 → down under the live tracker: peak
#: over the forward's end 4·B·T·f, F.gelu's 2).
ACTIVATION_BACKWARD_EXTRA: dict[str, int] = {"relu2": 2}


def ffn_buffers(spec: ModelSpec, setup: TrainingSetup) -> int:
    """B·T·f-wide gradients alive inside a feed-forward's backward: the activation's and
    the up projection's, and a gated one's product's; plus what the activation's own
    backward makes (:data:`ACTIVATION_BACKWARD_EXTRA`; a transformers class's own
    backward: :attr:`~introspect.refined.transformers_classes.ClassFacts.
    activation_backward_extra`, BLOOM's ``bloom_gelu_back``)."""
    base = {"gated": 3, "plain": 2}.get(spec.ffn, 0)  # none: a mixer-only block
    if not base:
        return 0
    own = facts(spec).activation_backward_extra if setup.implementation == "transformers" else 0
    return base + ACTIVATION_BACKWARD_EXTRA.get(spec.hidden_act, 0) + own


def ffn_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """One layer's feed-forward backward transient: the gradient of the activation and of
    the up projection (plain: one after the other, both alive at the activation's
    backward), plus the product's gradient for a gated FFN; and the residual stream's
    gradient. MoE: :func:`routed_transient`; with shared experts (Qwen2-MoE's
    ``shared_expert``, an MLP over every token beside the routed ones, run at the
    activations' dtype: its linears are autocast's) the larger of the two, which
    autograd runs one after the other."""
    buffers = ffn_buffers(spec, setup)
    stream = spec.hidden_size * setup.activation_bytes
    if not spec.is_moe:
        return (buffers * spec.ffn_dim * setup.activation_bytes + stream) * setup.tokens
    mlp = max(routed_transient(spec, setup), shared_transient(spec, setup))
    if _lora(setup) and lora.peft_moe(spec, setup):
        mlp += lora_moe.copy_gradient(spec, setup, working_weight_bytes(setup))
    return mlp + stream * setup.tokens


def shared_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """A shared expert's backward buffers (:func:`ffn_transient`'s dense rule at the
    shared width; 0 without one)."""
    buffers = ffn_buffers(spec, setup)
    shared = spec.kinds[0][0].feed_forward.shared_intermediate_size
    return buffers * shared * setup.activation_bytes * setup.tokens


def routed_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The routed experts' backward at its largest (``grouped_mm_experts_forward``,
    ``transformers/integrations/moe.py``, run in reverse), over the S = k·B·T routed rows
    at the routed path's dtype (:func:`saved_feed_forward.expert_bytes`): inside the activation's
    backward, three f-wide gradients (the product's, the activation's, the up half's; two
    plain), or inside the up (gate_up) grouped matmul's backward, the gradient of
    gate_up's output (``S·2f``; ``S·f`` plain) and of the gathered input it makes
    (``S·d``), or first of all at ``weighted_out[inv_perm]``'s backward, three S·d (the
    per-token sum's expanded gradient, copied for its view, the index backward's zeros
    and its ``index_put``) — whichever is largest (measured: gpt-oss's clamped SwiGLU,
    f > d, holds exactly the first at its peak, ``benchmarks/families.py``; small
    experts, f < d, the last: ``tests/test_hybrids.py``'s Nemotron-H). Llama 4 runs every expert
    on every token (:attr:`~introspect.layers.FeedForward.all_experts`; measured: its
    transients at the peak are exactly these bytes, ``tests/test_measure_hf.py``)."""
    ff = spec.kinds[0][0].feed_forward
    if ff.all_experts:
        # Llama 4: the product's backward as a dense MLP's (three f-wide buffers) over
        # the E·B·T rows (autocast's bmm: the activations' dtype), and the gradient of
        # the experts' summed output.
        e = setup.activation_bytes
        buffers = ffn_buffers(spec, setup)
        rows = ff.num_experts * setup.tokens
        return (buffers * rows * spec.ffn_dim + setup.tokens * spec.hidden_size) * e
    S, e = spec.num_experts_per_tok * setup.tokens, saved_feed_forward.expert_bytes(setup)
    width = (2 if spec.ffn == "gated" else 1) * spec.ffn_dim
    buffers = ffn_buffers(spec, setup)
    # The largest of its three moments: the activation's backward (the product's, the
    # activation's and the up half's gradients, as a dense MLP's), the up matmul's, and
    # first of all ``weighted_out[inv_perm]``'s: the per-token sum's expanded gradient,
    # copied for its view, beside the index backward's zeros and its ``index_put``
    # (three S·d).
    return S * max(buffers * spec.ffn_dim, width + spec.hidden_size, 3 * spec.hidden_size) * e


def _add(terms: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    out = dict(terms)
    for name, value in more.items():
        out[name] = out.get(name, 0) + value
    return out


def _add_into(terms: dict[str, int], more: dict[str, int]) -> None:
    """:func:`_add` in place, for a moment's own fresh dict."""
    for name, value in more.items():
        terms[name] = terms.get(name, 0) + value


@per_estimate
def head_parameters(spec: ModelSpec) -> int:
    """Parameters whose gradients the loss backward makes first: the output projection
    (V·d, shared with the embedding when tied: its gradient is allocated here) and its
    bias, and the final norm."""
    V, d = spec.vocab_size, spec.hidden_size
    return V * d + (V if spec.lm_head_bias else 0) + norm_params(spec, d)


def moments(
    spec: ModelSpec, setup: TrainingSetup, layers: Iterable[int] | None = None
) -> list[tuple[str, dict[str, int]]]:
    """Every moment of torch's step that can hold its peak, in step order, each with its
    phase: the loss's forward inside the model, the end of forward, the backward moments
    (:func:`backward_moments`, over ``layers``), the copy into the master's gradients and
    the optimizer step, where the setup has them. DPO's policy step runs 2·B rows
    (:func:`introspect.refined.dpo.policy_setup`)."""
    setup = dpo.policy_setup(setup)
    out: list[tuple[str, dict[str, int]]] = []
    forward = loss_forward(spec, setup)
    if forward is not None:
        out.append(("forward", forward))
    inside = mixer_forward(spec, setup)
    if inside is not None:
        out.append(("forward", inside))
    at_softmax = checkpointed_softmax_forward(spec, setup)
    if at_softmax is not None:
        out.append(("forward", at_softmax))
    in_attention = attention_forward(spec, setup)
    if in_attention is not None:
        out.append(("forward", in_attention))
    if setup.offload_activations:
        state = state_terms(spec, setup)
        kinds = {
            kind: (
                layer_saved(spec.for_kind(kind), setup),
                attention_transient(spec.for_kind(kind), setup),
            )
            for kind, _ in spec.kinds
        }
        out.append(("forward", activation_offload.layer_forward(state, kinds)))
    out.append(("forward_end", forward_end(spec, setup)))
    layers = candidate_layers(spec, setup) if layers is None else list(layers)
    out += [("backward", m) for m in backward_moments(spec, setup, layers)]
    if setup.grad_accum > 1:
        later = accumulation.later_layers(spec, layers)
        out += accumulation.later_micro_batch(
            spec,
            setup,
            full_grads=grad_bytes(spec, setup, _with_grads(spec, setup)),
            loss_forward=forward,
            logits_kept=LOGITS_OUTPUT in saved_terms(spec, setup),
            forward_end=forward_end(spec, setup),
            backward=backward_moments(spec, setup, later),
        )
        if inside is not None:
            # A later micro-batch's mixer forward: every gradient made already (and, in
            # the logits loop, the previous micro-batch's logits still bound).
            again = dict(inside)
            again[GRADS] = grad_bytes(spec, setup, _with_grads(spec, setup))
            if setup.loop == "logits" and LOGITS_OUTPUT in saved_terms(spec, setup):
                again[accumulation.PREVIOUS_LOGITS] = (
                    setup.tokens * spec.vocab_size * setup.activation_bytes
                )
            out.append(("forward", again))
    master = master_gradients(spec, setup)
    if master is not None:
        out.append(("master_grads", master))
    flat = deepspeed.grad_partition_moment(spec, setup, state_terms(spec, setup))
    if flat is not None:
        saved_all = saved_terms(spec, setup)
        if LOGITS_OUTPUT in saved_all:
            flat[LOGITS_OUTPUT] = saved_all[LOGITS_OUTPUT]
        out.append(("master_grads", flat))
    step = optimizer_step(spec, setup)
    zero3 = deepspeed.stage3_step_moments(spec, setup, step or {})
    if zero3:  # ZeRO-3's own step: the FP32 conversion, then the update
        out += zero3
    elif step is not None:
        out.append(("optimizer_step", step))
    return out


#: The T×T tensors of a checkpointed eager layer's forward at its softmax
#: (:func:`checkpointed_softmax_forward`).
SOFTMAX_FORWARD = "activations/layer/attention/softmax_forward"


def checkpointed_softmax_forward(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The top layer's first (checkpointed) forward at its softmax, in a class whose
    blocks return the attention's probabilities to the model's loop
    (``ClassFacts.returns_attention_probs``: Falcon, BLOOM): state, what the embedding
    and the checkpoints below keep (each layer's input, :func:`~introspect.refined.
    hf_saved.checkpointed_layer`, and eager's masks), the top layer's fused Q·K·V
    projection output, and its T×T tensors — the raw scores still bound (16-bit under
    autocast), the masked scores and the softmax's output (FP32: the FP32 additive mask
    promotes; ``dtype=torch.float32``), the softmax's cast to the query's dtype where it
    has one (:func:`~introspect.refined.hf_saved.dropped_bytes` below FP32), and the
    previous block's returned probabilities at that dtype, which the loop's ``outputs``
    holds. Nothing of it is saved (checkpointing), so the backward's recomputation of a
    layer never holds two layers' T×T tensors: without a class fact or checkpointing
    this moment is not the step's peak. Measured (dry run, d = 64, L = 4, T = 512,
    autocast with checkpointing, the peak this moment in both): Falcon (4 heads, rotary)
    0.923 -> 0.984, BLOOM (8 heads, ALiBi) 0.887 -> 0.993. None elsewhere."""
    if not facts(spec).returns_attention_probs or not setup.activation_checkpointing:
        return None
    if setup.attention != "eager" or len(spec.kinds) != 1 or setup.offload_activations:
        return None
    if type(implementation_of(spec, setup)).__name__ != "Transformers":
        return None
    B, T, s, L = setup.batch_size, setup.seq_len, setup.activation_bytes, spec.num_hidden_layers
    t2 = B * spec.num_attention_heads * T * T
    probs = hf_saved.dropped_bytes(spec, setup)
    cast = t2 * probs if probs < FP32 else 0
    terms = _add(state_terms(spec, setup), embedding_saved(spec, setup))
    below = hf_saved.checkpointed_layer(spec, setup)
    _add_into(terms, _prefixed({f"layer/{k}": (L - 1) * v for k, v in below.items()}))
    terms["activations/layer/attention/linear/q"] = (
        setup.tokens * (spec.q_dim + 2 * spec.kv_dim) * s
    )
    terms[SOFTMAX_FORWARD] = t2 * s + 2 * t2 * FP32 + cast + t2 * probs
    terms[GRADS] = resident_grads(spec, setup)
    return terms


ATTENTION_FORWARD = "activations/layer/attention/forward_inflight"


def attention_forward(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The top layer's forward inside its eager attention, in a class that holds more
    T×T tensors there than Llama's ``eager_attention_forward``
    (``ClassFacts.attention_forward_inflight``, n of them): state, what the embedding
    and the layers below keep, the top layer's attention-side saved set (its T×T
    probabilities, the dropout's mask and output among them), the n in-flight B·h·T²
    FP32 tensors and eager's additive causal masks (B·T² at the residual dtype, one per
    layer type, alive through the model's forward). Without the fact the backward of
    the top layer holds more than any forward moment (its saved set is the whole of
    this one's plus the two T×T gradients), so the moment is not counted. Measured (dry
    run, d = 64, L = 4, h = 4, FP32 eager, T = 512): GPT-NeoX-Japanese's peak is this
    moment, at probs·V's ``bmm`` (its live set: three saved (1, 4, 512, 512) FP32
    tensors a layer, the ``zeros`` and the masked scores, the (1, 1, 512, 512) mask)."""
    n = facts(spec).attention_forward_inflight
    if not n or setup.activation_checkpointing or setup.offload_activations:
        return None
    if setup.attention != "eager" or not spec.runs:
        return None
    if type(implementation_of(spec, setup)).__name__ != "Transformers":
        return None
    from introspect.refined.stream import residual_bytes

    B, T = setup.batch_size, setup.seq_len
    top_kind = spec.runs[-1].kind
    if top_kind.attention.kind not in ("full", "sliding", "chunked"):
        return None
    keys = T + (1 if top_kind.attention.sinks else 0)
    terms = _add(state_terms(spec, setup), embedding_saved(spec, setup))
    below = _saved_below(spec, setup, spec.num_hidden_layers - 1)
    _add_into(terms, _prefixed({f"layer/{k}": v for k, v in below.items()}))
    one = spec.for_kind(top_kind)
    top = saved.attention_side_terms(layer_saved(one, setup), one)
    _add_into(terms, _prefixed({f"layer/{k}": v for k, v in top.items()}))
    terms[ATTENTION_FORWARD] = n * B * one.num_attention_heads * T * keys * FP32
    # one mask per layer type (hf_saved.eager_masks' rule: Flint's full and sliding)
    masks = max(1, len(hf_saved.mask_types(spec)))
    terms["activations/attention_mask"] = masks * B * T * T * residual_bytes(setup)
    terms[GRADS] = resident_grads(spec, setup)
    terms.update(sharding.moment_terms(spec, setup, "forward_end", working_weight_bytes(setup)))
    return terms


def _runs_below(spec: ModelSpec, setup: TrainingSetup, index: int) -> list[tuple]:
    """Each run of layers below layer ``index`` that keeps its saved set, with how many of
    its layers do: under LoRA with ``--num-layers`` the frozen blocks below the first
    adapted one keep nothing (:func:`introspect.refined.lora.first_recorded`)."""
    lowest = lora.first_recorded(spec, setup) if _lora(setup) else 0
    out, start = [], 0
    for run in spec.runs:
        count = max(0, min(start + run.count, index) - max(start, lowest))
        if count:
            out.append((run, count))
        start += run.count
    return out


def _saved_below(spec: ModelSpec, setup: TrainingSetup, index: int) -> dict[str, int]:
    """The saved sets of the layers below layer ``index`` (:func:`_runs_below`), summed by
    term (unprefixed, as :func:`layer_saved` names them)."""
    below: dict[str, int] = {}
    for run, count in _runs_below(spec, setup, index):
        for name, value in layer_saved(spec.for_kind(run.kind), setup).items():
            below[name] = below.get(name, 0) + count * value
    return below


def resident_grads(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Gradient bytes held before backward makes any: DeepSpeed ZeRO-3's contiguous
    partition (:func:`deepspeed.stage3_grads`), else none."""
    return deepspeed.stage3_grads(spec, setup) or 0


def forward_end(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """End of forward / start of backward: state, every saved activation, the loop's
    logits and the loss backward's transient; no gradients yet (with the activations
    offloaded, :func:`activation_offload.at_forward_end` of the saved set)."""
    saved_all = saved_terms(spec, setup)
    if setup.offload_activations:
        saved_all = activation_offload.at_forward_end(saved_all)
    terms = _add(state_terms(spec, setup), saved_all)
    terms.update(kv_store(spec, setup))
    terms[LOGITS_GRAD] = logits_transient(spec, setup)
    terms[GRADS] = resident_grads(spec, setup)
    terms.update(sharding.moment_terms(spec, setup, "forward_end", working_weight_bytes(setup)))
    return terms


def loss_forward(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The loss's forward, inside the model's forward (transformers' classes on torch):
    state, every saved activation, the logits and what the loss makes from them before
    backward starts. None where no such moment can exceed :func:`forward_end` (the
    fused loss, MLX, the reference model). A library's chunked loss (torchtune, TRL,
    Liger) adds what its forward makes: :func:`introspect.refined.losses.forward_transients`.

    * the logits at the activation dtype: the loop's own (already saved) in the logits
      loop; in the labels loop the output object's, alive until the loss returns;
    * ``logits/upcast``: the FP32 copy of 16-bit logits — ``logits.float()`` in
      ``ForCausalLMLoss`` (``transformers/loss/loss_utils.py``) or autocast's cast for
      ``log_softmax`` (on its FP32 list) — alive while the log-softmax is computed;
      saved by nothing (``_log_softmax_backward_data`` reads the output);
    * ``autocast_cache``: under autocast with checkpointing, every block's BF16 weight
      copies. autocast caches the cast of a leaf FP32 tensor that requires grad until the
      outermost autocast region exits (``cached_cast``, ``aten/src/ATen/autocast_mode.cpp``;
      grad mode is not consulted), and forward and loss run inside that region; without
      checkpointing the copies are in the saved set already, and after the region they
      are freed (checkpointing saved none of them). The cache takes only leaf FP32
      tensors that require grad (``cached_cast``: ``arg.requires_grad() && arg.is_leaf()``),
      so under LoRA it holds the FP32 adapters' copies alone, over the adapted layers
      (:func:`lora.autocast_cache_bytes`; measured: LoRA and QLoRA under autocast with
      checkpointing within −2.1% of real steps, where every frozen block's copies counted
      put it 11% over; ``tests/test_num_layers.py``, ``tests/test_lora.py``);

    Measured: Qwen3-0.6B, T=2048, amp, checkpointing, labels loop (dry run): peak in the
    forward at 11.723 GB — weights and Adam 7.152, the saved set 0.27, the cache 0.88 and
    lm_head's copy 0.31, logits 0.62, their upcast 1.25 and log-softmax 1.25."""
    impl = implementation_of(spec, setup)
    if losses.is_library(setup):  # the library's loss, after the backbone's forward
        terms = _add(state_terms(spec, setup), saved_terms(spec, setup))
        terms.update(_prefixed(losses.forward_transients(spec, setup)))
        terms[GRADS] = resident_grads(spec, setup)
        wb = working_weight_bytes(setup)
        terms.update(sharding.moment_terms(spec, setup, "forward_end", wb))
        return terms
    if not impl.loss_in_forward or setup.cross_entropy != "standard":
        return None
    saved_all = saved_terms(spec, setup)
    if setup.offload_activations:  # what the loss just made; the saved set on the host
        saved_all = {k: v for k, v in saved_all.items() if k == LOG_SOFTMAX}
    terms = _add(state_terms(spec, setup), saved_all)
    terms.update(kv_store(spec, setup))
    BTV, s = setup.tokens * spec.vocab_size, setup.activation_bytes
    terms[LOGITS_OUTPUT] = BTV * s
    if impl.loss_bytes(setup) > s:
        terms["activations/logits/upcast"] = BTV * FP32
    cached = setup.activation_checkpointing or setup.offload_activations  # not saved here
    if hf_saved.is_amp(setup) and cached:
        per_layer = 2 * hf_saved.linear_weights_per_layer(spec)
        terms["activations/autocast_cache"] = spec.num_hidden_layers * per_layer
        stack_cache = shared_block.autocast_cache(spec)  # Zamba2: layer by layer
        if stack_cache is not None:
            terms["activations/autocast_cache"] = stack_cache
        if _lora(setup):  # only the adapters require grad: a frozen weight is not cached
            terms["activations/autocast_cache"] = lora.autocast_cache_bytes(spec, setup)
    terms[GRADS] = resident_grads(spec, setup)
    terms.update(sharding.moment_terms(spec, setup, "forward_end", working_weight_bytes(setup)))
    return terms


#: Up to this many layers every layer's backward moments are built; above it only the
#: layers that can hold the phase's largest moment (:func:`candidate_layers`) — and at
#: any L where :func:`builds_candidates_only` says so.
ALL_LAYERS_UP_TO = 256
#: The most layers :func:`candidate_layers` returns when the per-layer totals are (almost)
#: flat in the layer index and no exact argument narrows them further.
MAX_CANDIDATES = 4096


def builds_candidates_only(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether :func:`candidate_layers` narrows the layers at any L, not only beyond
    :data:`ALL_LAYERS_UP_TO`: where the estimate is the same, term for term and phase for
    phase, as building every layer (the argument does not depend on L;
    ``tests/test_execution_closed_form.py`` checks the bundled models). This is most of
    a closed-form command's time: a 28-layer model's 56 backward moments become 2.

    Capped gradients (the optimizer in backward, parameter offload) take the ends and
    the cap's kink (:func:`_capped_candidates`), DDP's ``gradient_as_bucket_view`` the
    saved bytes' slope alone. Not where the per-layer totals are not the line in the
    layer index (plus the bounded error) that :func:`candidate_layers` assumes, which a
    comparison with every layer over the bundled models found: a heterogeneous stack,
    whose layers below each moment are of their own kinds (:func:`_layer_moments`: the
    largest moment can be mid-stack, Llama 4 under FSDP2);
    tensor/pipeline parallelism rescales each moment per rank
    (:func:`introspect.refined.model_parallel.model_parallel`) after the candidates are
    chosen. These keep building every layer up to :data:`ALL_LAYERS_UP_TO`. MLX's
    derived setups have moments of their own (:mod:`introspect.refined.mlx`); the others
    keep building every layer."""
    return (
        setup.framework == "torch"
        and setup.tensor_parallel == 1
        and setup.pipeline_parallel == 1
        and not spec.is_heterogeneous
        # Gemma 4's store layers: the layers below one hold its recomputed K/V graph, a
        # step in the layer index, not the line (kv_store)
        and not hf_saved.kv_store_layers(spec, setup)
    )


def backward_moments(
    spec: ModelSpec, setup: TrainingSetup, layers: Iterable[int] | None = None
) -> list[dict[str, int]]:
    """Moments inside backward: the output projection's backward (the log-softmax freed,
    the logits' gradient alive, lm_head's gradient made), then for each layer from the
    top down its feed-forward backward (the whole layer alive; with checkpointing,
    recomputed) and its attention backward (its feed-forward side freed, those
    gradients made).

    Work is bounded by the input's size, not its values: the layers' moments differ only
    by terms linear in the layer index, so beyond :data:`ALL_LAYERS_UP_TO` layers only the
    :func:`candidate_layers` that can hold the largest moment are built; the phase's
    largest moment (and the first of equal ones, in step order) is the same as when
    every layer is built. ``layers`` overrides the candidates (top down), e.g. every
    layer, which is how the tests check the candidates."""
    BT, d, s = setup.tokens, spec.hidden_size, setup.activation_bytes
    state = state_terms(spec, setup)
    saved_all = saved_terms(spec, setup)
    head = dict(saved_all)
    head.pop(LOG_SOFTMAX, None)
    if setup.offload_activations:
        head = activation_offload.at_head(spec, setup, saved_all, working_weight_bytes(setup))
    head[LOGITS_GRAD] = (
        BT * spec.vocab_size * logits_grad_bytes(spec, setup)
        if setup.cross_entropy == "standard"
        else 0
    ) + BT * d * s
    head[GRADS] = grad_bytes(spec, setup, head_parameters(spec))
    head.update(kv_store(spec, setup))
    if losses.is_library(setup):
        head[LOGITS_GRAD] = losses.head(spec, setup, head)
    wb = working_weight_bytes(setup)
    head.update(sharding.moment_terms(spec, setup, "head", wb))
    out = [_add(state, head)]
    layer = _layer_moments(spec, setup, state, saved_all)
    for i in candidate_layers(spec, setup) if layers is None else layers:
        out.extend(layer(i))
    if not is_mlx(setup):  # torch's autograd engine; MLX sums inside its graph
        out.append(backward_end(spec, setup))
    if setup.optimizer_in_backward:
        _in_backward_steps(spec, setup, out, state, saved_all)
    end = sharding.backward_end(spec, setup, wb)
    if end is not None:
        loop_logits = {k: v for k, v in saved_all.items() if k == LOGITS_OUTPUT}
        out.append(_add(_add(state, {EMBEDDING: 0} | loop_logits), end))
    return out


def _in_backward_steps(
    spec: ModelSpec, setup: TrainingSetup, out: list[dict[str, int]], state, saved_all
) -> None:
    """The optimizer in backward: the head's and the embedding's own updates, inside
    backward (:func:`offload.in_backward_step_temporaries`). Untied, lm_head's weight is
    stepped once its AccumulateGrad has run, after lm_head's backward node released what
    it held (the logits' gradient, autocast's BF16 copy of the weight): every saved
    activation, the gradient flowing into the final norm, lm_head's gradient and the
    step's temporaries (measured within 0.01%, ``tests/test_accumulation.py``). The
    embedding (tied: the summed weight) is stepped last: its V·d gradient and
    temporaries, the loop's logits. A block's own tensors are stepped inside its
    backward; their temporaries (at most a few d·f) are not placed."""
    if _lora(setup) and not setup.train_embeddings:
        return
    Vd = spec.vocab_size * spec.hidden_size
    temporaries = offload.in_backward_step_temporaries(setup, Vd, state_value_bytes(setup))
    if not temporaries:
        return
    if not spec.tie_word_embeddings:
        head = {k: v for k, v in out[0].items() if k != "activations/logits/autocast_weight"}
        head[LOGITS_GRAD] = setup.tokens * spec.hidden_size * setup.activation_bytes
        head[OPTIMIZER_TEMPORARIES] = temporaries
        out.insert(1, head)
    step = dict(state)
    step.update({k: v for k, v in saved_all.items() if k == LOGITS_OUTPUT})
    step[GRADS] = Vd * working_weight_bytes(setup)
    step[OPTIMIZER_TEMPORARIES] = temporaries
    out.append(step)


#: Activations whose backward reads their output, not their input (``threshold_backward``
#: on ReLU's result; ReLU² squares that result): their output stays saved by themselves
#: after the down projection's backward.
RESULT_SAVING_ACTIVATIONS = ("relu", "relu2", "relu6")


def _after_down_projection(
    spec: ModelSpec, setup: TrainingSetup, whole: dict[str, int]
) -> tuple[dict[str, int], int]:
    """What a dense gated feed-forward's backward holds at its largest: inside the
    product's backward (``act * up``), after the down projection's.

    torch's engine releases a node's saved tensors once the node has run
    (``torch/csrc/autograd/engine.cpp``: ``fn.release_variables()`` without
    ``retain_graph``), so by the time the product's backward makes the gradients of the
    activation and of the up projection, the product (saved only by ``down_proj``) and,
    under autocast, ``down_proj``'s BF16 weight copy are freed, and ``down_proj``'s weight
    gradient exists: gate, act and up kept, three B·T·f gradients
    (:func:`ffn_transient`). Returns the layer's terms at that moment and the parameters
    whose gradients it has made (``down_proj``'s weight and bias). A plain one, inside
    its activation's backward, has freed the activation's output (below); an expert
    feed-forward keeps every term (an upper bound: its own order is not modelled).

    Measured: a transformers Qwen2 block with f = 256·d under autocast and checkpointing
    (``tests/test_measure_hf.py``), peak in this moment, within 1%."""
    shared_dominates = spec.ffn == "gated" and (
        shared_transient(spec, setup) > routed_transient(spec, setup)
    )
    if spec.is_moe and "feed_forward/shared" in whole and shared_dominates:
        # The same inside the shared expert's product backward, when its buffers are the
        # larger (ffn_transient): its product (saved by its down_proj alone) is freed and
        # its down_proj's weight gradient made.
        fs = spec.kinds[0][0].feed_forward.shared_intermediate_size
        down = spec.hidden_size * fs  # the shared down_proj's weights
        out = dict(whole)
        out["feed_forward/shared"] -= setup.tokens * fs * setup.activation_bytes
        if "autocast_weights" in out:
            out["autocast_weights"] -= 2 * down  # its BF16 copy
        return out, down
    d, f = spec.hidden_size, spec.ffn_dim
    if (
        spec.ffn == "plain"
        and not spec.is_moe
        and "feed_forward/act" in whole
        and spec.hidden_act not in RESULT_SAVING_ACTIVATIONS
    ):
        # A plain feed-forward inside its activation's backward: the activation's output
        # (saved by the down projection alone) is freed once that projection's backward
        # has run, while the activation's backward reads its input (``up``) and makes
        # up's gradient beside the activation's (ffn_transient). Dry run of XGLM (f =
        # 64·d, FP32 eager, T = 512): the peak holds one B·T·f gradient beyond the saved
        # set, not one plus the activation.
        out = {k: v for k, v in whole.items() if k != "feed_forward/act"}
        if "autocast_weights" in out:
            out["autocast_weights"] -= 2 * d * f
        return out, d * f + (d if spec.mlp_bias else 0)
    if spec.ffn != "gated" or spec.is_moe or "feed_forward/product" not in whole:
        return whole, 0
    out = {k: v for k, v in whole.items() if k != "feed_forward/product"}
    if "autocast_weights" in out:
        out["autocast_weights"] -= 2 * d * f
    return out, d * f + (d if spec.mlp_bias else 0)


def _mixer_recompute(spec: ModelSpec, setup: TrainingSetup, att, side: dict) -> dict[str, int]:
    """A checkpointed Mamba-2 layer's moment inside its recomputation (empty for other
    mixers): the attention side's saved set (the mixer's whole, its norm's) and the bytes
    its scan holds beyond it at the forward's peak
    (:func:`introspect.refined.mamba2.recompute_extra`), beside the residual stream's
    gradient that reached the layer. The recomputation runs at the start of the layer's
    backward (``torch/utils/checkpoint.py``, the first unpack of a saved tensor), before
    its feed-forward is made again."""
    if att.kind == "linear" and _deltanet_forward_applies(setup):
        from introspect.refined.stream import residual_bytes

        out = _deltanet_at_forward_peak(spec, setup, att, side)
        out["attention/recompute"] = setup.tokens * spec.hidden_size * residual_bytes(setup)
        return out
    beside = spec.kinds[0][0].mixer
    if beside is not None and beside.kind == "mamba2":
        return _parallel_mixer_recompute(spec, setup, beside)
    if att.kind != "mamba2" or beside is not None:
        return {}
    from introspect.refined import mamba2
    from introspect.refined.stream import is_amp, residual_bytes

    out = dict(side)
    # The norm before the mixer; not ``attention_norm``'s BF16 q, k and v weight copies
    # (the flat fields' attention, which a Mamba-2 layer has not: the mixer's own casts
    # are its ``attention/linear/autocast_weights``, already in ``side``).
    norm = hf_saved.attention_norm(spec, setup)
    norm.pop("autocast_weights", None)
    out.update(norm)
    stream = setup.tokens * spec.hidden_size * residual_bytes(setup)
    if is_amp(setup):
        # ``residual + hidden_states``: an FP32 stream plus out_proj's BF16 output, whose
        # backward casts the stream's gradient to BF16 for the branch
        # (``AddBackward0``'s grad.to(other dtype)) before out_proj's backward unpacks
        # the checkpoint: both alive through the recomputation (a live-storage trace of a
        # Mamba2ForCausalLM step: the B·T·d FP32 and BF16 gradients, both Temp).
        stream += setup.tokens * spec.hidden_size * BF16
    out["attention/recompute"] = mamba2.recompute_extra(att, setup, spec.hidden_size) + stream
    return out


def _parallel_mixer_recompute(spec: ModelSpec, setup: TrainingSetup, mixer) -> dict[str, int]:
    """A checkpointed Falcon-H1 layer inside its recomputation, at its Mamba-2 mixer's
    scan (:func:`_parallel_mixer_at_scan`), beside the residual stream's gradient that
    reached the layer (FP32 under autocast, with its BF16 cast for the branch, as
    :func:`_mixer_recompute`'s Mamba-2 layer)."""
    from introspect.refined.stream import is_amp, residual_bytes

    d = spec.hidden_size
    out = _parallel_mixer_at_scan(spec, setup, mixer)
    stream = setup.tokens * d * residual_bytes(setup)
    if is_amp(setup):
        stream += setup.tokens * d * BF16
    out["attention/recompute"] = out.pop("attention/mamba/forward") + stream
    return out


def _parallel_mixer_at_scan(spec: ModelSpec, setup: TrainingSetup, mixer) -> dict[str, int]:
    """A Falcon-H1 layer's own terms at its Mamba-2 mixer's scan peak:
    ``FalconH1DecoderLayer.forward`` runs ``self.mamba`` before ``self.self_attn``
    (``models/falcon_h1/modeling_falcon_h1.py`` l. 915-935), so only the block norm and
    the mixer's saved set so far are alive — the mixer's whole saved set
    (:func:`introspect.refined.falcon_h1.mixer_saved`) and what its scan holds beyond it
    at the forward's peak (:func:`introspect.refined.mamba2.recompute_extra`, the same
    ``mamba2_chunk_scan``, as ``attention/mamba/forward``), none of the attention's."""
    from introspect.refined import falcon_h1, mamba2

    d = spec.hidden_size
    out = falcon_h1.mixer_saved(mixer, setup, d)
    norm = hf_saved.attention_norm(spec, setup)
    norm.pop("autocast_weights", None)
    out.update(norm)
    out["attention/mamba/forward"] = mamba2.recompute_extra(mixer, setup, d)
    return out


def _deltanet_backward(spec: ModelSpec, setup: TrainingSetup, att) -> int | None:
    """A Gated DeltaNet layer's bytes inside its kernel's first ``solve_triangular``
    backward beyond its saved set (:func:`introspect.refined.deltanet.backward_transient`),
    beside the residual stream's gradient; None where not modelled (other mixers, or
    outside :func:`_deltanet_forward_applies`)."""
    if att.kind != "linear" or not _deltanet_forward_applies(setup):
        return None
    from introspect.refined import deltanet
    from introspect.refined.stream import residual_bytes

    stream = setup.tokens * spec.hidden_size * residual_bytes(setup)
    return deltanet.backward_transient(att, setup, spec.hidden_size) + stream


def _deltanet_forward_applies(setup: TrainingSetup) -> bool:
    """Whether the Gated DeltaNet forward-peak moments are modelled for ``setup``:
    transformers' classes on torch, full training or peft's LoRA (whose layer keeps
    :func:`lora.deltanet_at_forward_peak`'s set there), activations on the device (an
    offloaded saved set is on the host)."""
    return (
        setup.implementation == "transformers"
        and setup.framework == "torch"
        and not setup.offload_activations
    )


def _deltanet_at_forward_peak(spec: ModelSpec, setup: TrainingSetup, att, side: dict) -> dict:
    """A Gated DeltaNet layer's own terms at its mixer's forward peak (``spec`` one kind):
    the first norm's share and the mixer's whole saved set — its attention-side terms
    ``side`` and out_proj's input — plus what the forward holds beyond them
    (:func:`introspect.refined.deltanet.forward_extra`, which subtracts what is made after
    the peak); the feed-forward's not made yet."""
    from introspect.refined import deltanet

    full = layer_saved(spec, setup)
    out = implementation_of(spec, setup).at_attention_backward(spec, setup, full, dict(side))
    out["attention/linear/context"] = full.get("attention/linear/context", 0)
    _add_into(out, deltanet.forward_extra(att, setup, spec.hidden_size))
    if _lora(setup):
        _add_into(out, lora.deltanet_at_forward_peak(spec, setup, full))
    return out


def _mamba2_forward_applies(kind) -> bool:
    """Whether a layer kind's forward peak is inside a Mamba-2 scan: a Mamba-2 mixer alone
    on its branch (:func:`_mamba2_at_forward_peak`) or Falcon-H1's beside its attention
    (:func:`_parallel_mixer_at_scan`), not after Zamba2's shared block, whose terms the
    moment does not hold."""
    if kind.shared is not None:
        return False
    if kind.mixer is not None:
        return kind.mixer.kind == "mamba2"
    return kind.attention.kind == "mamba2"


def _mamba2_at_forward_peak(spec: ModelSpec, setup: TrainingSetup, att, side: dict) -> dict:
    """A Mamba-2 layer's own terms at its scan's peak (``spec`` one kind), its forward run
    without checkpointing: the norm before the mixer and the mixer's whole saved set
    (``side``), plus what ``mamba2_chunk_scan`` holds beyond it at ``(Y_diag +
    Y_off).contiguous()``, less the saved set made after that line
    (:func:`introspect.refined.mamba2.recompute_extra`: the moment a checkpointed layer's
    recomputation reaches, :func:`_mixer_recompute`, here with no gradient beside it);
    the feed-forward's not made yet. Its peak is the step's where the chunk matrices
    (B·h·N·c² each) outweigh the logits (a dry run of ``Mamba2ForCausalLM`` at its
    default widths, B = 2, T = 300: ``tests/test_mamba2_stack.py``)."""
    from introspect.refined import mamba2

    out = dict(side)
    norm = hf_saved.attention_norm(spec, setup)
    norm.pop("autocast_weights", None)  # the flat fields' q, k, v; the mixer's are in side
    out.update(norm)
    out["attention/mamba/forward"] = mamba2.recompute_extra(att, setup, spec.hidden_size)
    return out


def mixer_forward(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The forward's largest moment inside a Gated DeltaNet mixer (None where the stack
    has none, or under checkpointing: each layer's forward then keeps only its input, and
    the same peak comes at its recomputation, :func:`_mixer_recompute`): the topmost
    DeltaNet layer's forward at its peak (:func:`_deltanet_at_forward_peak`), every layer
    below it saved (less what each DeltaNet layer's forward freed again,
    :func:`introspect.refined.deltanet.released`), the embedding's saved set, state; no
    gradient, no logits yet.

    ``torch_chunk_gated_delta_rule`` (``transformers/models/qwen3_next/
    modeling_qwen3_next.py`` l. 371–509) holds its FP32 locals — the scan's state-sized
    products among them — beside everything the layer saves, so with wide heads the
    step's peak is this moment, not the forward's end (measured: the every-type
    Qwen3-Next and OLMo-Hybrid dry runs, ``tests/test_deltanet_rows.py``)."""
    if setup.activation_checkpointing or not _deltanet_forward_applies(setup):
        return None
    from introspect.refined import deltanet

    top, start = None, 0
    for run in spec.runs:
        if run.kind.attention.kind == "linear":
            top = (run.kind, start + run.count - 1)
        start += run.count
    if top is None:
        top, start = None, 0
        for run in spec.runs:
            if _mamba2_forward_applies(run.kind):
                top = (run.kind, start + run.count - 1)
            start += run.count
    if top is None:
        return None
    kind, index = top
    terms = _add(state_terms(spec, setup), embedding_saved(spec, setup))
    below = _saved_below(spec, setup, index)
    for run, count in _runs_below(spec, setup, index):
        if run.kind.attention.kind == "linear":
            # What each finished DeltaNet layer's forward freed again of its saved set.
            gone = count * deltanet.released(run.kind.attention, setup)
            below["attention/deltanet/released"] = (
                below.get("attention/deltanet/released", 0) - gone
            )
    _add_into(terms, _prefixed({f"layer/{k}": v for k, v in below.items()}))
    one = spec.for_kind(kind)
    full = layer_saved(one, setup)
    side = {k: v for k, v in full.items() if saved.is_attention_side(k)}
    if kind.attention.kind == "linear":
        own = _deltanet_at_forward_peak(one, setup, kind.attention, side)
    elif kind.mixer is not None:
        own = _parallel_mixer_at_scan(one, setup, kind.mixer)
    else:
        own = _mamba2_at_forward_peak(one, setup, kind.attention, side)
    _add_into(terms, _prefixed({f"layer/{k}": v for k, v in own.items()}))
    terms[GRADS] = resident_grads(spec, setup)
    terms.update(sharding.moment_terms(spec, setup, "forward_end", working_weight_bytes(setup)))
    return terms


#: The gradients inside eager attention's probs·V backward (:func:`probs_v_transient`).
PV_GRAD = "activations/layer/attention/probs_v_grad"


def _at_probs_v_backward(spec: ModelSpec, setup: TrainingSetup, full: dict, side: dict) -> dict:
    """A transformers eager attention layer's terms inside ``attn_output =
    torch.matmul(attn_weights, value_states)``'s backward (``eager_attention_forward``,
    e.g. ``models/gemma4/modeling_gemma4.py``; empty elsewhere): the attention side as at
    the softmax's backward (:meth:`~introspect.refined.implementations.Transformers.
    at_attention_backward`) but with V and the probabilities' 16-bit copy still held —
    the bmm saved them and runs before the softmax's backward, which frees them."""
    impl = implementation_of(spec, setup)
    eager = setup.attention == "eager" and type(impl).__name__ == "Transformers"
    if not eager or not impl.keeps_t2(spec, setup) or spec.kinds[0][0].attention.kind == "none":
        return {}
    if spec.kinds[0][0].attention.kind not in hf_saved.MASKED_KINDS:
        return {}
    out = dict(side)
    out.update(hf_saved.attention_norm(spec, setup))
    return out


#: The dropped probabilities the attention returns to its decoder layer (:func:`returned_probs`).
RETURNED_PROBS = "attention/quadratic/returned"
#: The gradients inside eager attention's dropout backward (:func:`dropout_transient`).
DROPOUT_GRAD = "activations/layer/attention/dropout_grad"


def _at_dropout_backward(spec: ModelSpec, setup: TrainingSetup, full: dict, current: dict) -> dict:
    """A transformers eager attention layer's terms inside the backward of the dropout on
    its probabilities (``attn_weights = nn.functional.dropout(attn_weights, p=dropout,
    training=module.training)`` between the softmax and ``torch.matmul(attn_weights,
    value_states)``, ``eager_attention_forward``, e.g. ``models/emu3/modeling_emu3.py``
    l. 147-150, ``models/biogpt/modeling_biogpt.py`` l. 112-115; empty without attention
    dropout): the softmax backward's moment ``current`` (probs·V's backward has freed V and
    the probabilities' copy it saved) with the dropout's mask still held — the dropout's
    backward reads it (CPU: ``_dropout_impl``'s ``input * noise``, whose backward is
    ``grad * noise``) and frees it only when it returns, before the softmax backward
    runs. Its transient is :func:`dropout_transient`."""
    impl = implementation_of(spec, setup)
    eager = setup.attention == "eager" and type(impl).__name__ == "Transformers"
    if not eager or not impl.keeps_t2(spec, setup) or spec.attention_dropout <= 0:
        return {}
    mask = full.get("attention/quadratic/dropout_mask")
    if not mask:
        return {}
    return {**current, "attention/quadratic/dropout_mask": mask}


def returned_probs(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of the dropped probabilities the attention returns beside its output and no
    backward keeps: ``eager_attention_forward`` returns ``attn_output, attn_weights`` (the
    dropout's output) and the decoder layer binds them (``hidden_states, _ =
    self.self_attn(...)``, e.g. ``models/seed_oss/modeling_seed_oss.py`` l. 149-154,
    254; ``models/llama/modeling_llama.py`` l. 299), so ``_`` holds them until the layer
    returns. Under autocast, where the dropout ran above 16 bits
    (:func:`~introspect.refined.hf_saved.dropped_bytes`: FP32), probs·V's matmul saves
    its 16-bit cast and the dropout's multiply only the mask: this B·h·T² tensor is alive
    beside the saved set through the rest of the layer's forward (its recomputation under
    checkpointing) and in no other moment. Zero without attention dropout (then
    ``attn_weights`` is the softmax's output, which its backward keeps anyway) or where
    the matmul saves the dropped tensor itself."""
    impl = implementation_of(spec, setup)
    eager = setup.attention == "eager" and type(impl).__name__ == "Transformers"
    if not eager or not impl.keeps_t2(spec, setup) or spec.attention_dropout <= 0:
        return 0
    dropped = hf_saved.dropped_bytes(spec, setup)
    if not hf_saved.is_amp(setup) or dropped <= setup.activation_bytes:
        return 0
    B, T = setup.batch_size, setup.seq_len
    return B * spec.num_attention_heads * T * T * dropped


def dropout_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """What the attention dropout's backward holds beyond the saved set: the gradient of
    the dropped probabilities (probs·V's backward's, cast back by autocast's ``_to_copy``
    to the dtype the dropout made: :func:`~introspect.refined.hf_saved.dropped_bytes`)
    and the gradient of the probabilities it makes (``grad * noise``, the same dtype),
    two B·h·T² tensors, beside the residual stream's gradient and grad-of-V
    (:meth:`~introspect.refined.implementations.Transformers.attention_stream`).
    Measured (BioGPT and Emu3, d = 64, 4 heads, L = 4, T = 512, autocast with
    checkpointing, dry run): the step's peak is this moment, four FP32 B·h·T² tensors
    (probabilities, mask, the two gradients) where the softmax backward holds three."""
    B, T = setup.batch_size, setup.seq_len
    impl = implementation_of(spec, setup)
    t2 = B * spec.num_attention_heads * T * T
    return 2 * t2 * hf_saved.dropped_bytes(spec, setup) + impl.attention_stream(spec, setup)


def probs_v_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """What probs·V's backward holds beyond the saved set: the gradient of its output
    (o_proj's input gradient, B·T·q_dim), the two it makes — the probabilities' (B·h·T²
    at the bmm's dtype: the activations') and V's (at the width the bmm saw V,
    :meth:`~introspect.refined.implementations.Transformers.attention_stream`) — and the
    residual stream's gradient. The softmax backward's moment (:func:`attention_transient`)
    holds two FP32 B·h·T² tensors instead of one 16-bit one and the B·T·q_dim gradient,
    so this is the larger where the heads are wide against T (measured: Gemma 4 unified,
    d = 64, 4 heads, global_head_dim 512, T = 64, FP32 eager: the peak inside the full
    layer's probs·V backward, B·T·q_dim + B·T·q_dim + B·h·T² + B·T·d alive beside its
    attention side)."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    impl = implementation_of(spec, setup)
    t2 = B * spec.num_attention_heads * T * T * s
    return B * T * spec.q_dim * s + t2 + impl.attention_stream(spec, setup)


#: The gradients inside Granite-SWA's logsumexp backward (:func:`lse_sink_transient`).
LSE_SINK_GRAD = "activations/layer/attention/sink_lse_grad"


def _at_lse_sink_backward(spec: ModelSpec, setup: TrainingSetup, current: dict) -> dict:
    """A Granite-SWA eager attention layer's terms inside ``torch.logsumexp``'s backward
    (:attr:`~introspect.refined.transformers_classes.ClassFacts.lse_sink_scale`; empty
    elsewhere): the layer as at its softmax's backward (``current``) less this layer's
    probabilities, which the softmax's backward freed.

    ``eager_attention_forward`` (``models/granite_swa/modeling_granite_swa.py`` l.
    105-117, ``models/granitemoe_swa/modeling_granitemoe_swa.py`` l. 189-197) makes
    ``lse`` and the sigmoid before the softmax, and ``sink_scale.unsqueeze(-1).to(...)``
    after probs·V: autograd runs the higher sequence numbers first, so the scale's cast,
    then probs·V's and the softmax's backward, and only then the sigmoid's, the
    subtraction's and logsumexp's, whose saved masked scores
    (``attention/quadratic/sink_scores``) are held throughout; the scores' own node
    waits for both gradients."""
    impl = implementation_of(spec, setup)
    if not facts(spec).lse_sink_scale or setup.attention != "eager":
        return {}
    if type(impl).__name__ != "Transformers" or not impl.keeps_t2(spec, setup):
        return {}
    out = dict(current)
    out.pop("attention/quadratic/probs", None)
    return out


def lse_sink_transient(spec: ModelSpec, setup: TrainingSetup) -> int:
    """What logsumexp's backward holds beyond the saved set (:func:`_at_lse_sink_backward`):
    the softmax's gradient of the masked scores, waiting in the scores' input buffer
    (``_softmax_backward_data`` returns the softmax input's dtype, the residual dtype r
    the mask promotes the scores to), and ``logsumexp_backward``'s ``grad * (self -
    result).exp()`` (``torch/csrc/autograd/FunctionsManual.cpp``): the difference, its
    exponential and the product, alive at once as one expression's temporaries — four
    B·h·T² tensors at r — plus the residual stream's and V's gradients
    (:meth:`~introspect.refined.implementations.Transformers.attention_stream`). The
    softmax's moment holds two B·h·T² gradients and the probabilities, so this one is
    the larger by one B·h·T² (measured, dry run: the peak at logsumexp's backward's
    multiply in the top layer, the masked scores, the softmax's gradient, ``sub``,
    ``exp`` and ``mul`` alive)."""
    from introspect.refined.stream import residual_bytes

    B, T = setup.batch_size, setup.seq_len
    t2 = B * spec.num_attention_heads * T * T * residual_bytes(setup)
    return 4 * t2 + implementation_of(spec, setup).attention_stream(spec, setup)


def _kind_parts(spec: ModelSpec, setup: TrainingSetup) -> dict:
    """One layer's share of its backward moments, for a homogeneous ``spec`` (a kind of a
    heterogeneous stack through :meth:`ModelSpec.for_kind`): what it keeps while the layers
    below it are alive (``below``), the whole layer at its feed-forward backward and its
    attention side at its attention backward (prefixed terms), the two backward
    transients, and its parameters: all, those whose gradients its feed-forward backward
    has made (``down``), and its attention side's."""
    d = spec.hidden_size
    full = layer_saved(spec, setup)
    below = saved.checkpointed_layer(spec, setup) if setup.activation_checkpointing else full
    impl = implementation_of(spec, setup)
    side = {k: v for k, v in full.items() if saved.is_attention_side(k)}
    att = spec.kinds[0][0].attention
    recompute = _mixer_recompute(spec, setup, att, side) if setup.activation_checkpointing else {}
    pv = _at_probs_v_backward(spec, setup, full, side)
    current = impl.at_attention_backward(spec, setup, full, side)
    dropout = _at_dropout_backward(spec, setup, full, current)
    if att.kind == "none":
        side = 0
    elif att.kind in ("mamba1", "mamba2", "rglru"):
        from introspect.refined import mamba1, mamba2, rglru

        # The kind's own mixer (the flat fields of ``spec.for_kind`` describe an attention).
        mixer = {"mamba1": mamba1, "mamba2": mamba2, "rglru": rglru}[att.kind]
        side = attention_params(spec, att) - mixer.made_before_peak(att, d)
    else:
        side = attention_params(spec) - spec.q_dim * d  # all but o_proj's
    attention_side_params = side + qk_norm_params(spec)
    attention_side_params += norm_params(spec, d)
    whole = {k: v for k, v in full.items() if k != "feed_forward/down"}
    # This layer's forward is done: what it freed again (one layer's; ``spec`` is a kind).
    gone = _layer_released(att, setup)
    if gone:
        below = _add(below, {RELEASED: -gone})
        whole = _add(whole, {RELEASED: -gone})
        current = _add(current, {RELEASED: -gone})
        if dropout:
            dropout = _add(dropout, {RELEASED: -gone})
    if setup.activation_checkpointing:
        recomputed = impl.recomputed_extra(spec, setup)
        whole, current = _add(whole, recomputed), _add(current, recomputed)
        if pv:
            pv = _add(pv, recomputed)
        if dropout:
            dropout = _add(dropout, recomputed)
        again = _recomputed_released(att, setup)
        if again:
            whole = _add(whole, {RELEASED: -again})
            current = _add(current, {RELEASED: -again})
            if dropout:
                dropout = _add(dropout, {RELEASED: -again})
        if recompute:
            recompute = _add(recompute, recomputed)
    sink = _at_lse_sink_backward(spec, setup, current)
    held = returned_probs(spec, setup) if setup.activation_checkpointing else 0
    # Checkpointing: the layer's recomputed forward at its feed-forward, the attention's
    # returned probabilities still bound (returned_probs), none of its gradients made.
    refed = _add(whole, {RETURNED_PROBS: held}) if held else {}
    whole, down_params = _after_down_projection(spec, setup, whole)
    # Gemma 4's per-layer-input tail, the block's last op: its gradients come first.
    tail = block_per_layer_input_params(spec)
    return {
        # Prefixed once: a moment differs from the next only by the layers below.
        "below": {}  # offloaded: the layers below are on the host
        if setup.offload_activations
        else _prefixed({f"layer/{k}": v for k, v in below.items()}),
        "whole": _prefixed({f"layer/{k}": v for k, v in whole.items()}),
        "current": _prefixed({f"layer/{k}": v for k, v in current.items()}),
        "pv": _prefixed({f"layer/{k}": v for k, v in pv.items()}),
        "pv_grad": probs_v_transient(spec, setup) if pv else 0,
        "sink": _prefixed({f"layer/{k}": v for k, v in sink.items()}),
        "sink_grad": lse_sink_transient(spec, setup) if sink else 0,
        "dropout": _prefixed({f"layer/{k}": v for k, v in dropout.items()}),
        "refed": _prefixed({f"layer/{k}": v for k, v in refed.items()}),
        "dropout_grad": dropout_transient(spec, setup) if dropout else 0,
        "recompute": _prefixed({f"layer/{k}": v for k, v in recompute.items()}),
        "ffn_grad": ffn_transient(spec, setup),
        "attention_grad": attention_transient(spec, setup, current=current),
        "deltanet_grad": _deltanet_backward(spec, setup, att),
        "deltanet_adapters": _prefixed(
            {f"layer/{k}": v for k, v in lora.deltanet_at_backward_peak(spec, setup).items()}
        )
        if _lora(setup) and att.kind == "linear"
        else {},
        "params": layer_parameters(spec) + tail,
        "down_params": down_params + tail,
        "attention_side_params": attention_side_params,
    }


def _layer_moments(spec: ModelSpec, setup: TrainingSetup, state: dict[str, int], saved_all):
    """A function of the layer index ``i`` giving that layer's backward moments.

    Layer ``i`` brings its own kind's share (:func:`_kind_parts`); below it the ``i``
    layers of the stack as they are, each kind's ``below`` times the layers of that kind
    under ``i``; above it the gradients of every layer above, each kind's parameters
    times its layers above ``i``. A homogeneous stack is one kind: ``i·below`` and
    ``(L-1-i)·P``. The counts come from the runs (:attr:`ModelSpec.runs`), so the work
    per moment is bounded by the stack's description, not by L."""
    L, BT, d, s = spec.num_hidden_layers, setup.tokens, spec.hidden_size, setup.activation_bytes
    loop_logits = {k: v for k, v in saved_all.items() if k == LOGITS_OUTPUT}
    kinds = [kind for kind, _ in spec.kinds]
    parts = [_kind_parts(spec.for_kind(kind), setup) for kind in kinds]
    index = {kind: n for n, kind in enumerate(kinds)}
    runs = [(index[run.kind], run.count) for run in spec.runs]
    before = {} if setup.offload_activations else embedding_saved(spec, setup)
    start = lora.first_recorded(spec, setup) if _lora(setup) else 0
    head_params = head_parameters(spec)
    wb = working_weight_bytes(setup)
    base = _add(state, before)  # every moment starts from it (each gets a copy)
    per_layer_inputs = spec.per_layer_input_size and implementation_of(spec, setup) is not REFERENCE

    def counts_below(i: int) -> tuple[int, list[int]]:
        """Layer i's kind, and how many layers of each kind lie below it."""
        counts, start = [0] * len(kinds), 0
        for n, count in runs:
            if i < start + count:
                counts[n] += i - start
                return n, counts
            counts[n] += count
            start += count
        raise IndexError(f"layer {i} of {L}")

    def layers_below(counts: list[int]) -> dict[str, int]:
        if len(parts) == 1:
            return {k: counts[0] * v for k, v in parts[0]["below"].items()}
        out: dict[str, int] = {}
        for part, count in zip(parts, counts, strict=True):
            if count:
                _add_into(out, {k: count * v for k, v in part["below"].items()})
        return out

    totals = [count for _, count in spec.kinds]
    kept_after = [_rglru_retained(spec, setup, kind) for kind in kinds]

    def retained_above(n: int, counts: list[int]) -> int:
        """RG-LRU layers above layer i (of kind n) already recomputed: their graphs."""
        return sum(
            (total - below - (1 if m == n else 0)) * kept
            for m, (kept, total, below) in enumerate(zip(kept_after, totals, counts, strict=True))
            if kept
        )

    def params_above(n: int, counts: list[int]) -> int:
        return sum(
            (total - below - (1 if m == n else 0)) * part["params"]
            for m, (part, total, below) in enumerate(zip(parts, totals, counts, strict=True))
        )

    # --num-layers: the blocks below the first recorded one keep nothing.
    unrecorded = counts_below(start)[1] if start else [0] * len(kinds)
    shared_tops = shared_block_tops(spec)

    def shared_above(i: int) -> int:
        """Parameters of the shared blocks whose topmost use lies above layer i: their
        gradients are made there (a tied weight's gradient accumulates in place)."""
        return sum(n for top, n in shared_tops if top > i)

    masked = setup.activation_checkpointing and "activations/attention_mask" in base

    def at_layer(i: int) -> list[dict[str, int]]:
        n, counts = counts_below(i)
        part = parts[n]
        recorded = [c - u for c, u in zip(counts, unrecorded, strict=True)]
        below_i = layers_below(recorded)  # the layers below, as they are
        below_i.update(kv_store(spec, setup, i))
        if per_layer_inputs:
            # Gemma 4: the per-layer inputs' gradient, summed over the layers' slices
            below_i.update(hf_saved.per_layer_input_grad(spec, setup, top=i == L - 1))
        if masked:
            # eager's masks of the layer types at or below i (hf_saved.eager_masks)
            present = [k for m, k in enumerate(kinds) if counts[m] or m == n]
            types = hf_saved.mask_types(spec, present)
            below_i["activations/attention_mask"] = hf_saved.eager_masks(spec, setup, types)
        above = head_params + params_above(n, counts) + shared_above(i)
        placed = sharding.moment_terms(spec, setup, "layer", wb, i)
        kept = retained_above(n, counts)
        if kept:
            placed = {**placed, RGLRU_RETAINED: kept}
        # The layer's feed-forward backward: the whole layer still (or, checkpointed,
        # again) alive, the gradients of everything above made.
        terms = dict(base)
        terms.update(below_i)
        _add_into(terms, part["whole"])
        _add_into(terms, loop_logits)
        terms["activations/layer/feed_forward/grad"] = part["ffn_grad"]
        done = above + part["down_params"]
        terms[GRADS] = grad_bytes(spec, setup, done)
        terms.update(placed)
        out = [terms]
        # The layer's attention backward.
        terms = dict(base)
        terms.update(below_i)
        _add_into(terms, part["current"])
        _add_into(terms, loop_logits)
        terms["activations/layer/attention/grad"] = part["attention_grad"]
        done = above + part["params"] - part["attention_side_params"]
        terms[GRADS] = grad_bytes(spec, setup, done)
        terms.update(placed)
        out.append(terms)
        if part["pv"]:
            # Eager attention: inside probs·V's backward, before the softmax's.
            pv_terms = dict(base)
            pv_terms.update(below_i)
            _add_into(pv_terms, part["pv"])
            _add_into(pv_terms, loop_logits)
            pv_terms[PV_GRAD] = part["pv_grad"]
            pv_terms[GRADS] = terms[GRADS]
            pv_terms.update(placed)
            out.append(pv_terms)
        if part["sink"]:
            # Granite-SWA: inside logsumexp's backward, after the softmax's.
            sink_terms = dict(base)
            sink_terms.update(below_i)
            _add_into(sink_terms, part["sink"])
            _add_into(sink_terms, loop_logits)
            sink_terms[LSE_SINK_GRAD] = part["sink_grad"]
            sink_terms[GRADS] = terms[GRADS]
            sink_terms.update(placed)
            out.append(sink_terms)
        if part["dropout"]:
            # Eager attention with dropout on its probabilities: inside the dropout's
            # backward, between probs·V's and the softmax's.
            dropout_terms = dict(base)
            dropout_terms.update(below_i)
            _add_into(dropout_terms, part["dropout"])
            _add_into(dropout_terms, loop_logits)
            dropout_terms[DROPOUT_GRAD] = part["dropout_grad"]
            dropout_terms[GRADS] = terms[GRADS]
            dropout_terms.update(placed)
            out.append(dropout_terms)
        if part["refed"]:
            # Checkpointing: the recomputed layer at its feed-forward, the attention's
            # returned probabilities alive (returned_probs); the gradients above made.
            refed = dict(base)
            refed.update(below_i)
            _add_into(refed, part["refed"])
            _add_into(refed, loop_logits)
            refed[GRADS] = grad_bytes(spec, setup, above)
            refed.update(placed)
            out.append(refed)
        if part["deltanet_grad"] is not None:
            # A Gated DeltaNet layer: inside the backward of its kernel's first
            # solve_triangular (the same layer terms, its own transient instead).
            terms = dict(terms)
            terms.pop("activations/layer/attention/grad")
            terms["activations/layer/attention/deltanet/backward"] = part["deltanet_grad"]
            # Under LoRA, the adapters of the projections made before the kernel.
            _add_into(terms, part["deltanet_adapters"])
            out.append(terms)
        if part["recompute"]:
            # Checkpointing: the mixer's forward peak as the recomputation runs it, with
            # the gradient of everything above made (none of this layer's yet).
            terms = dict(base)
            terms.update(below_i)
            _add_into(terms, part["recompute"])
            _add_into(terms, loop_logits)
            terms[GRADS] = grad_bytes(spec, setup, above)
            terms.update(placed)
            out.append(terms)
        for post in sharding.post_backward(spec, setup, wb, i):
            # FSDP2: the block's reduce-scatter, its activations freed.
            terms = dict(base)
            terms.update(below_i)
            _add_into(terms, loop_logits)
            _add_into(terms, post)
            terms["activations/layer/grad"] = BT * d * s  # the gradient flowing down
            out.append(terms)
        return out

    return at_layer


def shared_block_tops(spec: ModelSpec) -> list[tuple[int, int]]:
    """Each shared block's topmost using layer and its own parameters
    (:func:`introspect.params.shared_block_params`): backward reaches that use first."""
    from introspect.params import shared_block_params

    tops: dict[int, int] = {}
    blocks = {}
    start = 0
    for run in spec.runs:
        block = run.kind.shared
        if block is not None:
            tops[block.block_id] = start + run.count - 1
            blocks[block.block_id] = block
        start += run.count
    return [(tops[i], sum(shared_block_params(spec, b).values())) for i, b in blocks.items()]


def backward_end(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The embedding's backward, last in the step, every other gradient made.

    Untied: ``embedding_dense_backward`` makes the V·d gradient while the gradient of
    layer 0's input (B·T·d) is still alive. Tied: the weight has two uses, so the engine's
    input buffer for its AccumulateGrad already holds lm_head's V·d gradient when the
    embedding's arrives, and sums them out of place (``torch/csrc/autograd/
    input_buffer.cpp``): three V·d buffers at the gradients' dtype at once — the two
    summands and the sum that becomes ``.grad`` (measured: exactly 3·V·d·4 of temporaries
    at Qwen2's peak, FP32, fused or foreach Adam) — two beyond the N gradients."""
    terms = dict(state_terms(spec, setup))
    saved_all = saved_terms(spec, setup)
    if LOGITS_OUTPUT in saved_all:
        terms[LOGITS_OUTPUT] = saved_all[LOGITS_OUTPUT]
    terms[GRADS] = grad_bytes(spec, setup, _with_grads(spec, setup))
    if spec.tie_word_embeddings:
        terms["grads/embedding_sum"] = 2 * grad_bytes(
            spec, setup, spec.vocab_size * spec.hidden_size
        )
        if deepspeed.stage3_applies(setup):  # autograd's sum, before ZeRO-3's hook: whole
            vd = spec.vocab_size * spec.hidden_size
            terms["grads/embedding_sum"] = 2 * working_weight_bytes(setup) * vd
    else:
        terms["activations/embedding/grad"] = (
            setup.tokens * spec.hidden_size * setup.activation_bytes
        )
    return terms


def logits_grad_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per value of the logits' gradient at lm_head's backward: FP32 for the
    reference model; the logits' own dtype for transformers' classes (the FP32 gradient
    of ``.float()`` is cast back before lm_head sees it):
    :meth:`~introspect.refined.implementations.Reference.logits_grad_bytes`."""
    return implementation_of(spec, setup).logits_grad_bytes(setup)


def candidate_layers(spec: ModelSpec, setup: TrainingSetup) -> list[int]:
    """The layer indices, top down, whose backward moments can be the largest.

    Each of a layer's two moments totals ``c + i·S + G(L-1-i)``: ``S`` the bytes one
    layer below keeps, ``G(j) = ⌈w·(g₀ + j·P)/D⌉`` the gradients made so far (``w``
    bytes per gradient, ``P`` parameters per layer, ``D`` devices when ZeRO-2 shards them,
    else 1; 0 for a frozen model). That is a line in ``i`` plus an error within
    ``margin`` bytes (the ceiling), so every layer holding the largest value lies within
    ``margin / |slope|`` of the line's top end. The totals in one residue class of
    ``L-1-i`` modulo ``D`` form an arithmetic progression (``G(j+D) = G(j) + w·P``), so
    the first and last ``D`` layers hold the maximum too; the smaller set is used. (MLX's
    moments are :mod:`introspect.refined.mlx`'s, with no per-layer loop.) With neither set under
    :data:`MAX_CANDIDATES` (an almost flat line, only from a coincidence of sizes) the
    layers nearest the line's top are used and the peak may be off by ``margin`` bytes.
    """
    L = spec.num_hidden_layers
    # --num-layers: the backward stops at the first adapted block (lora.first_recorded).
    start = lora.first_recorded(spec, setup) if _lora(setup) else 0
    if L <= ALL_LAYERS_UP_TO and not builds_candidates_only(spec, setup):
        return list(range(L - 1, start - 1, -1))
    if start:  # LoRA's moments are affine in the layer index (below): the ends hold it
        D = min(setup.devices, L - start)
        return sorted(set(range(L - 1, L - 1 - D, -1)) | set(range(start, start + D)), reverse=True)
    if setup.activation_checkpointing:
        below = saved.checkpointed_layer(spec, setup)
    else:
        below = saved.per_layer(spec, setup)
    devices = setup.devices if setup.zero_stage >= 2 else 1
    if sharding.strategy(setup) in ("fsdp", "zero") or _lora(setup):
        # Every sharded term (gathered blocks, reduce-scatter inputs, sharded gradients
        # made so far) and LoRA's adapter gradients are affine in the layer index within
        # each residue class modulo D, so the first and last D layers hold the maximum.
        ends = set(range(L - 1, L - 1 - min(setup.devices, L), -1))
        return sorted(ends | set(range(min(setup.devices, L))), reverse=True)
    if setup.optimizer_in_backward or setup.offload == "parameters":
        return _capped_candidates(spec, setup)
    # The slope and the margin (4 bytes) times ``devices``, so both stay integers.
    slope = sum(below.values()) * devices
    margin = 4 * devices
    # The gradients made so far grow by one layer's per layer down, unless they live in
    # DDP's buckets (``gradient_as_bucket_view``): then only the saved bytes slope.
    if setup.optimizer != "none" and grad_bytes(spec, setup, 1):
        slope -= working_weight_bytes(setup) * layer_parameters(spec)
    top = L - 1 if slope >= 0 else 0
    width = L if slope == 0 else margin // abs(slope) + 1
    near = range(top, top - min(width, L), -1) if top else range(min(width, L) - 1, -1, -1)
    if 2 * devices < len(near):
        # j = L-1-i: the first and last `devices` values of j in every residue class.
        ends = set(range(L - 1, L - 1 - min(devices, L), -1)) | set(range(min(devices, L)))
        return sorted(ends, reverse=True)
    if len(near) > MAX_CANDIDATES:
        near = near[:MAX_CANDIDATES] if top else near[-MAX_CANDIDATES:]
    return list(near)


def _capped_candidates(spec: ModelSpec, setup: TrainingSetup) -> list[int]:
    """Candidates when the gradients made so far are capped (the optimizer in backward,
    parameter offload: ``offload.grads`` takes ``min(made, cap)``): each moment is then
    ``c + i·S + min(G(L-1-i), cap)``, the minimum of two lines in ``i`` — concave, so its
    largest value is at an end or at the kink, where the uncapped gradients reach the cap
    (found by bisection: bounded by log L, not by L). The layers within two of each."""
    L, P = spec.num_hidden_layers, layer_parameters(spec)
    head = head_parameters(spec)
    cap = grad_bytes(spec, setup, head + L * P)  # the capped value, reached by the end
    lo, hi = 0, L  # the first j whose gradients reach the cap
    while lo < hi:
        mid = (lo + hi) // 2
        if grad_bytes(spec, setup, head + mid * P) >= cap:
            hi = mid
        else:
            lo = mid + 1
    kink = L - 1 - lo
    near = {i for c in (0, L - 1, kink) for i in range(c - 2, c + 3) if 0 <= i < L}
    return sorted(near, reverse=True)


def optimizer_step(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int] | None:
    """The optimizer step: state, full gradients, the loop's logits, the update's
    temporaries. None for a frozen model (no step)."""
    if setup.optimizer == "none" or setup.optimizer_in_backward:
        return None
    terms = dict(state_terms(spec, setup))
    terms[GRADS] = step_grad_bytes(spec, setup)
    if rglru_retained_total(spec, setup):
        terms[RGLRU_RETAINED] = rglru_retained_total(spec, setup)
    saved_all = saved_terms(spec, setup)
    if LOGITS_OUTPUT in saved_all:
        terms[LOGITS_OUTPUT] = saved_all[LOGITS_OUTPUT]
    if _lora(setup):
        n = lora.trainable_parameters(spec, setup)
        local = _share(n, setup.devices, setup.zero_stage >= 1)
    elif sharding.strategy(setup) == "none":
        # torch's update skips a parameter whose .grad is None (Adam's _init_group):
        # a text-only step's tower (_with_grads)
        local = _with_grads(spec, setup)
    else:
        local = sharding.local_parameters(spec, setup)
    terms[OPTIMIZER_TEMPORARIES] = optimizer_temporaries(spec, setup, local)
    return terms


#: RecurrentGemma's last recurrent states, held by its RG-LRU modules between steps.
RGLRU_STATES = "activations/rglru/recurrent_states"


def _rglru_resident(spec: ModelSpec, setup: TrainingSetup) -> int:
    """:func:`introspect.refined.rglru.resident` for transformers' classes on torch (the
    module attribute is theirs), 0 elsewhere or without RG-LRU blocks."""
    if setup.implementation != "transformers" or setup.framework != "torch":
        return 0
    if not any(run.kind.attention.kind == "rglru" for run in spec.runs):
        return 0
    from introspect.refined import rglru

    return rglru.resident(spec, setup)


#: What checkpointed RG-LRU layers' recomputed graphs hold after their backward.
RGLRU_RETAINED = "activations/rglru/recomputed_graph"


def _rglru_retained(spec: ModelSpec, setup: TrainingSetup, kind) -> int:
    """:func:`introspect.refined.rglru.retained` for one layer of ``kind`` under
    checkpointing with transformers' classes on torch; 0 otherwise."""
    if kind.attention.kind != "rglru" or not setup.activation_checkpointing:
        return 0
    if setup.implementation != "transformers" or setup.framework != "torch":
        return 0
    from introspect.refined import rglru

    return rglru.retained(kind.attention, setup, spec.hidden_size)


def rglru_retained_total(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Every checkpointed RG-LRU layer's :func:`_rglru_retained`: alive from the end of
    backward through the optimizer step (each layer's from its own backward on)."""
    return sum(count * _rglru_retained(spec, setup, kind) for kind, count in spec.kinds)


def framework_extra(
    spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int]
) -> tuple[dict[str, int], int]:
    """The peak moment's terms plus what the framework holds beyond these moments, and
    that extra in bytes (added to every phase): the HF Trainer's collated batch, bound
    through its whole step (:func:`trainers.extra_terms`); nothing for a plain loop; and
    the buffers transformers' class registers (:func:`buffers.buffer_terms`: GPT-Neo's
    causal masks), resident from the build on; RecurrentGemma's last recurrent states
    (:func:`introspect.refined.rglru.resident`), resident from the first forward on. MLX's
    step is not torch's moments plus an extra; :mod:`introspect.refined.mlx` builds its
    own moments (what the lazy graph holds when ``mx.eval`` runs it), used by
    :func:`introspect.refined.execution_estimate` wherever :func:`mlx.applies`."""
    extra = {**trainers.extra_terms(spec, setup), **buffers.buffer_terms(spec, setup)}
    held = _rglru_resident(spec, setup)
    if held:
        extra[RGLRU_STATES] = held
    if not extra:
        return terms, 0
    return _add(terms, extra), sum(extra.values())
