"""The MLX dry run: a training step's peak memory from its graph, at any size, with
nothing allocated.

MLX builds the step lazily. :mod:`.mlx_replay_trace` records that graph with
``mx.export_function`` (nothing evaluated — the parameters themselves may be lazy);
:mod:`.mlx_replay_fuse` redoes ``mx.compile``'s fusion for a compiled step;
:mod:`.mlx_replay_eval` replays the graph through MLX's CPU evaluator — its order, each
op's buffer (new, donated or a view: :mod:`.mlx_replay_ops`, :mod:`.mlx_replay_layout`),
what keeps a buffer alive (users not yet evaluated, Python, tasks the worker has not run)
and how far the main thread runs ahead of the worker — and returns the allocator's peak,
what ``mx.get_peak_memory()`` reads.
No constant is fitted: every rule and number is MLX's (v0.32), named where it is used.

The step is the one :mod:`.mlx_step` measures and mlx-lm's trainer runs:
``nn.value_and_grad(model, loss)``, ``optimizer.update(model, grads)``, optionally
``mx.compile`` with the model and optimizer state captured, evaluated as
``mx.eval(step(*batch), [model.state, optimizer.state])`` after a warm-up step.

**Derived from** (while writing the rules): mlx-lm's Llama, FP32 Adam, at d=128 L=2 V=1000
T=128 B=2, d=128 L=4 V=2000 T=512 B=1, d=256 L=2 V=4000 T=256 B=4 and d=64 L=6 V=8000
T=1024 B=1, compiled and not: within 0.3% of ``mx.get_peak_memory()`` but the
T=512 B=1 row (+3.8%).
**Checked on** (``benchmarks/results/mlx_replay.md``, every prediction recorded before
its row was measured but one): 84 rows, mlx-lm's llama, qwen2, qwen3, gemma, phi and gpt2
classes and the reference model, d=256 L=4 V=8192, FP32 and BF16, (B, T) = (1, 128),
(4, 256), (1, 1024), compiled and not — 80 within ±5%, 73 within ±1%; every row with
B·T ≥ 256 within ±2.1%, every compiled row within ±0.9%. The four misses (+8–9%: llama
and gemma, B=1, T=128, uncompiled) are the worker keeping up with ops that small: fewer
tasks pending than the scheduler allows; the ``worker="caught_up"`` replay bounds them
from below. Not traceable: ``mx.checkpoint`` (``export_function`` cannot record its
CustomTransforms primitive), so mlx-lm's ``grad_checkpoint`` steps are not replayed.

**Verified** on the CPU (Linux) only. What follows from the source for Metal, unmeasured
here: the order, the reference counting and the donation rules are the same code
(``transforms.cpp``, ``backend/common``), but (1) the graph differs — on the GPU
``mx.fast.rms_norm``, ``rope``, ``layer_norm`` and ``scaled_dot_product_attention`` are
single primitives with their own backward kernels, while on the CPU they fall back to the
elementwise ops this trace records, so a trace taken on Linux is the CPU's graph;
(2) an op's inputs are held until its *command buffer* completes (``metal/eval.cpp``),
a buffer commits every 20–50 ops or 40–50 MB by chip (``metal/device.cpp``,
``MLX_MAX_OPS_PER_BUFFER``), with up to 10 in flight — so up to 200–500 ops of inputs
can be pinned instead of the CPU's ~100 dispatches; (3) Metal's allocator rounds every
buffer above a page to whole pages (``metal/allocator.cpp``). A Metal replay needs the
GPU's graph and those three rules; this module does not claim one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial

from introspect.measure.mlx_replay_eval import Replay, replay
from introspect.measure.mlx_replay_trace import Graph, trace_step

#: Small configs of mlx-lm's classes: ``mlx_lm.models.<model_type>.ModelArgs`` fields.
FAMILIES = ("llama", "qwen2", "qwen3", "gemma", "phi", "gpt2")
#: mlx-lm's mixture-of-experts classes among them (``experts``/``top_k`` of
#: :func:`family_config`; ``ffn`` is each expert's width).
MOE_FAMILIES = ("qwen3_moe", "mixtral")
#: mlx-lm's dense classes derived after those (``mlx_lm/models/<model_type>.py``).
DENSE_FAMILIES = ("gemma2", "gemma3_text", "phi3", "olmo2", "starcoder2")
FAMILIES += DENSE_FAMILIES


def family_config(
    model_type: str,
    d: int,
    layers: int,
    ffn: int,
    heads: int,
    kv: int,
    vocab: int,
    experts: int = 8,
    top_k: int = 2,
):
    """``ModelArgs`` keyword arguments for one of :data:`FAMILIES` or
    :data:`MOE_FAMILIES` at this shape (a MoE on every layer: ``decoder_sparse_step``
    1, no ``mlp_only_layers``, untied as Qwen3-MoE's published configs)."""
    if model_type == "qwen3_moe":
        return dict(
            model_type="qwen3_moe", hidden_size=d, num_hidden_layers=layers,
            intermediate_size=ffn, num_attention_heads=heads, num_key_value_heads=kv,
            head_dim=d // heads, vocab_size=vocab, num_experts=experts,
            num_experts_per_tok=top_k, moe_intermediate_size=ffn, decoder_sparse_step=1,
            mlp_only_layers=[], rms_norm_eps=1e-6, rope_theta=1e6,
            max_position_embeddings=4096, tie_word_embeddings=False, norm_topk_prob=True,
        )  # fmt: skip
    if model_type == "mixtral":
        return dict(
            model_type="mixtral", hidden_size=d, num_hidden_layers=layers,
            intermediate_size=ffn, num_attention_heads=heads, num_key_value_heads=kv,
            vocab_size=vocab, num_local_experts=experts, num_experts_per_tok=top_k,
            rms_norm_eps=1e-5, rope_theta=1e6, tie_word_embeddings=False,
        )  # fmt: skip
    if model_type == "gpt2":
        return dict(
            model_type="gpt2",
            n_ctx=4096,
            n_embd=d,
            n_head=heads,
            n_layer=layers,
            n_positions=4096,
            layer_norm_epsilon=1e-5,
            vocab_size=vocab,
        )
    if model_type in DENSE_FAMILIES:
        return dense_config(model_type, d, layers, ffn, heads, kv, vocab)
    if model_type == "phi":
        return dict(
            model_type="phi",
            max_position_embeddings=4096,
            vocab_size=vocab,
            hidden_size=d,
            num_attention_heads=heads,
            num_hidden_layers=layers,
            num_key_value_heads=kv,
            intermediate_size=ffn,
            # Phi-2's 0.4 of a 64-wide head is 25.6 rotary dims; mx.fast.rope needs even.
            partial_rotary_factor=0.5,
        )
    cfg = dict(
        model_type=model_type,
        hidden_size=d,
        num_hidden_layers=layers,
        intermediate_size=ffn,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        rms_norm_eps=1e-6,
        vocab_size=vocab,
    )
    if model_type in ("qwen3", "gemma"):
        cfg["head_dim"] = d // heads
    if model_type == "qwen3":
        cfg.update(max_position_embeddings=4096, tie_word_embeddings=True, rope_theta=1e6)
    return cfg


def dense_config(model_type: str, d: int, layers: int, ffn: int, heads: int, kv: int, vocab: int):
    """``ModelArgs`` keyword arguments for one of :data:`DENSE_FAMILIES`: Gemma 2 and 3's
    head as wide as d/heads (their ``head_dim`` and ``query_pre_attn_scalar``), Gemma 3's
    ``sliding_window`` longer than any T here (:data:`NO_WINDOW`: every layer's mask is
    ``"causal"``, ``create_attention_mask`` in ``mlx_lm/models/base.py``), StarCoder2's
    ``norm_epsilon`` (it has no ``rms_norm_eps``)."""
    cfg = dict(
        model_type=model_type,
        hidden_size=d,
        num_hidden_layers=layers,
        intermediate_size=ffn,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
    )
    if model_type == "starcoder2":
        return cfg | dict(norm_epsilon=1e-5)
    cfg["rms_norm_eps"] = 1e-6
    if model_type in ("gemma2", "gemma3_text"):
        cfg.update(head_dim=d // heads, query_pre_attn_scalar=d // heads)
    if model_type == "gemma3_text":
        cfg.update(sliding_window=NO_WINDOW, sliding_window_pattern=2)
    return cfg


#: A Gemma 3 sliding window no sequence here reaches (mlx-lm masks a window only when
#: it is shorter than T).
NO_WINDOW = 4096


def mlx_lm_model(config: dict, dtype=None, evaluate: bool = True):
    """``mlx_lm.models.<model_type>.Model`` from ``config``, in ``dtype``; its random
    weights evaluated, or left lazy for a dry run (nothing allocated)."""
    import importlib

    import mlx.core as mx

    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(0)
    model = module.Model(module.ModelArgs.from_dict(config))
    if dtype is not None and dtype != mx.float32:
        model.set_dtype(dtype)
    if evaluate:
        mx.eval(model.parameters())
    return model


@contextlib.contextmanager
def checkpointed(model) -> Iterator[None]:
    """mlx-lm's ``grad_checkpoint(model.layers[0])`` (``mlx_lm/tuner/trainer.py``) —
    every layer of that class recomputed in backward — undone on exit, since it patches
    the class."""
    from mlx_lm.tuner.trainer import grad_checkpoint

    cls = type(model.layers[0])
    original = cls.__call__
    grad_checkpoint(model.layers[0])
    try:
        yield
    finally:
        cls.__call__ = original


def mlx_lm_loss(model, batch, lengths):
    """mlx-lm's ``default_loss`` (``mlx_lm/tuner/trainer.py``)."""
    from mlx_lm.tuner.trainer import default_loss

    return default_loss(model, batch, lengths)


def mlx_lm_batch(vocab: int, batch_size: int, seq_len: int, evaluate: bool = True):
    """mlx-lm's (batch, lengths): B sequences of T+1 tokens, every position counted."""
    import mlx.core as mx

    if evaluate:
        tokens = mx.random.randint(0, vocab, (batch_size, seq_len + 1), key=mx.random.key(0))
    else:
        tokens = mx.zeros((batch_size, seq_len + 1), dtype=mx.int32)
    lengths = mx.array([[0, seq_len]] * batch_size)
    if evaluate:
        mx.eval(tokens, lengths)
    return tokens, lengths


def make_step(model, optimizer, loss: Callable, compiled: bool) -> Callable:
    """The step of the module docstring (``mlx_step.make_step`` with any loss)."""
    import mlx.core as mx
    import mlx.nn as nn

    loss_and_grad = nn.value_and_grad(model, loss)

    def step(*batch):
        value, grads = loss_and_grad(model, *batch)
        optimizer.update(model, grads)
        return value

    if compiled:
        state = [model.state, optimizer.state]
        return partial(mx.compile, inputs=state, outputs=state)(step)
    return step


def graph_of(model, optimizer, step: Callable, batch, compiled: bool) -> Graph:
    """The graph MLX evaluates for one step (fused when compiled)."""
    graph = trace_step(model, optimizer, step, batch)
    if compiled:
        from introspect.measure.mlx_replay_fuse import fuse

        graph = fuse(graph)
    return graph


def predict(model, optimizer, step: Callable, batch, compiled: bool) -> Replay:
    """The replayed peak of one step (the optimizer's state must exist)."""
    return replay(graph_of(model, optimizer, step, batch, compiled))


def measure(model, optimizer, step: Callable, batch, repeats: int = 3) -> tuple[int, list[int]]:
    """A real step: warm up, then ``repeats`` times reset the peak, step, read
    ``mx.get_peak_memory()``. Returns the active bytes before the step and the peaks."""
    import mlx.core as mx

    state = [model.state, optimizer.state]
    mx.eval(step(*batch), state)
    mx.synchronize()
    peaks = []
    base = 0
    for _ in range(repeats):
        base = mx.get_active_memory()
        mx.reset_peak_memory()
        mx.eval(step(*batch), state)
        mx.synchronize()
        peaks.append(mx.get_peak_memory())
    mx.clear_cache()
    return base, peaks


def dry_run(spec, setup, *, impl: str = "reference"):
    """``introspect measure --framework mlx[-compiled] --device fake``: the replayed
    peak of the step :func:`introspect.measure.runner.measure` would run — the reference
    model or mlx-lm's Llama, with ``mlx_step``'s loss and optimizer — built from lazy
    parameters and traced, nothing evaluated, at any size."""
    import time

    import mlx.core as mx
    from mlx.utils import tree_flatten

    from introspect.measure import mlx_step

    dtype = mlx_step.check_setup(setup)
    compiled = setup.framework == "mlx_compiled"
    mx.random.seed(0)
    if impl == "mlx_lm":
        from mlx_lm.models import llama

        from introspect.measure.implementations import llama_config

        model = llama.Model(llama.ModelArgs(model_type="llama", **llama_config(spec)))
    else:
        from introspect.measure.mlx_model import ReferenceModel

        model = ReferenceModel(spec, setup.attention)
    if dtype != mx.float32:
        model.set_dtype(dtype)
    optimizer = mlx_step.make_optimizer(setup)
    optimizer.init(model.trainable_parameters())
    shape = (setup.batch_size, setup.seq_len)
    batch = (mx.zeros(shape, dtype=mx.int32), mx.zeros(shape, dtype=mx.int32))
    step = make_step(model, optimizer, mlx_step.loss_fn, compiled)
    start = time.perf_counter()
    result = predict(model, optimizer, step, batch, compiled)
    seconds = time.perf_counter() - start
    n_params = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    return replay_measurement(
        model, optimizer, result, seconds, setup, implementation=impl, n_params=n_params
    )


def replay_measurement(
    model,
    optimizer,
    result,
    seconds: float,
    setup,
    *,
    implementation: str,
    n_params: int,
    trainable_params: int | None = None,
    notes: tuple[str, ...] = (),
):
    """The :class:`~introspect.measure.record.Measurement` of a replayed MLX step: the
    replay's peak, split into the bytes of the model's parameters, the optimizer's state
    and the rest ("other"); ``notes`` go before the replay's own two lines. Shared by the
    full fine-tuning dry run (:func:`dry_run`) and the LoRA one
    (:mod:`introspect.measure.mlx_lora_dry_run`)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from introspect.measure.record import Measurement, versions

    def nbytes(tree) -> int:
        return sum(v.nbytes for _, v in tree_flatten(tree) if isinstance(v, mx.array))

    params, opt_state = nbytes(model.parameters()), nbytes(optimizer.state)
    return Measurement(
        peak_bytes=result.peak_bytes,
        categories={
            "parameters": params,
            "optimizer_state": opt_state,
            "other": result.peak_bytes - params - opt_state,
        },
        peak_phase=result.peak_phase,
        backend="mlx",
        device="fake",
        compiled=setup.framework == "mlx_compiled",
        implementation=implementation,
        n_params=n_params,
        versions=versions("mlx", "mlx-lm"),
        setup=setup.to_dict(),
        notes=(
            *notes,
            "dry run: the step's MLX graph traced (mx.export_function, nothing evaluated) "
            "and replayed through MLX's CPU evaluator (introspect.measure.mlx_replay)",
            f"replay: {result.n_ops} ops, peak during {result.peak_op} "
            f"(op {result.peak_index}), {seconds:.1f} s",
        ),
        trainable_params=trainable_params,
    )
