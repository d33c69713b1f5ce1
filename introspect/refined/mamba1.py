"""What one Mamba-1 mixer keeps for backward: transformers' torch path (no mamba-ssm).

Source: ``transformers/models/mamba/modeling_mamba.py`` (5.x) — ``MambaMixer.forward``
(l. 360–484), ``causal_conv1d_fn`` (l. 82) and ``mamba_selective_scan`` (l. 175–282),
the sequential recurrence it runs when ``use_mambapy`` is off (or mambapy absent) and
outside ``torch.compile`` (``use_associative_scan`` needs dynamo tracing).
``FalconMambaMixer`` (``models/falcon_mamba/modeling_falcon_mamba.py``) and
``JambaMambaMixer`` (``models/jamba/modeling_jamba.py`` l. 454–620) are the same code
with RMSNorms on dt, B and C after x_proj: weightless in Falcon-Mamba
(``FalconMambaWeightlessRMSNorm``: ``x·rsqrt(mean x²)``, ``.type_as(x)``), with weights
in Jamba (``JambaRMSNorm``). Without the kernels ``mamba_inner_fn`` returns ``None``
and the layer runs the split, ``causal_conv1d_fn`` and ``mamba_selective_scan`` in
torch. Notation: B, T, d; I the mixer's width (``intermediate_size``), n states per
channel, R the dt rank (``time_step_rank``), w the conv kernel; ``a`` the activation
bytes (2 under autocast, whose linears, conv and matmuls output BF16); the scan runs in
FP32 (``A`` is ``-exp(A_log.float())``).

Terms, by the line that keeps them (storages count once; parameters and the input not):

* ``decay`` 2·I·n·4: ``-torch.exp(A_log.float())``, the exp's output and the negation
  (saved by ``A · dt``).
* ``in_proj`` B·T·2I·a: in_proj's output, of which the conv reads a transposed view
  (``.to(weight.dtype)`` aliases) and the gate's SiLU the other half; under autocast the
  conv reads its BF16 cast instead (``conv/input`` B·I·T·2, the FP32 ``.to`` copy in
  between is kept by nothing) and the gate's SiLU keeps the storage.
* ``conv/output`` B·I·(T+w−1)·a: the conv's output, w−1 positions longer, a view of
  which the SiLU saves.
* ``x`` B·I·T·a: the conv's SiLU output (read by the D skip ``hidden_states · D``);
  x_proj's input is its transpose, which ``F.linear`` copies contiguous (B·T·I·a;
  no copy when B or T is 1, where the transpose folds into one matrix);
  x_proj's output B·T·(R+2n)·a holds dt's rank-R input (saved by the ``dt_proj.weight @``
  matmul) and B, C (saved by the scan) — unless the norms below copy them.
* ``dt`` 2·B·I·T·a: ``dt + dt_bias`` (saved by softplus) and softplus's output (saved by
  ``A · dt`` and ``dt · B``).
* ``discretize``: ``discrete_A = exp(A·dt)`` (B·I·T·n·4, exp keeps its output) and
  ``discrete_B = dt·B.float()`` (B·I·T·n·4, saved by ``· x.float()``); in a 16-bit stream
  also ``B.float()`` (B·T·n·4) and ``x.float()`` (B·I·T·4) as copies (views in FP32).
* ``states``: the recurrence ``state = dA[t]·state + dBu[t]`` keeps every state: the
  zero initial state (B·I·n·a, the input's dtype) and the T FP32 states, each saved by
  the next step's multiply and by the output's ``matmul(state.to(dtype), C[t])`` — in a
  16-bit stream that matmul keeps a cast of each (T·B·I·n·2) and the last FP32 state is
  kept by nothing (T−1 of them).
* ``output``: the D skip's sum ``y + x·D`` in FP32 (B·I·T·4, saved by ``· silu(z)``),
  ``silu(z)`` (B·I·T·a) and, where D is a BF16 parameter, ``D.float()`` (I·4).
* ``context``: out_proj's input, the gated output transposed and copied contiguous:
  B·T·I·4 in FP32, its BF16 ``.to(dtype)`` (or autocast cast) otherwise.
* ``bcdt_norm`` (Falcon-Mamba, Jamba), for dt (R), B and C (n each): every norm's rstd
  (B·T·4), its output — in FP32 all three (B·T·(R+2n)·4, read by dt_proj's matmul and by
  the scan), in a 16-bit stream dt's and C's (B·T·(R+n)·2; B's is the scan's FP32 copy
  above), and Jamba's x·rstd (saved by the weight multiply, B·T·(R+2n)·a); a 16-bit
  stream also keeps each norm's FP32 input copy (B·T·(R+2n)·4) and no longer x_proj's
  output (the norms read copies of it).
* Under autocast, ``input_casts`` (in_proj's BF16 cast of the FP32 norm output, B·T·d·2)
  and ``autocast_weights`` (in_proj, conv, x_proj, dt_proj, out_proj:
  (2I·d + I·w + (R+2n)·I + I·R + I·d)·2; biases' casts are kept by nothing).

The fused kernels (``mamba_ssm``'s ``mamba_inner_fn``, CUDA only; ``state-spaces/mamba``,
``mamba_ssm/ops/selective_scan_interface.py``, ``MambaInnerFn.forward``) keep instead
``ctx.save_for_backward(xz, conv1d_weight, conv1d_bias, x_dbl, x_proj_weight,
delta_proj_weight, out_proj_weight, conv1d_out, delta, A, B, C, D, delta_bias,
scan_intermediates, out, ...)`` with ``conv1d_out`` and ``delta`` set to ``None`` at the
default ``checkpoint_lvl=1`` (the backward recomputes them): in_proj's output
(B·2I·T·a), x_proj's output (B·T·(R+2n)·a), contiguous copies of B and C (B·n·T·a
each), the scan kernel's ``scan_intermediates`` (its chunk-boundary states, not the T
states) and the scan output ``out`` (B·I·T·a) — no discretized A/B, no per-step states.
Not modelled here: no CUDA kernels on this machine, so nothing measures it (the
divergence flag says so).

Checked against a census of the real modules (``tests/test_mamba1.py``): equal to the
byte for Mamba, Falcon-Mamba and Jamba mixers in FP32, BF16 and autocast.
"""

from __future__ import annotations

from introspect.layers import Attention
from introspect.setup import TrainingSetup

FP32 = 4
BF16 = 2


def saved(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one Mamba-1 mixer's forward keeps for backward, by term (see the module
    docstring), excluding its input and parameters; B is the per-device batch."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    fp32 = a == FP32 and not autocast  # .float() and .to(weight.dtype) alias
    inner, n, R = att.mamba_inner_size, att.mamba_state_size, att.mamba_dt_rank
    w, d = att.mamba_conv_kernel, hidden_size
    BT = B * T
    rows = BT * inner
    x_proj_out = BT * (R + 2 * n) * a
    norm = att.mamba_bcdt_norm
    # x_proj reads the SiLU output transposed, (B, T, I) over a (B, I, T) storage: a view
    # ``F.linear`` can fold into one matrix only when B or T is 1; else a contiguous copy.
    clone = rows * a if B > 1 and T > 1 else 0
    if norm != "none" and not fp32:
        x_proj_out = 0  # the norms read FP32 copies of it
    out = {
        "attention/mamba1/decay": 2 * inner * n * FP32,
        "attention/mamba1/in_proj": BT * 2 * inner * a,
        "attention/mamba1/conv/output": B * inner * (T + w - 1) * a,
        "attention/mamba1/x": rows * a + clone + x_proj_out,
        "attention/mamba1/dt": 2 * rows * a,
        "attention/mamba1/discretize": 2 * rows * n * FP32
        + (0 if fp32 else BT * n * FP32 + rows * FP32),
        "attention/mamba1/states": B * inner * n * a
        + (T * B * inner * n * FP32 if fp32 else (T - 1) * B * inner * n * FP32)
        + (0 if fp32 else T * B * inner * n * BF16),
        "attention/mamba1/output": rows * FP32 + rows * a + (inner * FP32 if a < FP32 else 0),
        "attention/linear/context": rows * (FP32 if fp32 else BF16),
    }
    if autocast:
        out["attention/mamba1/output"] -= inner * FP32  # D is an FP32 parameter
        out["attention/mamba1/conv/input"] = rows * BF16
        out["attention/linear/input_casts"] = BT * d * BF16
        weights = 2 * inner * d + inner * w + (R + 2 * n) * inner + inner * R + inner * d
        out["attention/linear/autocast_weights"] = weights * BF16
    if norm != "none":
        widths = R + 2 * n
        kept = BT * widths * FP32 if fp32 else BT * (R + n) * BF16
        copies = 0 if fp32 else BT * widths * FP32
        x_rstd = BT * widths * a if norm == "weighted" else 0
        out["attention/mamba1/bcdt_norm"] = 3 * BT * FP32 + kept + copies + x_rstd
    return out


def backward_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes the mixer's backward holds beyond its saved set at its peak, inside the
    recurrence's backward: 4·B·I·T·n·4. Each step read ``discrete_A[:, :, t]`` and
    ``deltaB_u[:, :, t]``, and the backward of a ``select`` is a zero-filled tensor of
    the whole input (``select_backward``, ``aten/src/ATen/native/TensorShape.cpp``:
    ``zeros(input_sizes)``, then the slice's ``copy_``) that autograd's input buffer adds
    into the gradient it accumulates (``torch/csrc/autograd/input_buffer.cpp``): two
    whole FP32 gradients (of ``discrete_A`` and ``deltaB_u``) plus the two fresh
    zero-filled ones of the current step. A live-storage trace of the real module's
    backward (B=2, T=32–64, n=8–16) reads 4·B·I·T·n·4 within ±3% of it in FP32, BF16 and
    autocast; the per-step state and output gradients (the rest) are not modelled. The
    residual stream's gradient is the caller's."""
    B, T = setup.batch_size, setup.seq_len
    return 4 * B * att.mamba_inner_size * T * att.mamba_state_size * FP32


def made_before_peak(att: Attention, hidden_size: int) -> int:
    """Parameters whose gradients exist at the mixer's backward peak (inside the
    recurrence): out_proj's (and its bias) and D's, whose backwards run first."""
    inner = att.mamba_inner_size
    return inner * hidden_size + (hidden_size if att.mamba_proj_bias else 0) + inner
