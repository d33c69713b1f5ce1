"""mlx-lm's DoRA, LoRA dropout and gradient accumulation on MLX: what each adds to the
derived LoRA (or full) step of :mod:`introspect.refined.mlx`.

**DoRA** (``mlx_lm.lora`` with ``fine_tune_type: dora``: ``linear_to_lora_layers(...,
use_dora=True)``, ``mlx_lm/tuner/utils.py``, makes every targeted ``nn.Linear`` a
``DoRALinear``, ``mlx_lm/tuner/dora.py``). Beside LoRA's ``lora_a``/``lora_b`` it keeps
``m = ‖W‖`` per output row (``set_linear``: ``mx.linalg.norm(W.astype(float32), axis=1)``,
FP32, d_out values) — trainable, so Adam keeps two moments of it and the step makes its
gradient. Its ``__call__``::

    y = x @ w.T;  z = (dropout(x) @ lora_a) @ lora_b
    out = y + (scale · z).astype(x.dtype)
    adapted = w + (scale · lora_b.T) @ lora_a.T          # d_out × d_in, FP32
    denom = stop_gradient(norm(adapted, axis=1))         # d_out
    out = (m / denom).astype(x.dtype) · out

``stop_gradient`` means no VJP reads ``adapted``: it is a forward temporary made from
parameters alone, reduced to d_out norms as soon as it exists. The last multiply is
differentiated in both operands (m is trained), and its VJP for ``m`` reads ``out``
before the multiply: one B·T·d_out tensor in the activations' dtype per adapted linear
that LoRA's graph does not keep (the multiply's output is a new tensor the next op
keeps, as LoRA's sum was) — :func:`dora_graph_terms`. Measured (real mlx-lm Llama
steps, d = 128, r = 8, B·T = 256, FP32 eager): DoRA − LoRA = +4.5 MB at L = 4 and +9.6 MB
at L = 8, i.e. 1.28 MB per layer, the derived B·T·Σd_out·4 = 1.25 MB; the derived term at
L = 4 is +0.5 MB above that difference (one layer's ``out`` is not all alive at the peak).
Not modelled (:data:`NOT_MODELLED`, in the estimate's label): the ``adapted``
temporaries themselves. They depend on parameters only, so MLX's breadth-first order runs
them early in the forward, when little else exists — but a replay of mlx-lm's DoRA step
at d = 1024, f = 4096, T = 64 (weights far larger than the activations) holds 65.9 MB of
their products at its peak (about one block's d_out×d_in FP32 set) and peaks there: the
closed form is 0.903 of that replay at L = 4, 0.943 at L = 8 (LoRA there: 1.000, 0.998).
At the benchmark's shapes the backward holds the peak and they do not count. Also not
modelled: DoRA over a quantized base (``_dequantized_weight`` makes a d_out × d_in copy
per call).

mlx-lm refuses DoRA on ``SwitchLinear`` (a mixture of experts' stacked experts: "doesn't
support DoRA yet", ``linear_to_lora_layers``): :func:`check` names it.

**LoRA dropout** (``lora_parameters.dropout`` p > 0; ``nn.Dropout``,
``mlx/nn/layers/dropout.py``: ``mask = bernoulli(1 - p, x.shape)``, ``(mask · x) ·
(1 / (1 - p))``). Each adapter then reads its own dropped copy of its input instead of
the shared input: the VJP of ``dropped @ lora_a`` for ``lora_a`` keeps the copy, and the
mask multiply's VJP for ``x`` keeps the mask — promoted to x's dtype, since ``multiply``
casts the boolean operand (MLX's type promotion). In BF16 the matmul with FP32
``lora_a`` promotes the dropped copy to FP32, as it did ``x`` without dropout. What the
step without dropout kept for ``lora_a``'s gradient (the shared FP32 inputs; or their
FP32 copies, merged per shared input when compiled, one per adapter eager) is no longer
needed (:func:`dropout_terms`). Measured (d = 128 Llama, r = 8, B·T = 256, FP32 eager):
dropout 0.1 − none = +5.8 MB at L = 4 and +11.9 MB at L = 8, 1.54 MB per layer, the
derived (8·Σd_in − 4·Σ shared inputs)·B·T = 1.54 MB; the derived term at L = 4 is
+0.4 MB above that difference (compiled +0.7 MB: the fused kernel reads the boolean
mask itself).

**Gradient accumulation** (``grad_accumulation_steps`` M > 1, ``mlx_lm/tuner/trainer.py``
``train``): every micro-batch is one ``mx.compile``'d ``step(batch, prev_grad,
do_update)``; from the second on, ``grad = tree_map(add, grad, prev_grad)``, and on the
M-th the sum is divided by M and ``optimizer.update`` runs. The previous micro-batches'
summed tree (the trainable parameters' gradients, in their dtype: FP32 adapters, the
weights' dtype under full fine-tuning) is an input of the graph and stays alive until
each of its arrays is added, after that parameter's gradient is made — so through the
forward and the whole backward: :func:`accumulation_terms` adds it to every moment (an
upper bound at the update's moments, where the adds already run have consumed theirs).
The first micro-batch has no ``prev_grad`` and no update, so it holds less.

**Checked on** real mlx-lm steps on the CPU (``benchmarks/results/mlx-dora.md``,
``python benchmarks/mlx_dora.py``): mlx-lm's Llama (d = 192, L = 4, GQA) and Qwen2
(d = 160, L = 3, MQA), FP32 and BF16, eager and compiled — 24 of 24 within ±5% (0.981 to
1.026): DoRA 8, dropout 8, DoRA with dropout 2, accumulation 6 (mlx-lm's own ``train``
with ``grad_accumulation_steps`` 2, LoRA, DoRA and full: 0.990 to 1.013). The llama
dropout rows were seen under a first dropout rule (the results file says so).
Verified on the CPU only, as :mod:`introspect.refined.mlx`.
"""

from __future__ import annotations

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: What a DoRA estimate leaves out, in its label (module docstring; replayed at d = 1024,
#: f = 4096, T = 64: the closed form 0.903 of the replay at L = 4, 0.943 at L = 8).
NOT_MODELLED = (
    "not modelled: DoRA's per-call W + scale·B·A (d_out×d_in FP32 per adapted linear, "
    "about a block's worth alive at once in the forward), which holds the peak where the "
    "weights outweigh the activations (short T); introspect measure --impl mlx-lm runs the "
    "real step"
)

#: Block linears that read the same tensor (:data:`introspect.refined.mlx.SHARED_INPUTS`).
SHARED_INPUTS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def is_adapter(setup: TrainingSetup) -> bool:
    """mlx-lm's LoRA or DoRA (``LoRALinear`` or ``DoRALinear`` on the targeted linears)."""
    return setup.finetune in ("lora", "dora")


def check(spec: ModelSpec, setup: TrainingSetup, structure: str, derived: tuple) -> None:
    """Refuse a DoRA model that mlx-lm refuses or the counts do not describe: one line.

    mlx-lm's ``linear_to_lora_layers`` raises ``ValueError("SwitchLinear doesn't support
    DoRA yet.")`` for a mixture of experts' stacked experts (``mlx_lm/tuner/utils.py``);
    other blocks than ``derived`` (mlx-lm's Llama and Qwen2 LoRA counts) are not modelled."""
    if setup.finetune != "dora":
        return
    if spec.is_moe:
        raise IntrospectError(
            f"--finetune dora: {spec.source or 'this model'} has mixture-of-experts layers, "
            "and mlx-lm refuses DoRA on their SwitchLinear experts (linear_to_lora_layers "
            'in mlx_lm/tuner/utils.py: "SwitchLinear doesn\'t support DoRA yet"); use '
            "--finetune lora"
        )
    if structure not in derived:
        raise IntrospectError(
            f"--finetune dora: not modelled for mlx-lm's {structure} block (MLX's DoRA "
            f"step is derived over the LoRA counts of {', '.join(derived)}); use "
            "--finetune lora, or measure it with introspect measure --impl mlx-lm"
        )


def _shapes(spec: ModelSpec, setup: TrainingSetup) -> list[tuple[str, int, int]]:
    """(name, d_in, d_out) of each adapted linear of one block."""
    from introspect.refined.lora import linear_shapes, targets

    shapes = linear_shapes(spec)
    return [(t, *shapes[t]) for t in targets(spec, setup)]


def magnitude_rows(spec: ModelSpec, setup: TrainingSetup) -> int:
    """DoRA's trainable magnitudes: ``K · Σ d_out`` over the adapted linears (one ``m``
    value per output row, ``DoRALinear.set_linear``)."""
    from introspect.refined.lora import adapted_layers

    return adapted_layers(spec, setup) * sum(o for _, _, o in _shapes(spec, setup))


def dora_state_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """The magnitudes (FP32) and Adam's m and v of them (``mx.zeros_like``): added to
    :func:`introspect.refined.mlx.lora_state_terms`'s terms of the same names."""
    m = 4 * magnitude_rows(spec, setup)
    return {"weights/dora_magnitude": m, "optimizer/adam_m": m, "optimizer/adam_v": m}


def dora_graph_terms(spec: ModelSpec, setup: TrainingSetup, s: int) -> dict[str, int]:
    """What DoRA's graph keeps beyond LoRA's at a backward moment: per adapted linear the
    B·T·d_out ``out`` before the magnitude's multiply, in the activations' dtype ``s``
    (the VJP for ``m`` reads it), and the magnitudes' FP32 gradient."""
    from introspect.refined.lora import adapted_layers

    tokens = setup.batch_size * setup.seq_len
    rows = sum(o for _, _, o in _shapes(spec, setup))
    return {
        "activations/mlx/hidden/dora_unscaled": adapted_layers(spec, setup) * tokens * rows * s,
        "grads/mlx/dora_magnitude": 4 * magnitude_rows(spec, setup),
    }


def dropout_terms(spec: ModelSpec, setup: TrainingSetup, s: int, compiled: bool) -> dict[str, int]:
    """The adapters' dropout (module docstring), per token and adapted layer:

    * the mask, ``s`` bytes per input element of each adapter: ``mask * x`` promotes the
      boolean mask to x's dtype (an ``astype`` inside ``multiply``), and the multiply's
      VJP for ``x`` reads that copy;
    * each adapter's FP32 dropped copy (4 bytes per input element): the VJP of
      ``dropped @ lora_a`` for ``lora_a`` reads it (a BF16 copy is promoted to FP32 for
      the FP32 ``lora_a``, and the promoted one is kept);
    * less what the step without dropout kept for the same VJPs and no longer needs:
      the FP32 inputs themselves, one per shared input (FP32 steps) — or the FP32 copies,
      one per shared input when compiled (``mx.compile`` merges them), one per adapter
      eager (:func:`introspect.refined.mlx.lora_upcast_bytes`)."""
    if setup.lora_dropout == 0:
        return {}
    from introspect.refined.lora import adapted_layers

    tokens = setup.batch_size * setup.seq_len * adapted_layers(spec, setup)
    shapes = _shapes(spec, setup)
    inputs = sum(i for _, i, _ in shapes)  # one mask and one dropped copy per adapter
    names = {n for n, _, _ in shapes}
    shared = sum(max(0, len(names.intersection(g)) - 1) for g in SHARED_INPUTS)
    distinct = inputs - shared * spec.hidden_size  # q/k/v and gate/up read one tensor
    before = inputs if s == 2 and not compiled else distinct
    return {
        "activations/mlx/hidden/lora_dropout_mask": tokens * inputs * s,
        "activations/mlx/hidden/lora_dropout_copies": tokens * 4 * (inputs - before),
    }


def accumulation_terms(spec: ModelSpec, setup: TrainingSetup, s: int) -> dict[str, int]:
    """``--grad-accum M`` > 1: the previous micro-batches' summed gradient tree, alive
    through the micro-batch (module docstring): the trainable parameters in their
    dtype — the FP32 adapters (and DoRA's magnitudes) under LoRA/DoRA, ``N · s`` under
    full fine-tuning."""
    if setup.grad_accum <= 1:
        return {}
    if is_adapter(setup):
        from introspect.refined.lora import adapter_parameters

        n = adapter_parameters(spec, setup)
        if setup.finetune == "dora":
            n += magnitude_rows(spec, setup)
        return {"grads/mlx/accumulated": 4 * n}
    from introspect.params import parameter_count

    return {"grads/mlx/accumulated": parameter_count(spec) * s}
