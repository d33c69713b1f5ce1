"""Gradient accumulation: the moments of micro-batches 2..M, where every gradient exists.

``--grad-accum M`` runs M micro-batches of B each before one optimizer step (the HF
Trainer's ``gradient_accumulation_steps``: ``training_step`` per micro-batch, the loss
divided by M, ``optimizer.step()`` and ``zero_grad`` after the M-th,
``transformers/trainer.py``; torchtune's recipes the same). The first micro-batch starts
with no gradients (``zero_grad(set_to_none=True)``) and is the step without
accumulation. From the second on, every trainable parameter's ``.grad`` was made by the
micro-batches before and stays alive through forward and backward, and autograd adds each
new gradient into it: ``AccumulateGrad`` (``torch/csrc/autograd/functions/
accumulate_grad.h``, ``accumulateGrad``) steals the new gradient when ``.grad`` is
undefined, and otherwise runs ``variable_grad += new_grad`` in place, so the new one is a
transient that is freed once added.

The later micro-batch's moments are the first's (:mod:`introspect.refined.execution`)
with the gradients at their full size, and:

* ``grads/accumulating`` — a gradient made but not yet added: lm_head's (V·d, and its
  bias) at the output projection's backward; tied to the embedding it waits in the
  AccumulateGrad's input buffer for the embedding's (``torch/csrc/autograd/
  input_buffer.cpp``) and so is alive through every layer's backward; untied, the
  embedding's V·d gradient at the embedding's backward. A block's own weight gradients
  are added as soon as they are made (the engine runs a ready AccumulateGrad first) and
  are left out;
* ``grads/embedding_sum`` — tied: the two V·d summands and their out-of-place sum, three
  V·d buffers beyond the N gradients (the first micro-batch's sum becomes ``.grad``:
  two beyond);
* ``activations/logits/previous_micro_batch`` — the logits loop (``logits = model(x)``
  in a plain Python loop) still binds the previous micro-batch's logits until the new
  ones are returned, so the loss's forward inside transformers' model sees both.

Left out: a block weight's new gradient at its own linear's backward, before its
AccumulateGrad runs (d·f at the widest), which no moment of the first micro-batch
places. Measured against dry runs of every small family of ``tests/small_configs.py``
(B=2, T=32, FP32, M=4): within 0.6% for most; under by 1.0% (cohere2), 1.3% (llama4) and
2.0% (gpt2, d=256 against B·T=64: its 256×1024 weights rival the activations).

The optimizer step after the M-th micro-batch is the step without accumulation. Every
micro-batch from the second on is the same, so M > 2 adds nothing beyond M = 2. Only one
unsharded device is modelled (:mod:`introspect.applies` refuses the rest).
"""

from __future__ import annotations

from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import GRADS

ACCUMULATING = "grads/accumulating"
EMBEDDING_SUM = "grads/embedding_sum"
PREVIOUS_LOGITS = "activations/logits/previous_micro_batch"


def head_trainable(setup: TrainingSetup) -> bool:
    """Whether the output head and the embedding get gradients (full fine-tuning, or LoRA
    with ``--train-embeddings``)."""
    return setup.finetune == "full" or setup.train_embeddings


def later_layers(spec: ModelSpec, first_layers: list[int]) -> list[int]:
    """The layers whose backward moments a later micro-batch is priced at: the top layer
    of a homogeneous stack (its moments grow with the layers below), else the first
    micro-batch's candidates."""
    return first_layers if spec.is_heterogeneous else [spec.num_hidden_layers - 1]


def later_micro_batch(
    spec: ModelSpec,
    setup: TrainingSetup,
    *,
    full_grads: int,
    loss_forward: dict[str, int] | None,
    logits_kept: bool,
    forward_end: dict[str, int],
    backward: list[dict[str, int]],
) -> list[tuple[str, dict[str, int]]]:
    """The moments of a micro-batch after the first (none without accumulation), in step
    order, each with its phase. ``first_layers`` are the first micro-batch's backward
    layers; with every gradient already made, a homogeneous stack's layer moments grow
    with the layers below, so its top layer holds the largest (a heterogeneous stack
    keeps the first micro-batch's layers)."""
    if setup.grad_accum <= 1:
        return []
    from introspect.refined.precision import working_weight_bytes

    # The timeline's own pieces come from introspect.refined.execution, which calls this
    # (passed in, so this module does not import the timeline back).
    full = full_grads
    wb = working_weight_bytes(setup)
    V, d = spec.vocab_size, spec.hidden_size
    trained = head_trainable(setup)
    head = (V * d + (V if spec.lm_head_bias else 0)) * wb if trained else 0
    tied = trained and spec.tie_word_embeddings
    out: list[tuple[str, dict[str, int]]] = []
    forward = loss_forward
    if forward is not None:
        forward = dict(forward)
        if setup.loop == "logits" and logits_kept:
            forward[PREVIOUS_LOGITS] = setup.tokens * V * setup.activation_bytes
        out.append(("forward", forward))
    out.append(("forward_end", dict(forward_end)))
    backward = [dict(m) for m in backward]
    if head:
        backward[0][ACCUMULATING] = head
        if tied:
            for moment in backward[1:-1]:
                moment[ACCUMULATING] = head
            backward[-1][EMBEDDING_SUM] = 3 * V * d * wb
        else:
            backward[-1][ACCUMULATING] = V * d * wb
    out += [("backward", m) for m in backward]
    for _, moment in out:
        moment[GRADS] = full
    return out
