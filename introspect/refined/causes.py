"""Why each execution term has the size it has: one sentence per term, filled in for the
model and setup (the ``notes`` of the execution breakdown)."""

from __future__ import annotations

from introspect.refined import saved, sharding
from introspect.refined.precision import working_weight_bytes
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: Why each execution term has its size (terms not listed take their parent's cause).
CAUSES: dict[str, str] = {
    "weights": "working weights ({wb} bytes each, ÷D at ZeRO-3)",
    "weights/gathered": "ZeRO-3/FSDP: one gathered unit plus one prefetched, full size",
    "weights/reference": "DPO's frozen reference model: a second copy of the weights "
    "({wb} bytes each), run under no_grad each step (dpo_trainer.py:1338)",
    "grads": "gradients at this moment ({phase_grads}); the seed counts all of them on top "
    "of all activations",
    "optimizer/master_weights": "FP32 master copy of mixed precision",
    "optimizer/adam_m": "Adam first moment",
    "optimizer/adam_v": "Adam second moment",
    "optimizer/momentum": "SGD momentum buffer",
    "optimizer/temporaries": "the update's temporaries ({framework}, {optimizer_impl} {optimizer})",
    "optimizer/adafactor_factored": "Adafactor's FP32 row and column second-moment "
    "vectors of each matrix (transformers' Adafactor)",
    "optimizer/adafactor_second_moment": "Adafactor's full FP32 second moment of 1-D parameters",
    "optimizer/adafactor_rms": "Adafactor's 0-d RMS per parameter",
    "grads/deepspeed_flat_partition": "DeepSpeed's step: the flat copy of this rank's "
    "gradients (ZeRO-2: flatten_dense_tensors_aligned; ZeRO-3: self.flatten per "
    "sub-group), beside them",
    "grads/deepspeed_fp32_partition": "DeepSpeed's step: the flat copy converted to "
    "FP32, the FP32 partition's gradient (freed after the step)",
    "optimizer/paged_state": "bitsandbytes' paged m and v (cudaMallocManaged): torch's "
    "allocator does not count it, nvidia-smi does while resident",
    "optimizer/bnb_embedding_state": "the HF Trainer's 32-bit m and v for every trainable "
    "nn.Embedding under its 8-bit bitsandbytes AdamW (trainer.py create_optimizer)",
    "optimizer/bnb_block_scales": "bitsandbytes' FP32 absmax per 256 values of each 8-bit "
    "m and v, and the shared quantization maps",
    "activations/trainer/batch": "the HF Trainer's collated micro-batches (input_ids, "
    "attention_mask, labels: int64), all of the step's bound through it (get_batch_samples)",
    "activations/embedding": "layer 0's input, saved by its first norm",
    "activations/layer/layernorm": "norm outputs, saved by the next matmul",
    "activations/layer/layernorm/statistics": "{norm} statistics, FP32 per token "
    "(LayerNorm: mean and rstd; RMSNorm: rstd)",
    "activations/layer/layernorm/normalized": "RMSNorm keeps x·rstd for its weight's "
    "gradient (composite nn.RMSNorm)",
    "activations/layer/layernorm/qk_norm": "q/k norms keep their input and statistics",
    "activations/layer/layernorm/qk_norm/normalized": "RMSNorm q/k norms keep x·rstd for "
    "their weights' gradient",
    "activations/layer/attention/linear/q": "Q as the attention matmul keeps it (after RoPE)",
    "activations/layer/attention/linear/k": "K as the attention matmul keeps it{kv}",
    "activations/layer/attention/linear/v": "V as the attention matmul keeps it{kv}",
    "activations/layer/attention/linear/context": "attention context, saved by o_proj",
    "activations/layer/attention/linear/context_copy": "per-head q/k norms leave SDPA's "
    "output head-major: it and its reshaped copy for o_proj are both kept",
    "activations/layer/attention/linear/out": "residual x + attn, saved by the second norm",
    "activations/layer/attention/quadratic/probs": "ONE T×T tensor per layer: the FP32 "
    "softmax output (QKᵀ's backward needs Q and K, not the scores)",
    "activations/layer/attention/quadratic/probs_cast": "the softmax cast back to the "
    "activation dtype, saved by probs·V",
    "activations/layer/attention/logsumexp": "memory-efficient attention: a log-sum-exp "
    "per row instead of the T×T tensors (CUDA's memory-efficient kernel, run for FP32 or "
    "a mask, pads the rows to a multiple of 32)",
    "activations/layer/attention/rope": "RoPE cos/sin tables saved by each rotary multiply",
    "activations/layer/attention/mamba": "Mamba-2 mixer, transformers' torch path (no "
    "mamba-ssm kernels): conv, FP32 scan copies, chunk matrices, gated norm "
    "(introspect.refined.mamba2)",
    "activations/layer/shared_block": "a shared transformer block (Zamba2's hybrid "
    "layers), per use: its norms, q/k/v (and adapters), the attention kernel's own, its "
    "MLP (introspect.refined.shared_block)",
    "activations/embedding/copy": "Zamba2's original_hidden_states clone, kept by every "
    "checkpointed layer's inputs",
    "activations/layer/attention/mamba/scaled_input": "Falcon-H1: in_proj's input "
    "(the norm output times ssm_in_multiplier), a copy beside the attention's "
    "(introspect.refined.falcon_h1)",
    "activations/layer/attention/mamba/gate": "Falcon-H1 without mamba_rms_norm: the scan "
    "output and SiLU(gate), saved by their product (introspect.refined.falcon_h1)",
    "activations/layer/attention/mamba/context": "the parallel mixer's out_proj input, "
    "beside the attention's context (introspect.refined.falcon_h1)",
    "activations/layer/attention/grad": "attention backward transients (gradients of "
    "probs and scores, or of Q/K/V)",
    "activations/layer/feed_forward/gate": "gate projection output, saved by the activation",
    "activations/layer/feed_forward/up": "up projection output, saved by the activation "
    "(plain) or the product (gated)",
    "activations/layer/feed_forward/act": "activation output, saved by down (plain) or the "
    "product (gated)",
    "activations/layer/feed_forward/product": "act·up, saved by the down projection",
    "activations/layer/feed_forward/router": "router logits and softmax",
    "activations/layer/feed_forward/grad": "feed-forward backward transients (gradients "
    "of the activation, up and product)",
    "activations/layer/feed_forward/down": "layer output = next layer's input{ckpt}",
    "activations/final_norm": "final norm output, saved by lm_head (the seed has no final norm)",
    "activations/final_norm/statistics": "final {norm} statistics, FP32 per token",
    "activations/final_norm/normalized": "final RMSNorm keeps x·rstd",
    "activations/embedding/norm": "the norm on the embedding output keeps its input (the "
    "embedding's output) and statistics",
    "activations/head/dense": "the head transform's dense output, saved by its activation",
    "activations/head/act": "the head transform's activation output, saved by its norm",
    "activations/head/norm": "the head transform's norm output, saved by the output projection",
    "activations/head/norm/statistics": "the head transform's {norm} statistics, FP32 per token",
    "activations/head/norm/normalized": "the head transform's RMSNorm keeps x·rstd",
    "activations/head/autocast_weight": "autocast's BF16 copy of the head transform's dense weight",
    "activations/mlx": "MLX: forward tensors its VJPs keep, gradients in flight and what "
    "the ~110 pending dispatches pin, at this moment of the step's one graph, counted per "
    "layer from the graph (introspect.refined.mlx)",
    "activations/mlx/logits": "MLX: the B·T·V logits, their soft-max and gradients alive "
    "at this moment (counted from the graph: introspect.refined.mlx)",
    "activations/mlx/attention": "MLX: the T×T probabilities and causal masks the CPU "
    "attention's VJP keeps, and their gradients (introspect.refined.mlx)",
    "activations/mlx/feed_forward": "MLX: B·T·f feed-forward tensors kept or in flight "
    "(introspect.refined.mlx)",
    "activations/mlx/hidden": "MLX: B·T·d-sized tensors kept, in flight or pinned by "
    "pending tasks (norm fallbacks, rotary halves, residuals: introspect.refined.mlx)",
    "activations/mlx/hidden/dora_unscaled": "MLX DoRA: each adapted linear's B·T·d_out "
    "output before the magnitude's multiply, kept for m's gradient (mlx_lm/tuner/dora.py; "
    "introspect.refined.mlx_dora)",
    "activations/mlx/hidden/lora_dropout_mask": "MLX: each adapter's dropout mask, cast "
    "to the activations' dtype by the multiply, kept for the input's gradient (nn.Dropout; "
    "introspect.refined.mlx_dora)",
    "activations/mlx/hidden/lora_dropout_copies": "MLX: each adapter's own FP32 dropped copy "
    "of its input, kept for lora_a's gradient, less the shared inputs (or their copies) "
    "no longer kept (introspect.refined.mlx_dora)",
    "grads/mlx/dora_magnitude": "MLX DoRA: the magnitudes' FP32 gradient (d_out per "
    "adapted linear)",
    "grads/mlx/accumulated": "MLX: the previous micro-batches' summed gradient tree, an "
    "input of this micro-batch's graph until each is added (mlx_lm/tuner/trainer.py "
    "grad_accumulation_steps; introspect.refined.mlx_dora)",
    "weights/dora_magnitude": "MLX DoRA: m, one FP32 magnitude per output row of each "
    "adapted linear (DoRALinear.set_linear)",
    "grads/mlx/weight_sized": "MLX: weight-sized gradients, Adam temporaries and new "
    "weights/moments alive beside the old ones (negative: old ones already released)",
    "activations/logits/log_softmax": "FP32 log-softmax over B·T·V, saved by the loss",
    "activations/logits/output": "{logits_holder}",
    "grads/last_bf16": "the last parameter's BF16 gradient, freed once its FP32 master "
    "gradient exists (the copy runs in parameter order)",
    "activations/logits/upcast": "FP32 copy of the 16-bit logits the log-softmax reads "
    "(logits.float() in ForCausalLMLoss, or autocast's cast); saved by nothing",
    "activations/autocast_cache": "autocast's cached BF16 copies of every block's weights "
    "that require grad (under LoRA the adapters only), freed when the autocast region "
    "exits (with checkpointing nothing saves them)",
    "activations/logits/grad": "gradient of the log-probabilities and of the logits (FP32)",
    "activations/layer/layernorm/input": "the norm's FP32 copy of its input (RMSNorm's "
    "upcast; OLMo2's post-norms; with checkpointing, remade for the recomputed layer)",
    "activations/attention_mask": "eager's (B, 1, T, T) additive causal masks, one per layer "
    "type, kept by every checkpointed layer of that type as one of its inputs",
    "activations/layer/attention/kv_store": "Gemma 4's shared_kv_states: each layer type's "
    "topmost layer's K and V, and once that layer is recomputed the recomputed graph under "
    "them (its K/V paths' saved tensors), to the end of backward",
    "activations/layer/attention/probs_v_grad": "inside eager attention's probs·V "
    "backward: o_proj's input gradient, the probabilities' and V's gradients, the stream's",
    "activations/per_layer_inputs/grad/slice": "Gemma 4: the layer's own slice of the "
    "per-layer inputs' gradient, before its select_backward runs",
    "activations/positions": "rotary cos/sin, made once per forward and shared by every layer",
    "activations/embedding/dropout_mask": "embedding dropout's mask (CPU: the input's dtype; "
    "CUDA: one byte)",
    "activations/embedding/grad": "gradient of layer 0's input, read by the embedding's backward",
    "activations/layer/autocast_weights": "autocast's BF16 copies of each linear weight, kept "
    "by the matmuls",
    "activations/logits/autocast_weight": "autocast's BF16 copy of the lm_head weight",
    "activations/logits/labels": "the shifted labels (int64), kept by the NLL",
    "activations/layer/attention/quadratic/dropout_mask": "attention dropout's T×T mask "
    "(CPU: the input's dtype; CUDA: one byte)",
    "activations/layer/attention/quadratic/dropped": "the dropped probabilities, saved by probs·V",
    "activations/layer/attention/dropout_mask": "residual dropout's mask after the attention",
    "activations/layer/feed_forward/dropout_mask": "residual dropout's mask after the feed-forward",
    "activations/layer/feed_forward/act_intermediates": "the activation's own elementwise "
    "intermediates ({act}: transformers/activations.py)",
    "activations/final_norm/input": "with checkpointing, the final norm's own copy of the last "
    "layer's output",
    "grads/embedding_sum": "tied embedding: lm_head's and the embedding's V·d gradients and "
    "their out-of-place sum, alive at once",
    "activations/logits/logsumexp": "{ce} cross-entropy: one log-sum-exp per token, never "
    "all logits",
    "grads/accumulating": "--grad-accum: a gradient made and not yet added into the .grad the "
    "earlier micro-batches made (lm_head's; tied, waiting for the embedding's)",
    "activations/logits/previous_micro_batch": "--grad-accum: the loop's variable still holds "
    "the previous micro-batch's logits until the new loss returns",
    "activations/offload/unpacked_weight": "--offload-activations: lm_head's saved weight, "
    "unpacked back from the host for its backward",
    "activations/layer/attention/forward": "--offload-activations: the attention forward's "
    "T×T tensors beside one layer's saved set, before they are packed to the host",
}


def causes(spec: ModelSpec, setup: TrainingSetup, terms: dict[str, int]) -> dict[str, str]:
    """A cause for every term of ``terms`` (from :data:`CAUSES`, filled in for this
    setup)."""
    kv = ""
    if spec.group_size > 1:
        kv = (
            f": repeated to all {spec.num_attention_heads} heads (eager)"
            if saved.keeps_t2_for(spec, setup)
            else f": {spec.kv_heads} heads (GQA kept by the kernel)"
        )
    fill = {
        "wb": working_weight_bytes(setup),
        "phase_grads": "none before backward" if terms.get("grads", 0) == 0 else "allocated",
        "framework": setup.framework,
        "optimizer_impl": setup.resolved_optimizer_impl.replace("_", "-"),
        "optimizer": setup.optimizer,
        "norm": spec.norm,
        "kv": kv,
        "ckpt": "; with checkpointing, the only per-layer tensor kept"
        if setup.activation_checkpointing
        else "",
        "ce": setup.cross_entropy,
        "logits_holder": "the logits the training loop holds until the step ends"
        if setup.loop == "logits"
        else "the logits in the model's output object, alive until the loss returns",
        "act": spec.hidden_act,
    }
    if setup.grad_accum > 1 and terms.get("grads", 0):
        fill["phase_grads"] = "allocated; from the second micro-batch on, all of them"
    from introspect.refined import deepspeed

    if deepspeed.stage3_applies(setup):
        fill["phase_grads"] = (
            "DeepSpeed ZeRO-3's contiguous partition, grad_partitions_flat_buffer: "
            "allocated with the optimizer, held at every moment"
        )
    from introspect.refined import lora

    fill["quant"] = setup.resolved_base_quant
    fill["adapter_dtype"] = (
        "BF16 (--adapter-dtype bf16)" if setup.adapter_dtype == "bf16" else "FP32"
    )
    table = {**CAUSES, **lora.CAUSES} if setup.finetune != "full" else CAUSES
    out: dict[str, str] = {}
    for name in terms:
        key = name
        while key and key not in table:
            key = key.rpartition("/")[0]
        if key:
            out[name] = table[key].format(**fill)
    sharded = sharding.causes(spec, setup, working_weight_bytes(setup))
    out.update({k: v for k, v in sharded.items() if k in terms})
    from introspect.refined.affine import affine_bits

    if "weights" in terms and _mlx(setup) and affine_bits(setup):
        out["weights"] = (
            f"the frozen base as mx.quantize affine {affine_bits(setup)}-bit, groups of "
            f"{setup.group_size}: packed uint32 and a scale and bias per group (linears "
            "and embedding; norms and biases at the working dtype)"
        )
    if setup.framework in ("mlx", "mlx_compiled") and setup.resolved_device == "metal":
        for name in out:
            if "/mlx/" in name:
                # The counts are the CPU evaluator's graph (introspect/refined/mlx.py).
                out[name] += "; counted from MLX's CPU graph: on Metal the fused kernels "
                out[name] += "(rms_norm, rope, attention) keep less — unverified"
    return out


def tracker_phase(phase: str | None, framework: str = "torch") -> str | None:
    """The phase a measured step's tracker names for an execution moment.

    torch's live-storage tracker (``introspect/measure/live_tracker.py``) says forward
    until ``loss.backward()``, backward while autograd's engine runs (so the loss's own
    backward, our ``forward_end`` moment, is backward) and optimizer inside
    ``optimizer.step()``. MLX evaluates forward and backward as one graph, so its step
    (``introspect/measure/mlx_step.py``) tells only forward/backward from optimizer."""
    if phase is None:
        return None
    if framework in ("mlx", "mlx_compiled"):
        return "optimizer" if phase == "optimizer_step" else "forward/backward"
    named = {"forward_end": "backward", "optimizer_step": "optimizer", "master_grads": "optimizer"}
    return named.get(phase, phase)


#: How far MLX's update must raise the peak above the gradients' for the measured step to
#: call its peak the optimizer's (``introspect/measure/mlx_step.py``'s ``PHASE_MARGIN``).
MLX_PHASE_MARGIN = 0.01


def tracker_phase_of(meta: dict, framework: str = "torch") -> str | None:
    """:func:`tracker_phase` of an estimate's peak, by the measured step's own rule: MLX
    names the optimizer only where the update's moment exceeds every other by more than
    :data:`MLX_PHASE_MARGIN`."""
    phase, phases = meta.get("peak_phase"), meta.get("phases") or {}
    if framework in ("mlx", "mlx_compiled") and "optimizer_step" in phases:
        rest = max((v for k, v in phases.items() if k != "optimizer_step"), default=0)
        lifted = phases["optimizer_step"] > rest * (1 + MLX_PHASE_MARGIN)
        return "optimizer" if lifted else "forward/backward"
    return tracker_phase(phase, framework)


#: The tracker's categories (``introspect.measure.tracker.categories_at_peak``), in order.
TRACKER_CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "temporary")


def tracker_category(term: str) -> str:
    """The category of the live-storage tracker that an execution term's bytes fall in:
    tensors made in forward are activations; those made in backward or in the update
    before they become a gradient (the loss's and the layers' gradients in flight, the
    tied embedding's sum, the update's temporaries) are temporary."""
    if term == "weights" or term.startswith("weights/"):
        return "parameters"
    if term == "grads/last_bf16":  # a parameter's own gradient, not yet freed
        return "gradients"
    if term == "optimizer/temporaries" or term.startswith("grads/"):
        return "temporary"
    if term.startswith("optimizer/"):
        return "optimizer_state"
    if term == "grads":
        return "gradients"
    if term.endswith("/grad") or term.startswith("activations/mlx_"):
        return "temporary"
    return "activations"


def census_term(term: str) -> str:
    """The saved-tensor census's name (``introspect.measure.census.term_for``) for a saved
    execution term, so a profile reads beside ``measure``'s census."""
    if not term.startswith("activations/"):
        return term
    rest = term[len("activations/") :]
    if rest.startswith("layer/layernorm"):
        return "activations/layer/layernorm" + ("/stats" if "statistics" in rest else "")
    if rest in ("layer/attention/linear/out", "layer/feed_forward/down"):
        return "activations/layer/residual"
    if rest.startswith("layer/attention/quadratic/"):
        sub = "probabilities" if rest.endswith("/probs") else "other"
        return f"activations/layer/attention/quadratic/{sub}"
    if rest.startswith("layer/attention"):
        return "activations/layer/attention/linear"
    if rest.startswith("layer/feed_forward"):
        return "activations/layer/feed_forward"
    if rest.startswith("layer/"):
        return "activations/layer/" + rest.split("/")[1]
    if rest.startswith("final_norm") or rest.startswith("head/norm"):
        return "activations/final_norm"
    if rest.startswith("head/"):
        return "activations/logits"
    if rest.startswith("logits/") and not rest.endswith("/grad"):
        return "activations/logits"
    if rest.startswith("embedding") and not rest.endswith("/grad"):
        return "activations/embedding"
    return term


def _mlx(setup: TrainingSetup) -> bool:
    return setup.framework in ("mlx", "mlx_compiled")
