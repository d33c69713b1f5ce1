"""What one RecurrentGemma recurrent block keeps for backward: transformers' torch path.

Source: ``transformers/models/recurrent_gemma/modeling_recurrent_gemma.py`` (5.24) —
``RecurrentGemmaRecurrentBlock.forward`` (l. 415-461: ``linear_y`` and its
``gelu_pytorch_tanh``, ``linear_x``, the depthwise ``conv_1d`` with ``padding = w - 1``
cut back to T, the RG-LRU, ``x_branch * y_branch``, ``linear_out``), with
``use_cache=False`` as training runs it (``introspect/measure/hf_models.py`` builds so);
``RecurrentGemmaRglru.forward`` (l. 301-340) and ``_rnn_scan`` (l. 342-389); the
``SqrtBoundDerivative`` autograd function (l. 264-278: it saves its input). Notation: B,
T, d; W = ``lru_width``, h = ``num_attention_heads`` diagonal blocks of W/h, w =
``conv1d_width``; N = B·T·W; ``s`` the activation bytes (2 under autocast, whose linears,
conv and ``baddbmm`` output BF16); ``p`` the parameters' bytes (``recurrent_param``'s
softplus stays at its dtype: FP32 under autocast); ``c`` the bytes of the decay chain, the
BF16 gate times the softplus (type promotion: FP32 when either is FP32).

Terms, by the line that keeps them (storages count once; parameters and the input not):

* ``branches`` 3·N·s: linear_y's output (saved by the GELU), the GELU's output (saved by
  ``x_branch * y_branch``), linear_x's output (the conv reads its transposed view).
* ``conv`` B·W·(T+w−1)·s: the conv's output, w−1 positions longer; the RG-LRU's input
  is a transposed view of its first T, saved by ``activations * input_gate``.
* ``gates`` 3·N·s + W·p (+ N·s): ``activations.reshape(B·T, h, W/h)`` copies the
  non-contiguous view when B and T are both above 1 (saved by both ``baddbmm``; with B or
  T of 1 the merge is a view of the conv output), the two sigmoids' outputs (saved by each sigmoid,
  the input gate also by the gating multiply), ``-8.0 * recurrent_gate`` (saved by the
  multiply with ``softplus(recurrent_param)``, W·p, saved too).
* ``decay`` 4·N·c: ``a = exp(log_a)`` (exp keeps its output), ``a² = exp(2·log_a)``,
  ``1 - a²`` (saved by ``SqrtBoundDerivative``) and ``a * ~reset`` in ``_rnn_scan``
  (each step's multiply saves a slice of it, ``.type(float32)`` a view when c = 4); with
  c = 2 the steps save FP32 copies of the slices instead (``states``), so 3·N·c.
* ``normalized`` 2·N·s + 2·T: the gated input and the multiplier (``reset + ~reset ·
  sqrt(1-a²)``, cast to the activations' dtype: a BF16 copy under autocast), both saved
  by ``gated_inputs * multiplier``; the two ``~reset`` masks the multiplies save (1·T·1
  bools: ``position_ids`` is one row).
* ``states`` T·B·W·4: the linear scan's Python loop over the T steps keeps, for each
  step's ``recurrent_gate[:, t].type(float32) * recurrent_states``, the previous FP32
  state: the zero initial state and T−1 states (the last is returned and held by the
  module, :func:`resident`); with c = 2 also each step's FP32 copy of ``a[:, t]``
  ((T−1)·B·W·4: the first step's multiply has no gradient to make for a zero state).
* ``output`` 2·N·s: the scan's ``contextualized_states`` (saved by the product with the
  y branch) and that product (saved by linear_out).
* Under autocast, ``input_casts`` (linear_y's and linear_x's BF16 casts of the FP32 norm
  output, 2·B·T·d·2) and ``autocast_weights`` (linear_y, linear_x, linear_out, the two
  gate weights, the conv: (3·W·d + 2·W·W/h + W·w)·2; the biases' casts are kept by
  nothing).

Checked against the real block (``tests/test_recurrent_gemma.py``): the saved set equal
to a census to the byte in FP32, BF16 and autocast (B 1-3, T 1-16, W 128-256); the
backward peaks (:func:`backward_transient`, :func:`checkpointed_sqrt_transient`) and the
checkpointed layer's leftovers (:func:`retained`) equal to live-storage traces.
"""

from __future__ import annotations

from introspect.layers import Attention
from introspect.refined.precision import working_weight_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4
BF16 = 2


def _decay_bytes(setup: TrainingSetup) -> int:
    """Bytes per value of the decay chain (``c``): the gate's dtype promoted with the
    parameters' (FP32 when either is)."""
    return max(setup.activation_bytes, working_weight_bytes(setup))


def saved(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one recurrent block keeps for backward, by term (see the module docstring),
    excluding its input, its parameters and linear_out's output; B the per-device batch."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    W, w, d = att.lru_width, att.lru_conv_width, hidden_size
    N = B * T * W
    c = _decay_bytes(setup)
    # The reshape of the conv output's transposed view to (B·T, h, W/h) merges B and T,
    # whose strides (W·(T+w-1) and 1) do not chain unless B or T is 1: a copy otherwise.
    copy = N * s if B > 1 and T > 1 else 0
    out = {
        "attention/rglru/branches": 3 * N * s,
        "attention/rglru/conv": B * W * (T + w - 1) * s,
        "attention/rglru/gates": 3 * N * s + copy + W * working_weight_bytes(setup),
        "attention/rglru/decay": (4 if c == FP32 else 3) * N * c,
        "attention/rglru/normalized": 2 * N * s + 2 * T,
        "attention/rglru/states": T * B * W * FP32 + (0 if c == FP32 else (T - 1) * B * W * FP32),
        "attention/rglru/output": 2 * N * s,
    }
    if T == 1:
        # ``_rnn_scan``'s one-step branch returns its input (and an FP32 view or copy
        # of its first row as the state): no loop, and ``a * ~reset`` is on no path from
        # the output (its mask, counted here as the census counts it, is freed again).
        out["attention/rglru/decay"] = 3 * N * c
        out["attention/rglru/states"] = 0
    if setup.precision == "amp":
        block = W // att.num_attention_heads
        out["attention/rglru/input_casts"] = 2 * B * T * d * BF16
        weights = 3 * W * d + 2 * W * block + W * w
        out["attention/rglru/autocast_weights"] = weights * BF16
    return out


def resident(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes the recurrent blocks hold between steps: ``_rnn_scan`` returns its last FP32
    state, which ``RecurrentGemmaRglru.forward`` stores as ``self.recurrent_states``
    (B·W·4 per recurrent block); the next forward of the block replaces it
    (``self.rg_lru.recurrent_states = None`` at the top of the no-cache path), so in a
    steady-state step it is alive at every moment."""
    total = 0
    for run in spec.runs:
        att = run.kind.attention
        if att.kind == "rglru":
            total += run.count * setup.batch_size * att.lru_width * FP32
    return total


def backward_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes the block's backward holds beyond its saved set at its peak, inside the
    scan's backward at its first (last in time) step, linear_out's gradients made: the
    Python loop's ``recurrent_gate[:, t]`` and ``hidden_states[:, t]`` are ``select``s,
    whose backward is a zero-filled tensor of the whole input (``select_backward``,
    ``aten/src/ATen/native/TensorShape.cpp``) that autograd's input buffer adds into the
    gradient it accumulates (``torch/csrc/autograd/input_buffer.cpp``), beside the
    gradients of the y branch and of ``contextualized_states`` waiting for their nodes;
    by then linear_out's and the product's backwards have freed the product, the GELU
    output and the scan's output (3·N·s). Net, by a live-storage trace of the real block
    (B = 1-3, T = 5-16, W = 128-256, ``tests/test_recurrent_gemma.py``, to the byte):
    3·N·c, less in a 16-bit stream one B·W·4 state (the last step's saved FP32 vectors
    freed beyond the state's new gradient), and under autocast linear_out's BF16 weight
    copy (W·d·2, freed by its backward). The residual stream's gradient is the caller's."""
    B, T = setup.batch_size, setup.seq_len
    W, d = att.lru_width, hidden_size
    N = B * T * W
    out = 3 * N * _decay_bytes(setup)
    if setup.activation_bytes < FP32:
        out -= B * W * FP32
    if setup.precision == "amp":
        out -= W * d * BF16
    if setup.activation_checkpointing:
        return max(out, checkpointed_sqrt_transient(att, setup, hidden_size))
    return out


def checkpointed_sqrt_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Under checkpointing, the block's backward peak is later, inside
    ``SqrtBoundDerivative.backward`` (``clip(4·x)``, its ``sqrt`` and the division: three
    N·c tensors beside the gradient they divide): the recomputed graph the module's last
    state keeps (:func:`retained`) holds every tensor upstream of the scan, so none of
    them is freed as the backward consumes it, while the gradients of the decay chain
    and of the gated input are pending. Beyond the saved set, its first norm's terms
    and the residual stream's gradient (the caller's), by a live-storage trace of a real
    checkpointed decoder layer (B = 1-3, T = 16-256, W = 128-256, FP32, BF16, autocast;
    ``tests/test_recurrent_gemma.py``, to the byte): 5·N·c − N·s, less under autocast
    linear_out's BF16 weight copy (W·d·2, freed by its backward). The gradients made by
    then are linear_out's and the feed-forward's, as at the scan's peak."""
    B, T, s = setup.batch_size, setup.seq_len, setup.activation_bytes
    W, d = att.lru_width, hidden_size
    N = B * T * W
    out = 5 * N * _decay_bytes(setup) - N * s
    if setup.precision == "amp":
        out -= W * d * BF16
    return out


def made_before_peak(att: Attention, hidden_size: int) -> int:
    """Parameters whose gradients exist at the block's backward peak (inside the scan's
    backward): linear_out's weight and bias, whose backward runs first."""
    return att.lru_width * hidden_size + hidden_size


def retained(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes one checkpointed recurrent layer holds from its recomputation (at its
    backward) until its next forward: the recomputed graph upstream of the last state.

    Non-reentrant ``torch.utils.checkpoint`` recomputes the layer with gradients enabled,
    and its recomputation pack hook returns each tensor itself (``_recomputation_hook``,
    ``torch/utils/checkpoint.py``: ``return x``), so the recomputed graph's nodes hold
    what they saved for as long as the graph lives. Its outputs are dropped — but
    ``RecurrentGemmaRglru.forward`` stores the recomputed last state on the module
    (``self.recurrent_states = recurrent_states``), whose ``grad_fn`` keeps every node
    upstream of it, never run backward, until the next forward sets it to ``None``. That
    is the block's saved set (:func:`saved`) less what only the y branch, the product
    and linear_out saved (linear_y's output and its GELU's, ``contextualized_states``,
    the product; under autocast linear_y's input cast and the linear_y and linear_out
    weight copies), plus ``temporal_pre_norm``'s saved tensors (``RecurrentGemmaRMSNorm``
    l. 45-61): its input (the checkpoint's input under FP32 or autocast; the FP32 copy
    ``x.float()`` in a 16-bit stream), the rstd (B·T·4), ``x·rstd`` (B·T·d·4), ``1 +
    weight.float()`` (d·4) and — outside autocast, which keeps BF16 casts instead — its
    output as linear_x keeps it (B·T·d·s). Measured on a real CPU step of the every-type
    shape (autocast, checkpointed): 37,649,284 bytes alive after backward, the three
    recurrent layers' sum to the byte with the model's 4-byte normalizer cast."""
    B, T, s, d = setup.batch_size, setup.seq_len, setup.activation_bytes, hidden_size
    W, N, BT = att.lru_width, setup.batch_size * setup.seq_len * att.lru_width, B * T
    kept = sum(saved(att, setup, d).values()) - 4 * N * s  # y, GELU(y), scan output, product
    amp = setup.precision == "amp"
    if amp:
        kept -= BT * d * BF16 + 2 * W * d * BF16  # linear_y's input and weight, linear_out's
    stream = FP32 if amp or s == FP32 else s
    norm_input = BT * d * (FP32 if s < FP32 and not amp else stream)
    norm = norm_input + BT * FP32 + BT * d * FP32 + d * FP32
    if not amp:
        norm += BT * d * s
    return kept + norm
