"""Real transformers training steps for the refined execution layer's tests and benchmark.

Each family is a small config in Hugging Face's own keys; the model is the family's real
``*ForCausalLM`` class (``AutoModelForCausalLM.from_config``), in train mode, stepped as
its users step it:

* ``labels`` (the HF Trainer's ``compute_loss``, most users)::

      loss = model(input_ids=ids, labels=ids).loss   # ForCausalLMLoss inside the model
      loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

  the output object (and its logits) goes out of scope before backward, as in
  ``Trainer.compute_loss``;
* ``logits`` (a hand-written loop): ``logits = model(input_ids=ids).logits`` held by the
  loop until the step ends, ``F.cross_entropy`` on them in their own dtype.

``amp`` wraps forward and loss in ``torch.autocast("cpu", torch.bfloat16)`` over FP32
weights; ``bf16`` casts the model to BF16 (pure BF16, Adam state BF16). The peak is
the live-storage tracker (:mod:`introspect.measure.live_tracker`) after
a warm-up step, so Adam's state exists. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from introspect.setup import TrainingSetup

#: Small configs, one per family, in Hugging Face's config keys.
CONFIGS: dict[str, dict] = {
    "llama": dict(
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=1000,
    ),
    "qwen2": dict(
        model_type="qwen2",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=1000,
        tie_word_embeddings=True,
    ),
    "qwen3": dict(
        model_type="qwen3",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=160,
        vocab_size=1000,
        tie_word_embeddings=True,
    ),
    "gemma": dict(
        model_type="gemma",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=160,
        vocab_size=1000,
    ),
    "phi": dict(
        model_type="phi",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        vocab_size=1000,
        partial_rotary_factor=0.5,
    ),
    "gpt2": dict(
        model_type="gpt2",
        n_embd=64,
        n_layer=2,
        n_head=4,
        vocab_size=1000,
        n_positions=512,
    ),
    "mistral": dict(
        model_type="mistral",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=1000,
        sliding_window=None,
    ),
    "olmo2": dict(
        model_type="olmo2",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=160,
        vocab_size=1000,
    ),
}

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "amp": torch.float32}


def build(config: dict, setup: TrainingSetup):
    """The family's real causal-LM class for ``config``, random weights, train mode, in
    the dtype ``setup.precision`` implies. Inside a FakeTensorMode it is fake."""
    import transformers

    keys = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **keys)
    hf_config._attn_implementation = "eager" if setup.attention == "eager" else "sdpa"
    hf_config.use_cache = False  # as measure and the HF Trainer build it: no KV cache
    torch.manual_seed(0)
    # Built in its dtype (``.to`` cannot swap fake parameters).
    model = transformers.AutoModelForCausalLM.from_config(hf_config, dtype=DTYPES[setup.precision])
    if setup.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def _autocast(setup: TrainingSetup):
    if setup.precision == "amp":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def step(model, optimizer, ids: torch.Tensor, targets: torch.Tensor, setup: TrainingSetup):
    """One step as the ``setup.loop`` user writes it (``targets``: the next tokens, for
    the logits loop, as :func:`introspect.measure.torch_step.train_step` writes it)."""
    optimizer.zero_grad(set_to_none=True)
    with _autocast(setup):
        if setup.loop == "labels":
            loss = model(input_ids=ids, labels=ids).loss
        else:
            logits = model(input_ids=ids).logits
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
    loss.backward()
    optimizer.step()


def make_optimizer(model, setup: TrainingSetup):
    impl = setup.resolved_optimizer_impl
    kwargs = {"foreach": impl == "foreach", "fused": impl == "fused" or None}
    return torch.optim.AdamW(model.parameters(), lr=1e-4, **kwargs)


@dataclass
class Measured:
    peak_bytes: int
    peak_phase: str | None
    categories: dict[str, int]


def measure(model, setup: TrainingSetup, vocab: int) -> Measured:
    """Warm up, then track one step's live storages (the project's
    :class:`~introspect.measure.live_tracker.LiveStorageTracker`, MemTracker's rules)."""
    from introspect.measure import live_tracker

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, vocab, (setup.batch_size, setup.seq_len + 1), generator=g)
    ids, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    optimizer = make_optimizer(model, setup)
    step(model, optimizer, ids, targets, setup)
    tracker = live_tracker.LiveStorageTracker(model, optimizer)
    with tracker:
        step(model, optimizer, ids, targets, setup)
    state = live_tracker.optimizer_state_bytes(optimizer)
    categories = live_tracker.categories(tracker.peak_kinds, state)
    return Measured(tracker.peak_bytes, tracker.peak_phase, categories)


def measure_family(family: str, setup: TrainingSetup, config: dict | None = None) -> Measured:
    config = config or CONFIGS[family]
    model = build(config, setup)
    return measure(model, setup, model.config.vocab_size)


def dry_run(config: dict, setup: TrainingSetup) -> Measured:
    """The same step under FakeTensorMode: no memory allocated, the same storages. As in
    ``introspect measure --device fake``, :func:`~introspect.measure.hf_models.unpacked_rows`
    tells transformers' masks that each row is one sequence (the model's own position ids),
    which a fake tensor cannot show them: else the cache-off step builds a B×1×T×T mask
    that the real step skips."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from introspect.measure.hf_models import unpacked_rows

    with FakeTensorMode(allow_non_fake_inputs=True), unpacked_rows("fake"):
        model = build(config, setup)
        return measure(model, setup, model.config.vocab_size)


def spec_for(config: dict):
    from introspect.adapters.hf_config import spec_from_config

    return spec_from_config(dict(config))


def mixer_saved_bytes(layer, name: str, precision: str, B: int, T: int, hidden: int) -> int:
    """Bytes one real sequence mixer (transformers' Gated DeltaNet, Mamba-2 …) saves for
    backward: every storage produced inside it, as the census tags each with its
    producing module, so neither its input nor its parameters. Its input is not a leaf,
    as a norm's output in a model is (autocast caches leaf casts)."""
    from introspect.measure.census import census

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    holder = torch.nn.ModuleDict({name: layer.to(dtype)})
    leaf = torch.randn(B, T, hidden, dtype=dtype, requires_grad=True)
    x = leaf * 1.0
    autocast = torch.autocast("cpu", dtype=torch.bfloat16)
    ctx = autocast if precision == "amp" else contextlib.nullcontext()

    def forward():
        with ctx:
            return holder[name](x).sum()

    cen = census(holder, forward, tokens=B * T, seq_len=T)
    return sum(row[4] for row in cen.rows if row[0].startswith(name))
