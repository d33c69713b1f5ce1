"""Measured training steps of small MoE, sliding-window and MLA configs built by
transformers itself, beside the seed's and the refined estimate for the same setup.

    .venv/bin/python benchmarks/moe_window.py

Each row: one config (transformers' own class from ``AutoConfig.for_model``, FP32, CPU),
one warmed-up Adam step measured by ``introspect.measure`` (live tensor storages), and
``introspect.refined.estimate`` for the spec our config reader derives. No figures are
asserted; the printed table is the evidence.
"""

from __future__ import annotations

import sys

BASE = dict(
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    vocab_size=4096,
    intermediate_size=512,
)
CONFIGS = {
    "qwen3_moe (8 experts, top-2)": dict(
        model_type="qwen3_moe",
        **BASE,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
    ),
    "qwen2_moe (shared expert)": dict(
        model_type="qwen2_moe",
        **BASE,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=256,
    ),
    "mistral (window 128)": dict(model_type="mistral", **BASE, sliding_window=128),
    "gpt_oss (window 128, sinks, MoE)": dict(
        model_type="gpt_oss",
        **BASE,
        head_dim=32,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=128,
    ),
    "deepseek_v3 (MLA, MoE)": dict(
        model_type="deepseek_v3",
        **{**BASE, "num_key_value_heads": 8},
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        q_lora_rank=128,
        kv_lora_rank=64,
        qk_rope_head_dim=16,
        qk_nope_head_dim=32,
        v_head_dim=32,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
    ),
}


def main() -> int:
    import torch
    import transformers
    from introspect.adapters.hf_config import spec_from_config

    from introspect import refined, simplified
    from introspect.measure.torch_step import hf_forward, measure_step
    from introspect.setup import TrainingSetup

    transformers.utils.logging.set_verbosity_error()
    rows = []
    only = sys.argv[1:]
    for name, config in CONFIGS.items():
        if only and not any(o in name for o in only):
            continue
        impls = [("eager", "eager"), ("memory_efficient", "sdpa")]
        if config["model_type"] == "gpt_oss":  # transformers: no SDPA path (sinks)
            impls = impls[:1]
        for attention, impl in impls:
            for T in (256, 1024):
                setup = TrainingSetup(
                    batch_size=1, seq_len=T, attention=attention, framework="torch", device="cpu"
                )
                keys = {k: v for k, v in config.items() if k != "model_type"}
                cfg = transformers.AutoConfig.for_model(
                    config["model_type"], **keys, attn_implementation=impl
                )
                torch.manual_seed(0)
                model = transformers.AutoModelForCausalLM.from_config(cfg)
                m = measure_step(
                    model,
                    setup,
                    vocab=config["vocab_size"],
                    forward=hf_forward,
                    implementation="transformers",
                    loop=setup.loop,  # the estimate's: labels, transformers' users' loop
                )
                spec = spec_from_config(config)
                est = refined.estimate(spec, setup)
                seed = simplified.estimate(spec, setup).total
                rows.append(
                    (name, impl, T, m.peak_bytes, est.total, seed, m.peak_phase, est.peak_phase)
                )
                print(
                    f"{name:34s} {impl:5s} T={T:5d}  measured {m.peak_bytes / 1e6:8.1f} MB "
                    f"({m.peak_phase})  refined {est.total / 1e6:8.1f} MB ({est.peak_phase}) "
                    f"{est.total / m.peak_bytes - 1:+6.1%}  seed {seed / 1e6:8.1f} MB "
                    f"{seed / m.peak_bytes - 1:+6.1%}",
                    flush=True,
                )
                del model
    return 0


if __name__ == "__main__":
    sys.exit(main())
