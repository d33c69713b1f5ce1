"""``--num-layers K``: LoRA on the top K blocks only (mlx-lm's ``num_layers``, peft's
``layers_to_transform``). The claim the closed form rests on — a frozen block below the
first adapted one records nothing for the backward — checked on torch (a saved-tensor
count per block of a real peft model) and on MLX (a K-block step on an L-block model
holds what a K-block model's step holds, beyond its weights); then real steps against
the closed form (±3% torch, real and dry run; ±5% MLX), and the config readers."""

from __future__ import annotations

import json

import pytest

from introspect import refined
from introspect.cli import main
from introspect.refined import lora
from introspect.setup import TrainingSetup

LLAMA = dict(
    model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
    num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
)  # fmt: skip


def _spec(raw: dict):
    from introspect.adapters.hf_config import spec_from_config

    return spec_from_config(raw, source=raw["model_type"])


def torch_setup(k: int | None, **kw) -> TrainingSetup:
    fields = dict(
        seq_len=64, batch_size=2, device="cpu", finetune="lora", lora_rank=4,
        implementation="transformers", loop="labels", num_layers=k,
    ) | kw  # fmt: skip
    return TrainingSetup(**fields)


# ---- the setup and the closed form ------------------------------------------------------


def test_adapters_scale_with_k_and_the_base_stays_whole():
    spec = _spec(LLAMA)
    every = lora.adapter_parameters(spec, torch_setup(None))
    for k in (1, 2, 3, 4):
        s = torch_setup(k)
        assert lora.adapter_parameters(spec, s) * 4 == every * k  # exact integers
        assert lora.block_linear_parameters(spec, s) == lora.block_linear_parameters(spec)
    assert lora.adapter_parameters(spec, torch_setup(4)) == every


def test_frozen_blocks_drop_their_saved_set_from_the_estimate():
    """Without checkpointing each frozen block takes exactly one block's LoRA saved set
    out of the end of forward; under torch checkpointing nothing changes (every block
    keeps its input: :func:`lora.first_recorded`)."""
    from introspect.refined import execution

    spec = _spec(LLAMA)
    per_layer = sum(execution.layer_saved(spec, torch_setup(None)).values())

    def saved(s):
        return sum(v for k, v in execution.saved_terms(spec, s).items() if "/layer/" in k)

    assert saved(torch_setup(None)) - saved(torch_setup(1)) == 3 * per_layer
    ckpt = dict(activation_checkpointing=True)
    assert saved(torch_setup(1, **ckpt)) == saved(torch_setup(None, **ckpt))
    assert lora.first_recorded(spec, torch_setup(1, **ckpt)) == 0
    assert lora.first_recorded(spec, torch_setup(1)) == 3
    # MLX has no enable_input_require_grads: its frozen blocks stay unrecorded.
    mlx = TrainingSetup(framework="mlx", finetune="lora", num_layers=1, **ckpt)
    assert lora.first_recorded(spec, mlx) == 3


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(finetune="full", num_layers=2), "--num-layers 2 puts LoRA's adapters"),
        (dict(finetune="lora", num_layers=2, train_embeddings=True), "--train-embeddings"),
        (dict(finetune="lora", num_layers=2, lora_targets=("q_proj", "lm_head")), "lm_head"),
        (dict(finetune="lora", num_layers=2, lora_targets=("q_proj", "embed_tokens")), "embed"),
        (dict(finetune="lora", num_layers=0), "positive integer"),
        (dict(finetune="lora", num_layers=True), "positive integer"),
    ],
)
def test_setup_refusals(kw, message):
    with pytest.raises(ValueError, match=message):
        TrainingSetup(**kw)


def test_above_the_layers_is_one_line(capsys):
    assert main(["profile", "Qwen/Qwen2.5-0.5B", "--num-layers", "25"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--num-layers 25" in err[0] and "24 layers" in err[0]


def test_profile_prints_the_top_k_and_prices_less(capsys):
    def total(*flags):
        assert main(["profile", "Qwen/Qwen2.5-0.5B", "--seq", "512", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["estimates"]["refined"]["total_bytes"]

    every, top4 = total("--finetune", "lora"), total("--num-layers", "4")
    assert top4 < every
    assert total("--num-layers", "24") == every
    assert main(["profile", "Qwen/Qwen2.5-0.5B", "--num-layers", "4"]) == 0
    assert "adapters on the top 4 blocks" in capsys.readouterr().out


# ---- torch: the claim, then real steps --------------------------------------------------


def _peft_model(k: int | None, checkpointing: bool = False):
    import torch

    from introspect.measure import hf_models, peft_step

    spec = _spec(LLAMA)
    s = torch_setup(k, activation_checkpointing=checkpointing, attention="memory_efficient")
    model = hf_models.build(
        LLAMA, "llama", attention="memory_efficient", dtype=torch.float32,
        checkpointing=checkpointing,
    )  # fmt: skip
    return peft_step.wrap(model, spec, s, torch.float32), spec, s


def test_peft_adapts_exactly_the_top_k_blocks():
    pytest.importorskip("peft")
    model, spec, s = _peft_model(2)
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    blocks = {int(n.split(".layers.")[1].split(".")[0]) for n in trained}
    assert blocks == {2, 3}
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == (
        lora.trainable_parameters(spec, s)
    )
    # peft's all-linear, spelled as the model's names (peft refuses a str beside
    # layers_to_transform): every block linear of the adapted blocks.
    names = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n in trained if "lora_A" in n}
    assert names == set(lora.targets(spec, s))


def _saved_per_block(model, vocab: int) -> dict[int, int]:
    """Tensors autograd saves during each block's forward (a real forward, counted by
    ``saved_tensors_hooks``; the block the forward is in, set by forward hooks)."""
    import torch

    layers = model.get_base_model().model.layers
    current = {"i": None}
    counts = {i: 0 for i in range(len(layers))}
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(lambda m, a, i=i: current.update(i=i))
        layer.register_forward_hook(lambda m, a, o: current.update(i=None))

    def pack(t):
        if current["i"] is not None:
            counts[current["i"]] += 1
        return t

    x = torch.randint(0, vocab, (2, 16))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=x, labels=x).loss.backward()
    return counts


def test_frozen_blocks_below_save_nothing_on_torch():
    """The claim, on a real peft model: blocks 0 and 1 below the adapted 2 and 3 save no
    tensor at all; each adapted block saves; the input of block 0 needs no gradient."""
    pytest.importorskip("peft")
    model, spec, _ = _peft_model(2)
    counts = _saved_per_block(model, spec.vocab_size)
    assert counts[0] == counts[1] == 0
    assert counts[2] > 0 and counts[3] > 0


def test_checkpointing_makes_every_block_recorded_through_peft():
    """Why the estimate keeps every block under checkpointing: get_peft_model on a
    checkpointed model makes the embedding's output require grad
    (``enable_input_require_grads``), so the frozen blocks are in the graph."""
    pytest.importorskip("peft")
    import torch

    seen = {}
    for ckpt in (False, True):
        model, spec, _ = _peft_model(2, checkpointing=ckpt)
        layer0 = model.get_base_model().model.layers[0]
        layer0.register_forward_pre_hook(
            lambda m, a, ckpt=ckpt: seen.update({ckpt: a[0].requires_grad})
        )
        x = torch.randint(0, spec.vocab_size, (2, 16))
        model(input_ids=x, labels=x)
    assert seen == {False: False, True: True}


@pytest.mark.parametrize(
    "k, kw",
    [
        (1, {}),
        (3, {}),
        (2, dict(attention="eager")),
        (2, dict(lora_dropout=0.1)),
        (1, dict(activation_checkpointing=True)),
        (2, dict(precision="bf16", weights_dtype="bf16", lora_targets=("q_proj", "v_proj"))),
        (1, dict(precision="amp")),
        (2, dict(precision="amp", activation_checkpointing=True)),
        (1, dict(grad_accum=2)),
    ],
    ids=[
        *("k1", "k3", "eager", "dropout", "checkpointing", "bf16-qv", "amp"),
        *("amp-checkpointing", "grad-accum"),
    ],
)
def test_torch_step_within_3_percent(k, kw):
    """Real transformers + peft steps on CPU (layers_to_transform = the top K) and the
    same step as a FakeTensorMode dry run: the closed form within ±3% of both."""
    pytest.importorskip("peft")
    from introspect.measure import hf_models

    spec = _spec(LLAMA)
    s = torch_setup(k, **kw)
    est = refined.estimate(spec, s).total
    for device in ("cpu", "fake"):
        m, _ = hf_models.measure(LLAMA, "llama", spec, s, device=device, census=False)
        assert m.trainable_params == lora.trainable_parameters(spec, s)
        assert est == pytest.approx(m.peak_bytes, rel=0.03), device


def test_qlora_top_k_within_3_percent():
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("peft")
    from introspect.measure import hf_models

    spec = _spec(LLAMA)
    s = torch_setup(2, finetune="qlora", precision="bf16", weights_dtype="bf16")
    m, _ = hf_models.measure(LLAMA, "llama", spec, s, device="cpu", census=False)
    assert refined.estimate(spec, s).total == pytest.approx(m.peak_bytes, rel=0.03)


def test_measure_cli_dry_run_notes_the_blocks(capsys):
    pytest.importorskip("peft")
    argv = ["measure", "--layers", "4", "--d-emb", "64", "--heads", "4", "--vocab", "256"]
    argv += ["--seq", "32", "--llama", "--impl", "transformers", "--device", "fake"]
    assert main([*argv, "--num-layers", "2", "--no-census"]) == 0
    out = capsys.readouterr().out
    assert "layers_to_transform: the top 2 of 4" in out


# ---- MLX: the claim, then real mlx-lm steps ---------------------------------------------

QWEN2 = dict(
    model_type="qwen2", hidden_size=96, intermediate_size=192, num_hidden_layers=5,
    num_attention_heads=4, num_key_value_heads=2, vocab_size=1024,
    tie_word_embeddings=True, rms_norm_eps=1e-6,
)  # fmt: skip


def mlx_setup(k: int | None, framework: str = "mlx") -> TrainingSetup:
    return TrainingSetup(
        seq_len=64, batch_size=2, framework=framework, implementation="mlx_lm",
        device="cpu", finetune="lora", lora_rank=4, num_layers=k,
    )  # fmt: skip


def _mlx_step(raw: dict, s: TrainingSetup):
    pytest.importorskip("mlx_lm")
    from introspect.measure import mlx_lm_models

    spec = _spec(raw)
    m = mlx_lm_models.measure(raw, "qwen2", spec, s, compiled=s.framework == "mlx_compiled")
    return spec, m


def test_mlx_lm_adapts_the_top_k_blocks():
    pytest.importorskip("mlx_lm")
    from mlx.utils import tree_flatten

    from introspect.measure import mlx_lm_models

    spec, s = _spec(QWEN2), mlx_setup(2)
    model = mlx_lm_models.build(QWEN2, "qwen2")
    note = mlx_lm_models.to_lora(model, s)
    shapes = dict(tree_flatten(model.trainable_parameters()))
    assert {int(k.split(".")[2]) for k in shapes} == {3, 4}
    assert sum(v.size for v in shapes.values()) == lora.adapter_parameters(spec, s)
    assert "the top 2 of 5 blocks" in note


@pytest.mark.slow
def test_mlx_frozen_blocks_add_only_their_weights():
    """The claim on MLX: value_and_grad makes no VJP for the frozen blocks, so a K-block
    LoRA step on an L-block model holds, beyond its weights and Adam state, what a
    K-block model's LoRA step holds (measured: within 2%)."""
    from introspect.refined import mlx

    deep, shallow = QWEN2, dict(QWEN2, num_hidden_layers=2)
    spec_d, m_d = _mlx_step(deep, mlx_setup(2))
    spec_s, m_s = _mlx_step(shallow, mlx_setup(None))
    beyond_d = m_d.peak_bytes - sum(mlx.state_terms(spec_d, mlx_setup(2)).values())
    beyond_s = m_s.peak_bytes - sum(mlx.state_terms(spec_s, mlx_setup(None)).values())
    assert beyond_d == pytest.approx(beyond_s, rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["mlx", "mlx_compiled"])
@pytest.mark.parametrize("k", [2, 3])
def test_mlx_step_within_5_percent(framework, k):
    """Real mlx-lm LoRA steps (``linear_to_lora_layers(model, K, …)``) on CPU: the
    closed form (the K-layer LoRA counts beyond the whole model's state) within ±5%."""
    s = mlx_setup(k, framework)
    spec, m = _mlx_step(QWEN2, s)
    assert m.trainable_params == lora.adapter_parameters(spec, s)
    assert refined.estimate(spec, s).total == pytest.approx(m.peak_bytes, rel=0.05)


# ---- the config readers -----------------------------------------------------------------


def _config(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _resolved(capsys, argv) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["config"]["setup"]


def test_mlx_lm_num_layers_default_and_every_block(tmp_path, capsys):
    base = "model: Qwen/Qwen3-0.6B\nfine_tune_type: lora\nbatch_size: 1\nmax_seq_length: 256\n"
    default = _config(tmp_path, "a.yaml", base)
    got = _resolved(capsys, ["profile", "--config", default])["num_layers"]
    assert got["value"] == 16 and "mlx_lm/lora.py:59" in got["origin"]
    every = _config(tmp_path, "b.yaml", base + "num_layers: -1\n")
    got = _resolved(capsys, ["profile", "--config", every])["num_layers"]
    assert got["value"] is None and "every block" in got["origin"]
    # (the note it had before, "not modelled yet", is gone)
    assert main(["profile", "--config", default]) == 0
    assert "not modelled yet" not in capsys.readouterr().out
    # A flag wins over the file.
    got = _resolved(capsys, ["profile", "--config", default, "--num-layers", "4"])["num_layers"]
    assert got == {"value": 4, "origin": "flag --num-layers"}


def test_mlx_lm_num_layers_above_the_model_is_refused_as_mlx_lm_does(tmp_path, capsys):
    path = _config(tmp_path, "c.yaml", "model: Qwen/Qwen3-0.6B\nnum_layers: 40\n")
    assert main(["profile", "--config", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--num-layers 40" in err[0] and "c.yaml: num_layers" in err[0]


def test_axolotl_layers_to_transform(tmp_path, capsys):
    base = (
        "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
        "micro_batch_size: 1\nsequence_len: 256\n"
    )
    top = _config(tmp_path, "top.yaml", base + "peft_layers_to_transform: [20, 21, 22, 23]\n")
    got = _resolved(capsys, ["profile", "--config", top])["num_layers"]
    assert got["value"] == 4 and "peft_layers_to_transform" in got["origin"]
    low = _config(tmp_path, "low.yaml", base + "peft_layers_to_transform: [0, 1]\n")
    assert main(["profile", "--config", low]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "not the top 2 blocks" in err[0] and "peft_layers_to_transform" in err[0]
    )
    bad = _config(tmp_path, "bad.yaml", base + "peft_layers_to_transform: [a]\n")
    assert main(["profile", "--config", bad]) == 2
    assert "peft_layers_to_transform" in capsys.readouterr().err


QWEN2_MOE = dict(
    model_type="qwen2_moe", hidden_size=64, num_hidden_layers=3, intermediate_size=128,
    num_attention_heads=4, num_key_value_heads=2, vocab_size=512, num_experts=4,
    num_experts_per_tok=2, moe_intermediate_size=48, shared_expert_intermediate_size=64,
)  # fmt: skip


def test_moe_with_linear_experts_and_the_converted_ones():
    """Qwen2-MoE (peft adapts its shared expert's linears, the experts stay frozen): the
    top-K step within 3%. A model whose experts peft adapts as parameters (Qwen3-MoE)
    gets none from ``layers_to_transform``: refused, naming the flag."""
    pytest.importorskip("peft")
    from introspect.errors import IntrospectError
    from introspect.measure import hf_models

    spec = _spec(QWEN2_MOE)
    s = torch_setup(1)
    m, _ = hf_models.measure(QWEN2_MOE, "qwen2_moe", spec, s, device="cpu", census=False)
    assert m.trainable_params == lora.trainable_parameters(spec, s)
    assert refined.estimate(spec, s).total == pytest.approx(m.peak_bytes, rel=0.03)
    converted = _spec(
        dict(QWEN2_MOE, model_type="qwen3_moe", head_dim=16, moe_intermediate_size=48)
    )
    with pytest.raises(IntrospectError, match="--num-layers 1: peft adapts"):
        refined.estimate(converted, s)
    with pytest.raises(IntrospectError, match="--num-layers 1: peft adapts"):
        hf_models.measure(
            dict(QWEN2_MOE, model_type="qwen3_moe", head_dim=16), "qwen3_moe", converted, s,
            device="fake", census=False,
        )  # fmt: skip
