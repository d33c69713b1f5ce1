"""Walking live torch and MLX modules: exact counts and the recognised ModelSpec.

Every count is checked against an independent one: the sum of the shapes the test itself
created (or the framework's own ``parameters()``), and the spec the walker recognises is
checked field by field against the construction arguments. The 7B-shaped walks check that
no weight memory is allocated (torch: every parameter stays on the meta device; MLX: the
active memory does not grow).
"""

from __future__ import annotations

import pytest
from introspect.adapters.module_walk import ModuleDescription, UnrecognizedModule

from introspect.errors import IntrospectError
from introspect.params import COMPONENTS, parameter_count

#: Llama-2-7B's published exact parameter count (the reference-model table).
LLAMA2_7B_PARAMETERS = 6_738_415_616
LLAMA2_7B = dict(vocab=32000, layers=32, d=4096, heads=32, kv_heads=32, ffn=11008)


def check_consistent(desc: ModuleDescription) -> None:
    """The invariants every description keeps."""
    assert set(desc.params_by_component) == set(COMPONENTS)
    assert sum(desc.params_by_component.values()) == desc.parameter_count
    assert desc.spec.num_parameters == desc.parameter_count
    counted = sum(_numel(t.shape) for t in desc.tensors if t.tied_to is None)
    assert counted == desc.parameter_count


def _numel(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


# ---- plain modules, written the obvious way -------------------------------------------
def nanogpt(V: int, P: int, L: int, d: int, h: int, bias: bool):
    """nanoGPT's model.py, condensed: own LayerNorm (optional bias), fused c_attn, GELU
    MLP with c_fc/c_proj, learned positions, lm_head tied to wte."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(d, 3 * d, bias=bias)
            self.c_proj = nn.Linear(d, d, bias=bias)
            self.n_head, self.n_embd = h, d

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(d, 4 * d, bias=bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * d, d, bias=bias)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = LayerNorm(d, bias)
            self.attn = CausalSelfAttention()
            self.ln_2 = LayerNorm(d, bias)
            self.mlp = MLP()

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(
                dict(
                    wte=nn.Embedding(V, d),
                    wpe=nn.Embedding(P, d),
                    drop=nn.Dropout(0.0),
                    h=nn.ModuleList([Block() for _ in range(L)]),
                    ln_f=LayerNorm(d, bias),
                )
            )
            self.lm_head = nn.Linear(d, V, bias=False)
            self.transformer.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT

    return GPT()


def nanogpt_count(V, P, L, d, bias) -> int:
    """The shapes nanogpt() creates, summed by hand (lm_head shares wte)."""
    b = 1 if bias else 0
    norm = d + b * d
    attn = d * 3 * d + b * 3 * d + d * d + b * d
    mlp = d * 4 * d + b * 4 * d + 4 * d * d + b * d
    return V * d + P * d + L * (2 * norm + attn + mlp) + norm


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_nanogpt_torch(bias):
    pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    V, P, L, d, h = 101, 32, 3, 48, 4
    model = nanogpt(V, P, L, d, h, bias)
    desc = describe_torch(model)
    check_consistent(desc)
    assert desc.parameter_count == nanogpt_count(V, P, L, d, bias)
    assert desc.parameter_count == sum(p.numel() for p in model.parameters())
    s = desc.spec
    assert (s.vocab_size, s.hidden_size, s.num_hidden_layers) == (V, d, L)
    assert (s.num_attention_heads, s.kv_heads, s.head_size) == (h, h, d // h)
    assert (s.norm, s.norm_bias, s.ffn, s.ffn_dim) == ("layernorm", bias, "plain", 4 * d)
    assert (s.position_embedding, s.max_position_embeddings) == ("learned", P)
    assert s.tie_word_embeddings and s.hidden_act == "gelu"
    assert (s.qkv_bias, s.o_bias, s.mlp_bias) == (bias, bias, bias)
    assert s.norms_per_layer == 2 and s.qk_norm == "none"
    assert parameter_count(s) == desc.parameter_count
    assert s.assumptions == ()
    # wte is declared after lm_head shares it: still one table, the lm_head a tied alias.
    tied = [t for t in desc.tensors if t.tied_to is not None]
    assert [t.tied_to for t in tied] == ["transformer.wte.weight"]
    assert desc.params_by_component["lm_head"] == 0


def llama_torch(V, L, d, heads, kv_heads, ffn, *, builtin_norm=False, head_attrs=True):
    """Meta's reference Llama naming: tok_embeddings, wq/wk/wv/wo, w1/w2/w3,
    attention_norm/ffn_norm, a custom RMSNorm (or torch.nn.RMSNorm), untied output."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    head_dim = d // heads

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

    Norm = nn.RMSNorm if builtin_norm else RMSNorm

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            if head_attrs:
                self.n_heads, self.n_kv_heads, self.head_dim = heads, kv_heads, head_dim
            self.wq = nn.Linear(d, heads * head_dim, bias=False)
            self.wk = nn.Linear(d, kv_heads * head_dim, bias=False)
            self.wv = nn.Linear(d, kv_heads * head_dim, bias=False)
            self.wo = nn.Linear(heads * head_dim, d, bias=False)

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(d, ffn, bias=False)
            self.w2 = nn.Linear(ffn, d, bias=False)
            self.w3 = nn.Linear(d, ffn, bias=False)

    class TransformerBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = Attention()
            self.feed_forward = FeedForward()
            self.attention_norm = Norm(d)
            self.ffn_norm = Norm(d)

    class Transformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(V, d)
            self.layers = nn.ModuleList(TransformerBlock() for _ in range(L))
            self.norm = Norm(d)
            self.output = nn.Linear(d, V, bias=False)

    return Transformer()


def llama_count(V, L, d, heads, kv_heads, ffn) -> int:
    hd = d // heads
    attn = d * heads * hd + 2 * d * kv_heads * hd + heads * hd * d
    return V * d + L * (attn + 3 * d * ffn + 2 * d) + d + V * d


@pytest.mark.parametrize("builtin_norm", [False, True], ids=["custom-rmsnorm", "nn.RMSNorm"])
def test_llama_torch(builtin_norm):
    pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    args = dict(V=97, L=2, d=64, heads=8, kv_heads=2, ffn=160)
    model = llama_torch(*args.values(), builtin_norm=builtin_norm)
    desc = describe_torch(model, name="my llama")
    check_consistent(desc)
    assert desc.parameter_count == llama_count(*args.values())
    assert desc.parameter_count == sum(p.numel() for p in model.parameters())
    s = desc.spec
    assert (s.vocab_size, s.num_hidden_layers, s.hidden_size) == (97, 2, 64)
    assert (s.num_attention_heads, s.num_key_value_heads, s.head_size) == (8, 2, 8)
    assert (s.norm, s.ffn, s.ffn_dim, s.tie_word_embeddings) == ("rmsnorm", "gated", 160, False)
    assert not (s.qkv_bias or s.o_bias or s.mlp_bias or s.lm_head_bias)
    assert s.source == "my llama"
    assert parameter_count(s) == desc.parameter_count
    roles = {t.name: t.role for t in desc.tensors}
    assert roles["layers.1.feed_forward.w2.weight"] == "mlp.down"
    assert roles["layers.0.feed_forward.w3.weight"] == "mlp.up"
    assert roles["output.weight"] == "lm_head"


def test_missing_head_attributes_are_assumed_and_said():
    pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    desc = describe_torch(llama_torch(50, 1, 256, 4, 4, 512, head_attrs=False))
    assert desc.spec.head_dim == 128  # 128 divides the q width 256: the documented guess
    assert any("head_dim=128" in a for a in desc.spec.assumptions)
    assert any("head_dim=128" in n for n in desc.notes)
    assert desc.parameter_count == llama_count(50, 1, 256, 4, 4, 512)


def test_unrecognisable_modules_fail_in_one_line():
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    no_blocks = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
    with pytest.raises(UnrecognizedModule) as err:
        describe_torch(no_blocks)
    assert "Sequential" in str(err.value) and "repeated blocks" in str(err.value)
    assert "\n" not in str(err.value)

    class NoEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    with pytest.raises(IntrospectError, match="NoEmbedding.*no token embedding"):
        describe_torch(NoEmbedding())

    class NoAttention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 8)
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    with pytest.raises(UnrecognizedModule, match="NoAttention.*no attention projections"):
        describe_torch(NoAttention())
    with pytest.raises(IntrospectError, match="expected a torch.nn.Module"):
        describe_torch("gpt2")


def test_torch_transformer_encoder_layers():
    """Blocks from torch.nn.TransformerEncoderLayer: MultiheadAttention's in_proj_weight
    (fused qkv), linear1/linear2, norm1/norm2, heads from ``num_heads``."""
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    nn = torch.nn
    V, P, d, h, L = 100, 32, 64, 4, 3

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(V, d)
            self.pos = nn.Embedding(P, d)
            self.blocks = nn.ModuleList(
                nn.TransformerEncoderLayer(d, h, 4 * d, batch_first=True, norm_first=True)
                for _ in range(L)
            )
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, V, bias=False)

    desc = describe_torch(Model())
    layer = 3 * d * d + 3 * d + d * d + d + 8 * d * d + 4 * d + d + 4 * d
    assert desc.parameter_count == (V + P) * d + L * layer + 2 * d + V * d
    s = desc.spec
    assert (s.num_attention_heads, s.head_size, s.ffn, s.ffn_dim) == (h, d // h, "plain", 4 * d)
    assert (s.norm, s.norm_bias, s.qkv_bias, s.hidden_act) == ("layernorm", True, True, "relu")
    assert parameter_count(s) == desc.parameter_count


def llama_mlx(V, L, d, heads, kv_heads, ffn, *, tied=False):
    """A Llama-style MLX model with Hugging Face names and mlx.nn.RMSNorm; a tied one
    assigns the embedding's own array to the output projection."""
    nn = pytest.importorskip("mlx.nn")
    hd = d // heads

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.n_heads, self.n_kv_heads = heads, kv_heads
            self.q_proj = nn.Linear(d, heads * hd, bias=False)
            self.k_proj = nn.Linear(d, kv_heads * hd, bias=False)
            self.v_proj = nn.Linear(d, kv_heads * hd, bias=False)
            self.o_proj = nn.Linear(heads * hd, d, bias=False)
            self.rope = nn.RoPE(hd)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(d, ffn, bias=False)
            self.up_proj = nn.Linear(d, ffn, bias=False)
            self.down_proj = nn.Linear(ffn, d, bias=False)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = nn.RMSNorm(d)
            self.self_attn = Attention()
            self.post_attention_layernorm = nn.RMSNorm(d)
            self.mlp = MLP()

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(V, d)
            self.layers = [Block() for _ in range(L)]
            self.norm = nn.RMSNorm(d)
            self.lm_head = nn.Linear(d, V, bias=False)
            if tied:
                self.lm_head.weight = self.embed_tokens.weight

    return Llama()


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied-array"])
def test_llama_mlx(tied):
    pytest.importorskip("mlx.core")
    from introspect.adapters.mlx_module import describe_mlx

    args = dict(V=97, L=2, d=64, heads=8, kv_heads=2, ffn=160)
    desc = describe_mlx(llama_mlx(*args.values(), tied=tied))
    check_consistent(desc)
    expected = llama_count(*args.values()) - (97 * 64 if tied else 0)
    assert desc.parameter_count == expected
    s = desc.spec
    assert (s.num_attention_heads, s.num_key_value_heads, s.head_size) == (8, 2, 8)
    assert (s.norm, s.ffn, s.ffn_dim, s.tie_word_embeddings) == ("rmsnorm", "gated", 160, tied)
    assert s.position_embedding == "rope" and s.norms_per_layer == 2
    assert parameter_count(s) == desc.parameter_count
    assert desc.framework == "mlx"


# ---- Hugging Face transformers models (optional) --------------------------------------
SMALL = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2)
HF_CASES = {
    "llama": ("LlamaConfig", dict(num_attention_heads=4, num_key_value_heads=2)),
    "qwen2-tied-qkv-bias": (
        "Qwen2Config",
        dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    ),
    "qwen3-qk-norm-head-dim": (
        "Qwen3Config",
        dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True),
    ),
    "mixtral": (
        "MixtralConfig",
        dict(
            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2
        ),
    ),  # fmt: skip
    "gpt2": ("GPT2Config", dict(n_embd=64, n_layer=2, n_head=4, n_positions=32)),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(HF_CASES), ids=list(HF_CASES))
def test_transformers_models(case):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    config_class, extra = HF_CASES[case]
    base = {} if config_class == "GPT2Config" else dict(SMALL)
    if config_class == "GPT2Config":
        base = dict(vocab_size=128, bos_token_id=0, eos_token_id=0)
    config = getattr(transformers, config_class)(**base, **extra)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    desc = describe_torch(model)
    check_consistent(desc)
    assert desc.parameter_count == sum(p.numel() for p in model.parameters())
    s = desc.spec
    assert parameter_count(s) == desc.parameter_count, desc.notes
    assert s.model_type == config.model_type
    assert s.hidden_size == config.hidden_size
    assert s.num_hidden_layers == config.num_hidden_layers
    assert s.num_attention_heads == config.num_attention_heads
    assert s.vocab_size == config.vocab_size
    assert s.tie_word_embeddings == bool(config.tie_word_embeddings)
    if case == "gpt2":
        assert (s.norm, s.ffn, s.ffn_dim) == ("layernorm", "plain", 4 * 64)
        assert (s.position_embedding, s.max_position_embeddings) == ("learned", 32)
        assert s.qkv_bias and s.o_bias and s.mlp_bias and s.norm_bias
        return
    assert s.num_key_value_heads == config.num_key_value_heads
    assert s.head_size == (getattr(config, "head_dim", None) or 64 // 4)
    assert (s.norm, s.ffn, s.intermediate_size) == ("rmsnorm", "gated", 96)
    assert s.qkv_bias == (case.startswith("qwen2"))
    assert s.qk_norm == ("head" if case.startswith("qwen3") else "none")
    assert s.num_local_experts == getattr(config, "num_local_experts", 0)
    assert s.num_experts_per_tok == getattr(config, "num_experts_per_tok", 0)


#: More transformers families, each exact against ``model.parameters()`` and against the
#: structural count of the recognised spec: fused qkv/gate_up (Phi-3), GPT-NeoX's
#: query_key_value with a parallel block, Falcon's multi-query, OLMo2's full-width q/k
#: norms, Gemma's head_dim, Gemma-2's four norms, Phi's single norm, OPT's offset learned
#: positions, GPT-J, Starcoder2's biases, Qwen3-MoE's fused experts.
SMALL_HEADS = dict(SMALL, num_attention_heads=4)
HF_FAMILIES = {
    "phi3": ("Phi3Config", dict(SMALL_HEADS, num_key_value_heads=2, pad_token_id=0)),
    "gpt_neox": ("GPTNeoXConfig", SMALL_HEADS),
    "falcon": ("FalconConfig", dict(vocab_size=128, hidden_size=64, num_hidden_layers=2,
                                    num_attention_heads=4)),
    "olmo2": ("Olmo2Config", dict(SMALL_HEADS, pad_token_id=0)),
    "gemma": ("GemmaConfig", dict(SMALL_HEADS, num_key_value_heads=1, head_dim=32)),
    "gemma2": ("Gemma2Config", dict(SMALL_HEADS, num_key_value_heads=2, head_dim=32)),
    "phi": ("PhiConfig", SMALL_HEADS),
    "opt": ("OPTConfig", dict(vocab_size=128, hidden_size=64, ffn_dim=96, num_hidden_layers=2,
                              num_attention_heads=4, word_embed_proj_dim=64,
                              max_position_embeddings=32)),
    "gptj": ("GPTJConfig", dict(vocab_size=128, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                n_positions=32, bos_token_id=0, eos_token_id=0)),
    "starcoder2": ("Starcoder2Config", dict(SMALL_HEADS, num_key_value_heads=2)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(SMALL_HEADS, num_key_value_heads=2, num_experts=4,
                                         num_experts_per_tok=2, moe_intermediate_size=32,
                                         head_dim=32)),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("family", list(HF_FAMILIES), ids=list(HF_FAMILIES))
def test_transformers_families_exact(family):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    config_class, kwargs = HF_FAMILIES[family]
    config = getattr(transformers, config_class)(**kwargs)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    desc = describe_torch(model)
    check_consistent(desc)
    assert desc.parameter_count == sum(p.numel() for p in model.parameters())
    assert parameter_count(desc.spec) == desc.parameter_count, desc.notes
    s = desc.spec
    assert s.num_attention_heads == config.num_attention_heads
    assert s.kv_heads == (getattr(config, "num_key_value_heads", None) or s.kv_heads)
    assert s.head_size == (getattr(config, "head_dim", None) or 64 // 4)
    assert s.num_hidden_layers == config.num_hidden_layers
    assert s.tie_word_embeddings == bool(config.tie_word_embeddings)


@pytest.mark.slow
def test_shared_expert_is_counted_and_said():
    """Qwen2-MoE's shared expert has no ModelSpec field: the count stays exact and a
    note says where the structure and the module differ."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    config = transformers.Qwen2MoeConfig(
        **SMALL_HEADS, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=48,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    desc = describe_torch(model)
    check_consistent(desc)
    assert desc.parameter_count == sum(p.numel() for p in model.parameters())
    assert (desc.spec.num_local_experts, desc.spec.intermediate_size) == (4, 32)
    assert any("shared expert" in n for n in desc.notes)
    assert any("num_parameters carries the exact count" in n for n in desc.notes)


# ---- mlx-lm models (optional) ---------------------------------------------------------
MLX_LM_CASES = {
    "llama": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "qwen2": dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3": dict(
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
        max_position_embeddings=128, rope_theta=1e6,
    ),
    "mixtral": dict(num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                    num_experts_per_tok=2),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(MLX_LM_CASES), ids=list(MLX_LM_CASES))
def test_mlx_lm_models(model_type):
    pytest.importorskip("mlx_lm")
    import importlib

    from introspect.adapters.mlx_module import describe_mlx
    from mlx.utils import tree_flatten

    family = importlib.import_module(f"mlx_lm.models.{model_type}")
    extra = MLX_LM_CASES[model_type]
    args = family.ModelArgs(model_type=model_type, rms_norm_eps=1e-6, **SMALL, **extra)
    model = family.Model(args)
    desc = describe_mlx(model)
    check_consistent(desc)
    assert desc.parameter_count == sum(v.size for _, v in tree_flatten(model.parameters()))
    s = desc.spec
    assert parameter_count(s) == desc.parameter_count, desc.notes
    assert s.model_type == model_type
    assert (s.hidden_size, s.num_hidden_layers, s.vocab_size) == (64, 2, 128)
    assert (s.num_attention_heads, s.num_key_value_heads) == (4, 2)
    assert s.head_size == extra.get("head_dim", 16)
    assert (s.norm, s.ffn, s.intermediate_size) == ("rmsnorm", "gated", 96)
    assert s.tie_word_embeddings == extra.get("tie_word_embeddings", False)
    assert s.qkv_bias == (model_type == "qwen2")
    assert s.qk_norm == ("head" if model_type == "qwen3" else "none")
    assert s.num_local_experts == extra.get("num_local_experts", 0)


# ---- 7B-shaped models, no weight memory ------------------------------------------------
@pytest.mark.slow
def test_7b_torch_on_meta_allocates_nothing():
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    a = LLAMA2_7B
    with torch.device("meta"):
        model = llama_torch(a["vocab"], a["layers"], a["d"], a["heads"], a["kv_heads"], a["ffn"])
    desc = describe_torch(model)
    assert all(p.is_meta for p in model.parameters())
    assert desc.parameter_count == LLAMA2_7B_PARAMETERS
    assert desc.parameter_count == llama_count(*(a[k] for k in a))
    s = desc.spec
    assert (s.num_hidden_layers, s.hidden_size, s.num_attention_heads) == (32, 4096, 32)
    assert (s.intermediate_size, s.vocab_size, s.tie_word_embeddings) == (11008, 32000, False)
    assert parameter_count(s) == LLAMA2_7B_PARAMETERS


@pytest.mark.slow
def test_7b_mlx_lazy_allocates_nothing():
    mx = pytest.importorskip("mlx.core")
    from introspect.adapters.mlx_module import describe_mlx

    a = LLAMA2_7B
    mx.synchronize()
    active_before = mx.get_active_memory()
    model = llama_mlx(a["vocab"], a["layers"], a["d"], a["heads"], a["kv_heads"], a["ffn"])
    desc = describe_mlx(model)
    grown = mx.get_active_memory() - active_before
    # FP32 weights would be 27 GB; an unevaluated graph is a few kB.
    assert grown < 100e6, f"walking allocated {grown / 1e6:.1f} MB"
    assert mx.get_peak_memory() < 100e6 + active_before
    assert desc.parameter_count == LLAMA2_7B_PARAMETERS
    assert parameter_count(desc.spec) == LLAMA2_7B_PARAMETERS
    assert (desc.spec.num_attention_heads, desc.spec.intermediate_size) == (32, 11008)


# ---- round trip through the project's own reference models ----------------------------
def _reference_specs():
    from introspect.spec import ModelSpec

    common = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2)
    return {
        "llama-gqa-untied": ModelSpec(
            **common, num_attention_heads=4, num_key_value_heads=2, intermediate_size=80,
            norm="rmsnorm", ffn="gated", hidden_act="silu",
        ),
        "gpt-learned-tied-biases": ModelSpec(
            **common, num_attention_heads=4, norm="layernorm", ffn="plain", hidden_act="gelu",
            tie_word_embeddings=True, qkv_bias=True, o_bias=True, mlp_bias=True,
            position_embedding="learned", max_position_embeddings=16,
        ),
        "qwen3-qk-norm-head": ModelSpec(
            **common, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=48, norm="rmsnorm", ffn="gated", hidden_act="silu",
            tie_word_embeddings=True, qk_norm="head", qkv_bias=True,
        ),
        "olmo2-qk-norm-full": ModelSpec(
            **common, num_attention_heads=4, intermediate_size=64, norm="rmsnorm", ffn="gated",
            hidden_act="silu", qk_norm="full",
        ),
        "layernorm-no-bias-lm-head-bias": ModelSpec(
            **common, num_attention_heads=2, norm="layernorm", norm_bias=False,
            hidden_act="gelu", lm_head_bias=True,
        ),
    }  # fmt: skip


ROUND_TRIP_FIELDS = (
    "hidden_size", "num_hidden_layers", "num_attention_heads", "kv_heads", "head_size",
    "ffn_dim", "vocab_size", "tie_word_embeddings", "norm", "ffn", "hidden_act", "qkv_bias",
    "o_bias", "mlp_bias", "lm_head_bias", "qk_norm", "norms_per_layer", "position_embedding",
    "max_position_embeddings",
)  # fmt: skip


def _assert_round_trip(spec, desc, reference_count):
    check_consistent(desc)
    assert desc.parameter_count == reference_count == parameter_count(spec)
    for name in ROUND_TRIP_FIELDS:
        assert getattr(desc.spec, name) == getattr(spec, name), name
    if spec.norm == "layernorm":
        assert desc.spec.norm_bias == spec.norm_bias


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_reference_specs()))
def test_round_trip_torch_reference_model(case):
    pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    torch_model = pytest.importorskip("introspect.measure.torch_model")
    spec = _reference_specs()[case]
    model = torch_model.build(spec, device="meta")
    _assert_round_trip(spec, describe_torch(model), torch_model.parameter_count(model))


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_reference_specs()))
def test_round_trip_mlx_reference_model(case):
    pytest.importorskip("mlx.core")
    from introspect.adapters.mlx_module import describe_mlx

    mlx_model = pytest.importorskip("introspect.measure.mlx_model")
    spec = _reference_specs()[case]
    model = mlx_model.build(spec)
    _assert_round_trip(spec, describe_mlx(model), mlx_model.parameter_count(model))


def test_mlx_rejects_non_modules_and_blockless_modules():
    nn = pytest.importorskip("mlx.nn")
    from introspect.adapters.mlx_module import describe_mlx

    with pytest.raises(IntrospectError, match="expected an mlx.nn.Module"):
        describe_mlx(object())

    class Flat(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(10, 8)
            self.out = nn.Linear(8, 10)

    with pytest.raises(UnrecognizedModule, match="mlx module Flat.*repeated blocks"):
        describe_mlx(Flat())


@pytest.mark.slow
def test_7b_transformers_llama_on_meta():
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32,
    )  # fmt: skip
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    desc = describe_torch(model)
    assert all(p.is_meta for p in model.parameters())
    assert desc.parameter_count == LLAMA2_7B_PARAMETERS
    assert desc.spec.assumptions == ()
    assert desc.params_by_component["lm_head"] == 32000 * 4096


def test_mlx_quantized_model_counts_unpacked_parameters():
    """A 4-bit model (mlx.nn.quantize) has the parameters of the model it came from;
    the packed uint32 shapes and the scales/biases are not parameters."""
    nn = pytest.importorskip("mlx.nn")
    from introspect.adapters.mlx_module import describe_mlx

    args = dict(V=128, L=2, d=64, heads=4, kv_heads=2, ffn=128)
    model = llama_mlx(*args.values())
    nn.quantize(model, group_size=64, bits=4)
    desc = describe_mlx(model)
    check_consistent(desc)
    assert desc.parameter_count == llama_count(*args.values())
    s = desc.spec
    assert (s.hidden_size, s.num_key_value_heads, s.intermediate_size) == (64, 2, 128)
    assert any("quantized layers at 4 bits" in n for n in desc.notes)


def test_qwen_remote_code_layout():
    """Qwen-7B's remote-code layout: transformer.h, fused c_attn with bias, and a gated
    MLP written as w1/w2 (each intermediate_size/2 wide) with c_proj as the down side."""
    torch = pytest.importorskip("torch")
    from introspect.adapters.torch_module import describe_torch

    nn = torch.nn
    V, d, h, L, f = 151, 64, 4, 2, 96

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

    class QWenAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_heads = h
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d, bias=False)

    class QWenMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Linear(d, f, bias=False)
            self.w2 = nn.Linear(d, f, bias=False)
            self.c_proj = nn.Linear(f, d, bias=False)

    class QWenBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = (
                RMSNorm(),
                QWenAttention(),
                RMSNorm(),
                QWenMLP(),
            )

    class QWenLMHeadModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.Module()
            self.transformer.wte = nn.Embedding(V, d)
            self.transformer.h = nn.ModuleList(QWenBlock() for _ in range(L))
            self.transformer.ln_f = RMSNorm()
            self.lm_head = nn.Linear(d, V, bias=False)

    desc = describe_torch(QWenLMHeadModel())
    layer = 3 * d * d + 3 * d + d * d + 3 * d * f + 2 * d
    assert desc.parameter_count == V * d + L * layer + d + V * d
    s = desc.spec
    assert (s.norm, s.ffn, s.intermediate_size, s.qkv_bias, s.o_bias) == (
        "rmsnorm", "gated", f, True, False,
    )  # fmt: skip
    assert parameter_count(s) == desc.parameter_count
    roles = {t.name: t.role for t in desc.tensors}
    assert roles["transformer.h.0.mlp.c_proj.weight"] == "mlp.down"
    assert roles["transformer.h.0.attn.c_proj.weight"] == "attention.o"


def _hybrid_tree(d: int = 8):
    """A framework-free tree of a Jamba-like stack: layer 0 a Mamba mixer, layer 1 an
    attention, both with an MLP and two norms."""
    from introspect.adapters.module_walk import ModuleTree, ParamEntry

    class HybridForCausalLM: ...

    class HybridMambaMixer: ...

    class HybridAttention: ...

    class HybridMLP: ...

    class HybridRMSNorm: ...

    class Embedding: ...

    class MambaLayer: ...

    class AttentionLayer: ...

    modules = {"": HybridForCausalLM(), "embed_tokens": Embedding(), "layers": object()}
    params = [ParamEntry("embed_tokens.weight", (32, d), "e", "embed_tokens")]
    mixer = {"mamba": (HybridMambaMixer, ("in_proj", "conv1d", "x_proj", "out_proj"))}
    attention = {"self_attn": (HybridAttention, ("q_proj", "k_proj", "v_proj", "o_proj"))}
    for i, (layer, mixing) in enumerate(((MambaLayer, mixer), (AttentionLayer, attention))):
        modules[f"layers.{i}"] = layer()
        parts = {**mixing, "mlp": (HybridMLP, ("gate_proj", "up_proj", "down_proj"))}
        for child, (cls, linears) in parts.items():
            modules[f"layers.{i}.{child}"] = cls()
            for name in linears:
                owner = f"layers.{i}.{child}.{name}"
                modules[owner] = object()
                params.append(ParamEntry(f"{owner}.weight", (d, d), owner, owner))
        for norm in ("input_layernorm", "post_attention_layernorm"):
            owner = f"layers.{i}.{norm}"
            modules[owner] = HybridRMSNorm()
            params.append(ParamEntry(f"{owner}.weight", (d,), owner, owner))
    return ModuleTree("test", tuple(params), modules)


def test_unmodelled_parts_name_the_mixer_and_its_layers():
    from introspect.adapters.module_walk import unmodelled_parts

    assert unmodelled_parts(_hybrid_tree()) == ("HybridMambaMixer (mamba) in 1 of 2 layers",)


def test_a_plain_transformer_has_no_unmodelled_parts():
    pytest.importorskip("torch")
    from introspect.adapters.module_walk import unmodelled_parts
    from introspect.adapters.torch_module import torch_tree

    assert unmodelled_parts(torch_tree(llama_torch(64, 2, 32, 4, 2, 48))) == ()
    assert unmodelled_parts(torch_tree(nanogpt(64, 16, 2, 32, 4, True))) == ()
