"""torchtune's recipe YAML (torchtune at bd2a0fc, ``recipes/configs/`` and the recipes
that read them, ``recipes/*.py``). The model is ``model._component_`` — a builder such as
``torchtune.models.llama3_2.lora_llama3_2_1b`` — mapped to the Hub id of the same shapes
(:func:`hub_id`); LoRA's ``lora_rank`` / ``lora_dropout`` / ``lora_attn_modules`` /
``apply_lora_to_mlp`` sit beside it (``qlora_`` builders: an NF4 base). ``dtype: bf16`` is
pure BF16 (weights, grads and optimizer state: ``training.get_dtype`` then
``model.to(dtype)``); ``enable_activation_checkpointing``, ``enable_activation_offloading``,
``optimizer_in_bwd``, ``loss._component_`` (``CEWithChunkedOutputLoss`` → torchtune's
chunked loss), ``batch_size`` and ``tokenizer.max_seq_len``."""

from __future__ import annotations

import re

from introspect.adapters.trainers._base import Keys, Resolved, Value, accumulation

TORCHTUNE = "torchtune bd2a0fc"

#: Top-level keys the recipes read (``cfg.<key>`` / ``cfg.get("<key>")`` in recipes/*.py)
#: or the configs carry, that do not bear on one step's memory or are read below.
KNOWN = frozenset(
    "output_dir tokenizer checkpointer resume_from_checkpoint save_adapter_weights_only "
    "dataset seed shuffle batch_size optimizer lr_scheduler loss epochs max_steps_per_epoch "
    "gradient_accumulation_steps clip_grad_norm compile metric_logger log_every_n_steps "
    "log_peak_memory_stats log_level device dtype enable_activation_checkpointing "
    "enable_activation_offloading profiler optimizer_in_bwd run_val_every_n_steps dataset_val "
    "batch_size_val collate_fn low_cpu_ram custom_sharded_layers fsdp_cpu_offload "
    "fsdp_reshard_after_forward tensor_parallel_dim tensor_parallel_plan "
    "data_parallel_shard_dim data_parallel_replicate_dim context_parallel_dim model "
    "quantizer save_every_n_epochs save_every_n_steps cudnn_deterministic_mode "
    "enable_async_checkpointing enable_expandable_segments resize_token_embeddings "
    "include_path ac_mode ac_option dataloader datasets use_distributed_state_dict "
    "profile_memory name base_model_path".split()
)
#: Memory-relevant keys not modelled, with their neutral value.
NOT_MODELLED = {
    "compile": False,
    "clip_grad_norm": None,
    "fsdp_cpu_offload": False,
    "tensor_parallel_dim": 1,
    "context_parallel_dim": 1,
    "custom_sharded_layers": None,
    "ac_mode": None,
    "ac_option": None,
    "enable_fp8_training": False,
    "quantizer": None,
    "early_exit_loss": None,
    "layer_dropout": None,
}
#: torchtune builder family and size → the Hub id of the same shapes (base weights;
#: an ``_instruct`` builder has the same shapes).
HUB = {
    ("llama3_2", "1b"): "meta-llama/Llama-3.2-1B",
    ("llama3_2", "3b"): "meta-llama/Llama-3.2-3B",
    ("llama3_1", "8b"): "meta-llama/Llama-3.1-8B",
    ("llama3_1", "70b"): "meta-llama/Llama-3.1-70B",
    ("llama3_1", "405b"): "meta-llama/Llama-3.1-405B",
    ("llama3", "8b"): "meta-llama/Meta-Llama-3-8B",
    ("llama3", "70b"): "meta-llama/Meta-Llama-3-70B",
    ("llama2", "7b"): "meta-llama/Llama-2-7b-hf",
    ("llama2", "13b"): "meta-llama/Llama-2-13b-hf",
    ("llama2", "70b"): "meta-llama/Llama-2-70b-hf",
    ("qwen2_5", "0_5b"): "Qwen/Qwen2.5-0.5B",
    ("qwen2_5", "1_5b"): "Qwen/Qwen2.5-1.5B",
    ("qwen2_5", "3b"): "Qwen/Qwen2.5-3B",
    ("qwen2_5", "7b"): "Qwen/Qwen2.5-7B",
    ("qwen2_5", "14b"): "Qwen/Qwen2.5-14B",
    ("qwen2_5", "32b"): "Qwen/Qwen2.5-32B",
    ("qwen2_5", "72b"): "Qwen/Qwen2.5-72B",
    ("qwen3", "0_6b"): "Qwen/Qwen3-0.6B",
    ("qwen3", "1_7b"): "Qwen/Qwen3-1.7B",
    ("qwen3", "4b"): "Qwen/Qwen3-4B",
    ("qwen3", "8b"): "Qwen/Qwen3-8B",
    ("qwen3", "14b"): "Qwen/Qwen3-14B",
    ("qwen3", "32b"): "Qwen/Qwen3-32B",
    ("gemma", "2b"): "google/gemma-2b",
    ("gemma", "7b"): "google/gemma-7b",
    ("mistral", "7b"): "mistralai/Mistral-7B-v0.1",
}
_BUILDER = re.compile(r"^torchtune\.models\.(\w+)\.(lora_|qlora_)?(\w+)$")
_SIZE = re.compile(r"^(\d+(?:_\d+)?b)(?:_\w+)?$")
#: ``optimizer._component_`` → (optimizer, implementation or None for the ``fused`` key).
OPTIMIZERS = {
    "torch.optim.AdamW": "adamw",
    "torch.optim.Adam": "adam",
    "torch.optim.SGD": "sgd",
    "bitsandbytes.optim.PagedAdamW8bit": "adam8bit",
    "bitsandbytes.optim.AdamW8bit": "adam8bit",
    "bitsandbytes.optim.PagedAdamW": "adamw",
    "torchao.optim.AdamW8bit": "adam8bit",
    "torchao.prototype.low_bit_optim.AdamW8bit": "adam8bit",
}


def looks_like(data: dict) -> bool:
    model = data.get("model")
    return isinstance(model, dict) and "_component_" in model


def hub_id(component: str) -> tuple[str, bool] | None:
    """(Hub id, qlora) for a torchtune model builder path, or None."""
    m = _BUILDER.match(component)
    if not m or not m.group(3).startswith(m.group(1) + "_"):
        return None
    size = _SIZE.match(m.group(3)[len(m.group(1)) + 1 :])
    if not size or (m.group(1), size.group(1)) not in HUB:
        return None
    return HUB[(m.group(1), size.group(1))], m.group(2) == "qlora_"


def read(keys: Keys, resolved: Resolved) -> None:
    model = keys.get("model", (dict,))
    mk = Keys(keys.path, model, "a torchtune model builder", "model.")
    component = mk.get("_component_", (str,))
    found = hub_id(component or "")
    if found is None:
        raise mk.error(
            "_component_",
            f"is {component!r}, a builder introspect has no Hub id for",
            "give the model as SOURCE (a Hub id or config.json)",
        )
    resolved.model = Value(found[0], mk.origin("_component_") + f" = {component.rsplit('.', 1)[1]}")
    lora = ".lora_" in component or ".qlora_" in component
    resolved.set(
        "finetune", "qlora" if found[1] else "lora" if lora else "full", mk.origin("_component_")
    )
    if lora:
        _lora(mk, resolved)
    mk.taken.update(mk.data)
    batch = keys.positive("batch_size")
    if batch is None:
        raise keys.error("batch_size", "is missing", "torchtune's recipes need it; set batch_size")
    resolved.set("batch_size", batch, keys.origin("batch_size"))
    tok = keys.get("tokenizer", (dict,), {})
    seq = Keys(keys.path, tok, "a torchtune tokenizer", "tokenizer.").positive("max_seq_len")
    if isinstance(seq, int) and not isinstance(seq, bool) and seq > 0:
        resolved.set("seq_len", seq, keys.origin("tokenizer.max_seq_len"))
    else:
        resolved.note(
            "`tokenizer.max_seq_len: null` — no truncation: T is "
            "introspect's default unless --seq says"
        )
    dtype = keys.get("dtype", (str,), "fp32")
    if dtype not in ("bf16", "fp32", "fp16"):
        raise keys.error("dtype", f"is {dtype!r}, not bf16 or fp32", "torchtune refuses it")
    if dtype == "fp16":
        raise keys.error("dtype", "is fp16, which torchtune's recipes refuse", "use bf16 or fp32")
    resolved.set(
        "precision",
        "bf16" if dtype == "bf16" else "fp32",
        keys.origin("dtype") if keys.has("dtype") else f"{TORCHTUNE} default fp32",
    )
    lora = resolved.fields["finetune"].value != "full"
    if lora and dtype == "bf16":
        # torchtune builds the adapters in the model's dtype (model.to(dtype)): BF16
        where = keys.origin("dtype") + " (adapters in the model dtype)"
        resolved.set("adapter_dtype", "bf16", where)
    ckpt = keys.get("enable_activation_checkpointing", (bool,), False)
    resolved.set("activation_checkpointing", ckpt, keys.origin("enable_activation_checkpointing"))
    offload = keys.get("enable_activation_offloading", (bool,), False)
    resolved.set("offload_activations", offload, keys.origin("enable_activation_offloading"))
    in_bwd = keys.get("optimizer_in_bwd", (bool,), False)
    resolved.set(
        "optimizer_in_backward",
        in_bwd,
        keys.origin("optimizer_in_bwd")
        if keys.has("optimizer_in_bwd")
        else f"{TORCHTUNE} default (off)",
    )
    accumulation(keys, resolved)
    _optimizer(keys, resolved)
    _loss(keys, resolved)
    device = keys.get("device", (str,), "cuda")
    if device == "cpu":
        resolved.set("device", "cpu", keys.origin("device"))
    resolved.set(
        "implementation", "reference", f"{TORCHTUNE}: its own model (not transformers' class)"
    )
    resolved.set(
        "attention",
        "memory_efficient",
        f"{TORCHTUNE}: scaled_dot_product_attention (torchtune/modules/attention.py:140)",
    )
    resolved.note(
        "torchtune's own model class is priced with introspect's reference model (the same blocks)"
    )
    if keys.get("fsdp_reshard_after_forward", (bool,)) is False:
        resolved.set("reshard_after_forward", False, keys.origin("fsdp_reshard_after_forward"))
    for key, neutral in NOT_MODELLED.items():
        keys.not_modelled(resolved, key, unless=neutral)
    keys.finish(KNOWN, resolved)


def _lora(mk: Keys, resolved: Resolved) -> None:
    rank = mk.positive("lora_rank")
    if rank:
        resolved.set("lora_rank", rank, mk.origin("lora_rank"))
    dropout = mk.get("lora_dropout", (float,))
    if dropout is not None:
        resolved.set("lora_dropout", float(dropout), mk.origin("lora_dropout"))
    attn = mk.get("lora_attn_modules", (list,), [])
    mlp = mk.get("apply_lora_to_mlp", (bool,), False)
    from introspect.adapters.trainers.common import lora_targets

    names = list(attn) + (["gate_proj", "up_proj", "down_proj"] if mlp else [])
    if names:
        targets, other = lora_targets(mk, "lora_attn_modules", names)
        resolved.set(
            "lora_targets",
            targets,
            mk.origin("lora_attn_modules") + (" + apply_lora_to_mlp" if mlp else ""),
        )
        if other:
            resolved.note(f"`model.lora_attn_modules: {', '.join(other)}` — not modelled")
    if mk.get("apply_lora_to_output", (bool,), False):
        resolved.note("`model.apply_lora_to_output: true` — the head's adapter not modelled")


def _optimizer(keys: Keys, resolved: Resolved) -> None:
    opt = keys.get("optimizer", (dict,), {})
    sub = Keys(keys.path, opt, "a torchtune optimizer", "optimizer.")
    component = sub.get("_component_", (str,), "torch.optim.AdamW")
    if component not in OPTIMIZERS:
        resolved.refuse(
            "optimizer",
            f"--config {keys.shown}: optimizer._component_ {component!r} has no "
            "state model in the closed form; give --optimizer",
        )
        return
    name = OPTIMIZERS[component]
    from introspect.setup import OPTIMIZERS as MODELLED

    paged = {"bitsandbytes.optim.PagedAdamW8bit": "paged_adamw_8bit"}
    paged["bitsandbytes.optim.PagedAdamW"] = "paged_adamw_32bit"
    if paged.get(component) in MODELLED:  # bitsandbytes' paged state, as its own term
        name = paged[component]
    if name == "sgd" and sub.get("momentum", (float,)):
        name = "sgd_momentum"
    resolved.set("optimizer", name, keys.origin("optimizer._component_"))
    if sub.get("fused", (bool,)):
        resolved.set("optimizer_impl", "fused", keys.origin("optimizer.fused"))
    elif sub.get("foreach", (bool,)):
        resolved.set("optimizer_impl", "foreach", keys.origin("optimizer.foreach"))
    if "Paged" in component and not name.startswith("paged_"):
        resolved.note(f"`optimizer._component_: {component}` — paged state not modelled yet")


def _loss(keys: Keys, resolved: Resolved) -> None:
    loss = keys.get("loss", (dict,), {})
    sub = Keys(keys.path, loss, "a torchtune loss", "loss.")
    component = sub.get("_component_", (str,), "torch.nn.CrossEntropyLoss")
    if component.endswith("CEWithChunkedOutputLoss"):
        resolved.set("cross_entropy", "torchtune", keys.origin("loss._component_"))
    elif component.endswith("LinearCrossEntropyLoss"):
        resolved.set("cross_entropy", "fused", keys.origin("loss._component_"))
        resolved.note(
            "`loss: LinearCrossEntropyLoss` — torchtune's chunked "
            "linear loss priced as the generic fused one"
        )
    elif component.endswith("CrossEntropyLoss"):
        resolved.set("cross_entropy", "standard", keys.origin("loss._component_"))
    else:
        resolved.refuse(
            "cross_entropy",
            f"--config {keys.shown}: loss._component_ {component!r} "
            "is not modelled; give --cross-entropy",
        )
