"""The chunked losses' saved sets and transients in the closed form (``--cross-entropy
torchtune | trl | liger``); the measured step runs the same algorithms
(:mod:`introspect.measure.losses`, which names each library's source line by line).

N = B·T tokens, V the vocabulary, d the width, s the activations' bytes, w the working
weights' bytes. Each function returns breakdown terms (``logits/...``, prefixed by the
caller) for one moment of torch's step:

* :func:`saved` — kept from the loss's forward to its backward;
* :func:`forward_transients` — what the loss makes at its forward's largest moment,
  beside the saved set (the moment :func:`introspect.refined.execution.loss_forward`);
* :func:`backward_start` — the transient at the loss's backward's largest moment before
  any gradient of a parameter exists (``activations/logits/grad`` at forward end);
* :func:`head` — the output projection's backward (``activations/logits/grad`` there,
  and which saved terms are freed by then).

**torchtune** (``torchtune/modules/loss/ce_chunked_output_loss.py``: CEWithChunkedOutputLoss
over ``TransformerDecoder.chunked_output``'s 8 chunks, ``torch.chunk`` along T): forward
keeps every chunk's logits (s) until the recipe's ``del logits``, and each chunk's FP32
log-softmax for backward; the upcast ``.float()`` of one chunk (16-bit logits only) is
alive while its log-softmax is made. torch's engine runs every chunk's loss backward
(higher sequence numbers) before any chunk's lm_head backward, so each chunk's
log-probability and logits gradients (two FP32 chunks) are made while the chunks not yet
reached keep their log-softmax, and the logits' gradients at s pile up to N·V·s before
lm_head's backward takes them one chunk at a time.

**liger** (``liger_kernel/ops/fused_linear_cross_entropy.py``): chunks of
``next_power_of_2(ceil(N / ceil(V/d)))`` tokens; the forward allocates the gradient of
the hidden states (N·d at the hidden states' dtype) and of the head weight (V·d·w),
makes one chunk's logits, overwrites them with their gradient (the kernel, in place) and
accumulates both gradients; they are saved for backward, which returns them. The final
norm's output is then saved by nothing (the function does not save its input). Off CUDA
(and on CUDA when ``torch.mm(out=)`` cannot be used, e.g. under autocast) the weight's
gradient per chunk is ``torch.mm(grad.t(), x).float()``: a V·d temporary at the chunk's
dtype and, for 16-bit chunks, its FP32 copy; on CUDA with one dtype it is an in-place
``addmm``.

**trl** (``trl/kernels/chunked_logprob.py``: ChunkedLogProbFunction, through
``trl/trainer/utils.py: add_fused_lm_head``): one reused ``min(N, 4096) × 32768`` buffer
at the compute dtype, tiles of ``n × min(V, 32768)``; seven N-long FP32 statistics; saved:
the hidden states (the final norm's output, a view), the weight, the targets (int64), a
log-sum-exp and the entropy per token (FP32), the label mask. Its backward allocates
FP32 accumulators for the hidden states' and the weight's gradients (N·d·4, V·d·4) and
a second buffer, and at the end casts both to their parameters' dtype. Off CUDA the tiles
are folded by TRL's torch fallback, whose temporaries are FP32 tiles: 12 bytes per tile
element at most in the forward fold (``_forward_tile``: z, z − max, exp) and 29 in the
backward's (``_backward_tile``: y, z, log p, p, the gradient, the target mask and two
products); with Triton (CUDA) the kernels work in registers and only the 16-bit tile
is read, and SFTTrainer scores only the unmasked positions (a copy of their hidden
states, saved).
"""

from __future__ import annotations

from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

FP32 = 4
INT64 = 8

#: torchtune's CEWithChunkedOutputLoss default ``num_output_chunks``.
TORCHTUNE_CHUNKS = 8
#: TRL's tile: tokens (``TOKEN_CHUNK_SIZE``) and vocabulary (``_CHUNKED_LOGPROB_CHUNK_SIZE``).
TRL_TOKENS, TRL_VOCAB = 4096, 32768
#: Bytes of FP32 temporaries per tile element in TRL's torch fallback at its largest
#: (forward fold, backward tile); counted off the source, see the module docstring.
TRL_FOLD_BYTES, TRL_BACKWARD_TILE_BYTES = 12, 29

LIBRARY_LOSSES = ("torchtune", "trl", "liger")


def is_library(setup: TrainingSetup) -> bool:
    """Whether the setup's loss is one of the libraries' chunked losses."""
    return setup.cross_entropy in LIBRARY_LOSSES


def _on_cuda(setup: TrainingSetup) -> bool:
    return setup.resolved_device == "cuda"


def _compute_bytes(setup: TrainingSetup) -> int:
    """The logits' dtype inside the loss: autocast's BF16 under amp, else the activations'."""
    return 2 if setup.precision == "amp" else setup.activation_bytes


def torchtune_chunks(setup: TrainingSetup) -> list[int]:
    """Tokens per chunk: ``torch.chunk(T, 8)`` (chunks of ceil(T/8), the last the rest),
    times B."""
    T, C = setup.seq_len, TORCHTUNE_CHUNKS
    size = -(-T // C)
    lens = [min(size, T - start) for start in range(0, T, size)]
    return [setup.batch_size * n for n in lens]


def liger_chunk(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Liger's chunk in tokens: ``min(N, next_power_of_2(ceil(N / ceil(V/d))))``."""
    N, V, d = setup.tokens, spec.vocab_size, spec.hidden_size
    inc = -(-V // d)
    return min(N, 1 << max(0, (-(-N // inc) - 1).bit_length()))


def trl_tokens(setup: TrainingSetup) -> int:
    """Positions TRL's fused head scores: ``last_hidden_state[:, :-1]``, B·(T−1)."""
    return setup.batch_size * (setup.seq_len - 1)


def _trl_tile(spec: ModelSpec, setup: TrainingSetup) -> tuple[int, int]:
    """TRL's tile: (tokens, vocabulary columns used); the buffer is always 32768 wide."""
    return min(trl_tokens(setup), TRL_TOKENS), min(spec.vocab_size, TRL_VOCAB)


def saved(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the loss keeps for its backward (see the module docstring)."""
    N, V, d, s = setup.tokens, spec.vocab_size, spec.hidden_size, setup.activation_bytes
    if setup.cross_entropy == "torchtune":
        return {"logits/log_softmax": N * V * FP32, "logits/labels": N * INT64}
    if setup.cross_entropy == "liger":
        from introspect.refined.precision import working_weight_bytes

        hidden = FP32 if setup.precision == "amp" else s
        return {
            "final_norm": 0,  # saved by nothing: the function keeps its gradient instead
            "logits/grad_input": N * d * hidden,
            "logits/grad_weight": V * d * working_weight_bytes(setup),
            "logits/loss_1d": N * FP32,
        }
    # trl: targets (int64), log-sum-exp and entropy (FP32), the label mask
    out = {"logits/labels": N * INT64, "logits/logsumexp": 2 * N * FP32, "logits/mask": N}
    if _on_cuda(setup):
        out["logits/hidden_copy"] = N * d * s  # hidden_states[mask]
    return out


def forward_transients(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """What the loss's forward holds at its largest beyond :func:`saved`."""
    N, V, d = setup.tokens, spec.vocab_size, spec.hidden_size
    c = _compute_bytes(setup)
    if setup.cross_entropy == "torchtune":
        lens = torchtune_chunks(setup)
        out = {"logits/output": N * V * c}
        if c < FP32:
            # chunk k's upcast, alive while its log-softmax is made; chunks above k have
            # none yet (the saved term counts all N): the largest such moment.
            out["logits/upcast"] = max(
                (sum(lens[: k + 1]) - N + n) * V * FP32 for k, n in enumerate(lens)
            )
        return out
    if setup.cross_entropy == "liger":
        chunk = liger_chunk(spec, setup)
        out = {"logits/chunk": chunk * V * c}
        same_dtype = setup.precision != "amp"
        if not (_on_cuda(setup) and same_dtype):
            out["logits/grad_weight_chunk"] = V * d * c + (V * d * FP32 if c < FP32 else 0)
        return out
    n, cols = _trl_tile(spec, setup)
    N = trl_tokens(setup)
    out = {"logits/statistics": 5 * N * FP32, "logits/buffer": n * TRL_VOCAB * c}
    if not _on_cuda(setup):
        out["logits/tile_temporaries"] = trl_fold_bytes(spec, setup) * n * cols
    return out


def trl_fold_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per tile element at the forward fold's largest in TRL's torch fallback.

    The fold (``_forward_tile``) holds z, z − max and exp(z − max): 12. Its transform
    first (``_torch_transform``) holds 8 without a softcap (z·scale, z·inv_t) and 12 with
    one (``softcap * torch.tanh(z / softcap)``: z, z / softcap, its tanh; then z, the tanh,
    their product); under 16-bit compute ``tile.float()``'s FP32 copy, the call's argument,
    is alive through the transform (+4): 16 with a softcap, beyond the fold's 12."""
    if not spec.final_logit_softcapping:
        return TRL_FOLD_BYTES
    upcast = FP32 if _compute_bytes(setup) < FP32 else 0
    return max(TRL_FOLD_BYTES, 3 * FP32 + upcast)


def trl_backward_tile_bytes(spec: ModelSpec) -> int:
    """Bytes per tile element at the backward tile's largest in TRL's torch fallback
    (``_backward_tile``, chunked_logprob.py): 29 (module docstring); a softcap keeps
    ``t = torch.tanh(y / softcap)`` (FP32) alive to the end for the chain rule's
    ``grad * (1 - t * t)``: 4 more through the same largest moment (the target mask's
    FP32 copy and the difference beside y, t, z, log p, p and the gradient)."""
    return TRL_BACKWARD_TILE_BYTES + (FP32 if spec.final_logit_softcapping else 0)


def backward_start(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The loss backward's largest transient before a parameter's gradient exists."""
    N, V, d = setup.tokens, spec.vocab_size, spec.hidden_size
    c = _compute_bytes(setup)
    if setup.cross_entropy == "torchtune":
        # chunk j's log-softmax backward (last chunk first): its two FP32 gradients, the
        # chunks above it already turned into gradients at c (their log-softmax freed).
        lens = torchtune_chunks(setup)
        best = 0
        for j in range(len(lens) - 1, -1, -1):
            above = sum(lens[j + 1 :])
            best = max(best, 2 * lens[j] * V * FP32 - above * V * (FP32 - c))
        return best
    if setup.cross_entropy == "liger":
        return 0
    n, cols = _trl_tile(spec, setup)
    N = trl_tokens(setup)
    out = (N * d + _trl_weight_grad(spec, setup)) * FP32 + n * TRL_VOCAB * c + N * FP32
    if not _on_cuda(setup):
        out += trl_backward_tile_bytes(spec) * n * cols
    return out


def head(spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int]) -> int:
    """The output projection's backward: frees the loss's saved terms it no longer needs
    from ``terms`` (in place) and returns the logits' gradient bytes alive there."""
    N, V, d, s = setup.tokens, spec.vocab_size, spec.hidden_size, setup.activation_bytes
    c = _compute_bytes(setup)
    for name in list(terms):
        if name.startswith("activations/logits/"):
            del terms[name]
    if setup.cross_entropy == "torchtune":
        # torch's engine sums the 8 lm_head calls' weight gradients in the input buffer
        # of the weight's one AccumulateGrad (torch/csrc/autograd/input_buffer.cpp,
        # out of place: the first arrives as a view), which runs after the last chunk:
        # at the first chunk its product beside every chunk's logits gradient; at the
        # second the first's, its own and their sum (3·V·d), two chunks' logits
        # gradients freed. Measured (dry run = tracker): Llama d=512, V=8000, T=512 and
        # Llama-3.1-8B T=4096, SDPA, bf16. The caller counts lm_head's gradient (V·d·w)
        # as made; it is in these.
        from introspect.refined.precision import working_weight_bytes

        lens = torchtune_chunks(setup)
        first = N * V * c + V * d * c
        second = (N - sum(lens[:2])) * V * c + 3 * V * d * c if len(lens) > 1 else 0
        held = max(first, second) + max(lens) * d * s
        return max(0, held - V * d * working_weight_bytes(setup))
    if setup.cross_entropy == "liger":
        hidden = FP32 if setup.precision == "amp" else s
        return N * d * hidden  # the saved gradient, passed on to the final norm
    # trl: the FP32 accumulators and their casts, returned together
    N = trl_tokens(setup)
    return (N * d + _trl_weight_grad(spec, setup)) * FP32 + N * d * s


def head_trained(setup: TrainingSetup) -> bool:
    """Whether the output projection's weight gets a gradient: full fine-tuning, or LoRA
    with the embeddings and head trained (peft's ``modules_to_save``)."""
    return setup.finetune == "full" or setup.train_embeddings


def _trl_weight_grad(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Elements of TRL's FP32 weight-gradient accumulator: V·d when the head is trained;
    none under LoRA, whose frozen head has ``needs_input_grad[1]`` False, so
    ``ChunkedLogProbFunction.backward`` (chunked_logprob.py:398-400) allocates no
    ``grad_weight`` and skips its ``_addmm_fp32`` (:429) and final cast (:439)."""
    return spec.vocab_size * spec.hidden_size if head_trained(setup) else 0
