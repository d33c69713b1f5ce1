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
    """Bytes the mixer's backward holds beyond its saved set at its scan's peak: the same
    ``mamba2_chunk_scan`` backward as the Mamba-2 stacks'
    (:func:`introspect.refined.mamba2.scan_backward_transient`: B_decay's, ``M = G * L``'s
    or G's einsum's moment), less this mixer's own saved set as the backward frees it —
    out_proj's input (``context``), the output gate (``gate`` or ``gated_norm``), steps
    2–4's and the chunk matrices M and G. This may be negative: the moment is then no
    larger than the attention's. The c×c and B·h·T_p·n gradients make it the layer's
    peak when the chunk or the state is wide against T and d. The closed form over the
    dry run of ``FalconH1ForCausalLM`` (``tests/test_falcon_h1.py``'s shapes), from this
    mixer's own two moments to these: the long chunk under autocast 0.994 → 1.006
    (checkpointed) and 0.995 → 1.003; FP32 at the wide state, two rows, checkpointed,
    0.937 → 0.977 (0.996 with :func:`introspect.refined.mamba2.recompute_extra`'s
    padded C)."""
    kept = mixer_saved(att, setup, hidden_size)
    return mamba2.scan_backward_transient(att, setup, hidden_size, kept)
