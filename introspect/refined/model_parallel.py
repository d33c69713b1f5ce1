"""Tensor and pipeline parallel per rank (Megatron-LM), as closed forms; not measured.

Tensor parallel t (Shoeybi et al. 2019, "Megatron-LM", §3;
``megatron/core/tensor_parallel/layers.py``): QKV and the FFN's up/gate are
column-parallel, O and down row-parallel, so their weights and the attention and
feed-forward activations are ÷t; norms, residuals and the embedding's output stay whole
on every rank (no sequence parallelism); the embedding, head and logits are
vocab-parallel (÷t). Pipeline p under 1F1B (Narayanan et al. 2021, §2.2.1): a stage holds
⌈L/p⌉ blocks; the first stage keeps min(p, m) micro-batches' activations in flight and
the embedding, the last one micro-batch, the final norm and the logits.

A degree the model cannot take (t not dividing the heads, K/V heads or feed-forward
widths; p above the layers) is refused before anything is priced
(:func:`introspect.applies.check_parallel`): the commands check it first, and
:func:`model_parallel` again for any other caller.
"""

from __future__ import annotations

import math

from introspect.params import attention_params, ffn_params, norm_params, qk_norm_params
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def model_parallel_parameters(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters on one tensor-parallel rank of the first pipeline stage (Megatron-LM,
    ``megatron/core/tensor_parallel/layers.py``): QKV and the FFN's up/gate are
    column-parallel, O and down row-parallel (weights ÷t; row-parallel biases and norms
    replicated); the embedding and head vocab-parallel (÷t); the stage holds ⌈L/p⌉
    blocks and the embedding. Not measured."""
    t, p = setup.tensor_parallel, setup.pipeline_parallel
    d = spec.hidden_size
    per_layer = attention_params(spec) + ffn_params(spec) * max(1, spec.num_local_experts)
    replicated = spec.norms_per_layer * norm_params(spec, d) + qk_norm_params(spec)
    layers = math.ceil(spec.num_hidden_layers / p)
    embed = math.ceil(spec.vocab_size / t) * d
    head = 0 if (spec.tie_word_embeddings or p > 1) else embed
    return layers * (math.ceil(per_layer / t) + replicated) + embed + head


def model_parallel(spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int]) -> dict[str, int]:
    """One moment's terms on the largest tensor- and pipeline-parallel rank (closed forms,
    not measured). Tensor parallel t (Megatron-LM, Shoeybi et al. 2019, §3; without
    sequence parallelism): attention and feed-forward activations ÷t, norm inputs,
    residuals and the embedding's output whole on every rank, logits vocab-parallel ÷t.
    Pipeline p under 1F1B (Narayanan et al. 2021, §2.2.1): a stage holds ⌈L/p⌉ blocks;
    the first stage keeps min(p, m) micro-batches' activations in flight and the
    embedding, the last one micro-batch, the final norm and the logits. State terms scale
    with the stage's parameters (:func:`model_parallel_parameters`). The figure is the
    larger of the first and the last stage."""
    t, p = setup.tensor_parallel, setup.pipeline_parallel
    if t == 1 and p == 1:
        return terms
    from introspect.applies import check_parallel

    check_parallel(spec, setup)
    L = spec.num_hidden_layers
    share = model_parallel_parameters(spec, setup) / spec.n_params
    layers = math.ceil(L / p)
    in_flight = min(p, setup.micro_batches or p)

    def stage(first: bool) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, v in terms.items():
            if not name.startswith("activations/"):
                out[name] = round(v * share)
            elif name.startswith("activations/layer/"):
                split = "attention" in name or "feed_forward" in name
                out[name] = round(
                    v * layers / L * (in_flight if first else 1) / (t if split else 1)
                )
            elif name == "activations/embedding":
                out[name] = v * (in_flight if first else 1) if (first or p == 1) else 0
            else:  # final norm, logits, loss: the last stage; vocab-parallel ÷t
                out[name] = 0 if (first and p > 1) else round(v / t)
        return out

    first, last = stage(True), stage(False)
    return first if sum(first.values()) >= sum(last.values()) else last
