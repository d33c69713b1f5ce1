"""Zamba2 in closed form (issue 22, part 2): Mamba-2 layers, some of which first run a
transformer block whose weights they share (``Zamba2HybridLayer``). Exact parameter
counts against the meta-device build (shared weights once); the shared block's saved set
against a census of the real module, per use; the stack's closed form against the dry
run of the real class (``introspect measure --device fake``) for FP32 eager, autocast
with checkpointing and BF16 SDPA, within ±3%. Bad sizes are one line naming the key."""

from __future__ import annotations

import contextlib
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.refined import shared_block  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: Zamba2 at a small shape: six layers, three hybrid, two shared blocks (block 0 at the
#: first and third hybrid layer), q/k/v adapters and rotary positions on.
ZAMBA2 = {
    "model_type": "zamba2",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "vocab_size": 256,
    "intermediate_size": 96,
    "n_mamba_heads": 4,
    "mamba_d_state": 16,
    "chunk_size": 16,
    "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid", "mamba", "hybrid"],
    "num_mem_blocks": 2,
    "use_shared_attention_adapter": True,
    "adapter_rank": 8,
    "use_mem_rope": True,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
#: The published default's layout: one shared block, no q/k/v adapters, no rotary.
ZAMBA2_PLAIN = {
    **ZAMBA2,
    "num_mem_blocks": 1,
    "use_shared_attention_adapter": False,
    "use_mem_rope": False,
}

VARIANTS = {
    "small": ZAMBA2,
    "plain": ZAMBA2_PLAIN,
    "gqa, biases, untied": {
        **ZAMBA2_PLAIN,
        "num_mem_blocks": 2,
        "num_key_value_heads": 2,
        "add_bias_linear": True,
        "tie_word_embeddings": False,
        "mamba_ngroups": 2,
    },
    "more blocks than hybrid layers": {**ZAMBA2, "num_mem_blocks": 5},
    "legacy names, expand 3": {
        **ZAMBA2_PLAIN,
        "mamba_expand": 3,
        "n_mamba_heads": 6,
        "num_hidden_layers": 4,
        "layers_block_type": ["mamba", "hybrid", "linear_attention", "hybrid"],
    },
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_zamba2_count_equals_the_meta_build(name):
    spec = count_is_the_meta_build(VARIANTS[name])
    assert any(kind.shared is not None for kind, _ in spec.kinds)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_zamba2_parameter_tensors_are_the_models_own(name):
    """The tensors the optimizer loop and the sharding terms read
    (``shard_shapes.parameter_tensors``: each mixer's conv, in_proj, dt_bias, A_log,
    norm, D, out_proj; each use's linear; the tied block once) are the meta build's
    ``parameters()``, shape for shape (as a multiset: the order is module order within
    a layer, not checked here)."""
    from introspect.refined.shard_shapes import parameter_tensors

    config = VARIANTS[name]
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model("zamba2", **keys)
        )
    real = sorted(tuple(p.shape) for p in model.parameters())
    assert sorted(parameter_tensors(spec_from_config(dict(config)))) == real


def test_default_zamba2_config_counts_its_shared_block_once():
    """Zamba2Config()'s 54 layers, 9 of them hybrid over one shared block: 2,481,848,336
    parameters, as the meta build counts them (the tied block once)."""
    config = transformers.Zamba2Config().to_dict()
    spec = spec_from_config(config)
    assert spec.n_params == 2_481_848_336
    hybrid = [count for kind, count in spec.kinds if kind.shared is not None]
    assert hybrid == [9] and spec.num_hidden_layers == 54
    with torch.device("meta"):
        model = transformers.Zamba2ForCausalLM(transformers.Zamba2Config())
    assert spec.n_params == sum(p.numel() for p in model.parameters())


def test_a_saved_config_s_hybrid_layer_ids_size_the_adapter_lists():
    """A config.json from ``Zamba2Config.to_dict()`` keeps ``hybrid_layer_ids``, which
    overrides the list ``__post_init__`` derives (PreTrainedConfig sets extra keys after
    it): every_type's shrunk default keeps the 54-layer list for its 7 layers, so the one
    shared block holds 9 gate_up adapters and its one use runs the first. Counted as
    built; a list that misses a hybrid layer is one line."""
    raw = {**transformers.Zamba2Config().to_dict(), "model_type": "zamba2"}
    small = {**raw, "num_hidden_layers": 7, "layers_block_type": raw["layers_block_type"][:7]}
    assert len(small["hybrid_layer_ids"]) == 9
    count_is_the_meta_build(small)
    with pytest.raises(Exception, match="hybrid_layer_ids"):
        spec_from_config({**small, "hybrid_layer_ids": [12, 18]})


def _use(config: dict, attention: str):
    """One hybrid layer's shared block and linear from transformers' own class, with the
    inputs a model gives it (the embedding output, the rotary tables, eager's mask)."""
    from transformers.models.zamba2.modeling_zamba2 import Zamba2HybridLayer

    keys = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.Zamba2Config(**keys)
    cfg._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.Zamba2ForCausalLM(cfg).model
    layer = next(m for m in model.layers if isinstance(m, Zamba2HybridLayer))
    return model, layer, model.layers_block_type.index("hybrid")


class _SharedUse(torch.nn.Module):
    """The block and the per-use linear, as ``Zamba2HybridLayer.forward`` runs them."""

    def __init__(self, layer, index: int, inputs: dict) -> None:
        super().__init__()
        self.block, self.linear, self.index, self.inputs = (
            layer.shared_transformer,
            layer.linear,
            index,
            inputs,
        )

    def forward(self, hidden):
        out = self.block(hidden, layer_idx=self.index, **self.inputs)
        return self.linear(out)


def _census(config: dict, attention: str, precision: str, B: int, T: int) -> int:
    return sum(_census_rows(config, attention, precision, B, T).values())


def _census_rows(config: dict, attention: str, precision: str, B: int, T: int) -> dict:
    """The storages one use saves: ``{(shape, producing op, n): bytes}``."""
    from introspect.measure.census import census

    model, layer, index = _use(config, attention)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    model.to(dtype)
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "amp" else None
    embed = torch.randn(B, T, HIDDEN, dtype=dtype, requires_grad=True)
    positions = torch.arange(T)[None]
    inputs: dict = {}
    with ctx or contextlib.nullcontext():
        inputs["original_hidden_states"] = embed * 1.0
        if config.get("use_mem_rope"):
            inputs["position_embeddings"] = model.rotary_emb(embed, positions)
        if attention == "eager":
            mask = torch.full((T, T), torch.finfo(dtype).min, dtype=dtype).triu(1)
            inputs["attention_mask"] = mask[None, None].expand(B, 1, T, T)
    use = _SharedUse(layer, index, inputs)
    holder = torch.nn.ModuleDict({"use": use})
    leaf = torch.randn(B, T, HIDDEN, dtype=dtype, requires_grad=True)
    x = leaf * 1.0

    def forward():
        with ctx or contextlib.nullcontext():
            return holder["use"](x).sum()

    cen = census(holder, forward, tokens=B * T, seq_len=T)
    rows = [row for row in cen.rows if row[0].startswith("use")]
    return {(row[2], row[1], i): row[4] for i, row in enumerate(rows)}


def _setup(precision: str, attention: str, B: int, T: int) -> TrainingSetup:
    return TrainingSetup(
        batch_size=B,
        seq_len=T,
        precision=precision,
        activation_dtype="fp32" if precision == "fp32" else "bf16",
        weights_dtype="bf16" if precision == "bf16" else "fp32",
        attention="eager" if attention == "eager" else "memory_efficient",
        device="cpu",
        implementation="transformers",
    )


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("config", ["small", "plain", "gqa, biases, untied"])
def test_shared_block_saved_set_equals_the_census(precision, attention, config):
    """One use of the shared block (and its linear) keeps, to the byte, what
    introspect.refined.shared_block says: the concatenation's norm, q/k/v and their
    adapters, the attention kernel's own, the MLP with its adapter, and under autocast
    the BF16 copies of every weight it reads."""
    B, T = 2, 24
    cfg = VARIANTS[config]
    spec = spec_from_config(dict(cfg))
    block = next(kind.shared for kind, _ in spec.kinds if kind.shared is not None)
    want = sum(shared_block.saved(spec, _setup(precision, attention, B, T), block).values())
    assert _census(cfg, attention, precision, B, T) == want


@pytest.mark.parametrize("setup", sorted(SETUPS))
@pytest.mark.parametrize("config", ["small", "plain"])
def test_zamba2_closed_form_within_3_percent_of_its_dry_run(tmp_path, capsys, setup, config):
    row = measured(tmp_path, capsys, VARIANTS[config], SETUPS[setup], B=2, T=32)
    assert abs(row["measured_over_refined"] - 1) <= 0.03, row["measured_over_refined"]


def test_architecture_layer_counts_the_shared_block_per_use():
    """The seed's bookkeeping at the shared block's shapes, once per use (three hybrid
    layers over two blocks): its norms over 2·d and d, Q/K/V/context over the 2·d-wide
    attention and o_proj's d, the 2·B·h·T² scores and probabilities, the gated MLP's four
    f-wide tensors and the two d-wide outputs."""
    from introspect.refined import architecture

    spec = spec_from_config(dict(ZAMBA2))
    setup = _setup("fp32", "eager", 2, 32)
    terms = architecture.estimate(spec, setup).terms
    BT, d, W, h, f, uses, s = 64, HIDDEN, 2 * HIDDEN, 4, 96, 3, 4
    layer = "activations/layer"
    assert terms[f"{layer}/layernorm/shared_block"] == uses * s * BT * (W + d)
    assert terms[f"{layer}/attention/linear/shared_block"] == uses * s * BT * (4 * W + d)
    assert terms[f"{layer}/attention/quadratic/shared_block"] == uses * s * 2 * 2 * h * 32**2
    assert terms[f"{layer}/feed_forward/shared_block"] == uses * s * BT * (4 * f + 2 * d)
    # Each tensor it counts is one the real block's step saves (its census, FP32 eager):
    # the W- and d-wide norm inputs, Q/K/V and the context, the T×T probabilities, the
    # 2f-wide gate_up and the f-wide activation and product, the d-wide MLP output.
    rows = _census_rows(ZAMBA2, "eager", "fp32", 2, 32)
    storages = {n // s for n in rows.values()}  # elements of each saved storage
    assert {BT * W, BT * d, 2 * h * 32 * 32, BT * 2 * f, BT * f} <= storages


def test_profile_prints_the_shared_block_and_its_estimate(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ZAMBA2))
    assert main(["profile", str(path), "--seq", "64"]) == 0
    out = capsys.readouterr().out
    assert "shared block 0 (attention over 128: 4 heads of 32; gated MLP 96" in out
    assert "shared block 1" in out
    assert "do not apply" not in out  # estimated in closed form, not left to a dry run
    assert "refined: execution" in out


@pytest.mark.parametrize(
    "change, key",
    [
        ({"n_mamba_heads": 5}, "n_mamba_heads"),
        ({"num_attention_heads": 5}, "num_attention_heads"),
        ({"layers_block_type": ["mamba", "attention"]}, "layers_block_type"),
        ({"mamba_ngroups": 3}, "mamba_ngroups"),
        ({"num_key_value_heads": 2}, "use_shared_attention_adapter"),
        ({"mamba_expand": 1.5}, "mamba_expand"),
    ],
)
def test_bad_zamba2_sizes_are_one_line(tmp_path, capsys, change, key):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**ZAMBA2, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert key in line and str(path) in line


@pytest.mark.parametrize("flags", [["--devices", "2", "--fsdp"], ["--pp", "2"]])
def test_sharding_a_shared_block_by_layer_is_refused_in_one_line(tmp_path, capsys, flags):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ZAMBA2))
    assert main(["profile", str(path), *flags]) == 2
    line = one_line_error(capsys)
    assert flags[-1] in line or flags[0] in line
    assert "shared transformer blocks at 3 of 6 layers" in line
