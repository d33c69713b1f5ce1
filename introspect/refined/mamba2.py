"""What one Mamba-2 mixer keeps for backward: transformers' torch path (no mamba-ssm).

Source: ``transformers/models/granitemoehybrid/modeling_granitemoehybrid.py`` —
``GraniteMoeHybridMambaLayer.forward`` (l. 578–724), ``causal_conv1d_fn`` (l. 279),
``mamba2_chunk_scan`` (l. 389–500), ``segment_sum`` (l. 226), ``pad_tensor_by_size``
and ``GraniteMoeHybridRMSNormGated`` (l. 726); ``NemotronHMamba2Mixer`` and
``NemotronHRMSNormGated`` (``models/nemotron_h/modeling_nemotron_h.py`` l. 56, 390–616)
are the same code line for line. Without the ``mamba_ssm`` kernels
``mamba2_split_conv1d_scan_combined`` returns ``None`` and the layer runs the split,
``causal_conv1d_fn`` and ``mamba2_chunk_scan`` in torch. Notation: B, T, d; h heads of p
(I = h·p, the mixer's width), g groups of n states (G = g·n), conv channels
C = I + 2G, in_proj width P = I + C + h, w the conv kernel, c the chunk
(``chunk_size``), N = ⌈T/c⌉ chunks, T_p = N·c; ``a`` the activation bytes. The scan runs
in FP32 (``hidden_states.float()``, ``B.float()``, ``C.float()``); ``m`` is the bytes
of its einsums' saved operands: 4, or 2 under autocast, whose ``bmm`` casts them to BF16.

Terms, by the line that keeps them (storages count once; parameters and the input not):

* ``decay``: ``-torch.exp(A_log.float())``, the exp's output and its negation (2·h·4).
* ``conv/input``: ``F.conv1d(hidden_states.to(weight.dtype), …)`` saves its input, a
  transposed slice of in_proj's output, whose whole B·T·P·a storage stays; under
  autocast conv1d's BF16 cast of the FP32 copy (B·T·C·2) and of its weight (C·w·2).
* ``conv/output`` B·C·(T+w−1)·a: SiLU saves the conv's output, w−1 positions longer.
* ``dt`` 2·B·T·h·a: ``dt + dt_bias`` (saved by softplus) and softplus's output (saved by
  the clamp); then the clamped dt in FP32 — one storage in FP32 (``.float()`` aliases),
  two ``.float()`` copies otherwise (``dt[..., None].float()``, ``dt.float()``).
* ``x``: ``hidden_states * dt[..., None]`` saves x in FP32: a view of the SiLU output in
  FP32 (its whole B·T·C·4 storage), else its FP32 copy (B·T·I·4).
* ``residual`` B·T_p·I·4: ``D[..., None] * pad_tensor_by_size(x)`` saves the pad.
* ``masks``: ``segment_sum``'s two boolean ``~mask`` of ``masked_fill``, c² each, and
  for the chunk recurrence (N+1)² each.
* ``intra_chunk``: ``L = exp(segment_sum(A))`` (B·h·N·c²·4, exp keeps its output),
  ``G``'s einsum output (saved by ``G * L``; ·m) and ``M`` (saved by the Y_diag einsum;
  4, or its BF16 cast), and the einsums' operand copies: C and B for G (2·B·h·T_p·n·m)
  and x for Y_diag (B·h·T_p·p·m).
* ``states``: ``decay_states`` (exp, B·h·T_p·4), the padded B it multiplies
  (B·T_p·h·n·4), the states einsum's copies of ``B_decay`` (B·h·T_p·n·m) and x
  (B·h·T_p·p·m); ``decay_chunk`` (exp, B·h·(N+1)²·4; under autocast also its BF16 cast)
  and the chunk states ``torch.cat``'d for the recurrence (B·h·(N+1)·p·n·m).
* ``state_output``: ``state_decay_out`` (exp, B·h·T_p·4), the output einsum's copies
  of the chunk states (B·h·N·p·n·m) and C (B·h·T_p·n·m) and its output, saved by
  ``* state_decay_out`` (B·T_p·h·p·m).
* ``gated_norm`` (``RMSNormGated(y, gate)``, FP32 whatever the stream): the gate's FP32
  copy (none in FP32: a view of in_proj's output), its SiLU, the padded scan output
  (``Y_diag + Y_off + D_residual``, B·T_p·I·4, of which the norm reads a view), the
  product (saved by ``pow`` and the rstd multiply), the rstd (B·T·g·4) and x·rstd
  (saved by the weight multiply) — each B·T·I·4 but the two named.
* ``context``: out_proj's input, the FP32 norm output in FP32 (B·T·I·4), its BF16
  ``.to(dtype)`` or autocast cast otherwise (B·T·I·2).
* Under autocast, ``input_casts`` (in_proj's BF16 cast of the FP32 norm output, B·T·d·2)
  and ``autocast_weights`` (in_proj, out_proj, conv: (d·P + I·d + C·w)·2).

The fused kernels (``mamba_ssm``'s ``mamba_split_conv1d_scan_combined``, CUDA and triton
only; ``state-spaces/mamba``, ``mamba_ssm/ops/triton/ssd_combined.py``,
``MambaSplitConv1dScanCombinedFn.forward``) keep instead ``ctx.save_for_backward(zxbcdt,
conv1d_weight, conv1d_bias, out_x, A, D, dt_bias, initial_states, seq_idx,
rmsnorm_weight, rstd, outproj_weight, outproj_bias)``: in_proj's output (B·T·P·a), the
scan's output before the gated norm (B·T·I·a) and one rstd per row and group — no conv
output, no FP32 copies, no chunk matrices (the backward recomputes them). Not modelled
here: no CUDA kernels on this machine, so nothing measures it.

Checked against a census of the real module (``tests/test_ssm.py``): equal to the byte in
FP32, BF16 and autocast for T padded and a multiple of the chunk, one or more chunks,
one or more groups.
"""

from __future__ import annotations

from introspect.layers import Attention
from introspect.setup import TrainingSetup

FP32 = 4
BF16 = 2


def widths(att: Attention, hidden_size: int) -> dict[str, int]:
    """The mixer's widths: I (h·p), G (g·n), C (conv channels), P (in_proj's output)."""
    inner = att.mamba_num_heads * att.mamba_head_dim
    groups = att.mamba_n_groups * att.mamba_state_size
    conv = inner + 2 * groups
    return {"I": inner, "G": groups, "C": conv, "P": inner + conv + att.mamba_num_heads}


def saved(att: Attention, setup: TrainingSetup, hidden_size: int) -> dict[str, int]:
    """Bytes one Mamba-2 mixer's forward keeps for backward, by term (see the module
    docstring), excluding its input and parameters; B is the per-device batch."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    fp32 = a == FP32 and not autocast  # .float() and .to(weight.dtype) alias
    h, p, n, g = att.mamba_num_heads, att.mamba_head_dim, att.mamba_state_size, att.mamba_n_groups
    w, c, d = att.mamba_conv_kernel, att.mamba_chunk_size, hidden_size
    size = widths(att, d)
    inner, conv, proj = size["I"], size["C"], size["P"]
    N = -(-T // c)
    Tp = N * c
    m = BF16 if autocast else FP32
    heads = B * h
    square = heads * N * c * c
    out = {
        "attention/mamba/decay": 2 * h * FP32,
        "attention/mamba/conv/input": B * T * (conv * BF16 if autocast else proj * a),
        "attention/mamba/conv/output": B * conv * (T + w - 1) * a,
        "attention/mamba/dt": 2 * B * T * h * a + (1 if fp32 else 2) * B * T * h * FP32,
        "attention/mamba/x": B * T * (conv if fp32 else inner) * FP32,
        "attention/mamba/residual": B * Tp * inner * FP32,
        "attention/mamba/masks": 2 * c * c + 2 * (N + 1) ** 2,
        "attention/mamba/intra_chunk": square * FP32
        + square * m
        + square * (BF16 if autocast else FP32)
        + heads * Tp * (2 * n + p) * m,
        "attention/mamba/states": heads * Tp * FP32
        + B * Tp * h * n * FP32
        + heads * Tp * (n + p) * m
        + heads * (N + 1) ** 2 * (FP32 + (BF16 if autocast else 0))
        + heads * (N + 1) * p * n * m,
        "attention/mamba/state_output": heads * Tp * FP32
        + heads * N * p * n * m
        + heads * Tp * n * m
        + heads * Tp * p * m,
    }
    if N == 1:
        # One chunk: the output einsum reads the chunk states as a view of the
        # recurrence's output, N+1 chunks long; without autocast's casts the states
        # einsum reads x as the Y_diag einsum's view of it (one storage, not a copy).
        out["attention/mamba/state_output"] += heads * p * n * m
        if not autocast:
            out["attention/mamba/states"] -= heads * Tp * p * m
    if B * N == 1 and not autocast:
        # And one batch row: the (b, c) batch is a single matrix, so G reads the padded
        # B (already the ``states`` term's) and the padded C as views, and the output
        # einsum that same padded C.
        out["attention/mamba/intra_chunk"] -= heads * Tp * n * m
        out["attention/mamba/state_output"] -= heads * Tp * n * m
    rows = B * T * inner
    gate = 0 if fp32 else rows * FP32
    out["attention/mamba/gated_norm"] = (
        gate + rows * FP32 + B * Tp * inner * FP32 + 2 * rows * FP32 + B * T * g * FP32
    )
    out["attention/linear/context"] = rows * (FP32 if fp32 else BF16)
    if autocast:
        out["attention/linear/input_casts"] = B * T * d * BF16
        weights = d * proj + inner * d + conv * w
        out["attention/linear/autocast_weights"] = weights * BF16
    return out


def backward_transient(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes the mixer's backward holds beyond its saved set at its peak: the larger of
    two moments, the gated norm's backward and the scan's (:func:`scan_backward_transient`,
    the peak where the chunk matrices are large beside the B·T·I rows).

    Inside the gated RMSNorm's backward (``pow(2).mean`` of the gated FP32 product) five
    B·T·I FP32 gradients are alive — the weight multiply's input gradient, ``mean``'s
    expanded gradient (``div``), and ``pow``'s backward (``pow(x, 1)``, ``· 2`` and the
    product with the incoming gradient) — while the backward already freed x·rstd (after
    the weight multiply's backward) and the rstd (after the rstd multiply's) and, under
    autocast, out_proj's BF16 weight copy (the context out_proj saved is not in the
    attention side, so it is not subtracted here). Read from a live-storage trace of the
    real module's backward (``tests/test_ssm.py``); the residual stream's gradient is the
    caller's."""
    B, T = setup.batch_size, setup.seq_len
    inner = att.mamba_num_heads * att.mamba_head_dim
    rows = B * T * inner
    freed = rows * FP32 + B * T * att.mamba_n_groups * FP32
    if setup.precision == "amp":
        freed += inner * hidden_size * BF16
    norm = 5 * rows * FP32 - freed
    return max(norm, scan_backward_transient(att, setup, hidden_size))


def scan_backward_transient(
    att: Attention, setup: TrainingSetup, hidden_size: int, kept: dict[str, int] | None = None
) -> int:
    """Bytes the mixer's backward holds beyond its saved set inside ``mamba2_chunk_scan``'s
    backward (may be negative), read from live-storage traces of
    ``GraniteMoeHybridMambaLayer``'s and ``NemotronHMamba2Mixer``'s backward (chunks of
    64–256, states of 32–256, one or two rows). ``kept`` is the mixer's saved set by term
    (:func:`saved`, or Falcon-H1's).

    The engine runs ready nodes highest sequence number first, so after the output sum's
    backward the off-diagonal branch (Y_off, the chunk recurrence, the states einsum: all
    made after Y_diag) runs, then Y_diag's einsum, and ``D * pad(x)``'s multiply, made
    first, waits: its pad and the padded scan output's gradient (B·T_p·I·4) stay, beside
    the gate's gradient (B·T·I·4, waiting for in_proj's split) and A_cumsum's summed one
    (B·h·T_p·4). By the first moment the backward has freed out_proj's input (and under
    autocast its BF16 weight), the gated norm's saved set, the output einsum's and the
    recurrence's, and the states einsum's operand copies. With X = B·h·T_p·n·4, one
    gradient of the padded B or C, the largest of three moments:

    * ``B * decay_states``'s backward: the output einsum's C gradient and the states
      einsum's B_decay and x gradients, beside the multiply's two products (4·X + x's).
    * ``M = G * L``'s backward, after exp's backward freed decay_states, the multiply the
      padded B (unless one row and one chunk outside autocast, where G reads it as a
      view), and Y_diag's einsum M and its copy of x: M's gradient beside both products
      (three B·h·N·c² FP32 tensors; under autocast without checkpointing G's product also
      cast down to BF16, ``mul_tensor_backward``'s ``.to(self's dtype)``; checkpointed,
      the node had unpacked G into a local freed just before), the two off-diagonal
      gradients and the chunked x's.
    * G's einsum backward: M's gradient and G (the multiply saved it) gone, its C and B
      gradients made beside the off-diagonal two.

    M's wins where the chunk is long beside the state (c > n); B_decay's and G's where the
    state is wide."""
    B, T, c = setup.batch_size, setup.seq_len, att.mamba_chunk_size
    N = -(-T // c)
    Tp = N * c
    h, n, p = att.mamba_num_heads, att.mamba_state_size, att.mamba_head_dim
    inner = h * p
    autocast = setup.precision == "amp"
    m = BF16 if autocast else FP32
    square = B * h * N * c * c * FP32
    X = B * h * Tp * n * FP32  # one gradient of the padded B or C
    kept = saved(att, setup, hidden_size) if kept is None else kept
    # Alive at every moment: the padded scan output's gradient, the gate's and, from
    # state_decay_out's exp, A_cumsum's.
    common = B * Tp * inner * FP32 + B * T * inner * FP32 + B * h * Tp * FP32
    freed = kept.get("attention/linear/context", kept.get("attention/mamba/context", 0))
    freed += kept.get("attention/mamba/gated_norm", kept.get("attention/mamba/gate", 0))
    freed += kept["attention/mamba/state_output"] + 2 * (N + 1) ** 2
    # The states term but its exp and the padded B, which B_decay's multiply still holds.
    freed += kept["attention/mamba/states"] - B * h * Tp * FP32 - B * Tp * h * n * FP32
    if autocast:
        freed += inner * hidden_size * BF16
    # B_decay's backward: the output einsum's C gradient and the states einsum's B_decay
    # gradient beside the multiply's two products, and the states einsum's x gradient.
    b_decay = 4 * X + B * h * Tp * p * FP32
    # Then exp's backward freed decay_states, the multiply the padded B (unless G reads
    # it as a view), the Y_diag einsum M and its copy of x.
    later = B * h * Tp * FP32 + B * h * N * c * c * m + B * h * Tp * p * m
    if not (B * N == 1 and not autocast):
        later += B * Tp * h * n * FP32
    cast = square // 2 if autocast and not setup.activation_checkpointing else 0
    mul = 3 * square + cast + 2 * X + B * Tp * inner * FP32 - later
    # G's einsum: M's gradient gone, and G itself (the multiply saved it); its C and B
    # gradients made.
    g = 2 * square + 4 * X + B * Tp * inner * FP32 - later - B * h * N * c * c * m
    return common + max(b_decay, mul, g) - freed


def made_before_peak(att: Attention, hidden_size: int) -> int:
    """Parameters whose gradients exist at the mixer's backward peak: out_proj's (and its
    bias) and the gated norm's weight, whose backwards run first."""
    inner = att.mamba_num_heads * att.mamba_head_dim
    return inner * hidden_size + (hidden_size if att.mamba_proj_bias else 0) + inner


def recompute_extra(att: Attention, setup: TrainingSetup, hidden_size: int) -> int:
    """Bytes the mixer's forward holds at its scan's peak beyond its whole saved set, as
    checkpointing's recomputation runs it again inside the backward (may be negative).

    Without autocast the peak is ``(Y_diag + Y_off).contiguous()`` in
    ``mamba2_chunk_scan`` (``transformers/models/nemotron_h/modeling_nemotron_h.py``
    l. 274–377, the function Falcon-H1 and Granite-4.0-H call too): every local the
    function still binds is alive — ``D_residual`` and the three B·T_p·I FP32 tensors the
    line makes or reads (``Y_off``, the sum, its contiguous copy), the Y_diag einsum's
    output (B·T_p·I·m), the zero initial state (B·h·p·n·m), the padded A and its cumsum
    (2·B·T_p·h·4). Under autocast the FP32 tensors whose BF16 casts the einsums saved are
    locals too — the padded C and x, ``B_decay`` (B·T_p·(2·h·n + I)·4) and M
    (B·h·N·c²·4) — and so are the caller's BF16 in_proj output (B·T·P·2), the conv's
    SiLU output (B·T·C·2), the conv bias cast (C·2) and the clamped dt (B·T·h·2); under
    BF16 the SiLU output and clamped dt (FP32 keeps both). Not yet made: the gated norm's
    saved set (``gated_norm``), out_proj's input (``context``) and, under autocast, its
    weight cast. Read from a live-storage trace of ``NemotronHMamba2Mixer``'s forward.

    Under autocast, where the batch and chunk do not collapse to one (B·N > 1), an
    einsum's permuted operand is first copied in FP32 (``einsum``'s
    ``permute(...).reshape``; with B·N = 1 the head-major view is a valid strided
    ``bmm`` operand) and only then cast by ``bmm``'s autocast, so the FP32 copy is alive
    through the ``bmm`` as well (without autocast that copy is the operand ``bmm`` saves,
    already in the saved set). Two such moments can outgrow the last line: the Y_diag
    einsum (M's copy, B·h·N·c²·4, and x's, B·h·T_p·p·4, before anything after it is
    made) and the ``C_times_states`` einsum (C's copy, B·h·T_p·n·4, before ``Y_off``;
    the chunk states are head-leading already); the first wins where the chunk is long
    beside the state, the second where the state is wide beside the head (Falcon-H1
    shrunk to p = 8, n = 256: a live-storage trace of ``FalconH1ForCausalLM``'s
    checkpointed step at T = 512). The peak is the largest of the three."""
    B, T, a = setup.batch_size, setup.seq_len, setup.activation_bytes
    autocast = setup.precision == "amp"
    h, p, n = att.mamba_num_heads, att.mamba_head_dim, att.mamba_state_size
    c, d = att.mamba_chunk_size, hidden_size
    size = widths(att, d)
    inner, conv, proj = size["I"], size["C"], size["P"]
    N = -(-T // c)
    Tp = N * c
    m = BF16 if autocast else FP32
    caller = 0  # the mixer's locals outside the scan
    if autocast:
        caller += B * T * proj * BF16 + conv * BF16 * (1 if att.mamba_conv_bias else 0)
    if autocast or a != FP32:
        caller += B * T * conv * a + B * T * h * a
    rows = B * Tp * inner  # D_residual, Y_diag, Y_off, the sum and its copy: B·T_p·I each
    padded_a = 2 * B * Tp * h * FP32
    held = caller + rows * (4 * FP32 + m) + B * h * p * n * m + padded_a
    if autocast:
        held += B * Tp * (2 * h * n + inner) * FP32 + B * h * N * c * c * FP32
    elif B * N > 1:
        # The einsums copy their operands here (the saved set's views are the one-row,
        # one-chunk case's): the padded x, C and B_decay are locals beside their copies
        # (two rows in one chunk as much as several chunks: tests/test_ssm.py).
        held += B * Tp * (inner + 2 * h * n) * FP32
    if N > 1:
        # The recurrence's output, whose first N chunks the output einsum copied.
        held += B * h * (N + 1) * p * n * m
    kept = saved(att, setup, d)
    later = kept["attention/mamba/gated_norm"] + kept["attention/linear/context"]
    if autocast:
        later += inner * d * BF16
        copies = B * N > 1  # the einsums' FP32 operand copies (see above)
        # C_times_states's bmm: C's FP32 copy; Y_off and after not made.
        output_einsum = held - 3 * rows * FP32 + (B * h * Tp * n * FP32 if copies else 0)
        # Y_diag's bmm: M's and x's FP32 copies; B_decay, steps 2-4's saved set, the
        # zero state, the recurrence's output, Y_off and after not made.
        not_made = (
            kept["attention/mamba/states"]
            - B * Tp * h * n * FP32  # the padded B, a local already
            + kept["attention/mamba/state_output"]
        )
        y_diag = (
            caller
            + rows * (FP32 + m)
            + padded_a
            + B * Tp * (h * n + inner) * FP32
            + B * h * N * c * c * FP32
            + (B * h * (N * c * c + Tp * p) * FP32 if copies else 0)
            - not_made
        )
        held = max(held, output_einsum, y_diag)
    return held - later
