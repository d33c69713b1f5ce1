"""LoRA and QLoRA: the refined terms against peft models and real peft steps (torch CPU),
and NF4 storage against bitsandbytes' own quantization."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from introspect import refined  # noqa: E402
from introspect.errors import IntrospectError  # noqa: E402
from introspect.params import parameters_by_component  # noqa: E402
from introspect.refined import lora  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402
from introspect.spec import ModelSpec  # noqa: E402

LLAMA = ModelSpec(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=256,
    vocab_size=1024,
    norm="rmsnorm",
    norm_bias=False,
    ffn="gated",
    hidden_act="silu",
    model_type="llama",
)
LLAMA = LLAMA.replace(num_parameters=sum(parameters_by_component(LLAMA).values()))

T = 256


def setup(**kw) -> TrainingSetup:
    kw.setdefault("attention", "memory_efficient")
    return TrainingSetup(seq_len=T, device="cpu", lora_rank=8, finetune="lora", **kw)


@pytest.mark.parametrize(
    "targets, rank",
    [(("q_proj", "v_proj"), 8), (("all-linear",), 4), (("o_proj", "down_proj"), 16)],
)
def test_trainable_parameters_match_peft(targets, rank):
    from introspect.measure import peft_step

    s = setup(lora_targets=targets).replace(lora_rank=rank)
    model = peft_step.build(LLAMA, s)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora.trainable_parameters(LLAMA, s) == trainable


#: Small configs of families whose blocks differ from Llama's: fused projections (Phi-3's
#: qkv_proj and gate_up_proj, GPT-2's Conv1D c_attn) and a plain biased feed-forward
#: under other names (StarCoder2's c_fc and c_proj).
FAMILY_CONFIGS = {
    "phi3": {"model_type": "phi3", "pad_token_id": 0},
    "gpt2": {"model_type": "gpt2", "n_embd": 128, "n_layer": 2, "n_head": 4},
    "starcoder2": {"model_type": "starcoder2", "use_bias": True, "norm_epsilon": 1e-5},
}
SMALL = dict(
    hidden_size=128, num_hidden_layers=2, intermediate_size=352, num_attention_heads=4,
    num_key_value_heads=2, vocab_size=1000,
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_peft_all_linear_on_other_blocks(family):
    """peft's own all-linear on transformers' class, as ``measure --lora-rank`` runs it:
    the adapters the estimate counts are the ones peft made (one per fused projection),
    and the peak of the real step is the estimate's within 1%."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models

    raw = FAMILY_CONFIGS[family]
    raw = raw if family == "gpt2" else {**SMALL, **raw}
    spec = spec_from_config(raw)
    s = TrainingSetup(
        seq_len=128, device="cpu", lora_rank=4, finetune="lora",
        implementation="transformers", loop="labels",
    )  # fmt: skip
    m, _ = hf_models.measure(raw, family, spec, s, device="cpu", census=False)
    assert m.implementation == "transformers+peft"
    assert m.trainable_params == lora.adapter_parameters(spec, s)
    assert refined.estimate(spec, s).total == pytest.approx(m.peak_bytes, rel=0.01)


#: Small MoE configs (transformers 5's fused experts): peft's all-linear converts the
#: experts and router of Qwen3-MoE and Mixtral into parameter adapters, and keeps its
#: plain meaning on Qwen2-MoE (shared expert adapted, experts frozen).
MOE_CONFIGS = {
    "qwen3_moe": {"model_type": "qwen3_moe", "head_dim": 32, "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 64},
    "mixtral": {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 96, "shared_expert_intermediate_size": 128},
    # A shared expert whose backward outgrows the routed experts', MoE on layer 2 only.
    "qwen2_moe_mixed": {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
                        "moe_intermediate_size": 64, "shared_expert_intermediate_size": 1408,
                        "decoder_sparse_step": 2},
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    "family,precision", [("qwen3_moe", "fp32"), ("mixtral", "fp32"), ("qwen2_moe", "fp32"),
                         ("qwen3_moe", "bf16"), ("qwen2_moe_mixed", "fp32")],
)  # fmt: skip
def test_peft_on_transformers_experts(family, precision):
    """LoRA on transformers 5's MoE classes as peft makes it (introspect.refined.lora_moe):
    the adapters peft made, exactly, and the real step's peak within 2% — the experts'
    parametrized copies included where peft adapts the experts."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models
    from introspect.refined import lora_moe

    raw = {**SMALL, **MOE_CONFIGS[family]}
    spec = spec_from_config(raw)
    dtypes = {} if precision == "fp32" else dict(weights_dtype="bf16", activation_dtype="bf16")
    s = TrainingSetup(
        seq_len=64, batch_size=2, device="cpu", lora_rank=4, finetune="lora",
        implementation="transformers", loop="labels", precision=precision, **dtypes,
    )  # fmt: skip
    m, _ = hf_models.measure(raw, family, spec, s, device="cpu", census=False)
    assert m.trainable_params == lora.adapter_parameters(spec, s)
    est = refined.estimate(spec, s)  # (the mixed stack: inside its shared expert's backward)
    assert est.total == pytest.approx(m.peak_bytes, rel=0.02)
    copies = est.execution.sum("activations/layer/lora/experts")
    assert (copies > 0) == (family in lora_moe.CONVERTED)


def test_qlora_keeps_transformers_experts_at_the_working_dtype():
    """bitsandbytes replaces nn.Linear only: transformers 5's expert parameters stay BF16
    under QLoRA, so the base's NF4 part is the attention and what else is a linear."""
    from introspect.adapters.hf_config import spec_from_config

    spec = spec_from_config({**SMALL, **MOE_CONFIGS["qwen3_moe"]})
    s = TrainingSetup(seq_len=64, finetune="qlora", precision="bf16", device="cpu")
    experts = 2 * 8 * 3 * 128 * 64  # L · E · 3 · d · f
    assert lora.block_linear_parameters(spec, s) == (lora.block_linear_parameters(spec) - experts)
    # mlx-lm's SwitchLinear experts are quantizable (MLX's 4-bit base is --base-quant
    # affine4: NF4 QLoRA is refused under --framework mlx)
    mlx = s.replace(framework="mlx", finetune="lora", base_quant="affine4")
    assert lora.block_linear_parameters(spec, mlx) == lora.block_linear_parameters(spec)


@pytest.mark.parametrize("double_quant", [False, True])
def test_nf4_storage_is_bitsandbytes(double_quant):
    bnb = pytest.importorskip("bitsandbytes.functional")
    w = torch.randn(256, 384, dtype=torch.bfloat16)
    packed, state = bnb.quantize_4bit(
        w, blocksize=64, compress_statistics=double_quant, quant_type="nf4"
    )
    tensors = [packed, state.absmax, state.code]
    if double_quant:
        tensors += [state.offset, state.state2.absmax, state.state2.code]
    stored = sum(t.numel() * t.element_size() for t in tensors)
    assert lora.nf4_tensor_bytes(w.numel(), double_quant) == stored


@pytest.mark.slow
@pytest.mark.parametrize(
    "kw",
    [
        dict(lora_targets=("q_proj", "v_proj")),
        dict(),
        dict(lora_dropout=0.1),
        dict(train_embeddings=True),
        dict(attention="eager"),
    ],
    ids=["qv", "all-linear", "dropout", "emb", "eager"],
)
def test_lora_step_peak(kw):
    """Real peft steps (FP32, CPU, the loss inside the model): the refined estimate for
    transformers' Llama within 1% of the measured peak; and below the same step's full
    fine-tune."""
    from introspect.measure import peft_step

    s = setup(**kw)
    measured = peft_step.measure(LLAMA, s).peak_bytes
    estimate = refined.estimate(LLAMA, s).total
    assert abs(estimate - measured) / measured < 0.01
    full = s.replace(finetune="full", lora_dropout=0.0, train_embeddings=False)
    assert estimate < refined.estimate(LLAMA, full).total


def test_checkpointed_amp_lora_caches_only_the_adapters():
    """transformers' Llama with peft, under autocast with checkpointing at B=1, T=64, the
    loss inside the model (a real CPU step): autocast caches BF16 copies of the trainable
    adapters only (the frozen base weights are cast anew at each use), so no copy of the
    base is held at the forward's end; the refined estimate within 2% of the peak (it
    held every block weight's copy before: 0.93 of the real step)."""
    from introspect.adapters.hf_config import spec_from_config

    from introspect.measure import hf_models

    raw = dict(
        model_type="llama", hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=352, vocab_size=2048,
        max_position_embeddings=256,
    )  # fmt: skip
    spec = spec_from_config(raw, source="llama")
    s = TrainingSetup(
        batch_size=1, seq_len=64, device="cpu", finetune="lora", lora_rank=8,
        precision="amp", activation_checkpointing=True, optimizer="sgd",
        implementation="transformers", loop="labels", attention="memory_efficient",
    )  # fmt: skip
    measured = hf_models.measure(raw, "llama", spec, s, device="cpu", census=False)[0]
    estimate = refined.estimate(spec, s).total
    assert abs(estimate - measured.peak_bytes) / measured.peak_bytes < 0.02


@pytest.mark.slow
def test_qlora_saves_what_nf4_saves():
    """A QLoRA step and the same LoRA step over a BF16 base differ by the base's storage:
    measured (bitsandbytes on CPU, quant state included) against the estimate's
    difference, exactly up to 1%. Both count the same weights: a packed NF4 parameter
    holds two per element."""
    pytest.importorskip("bitsandbytes")
    from introspect.measure import peft_step

    bf16 = dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16")
    plain, q = setup(**bf16), setup(**bf16).replace(finetune="qlora")
    m_plain, m_q = peft_step.measure(LLAMA, plain), peft_step.measure(LLAMA, q)
    assert m_q.n_params == m_plain.n_params and m_q.trainable_params == m_plain.trainable_params
    measured = m_plain.peak_bytes - m_q.peak_bytes
    estimated = refined.estimate(LLAMA, plain).total - refined.estimate(LLAMA, q).total
    assert measured > 0
    assert abs(estimated - measured) / measured < 0.01


def test_bad_rank_and_targets():
    with pytest.raises(IntrospectError, match="--lora-rank"):
        lora.targets(LLAMA, setup().replace(lora_rank=129))
    with pytest.raises(IntrospectError, match="--lora-targets: this model has no c_attn"):
        lora.targets(LLAMA, setup(lora_targets=("c_attn",)))
    plain = LLAMA.replace(ffn="plain", hidden_act="gelu", num_parameters=None)
    with pytest.raises(IntrospectError, match="gate_proj"):
        lora.targets(plain, setup(lora_targets=("gate_proj",)))


def test_lora_state_is_smaller_and_sums():
    full = refined.estimate(LLAMA, TrainingSetup(seq_len=T))
    est = refined.estimate(LLAMA, setup())
    b = est.execution
    assert b.total == sum(b.terms.values())
    assert b.sum("optimizer") < full.execution.sum("optimizer") / 10
    assert b["weights/lora_adapters"] == 4 * lora.adapter_parameters(LLAMA, setup())


@pytest.mark.parametrize(
    "fields, expected",
    [
        (dict(), 0),  # FP32 throughout: lora_A reads the block's own input
        (dict(precision="bf16", weights_dtype="bf16", activation_dtype="bf16"), 4),
        (dict(precision="amp", activation_dtype="bf16"), 2),
        (dict(precision="amp", activation_dtype="bf16", finetune="qlora"), 2),
        (dict(lora_dropout=0.1), 8),
        (dict(lora_dropout=0.1, device="cuda", precision="amp", activation_dtype="bf16"), 3),
    ],
)
def test_adapter_input_copies_follow_peft(fields, expected):
    """peft's Linear casts x to FP32; bnb's 4-bit LoRA skips it under autocast, where
    autocast's own BF16 cast in lora_A is kept either way (census:
    tests/test_lora_sharded.py); dropout keeps a mask (input dtype on CPU, bool on
    CUDA)."""
    s = setup().replace(**fields)
    assert lora.adapter_input_bytes(s) == expected
