"""What Falcon-H1's parallel Mamba-2 mixer and its muP multipliers keep for backward:
transformers' torch path (no ``mamba-ssm``).

Source: ``transformers/models/falcon_h1/modeling_falcon_h1.py`` — ``FalconH1Mixer.forward``
(l. 669–825), ``FalconH1DecoderLayer.forward`` (l. 887–948), ``FalconH1MLP.forward``,
``FalconH1Model.forward`` / ``FalconH1ForCausalLM.forward`` and ``compute_mup_vector``.
The conv (``causal_conv1d_fn``) and the scan (``mamba2_chunk_scan``) are Granite 4.0-H's
line for line, so the mixer is :func:`introspect.refined.mamba2.saved` but for what the
muP multiplies and the missing norm change. Notation as there (B, T, d; I the width,
C = I + 2·g·n the conv channels, P = I + C + h in_proj's width; ``a`` the activation
bytes).

A multiply by a Python float saves nothing (its backward is the same multiply), so
``hidden_states * ssm_in_multiplier``, ``* attention_in_multiplier``, K's
``* key_multiplier``, the gate's ``* gate_multiplier``, ``* down_multiplier``, the branch
outputs' ``* ssm_out_multiplier`` / ``* attn_out_multiplier``, the embedding's and the
logits' multipliers keep nothing more: each makes a new tensor its consumer saves in
place of the one it scales (the rotary keeps the scaled K, SiLU the scaled gate, the loss
the scaled logits), the same bytes. What does change, against a census of the real
module (``tests/test_falcon_h1.py``):

* ``scaled_input`` B·T·d·a: in_proj saves ``hidden_states * ssm_in_multiplier``, a copy
  of the block norm's output beside the attention's own scaled copy (q/k/v save
  ``hidden_states * attention_in_multiplier``); the norm's output itself is saved by
  neither. Under autocast the FP32 copy is not saved: in_proj keeps its BF16 cast (the
  ``input_casts`` term, as Granite's).
* ``projected_states * self.mup_vector``: a multiply by a buffer saves the buffer, not
  the product's input, and makes the B·T·P tensor the conv, dt and the gate read in
  place of in_proj's output (the same bytes). Under autocast in_proj's output is BF16
  and the buffer FP32, so the product is FP32 (type promotion; ``mul`` is not an
  autocast op): dt (``dt + dt_bias``, softplus, the clamp: 3·B·T·h·4), x (a view of the
  conv's FP32 output ``out.to(hidden_states.dtype)``, B·T·C·4) and the gate (a view of
  the product: its whole B·T·P·4 storage, which the conv does not keep under autocast —
  it saves its BF16 cast) are those of an FP32 stream.
* Without ``mamba_rms_norm`` (Falcon-H1's default), ``gate``: ``scan_output *
  F.silu(gate)`` saves the scan output (a view of the padded FP32 ``Y_diag + Y_off +
  D_residual``, B·T_p·I·4) and SiLU's output (B·T·I at the gate's dtype), SiLU its input
  (the gate, above); no FP32 gate copy, rstd, product or x·rstd. The product (FP32) is
  out_proj's input: cast back (``.to(dtype)``) as the gated norm's output is, so
  ``context`` is Granite's.
"""

from __future__ import annotations

from introspect.layers import Attention
from introspect.refined import mamba2
from introspect.setup import TrainingSetup

FP32 = 4


def mixer_saved(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one ``FalconH1Mixer`` keeps for backward, by term (see the module
    docstring), excluding its input and parameters; B is the per-device batch."""
    out = mamba2.saved(att, setup, hidden_size)
    # The mixer's out_proj input is its own, beside the attention's context.
    out["attention/mamba/context"] = out.pop("attention/linear/context")
    if not att.mamba_mup:
        return out
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    size = mamba2.widths(att, hidden_size)
    inner, h = size["I"], att.mamba_num_heads
    rows = B * T * inner
    if autocast:
        out["attention/mamba/dt"] = 3 * B * T * h * FP32
        out["attention/mamba/x"] = B * T * size["C"] * FP32
        gate = B * T * size["P"] * FP32
    else:
        out["attention/mamba/scaled_input"] = B * T * hidden_size * a
        gate = 0  # a view of the product the conv already keeps whole
    if att.mamba_gated_norm:
        if autocast:
            out["attention/mamba/gated_norm"] += gate - rows * FP32  # no FP32 gate copy
        return out
    c = att.mamba_chunk_size
    padded = B * (-(-T // c) * c) * inner * FP32
    del out["attention/mamba/gated_norm"]
    out["attention/mamba/gate"] = gate + rows * (FP32 if autocast else a) + padded
    return out


def backward_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes the mixer's backward holds beyond its saved set at its scan's peak
    (``mamba2_chunk_scan`` run in reverse), read from a live-storage trace of
    ``FalconH1Mixer``'s backward: at the backward of ``G = einsum(C, B)`` the two products
    of ``M = G * L``'s backward (grad·L for G, grad·G for L: two B·h·N·c² FP32 tensors,
    L's waiting for ``exp``'s backward) are alive with G's einsum gradients of C and B
    (B·h·T_p·n·4 each), the padded gradient of the scan output
    (``output[:, :seq_len]``'s backward, B·T_p·I·4) and the gate's gradient (B·T·I·4,
    waiting for in_proj's). By then the backward has freed what the ops after G's einsum
    alone saved: out_proj's input (``context``) and, under autocast, its BF16 weight copy,
    the output gate (``gate`` or ``gated_norm``), ``D * pad(x)``'s (``residual``), the
    output einsum's and ``* state_decay_out``'s (``state_output``) and M, saved by the
    Y_diag einsum — so this may be negative: the moment is then no larger than the
    attention's. The c×c gradients make it the layer's
    peak when the chunk is long against T and d (h·N·c² ≫ T·I)."""
    B, T, c = setup.batch_size, setup.seq_len, att.mamba_chunk_size
    N = -(-T // c)
    Tp = N * c
    h, inner = att.mamba_num_heads, att.mamba_num_heads * att.mamba_head_dim
    square = B * h * N * c * c * FP32
    # The larger of two moments: G's einsum backward (the two products, C's and B's
    # gradients) and, just before, the second product of ``M = G * L``'s backward, while
    # the gradient of M it multiplies (B·h·N·c²·4: FP32 whether Y_diag's bmm ran on M's
    # FP32 copy or autocast's BF16 cast, whose backward casts back) is alive beside the
    # first — the later wins where the chunk is long beside the state (c > 2n). Under
    # autocast G is BF16, so G's product is cast down (``mul_tensor_backward``'s
    # ``.to(self's dtype)``) while all three are alive; checkpointed, the node had
    # unpacked G (popped from the checkpoint's storage, ``torch/utils/checkpoint.py``)
    # into a local freed after its last use, just before that cast: no net growth.
    cast = square // 2 if setup.precision == "amp" and not setup.activation_checkpointing else 0
    held = 2 * square + max(2 * B * h * Tp * att.mamba_state_size * FP32, square + cast)
    held += B * Tp * inner * FP32 + B * T * inner * FP32
    saved = mixer_saved(att, setup, hidden_size)
    autocast = setup.precision == "amp"
    freed = saved["attention/mamba/context"] + saved["attention/mamba/state_output"]
    freed += saved.get("attention/mamba/gate", saved.get("attention/mamba/gated_norm", 0))
    freed += saved["attention/mamba/residual"]  # D * pad(x): its backward has run
    freed += B * h * N * c * c * (2 if autocast else FP32)  # M, saved by Y_diag's einsum
    if autocast:
        freed += inner * hidden_size * 2
    return held - freed
