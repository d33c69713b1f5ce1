"""The chunked losses users run, computed in the measured step as each library writes it.

``--cross-entropy torchtune | trl | liger`` replace the loop's loss (``introspect.measure
.torch_step``): each function here takes ``(model, input_ids, targets)`` of a transformers
``*ForCausalLM`` (peft-wrapped or not) and returns ``(loss, held)`` like the loops there.

TRL's own code runs where TRL is installed (the ``compare`` extras): :func:`trl_loss`
patches the model with TRL's ``add_fused_lm_head`` (``trl/trainer/utils.py:1548``) as
``SFTTrainer`` does (``sft_trainer.py:1144``, the same ``outputs``) and calls it with
``fused_lm_head=True`` as ``SFTTrainer.compute_loss`` does (:1611). Where TRL does not
import, and for the two other libraries, whose code does not import here without heavy
dependencies, the algorithm is a function that mirrors the source line by line (the
step's notes say which ran):

* torchtune 0.6.1 (the current release): ``torchtune/__init__.py`` imports torchao, and
  the package imports torchdata, datasets, sentencepiece, tiktoken... at its top;
* TRL 1.16.0 without TRL installed: ``trl/kernels/chunked_logprob.py`` imports only
  torch, but its backward imports ``trl.trainer.utils`` (datasets, pandas, accelerate);
* Liger-Kernel 0.8.5: ``liger_kernel/ops/fused_linear_cross_entropy.py`` imports triton
  (CUDA) at its top, and its cross-entropy is a Triton kernel.

What each keeps, with the source file:

* **torchtune** — ``CEWithChunkedOutputLoss`` (``torchtune/modules/loss/
  ce_chunked_output_loss.py``), the loss of every 0.6.1 recipe config: the recipe calls
  ``model.set_num_output_chunks(8)`` so the model's output projection returns a list of 8
  logits chunks (``TransformerDecoder.chunked_output``, ``torchtune/modules/
  transformer.py``); the loss upcasts each chunk (``.float()``) and calls
  ``F.cross_entropy(reduction="sum")`` on it, so autograd keeps every chunk's FP32
  log-softmax (all B·T·V of them); the recipe's ``del logits`` frees the 16-bit chunks
  before backward (``recipes/full_finetune_single_device.py: _loss_step``). (torchtune's
  main branch, unreleased, moved its configs to ``LinearCrossEntropyLoss``,
  ``cross_entropy_loss.py``, which projects inside the loss: not modelled.)
* **trl** — TRL's fused LM head (``trl/trainer/utils.py: add_fused_lm_head``, which
  ``SFTTrainer`` installs for every run) over ``ChunkedLogProbFunction``
  (``trl/kernels/chunked_logprob.py``): 4096-token × 32768-vocabulary tiles into one
  reused buffer, folded into online log-sum-exp statistics; it saves the hidden states,
  the weight, the targets and a log-sum-exp per token, and its backward recomputes each
  tile and accumulates FP32 gradients of the hidden states and the weight. Here the
  tiles are folded by TRL's own torch fallback (``_forward_tile``/``_backward_tile``, what
  TRL runs on a device without Triton), every position scored (TRL's non-Triton path).
* **liger** — ``LigerFusedLinearCrossEntropyFunction``
  (``liger_kernel/ops/fused_linear_cross_entropy.py``, via ``LigerForCausalLMLoss``,
  ``liger_kernel/transformers/model/loss_utils.py``): chunks of
  ``next_power_of_2(ceil(BT / ceil(V / d)))`` tokens; each chunk's logits are made, the
  Triton kernel overwrites them with their gradient in place, and the gradients of the
  hidden states (B·T·d) and of the head weight (V·d) are accumulated IN THE FORWARD and
  saved; backward only returns them. The kernel's in-place softmax-and-gradient is
  written here as in-place torch ops on the chunk (same buffers; the arithmetic in the
  chunk's dtype, not the kernel's FP32 registers), and ``total_n_non_ignore`` stays a
  tensor instead of Liger's ``.item()`` so a dry run can trace it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

#: The losses this module computes (``TrainingSetup.cross_entropy``).
LIBRARY_LOSSES = ("torchtune", "trl", "liger")

IGNORE_INDEX = -100
#: torchtune's ``CEWithChunkedOutputLoss(num_output_chunks=8)`` default.
TORCHTUNE_CHUNKS = 8
#: TRL's ``TOKEN_CHUNK_SIZE`` (tokens per tile) and ``_CHUNKED_LOGPROB_CHUNK_SIZE``
#: (vocabulary per tile, ``trl/trainer/utils.py``).
TRL_TOKEN_CHUNK = 4096
TRL_VOCAB_CHUNK = 32768
#: The per-token outputs SFTTrainer asks of the fused head (``trl/trainer/sft_trainer.py``).
TRL_OUTPUTS = ("log_probs", "entropy", "is_top1")

NOTES = {
    "torchtune": "loss torchtune: CEWithChunkedOutputLoss (torchtune 0.6.1, "
    "ce_chunked_output_loss.py) over 8 output chunks, mirrored line by line (torchtune "
    "needs torchao to import)",
    "trl": "loss trl: SFTTrainer's fused LM head, ChunkedLogProbFunction (TRL 1.16.0, "
    "kernels/chunked_logprob.py) with its torch tile fallback, mirrored line by line (TRL "
    "is not installed: pip install trl)",
    "liger": "loss liger: LigerFusedLinearCrossEntropyFunction (Liger-Kernel 0.8.5, "
    "ops/fused_linear_cross_entropy.py), mirrored line by line in torch (its kernels are "
    "Triton's); gradients made in the forward",
}


def note(name: str) -> str:
    """The step's note for loss ``name``: TRL's own code where it imports."""
    if name == "trl" and _trl_fused_head() is not None:
        import trl

        return (
            f"loss trl: TRL {trl.__version__}'s own fused LM head (trl/trainer/utils.py "
            "add_fused_lm_head, as SFTTrainer installs it) over ChunkedLogProbFunction, its "
            "torch tile fallback off Triton"
        )
    return NOTES[name]


def _trl_fused_head():
    """TRL's ``add_fused_lm_head``, or None where TRL does not import."""
    try:
        from trl.trainer.utils import add_fused_lm_head
    except ImportError:
        return None
    return add_fused_lm_head


def _parts(model: nn.Module) -> tuple[nn.Module, nn.Linear]:
    """The backbone (``base_model``: the decoder without the head) and the output
    projection of a transformers causal LM, under a peft wrapper or not."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.base_model, inner.get_output_embeddings()


def library_loss(name: str):
    """The loop's loss for ``--cross-entropy NAME`` (:data:`LIBRARY_LOSSES`). TRL is
    imported here, before any step is tracked: its modules make tensors when imported."""
    if name == "trl":
        _trl_fused_head()
    return {"torchtune": torchtune_loss, "trl": trl_loss, "liger": liger_loss}[name]


# --- torchtune ---------------------------------------------------------------------------


def torchtune_loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
    """torchtune's recipe ``_loss_step``: the labels shifted with an ignored last
    position (``torch.hstack((labels[..., 1:], ignore))``), the model's chunked output,
    the loss, then ``del logits``."""
    backbone, output = _parts(model)
    h = backbone(input_ids=input_ids).last_hidden_state
    # TransformerDecoder.chunked_output
    logits = [output(chunk) for chunk in h.chunk(TORCHTUNE_CHUNKS, dim=1)]
    del h
    ignore = torch.full_like(input_ids[:, :1], IGNORE_INDEX)
    labels = torch.hstack((input_ids[..., 1:], ignore))
    loss = ce_with_chunked_output(logits, labels)
    del logits  # "free logits otherwise it peaks backward memory"
    return loss, None


def ce_with_chunked_output(logits: list[torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """``CEWithChunkedOutputLoss.forward``."""
    total_elements = (labels != IGNORE_INDEX).sum()
    labels = [chunk.reshape(-1) for chunk in labels.chunk(TORCHTUNE_CHUNKS, dim=1)]
    logits = [chunk.reshape(-1, chunk.size(-1)) for chunk in logits]
    total_loss = 0.0
    for logits_chunk, labels_chunk in zip(logits, labels, strict=True):
        # compute_cross_entropy: upcast one chunk, its sum of cross-entropies
        total_loss += F.cross_entropy(
            logits_chunk.float(), labels_chunk, ignore_index=IGNORE_INDEX, reduction="sum"
        )
    return total_loss / total_elements


# --- TRL ---------------------------------------------------------------------------------


def trl_loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
    """SFTTrainer's loss: ``model(input_ids=x, labels=x, fused_lm_head=True).loss``, the
    causal LM (the peft model's base, as sft_trainer.py:1144 patches it) patched once with
    TRL's own ``add_fused_lm_head(outputs=("log_probs", "entropy", "is_top1"))``. Without
    TRL, :func:`trl_mirror_loss`."""
    add_fused_lm_head = _trl_fused_head()
    if add_fused_lm_head is None:
        return trl_mirror_loss(model, input_ids, targets)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(inner, "_introspect_fused_lm_head", False):
        add_fused_lm_head(inner, outputs=TRL_OUTPUTS)
        inner._introspect_fused_lm_head = True
    out = model(input_ids=input_ids, labels=input_ids, use_cache=False, fused_lm_head=True)
    return out.loss, None


def trl_mirror_loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
    """``add_fused_lm_head``'s ``_fused_forward`` with ``labels=input_ids`` (what
    SFTTrainer's ``compute_loss`` passes), on the non-Triton path: every position scored,
    the ignored ones zeroed after."""
    backbone, lm_head = _parts(model)
    backbone_outputs = backbone(input_ids=input_ids, use_cache=False)
    hidden_states = backbone_outputs.last_hidden_state[:, :-1]
    labels = input_ids[:, 1:]
    mask = labels != IGNORE_INDEX
    per_token = ChunkedLogProb.apply(
        hidden_states.reshape(-1, hidden_states.size(-1)),
        lm_head.weight,
        lm_head.bias,
        labels.clamp(min=0).reshape(-1),
        1.0,
        TRL_VOCAB_CHUNK,
        TRL_OUTPUTS,
    )
    per_token = [None if x is None else x.view(mask.shape).masked_fill(~mask, 0) for x in per_token]
    log_probs = per_token[0]
    loss = -log_probs.sum() / mask.sum().clamp(min=1)
    return loss, None


def _trl_forward_tile(
    tile, targets, running_max, sum_exp, x_sum_exp, target_logit, max_before, start
):
    """``_forward_tile`` (logit_scale 1, no softcap, temperature 1; entropy and is_top1)."""
    n_cols = tile.shape[-1]
    z = _trl_transform(tile.float())
    local = targets - start
    before_target = torch.arange(n_cols, device=z.device) < local.unsqueeze(-1)
    max_before.copy_(torch.maximum(max_before, z.masked_fill(~before_target, -math.inf).amax(-1)))
    del before_target
    new_m = torch.maximum(running_max, z.amax(-1))
    rescale = torch.exp(running_max - new_m)
    e = torch.exp(z - new_m.unsqueeze(-1))
    sum_exp.mul_(rescale).add_(e.sum(-1))
    x_sum_exp.mul_(rescale).add_((e * z).sum(-1))
    running_max.copy_(new_m)
    in_tile = (local >= 0) & (local < n_cols)
    target_z = z.gather(-1, local.clamp(0, n_cols - 1).unsqueeze(-1)).squeeze(-1)
    target_logit.copy_(torch.where(in_tile, target_z, target_logit))


def _trl_transform(z: torch.Tensor) -> torch.Tensor:
    """``_torch_transform(z, logit_scale=1.0, softcap, inv_t=1.0, HAS_SOFTCAP=False)``:
    two multiplications, each a new tensor."""
    z = z * 1.0
    return z * 1.0


def _trl_backward_tile(tile, targets, log_z, grad_logprobs, start):
    """``_backward_tile`` with the log-probabilities' gradient only (the entropy is
    logged, not trained): the tile overwritten with the logits' gradient."""
    n_cols = tile.shape[-1]
    y = tile.float() * 1.0
    z = y * 1.0
    log_p = z - log_z.unsqueeze(-1)
    p = torch.exp(log_p)
    grad = torch.zeros_like(z)
    is_target = torch.arange(start, start + n_cols, device=z.device) == targets.unsqueeze(-1)
    grad += grad_logprobs.unsqueeze(-1) * (is_target.float() - p)
    del is_target
    grad = grad * 1.0
    tile.copy_(grad * 1.0)


def _addmm_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """TRL's ``_addmm_fp32`` off CUDA: ``acc.addmm_(a.float(), b.float())``."""
    acc.addmm_(a.float(), b.float())


class ChunkedLogProb(torch.autograd.Function):
    """TRL's ``ChunkedLogProbFunction`` (no softcap, logit_scale 1), its tiles folded by
    the torch fallback."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk_size, outputs):
        ctx.set_materialize_grads(False)
        device = hidden.device
        N, vocab = hidden.shape[0], weight.shape[0]
        compute_dtype = (
            torch.get_autocast_dtype(device.type)
            if torch.is_autocast_enabled(device.type)
            else hidden.dtype
        )
        running_max = torch.full((N,), float("-inf"), device=device, dtype=torch.float32)
        sum_exp = torch.zeros((N,), device=device, dtype=torch.float32)
        x_sum_exp = torch.zeros((N,), device=device, dtype=torch.float32)
        sq_sum_exp = torch.zeros((N,), device=device, dtype=torch.float32)  # noqa: F841 (TRL makes it)
        z_sum = torch.zeros((N,), device=device, dtype=torch.float32)  # noqa: F841
        max_before = torch.full((N,), float("-inf"), device=device, dtype=torch.float32)
        target_logit = torch.zeros((N,), device=device, dtype=torch.float32)
        mm_buf = torch.empty(
            (min(N, TRL_TOKEN_CHUNK), chunk_size), device=device, dtype=compute_dtype
        )
        for token_start in range(0, N, TRL_TOKEN_CHUNK):
            token_end = min(token_start + TRL_TOKEN_CHUNK, N)
            n = token_end - token_start
            hidden_chunk = hidden[token_start:token_end].to(compute_dtype)
            for start in range(0, vocab, chunk_size):
                end = min(start + chunk_size, vocab)
                tile = mm_buf[:n, : end - start]
                torch.mm(hidden_chunk, weight[start:end].to(compute_dtype).t(), out=tile)
                if bias is not None:
                    tile.add_(bias[start:end].to(compute_dtype))
                rows = slice(token_start, token_end)
                _trl_forward_tile(
                    tile, targets[rows], running_max[rows], sum_exp[rows], x_sum_exp[rows],
                    target_logit[rows], max_before[rows], start,
                )  # fmt: skip
        log_z = running_max + torch.log(sum_exp)
        logprobs = target_logit - log_z
        entropy = log_z - x_sum_exp / sum_exp if "entropy" in outputs else None
        is_top1 = (
            (target_logit >= running_max) & (target_logit > max_before)
            if "is_top1" in outputs
            else None
        )
        ctx.save_for_backward(
            hidden, weight, bias, targets, log_z, log_z if entropy is None else entropy
        )
        ctx.compute_dtype, ctx.chunk_size = compute_dtype, chunk_size
        ctx.mark_non_differentiable(*(x for x in (is_top1,) if x is not None))
        return logprobs, entropy, is_top1

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy, *_):
        hidden, weight, bias, targets, log_z, _entropy = ctx.saved_tensors
        compute_dtype, chunk_size = ctx.compute_dtype, ctx.chunk_size
        needs_hidden, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        N, vocab = hidden.shape[0], weight.shape[0]
        grad_hidden = (
            torch.zeros(hidden.shape, device=hidden.device, dtype=torch.float32)
            if needs_hidden
            else None
        )
        grad_weight = (
            torch.zeros(weight.shape, device=weight.device, dtype=torch.float32)
            if needs_weight
            else None
        )
        grad_bias = (
            torch.zeros(bias.shape, device=bias.device, dtype=torch.float32) if needs_bias else None
        )
        mm_buf = torch.empty(
            (min(N, TRL_TOKEN_CHUNK), chunk_size), device=hidden.device, dtype=compute_dtype
        )
        grad_logprobs = grad_logprobs.float().contiguous()
        for token_start in range(0, N, TRL_TOKEN_CHUNK):
            token_end = min(token_start + TRL_TOKEN_CHUNK, N)
            n = token_end - token_start
            rows = slice(token_start, token_end)
            hidden_chunk = hidden[rows].to(compute_dtype)
            for start in range(0, vocab, chunk_size):
                end = min(start + chunk_size, vocab)
                w_chunk = weight[start:end].to(compute_dtype)
                tile = mm_buf[:n, : end - start]
                torch.mm(hidden_chunk, w_chunk.t(), out=tile)
                if bias is not None:
                    tile.add_(bias[start:end].to(compute_dtype))
                _trl_backward_tile(tile, targets[rows], log_z[rows], grad_logprobs[rows], start)
                if grad_hidden is not None:
                    _addmm_fp32(grad_hidden[rows], tile, w_chunk)
                if grad_weight is not None:
                    _addmm_fp32(grad_weight[start:end], tile.t(), hidden_chunk)
                if grad_bias is not None:
                    grad_bias[start:end] += tile.sum(dim=0, dtype=torch.float32)
        return (
            grad_hidden.to(hidden.dtype) if grad_hidden is not None else None,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
            None,
            None,
            None,
            None,
        )


# --- Liger -------------------------------------------------------------------------------


def liger_loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
    """Liger's patched ``*ForCausalLM.forward`` (``lce_forward``) with ``labels=input_ids``:
    the backbone, then ``LigerForCausalLMLoss`` — labels padded and shifted, hidden states
    flattened (a view), the fused function with ``reduction="mean"``; no logits."""
    backbone, lm_head = _parts(model)
    hidden_states = backbone(input_ids=input_ids).last_hidden_state
    labels = F.pad(input_ids, (0, 1), value=IGNORE_INDEX)
    shift_labels = labels[..., 1:].contiguous()
    hidden_states = hidden_states.view(-1, hidden_states.size(-1))
    loss = FusedLinearCrossEntropy.apply(
        hidden_states, lm_head.weight, shift_labels.view(-1), lm_head.bias
    )
    return loss, None


def liger_chunk_size(tokens: int, vocab: int, hidden: int) -> int:
    """Liger's chunk: ``inc_factor = cdiv(V, H)``, ``next_power_of_2(cdiv(BT,
    inc_factor))``, at most BT (``chunk_mem_const`` 1)."""
    inc_factor = -(-vocab // hidden)
    chunk = 1 << max(0, (-(-tokens // inc_factor) - 1).bit_length())
    return min(chunk, tokens)


def _liger_kernel(logits_chunk, target_chunk, loss_slice, n_non_ignore) -> None:
    """``liger_cross_entropy_kernel`` (mean reduction, no label smoothing or z-loss):
    each row's loss into ``loss_slice`` and the row's logits overwritten with the
    gradient ``(softmax - onehot) / n_non_ignore`` (0 for an ignored row), in place."""
    valid = target_chunk != IGNORE_INDEX
    index = target_chunk.clamp(min=0).unsqueeze(-1)
    x_target = logits_chunk.gather(-1, index).float()
    m = logits_chunk.amax(-1, keepdim=True)
    logits_chunk.sub_(m).exp_()
    d = logits_chunk.sum(-1, keepdim=True, dtype=torch.float32)
    scale = (valid.float() / n_non_ignore).unsqueeze(-1)
    loss_slice.copy_(((m.float() + d.log() - x_target) * scale).squeeze(-1))
    logits_chunk.div_(d)
    logits_chunk.scatter_add_(-1, index, -torch.ones_like(x_target, dtype=logits_chunk.dtype))
    logits_chunk.mul_(scale)


def fused_linear_cross_entropy_forward(_input, weight, target, bias=None):
    """``fused_linear_cross_entropy_forward`` (mean reduction, ``accum_dtype=None``, no
    token scaling; CPU: no ``torch.mm(out=)``, the legacy weight-gradient path)."""
    device = _input.device
    BT, H = _input.shape
    V = weight.shape[0]
    chunk_size = liger_chunk_size(BT, V, H)
    num_chunks = -(-BT // chunk_size)
    grad_input = torch.zeros_like(_input, device=device)
    grad_weight = torch.zeros_like(weight, device=device) if weight.requires_grad else None
    grad_bias = torch.zeros_like(bias, device=device) if bias is not None else None
    loss_1d = torch.zeros(BT, dtype=torch.float32, device=device)
    target_mask = target != IGNORE_INDEX
    total_n_non_ignore = target_mask.sum()  # Liger: .item()
    for chunk_id in range(num_chunks):
        start_idx = chunk_id * chunk_size
        end_idx = min((chunk_id + 1) * chunk_size, BT)
        _input_chunk = _input[start_idx:end_idx]
        logits_chunk = _input_chunk @ weight.t()
        if bias is not None:
            logits_chunk = logits_chunk + bias
        target_chunk = target[start_idx:end_idx]
        logits_chunk = logits_chunk.contiguous()
        target_chunk = target_chunk.contiguous()
        _liger_kernel(logits_chunk, target_chunk, loss_1d[start_idx:end_idx], total_n_non_ignore)
        grad_logits_chunk = logits_chunk
        del logits_chunk
        grad_input[start_idx:end_idx] = grad_logits_chunk @ weight
        if grad_weight is not None:
            grad_weight += torch.mm(grad_logits_chunk.t(), _input_chunk).float()
        if bias is not None:
            torch.add(input=grad_bias, other=grad_logits_chunk.sum(dim=0), out=grad_bias)
        del grad_logits_chunk, _input_chunk, target_chunk
    loss = torch.sum(loss_1d)
    grad_weight = grad_weight.to(weight.dtype) if grad_weight is not None else None
    grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None else None
    return loss, grad_input, grad_weight, grad_bias


class FusedLinearCrossEntropy(torch.autograd.Function):
    """``LigerFusedLinearCrossEntropyFunction`` (mean reduction): the gradients made in
    the forward and saved; the backward scales them in place (Liger's
    ``element_mul_kernel``, skipped there when the upstream gradient is 1) and returns
    them."""

    @staticmethod
    def forward(ctx, _input, weight, target, bias=None):
        loss, grad_input, grad_weight, grad_bias = fused_linear_cross_entropy_forward(
            _input, weight, target, bias
        )
        ctx.save_for_backward(
            grad_input.detach(),
            grad_weight.detach() if grad_weight is not None else None,
            grad_bias.detach() if grad_bias is not None else None,
        )
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight, grad_bias = ctx.saved_tensors
        # fused_linear_cross_entropy_backward: an in-place scale (no new storage)
        for grad in (grad_input, grad_weight, grad_bias):
            if grad is not None:
                grad.mul_(grad_output.to(grad.dtype))
        return grad_input, grad_weight, None, grad_bias
