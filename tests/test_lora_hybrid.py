"""LoRA on hybrid stacks (Gated DeltaNet and Mamba-2 layers) as peft adapts them.

* Adapter counts: ``lora.trainable_parameters`` against a real ``get_peft_model`` on the
  real class (meta build) — peft's ``target_modules="all-linear"``
  (``peft/tuners/tuners_utils.py`` ``_maybe_include_all_linear_layers``: every
  ``nn.Linear`` but the output head, each layer's own mixer linears), peft's default
  targets for the model type (``peft/utils/constants.py``
  ``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``: Nemotron-H's q/k/v/o; the other
  types have none), and named targets, DeltaNet and Mamba-2 names among them.
* The Gated DeltaNet's saved set under LoRA against a census of the real mixer with
  peft's adapters injected and its own parameters frozen, to the byte (FP32, BF16,
  autocast; with and without dropout).
* The step: the closed form against the dry run of the real peft-wrapped class
  (``introspect measure --device fake --impl transformers --finetune lora``), FP32 eager,
  autocast with checkpointing and BF16 SDPA, within ±3%.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from mixer_stacks import SETUPS, measured  # noqa: E402
from test_deltanet_rows import QWEN3_NEXT  # noqa: E402
from test_hybrids import OLMO_HYBRID, QWEN3_5_MOE_TEXT, QWEN3_5_TEXT  # noqa: E402
from test_ssm import GRANITE, NEMOTRON_H  # noqa: E402

from introspect.refined import execution, lora  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

CONFIGS = {
    "qwen3_next": QWEN3_NEXT,
    "qwen3_5_text": QWEN3_5_TEXT,
    "qwen3_5_moe_text": QWEN3_5_MOE_TEXT,
    "olmo_hybrid": OLMO_HYBRID,
    "nemotron_h": NEMOTRON_H,
    "granitemoehybrid": GRANITE,
}

#: Named targets per family: the mixers' own linears, and names two layer kinds share
#: (OLMo-Hybrid's DeltaNet has q/k/v/o_proj too; Qwen3.5's gated attention's q_proj is
#: 2·q_dim wide).
NAMED = [
    ("qwen3_next", ("in_proj_qkvz", "in_proj_ba", "out_proj", "o_proj")),
    ("qwen3_5_text", ("in_proj_qkv", "in_proj_z", "out_proj")),
    ("qwen3_5_text", ("q_proj", "v_proj", "in_proj_b", "in_proj_a", "down_proj")),
    ("qwen3_5_moe_text", ("in_proj_qkv", "out_proj", "shared_expert_gate")),
    ("olmo_hybrid", ("q_proj", "v_proj")),
    ("olmo_hybrid", ("a_proj", "b_proj", "g_proj", "o_proj")),
    ("nemotron_h", ("in_proj",)),
    ("nemotron_h", ("in_proj", "up_proj", "o_proj")),
    ("granitemoehybrid", ("in_proj", "out_proj", "q_proj")),
]


def _peft_count(config: dict, target_modules, r: int) -> int:
    keys = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(config["model_type"], **keys)
        )
    kw = {} if target_modules is None else {"target_modules": target_modules}
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=r, **kw))
    return sum(p.numel() for p in wrapped.parameters() if p.requires_grad)


def _ours(config: dict, targets: tuple[str, ...], r: int) -> int:
    spec = spec_from_config(dict(config))
    s = TrainingSetup(seq_len=32, finetune="lora", lora_rank=r, lora_targets=targets)
    return lora.trainable_parameters(spec, s)


@pytest.mark.parametrize("family", sorted(set(CONFIGS) - {"nemotron_h"}))
@pytest.mark.parametrize("r", [4, 8])
def test_all_linear_adapters_are_peft_s(family, r):
    """Every layer's own linears: the DeltaNet's, Mamba-2's in_proj/out_proj (Granite
    4.0-H), the gated attention's 2·q_dim q_proj."""
    config = CONFIGS[family]
    assert _ours(config, ("all-linear",), r) == _peft_count(config, "all-linear", r)


@pytest.mark.parametrize("targets", [("all-linear",), ("in_proj", "out_proj")])
def test_out_proj_on_nemotron_h_is_refused_as_peft_refuses_it(targets):
    """peft's ``_check_lora_target_modules_mamba`` refuses out_proj on nemotron_h (and
    so all-linear, which reaches the Mamba-2 mixers' out_proj): one IntrospectError."""
    from introspect.errors import IntrospectError

    with pytest.raises(ValueError, match="out_proj"):
        _peft_count(NEMOTRON_H, "all-linear" if targets[0] == "all-linear" else list(targets), 8)
    with pytest.raises(IntrospectError, match="out_proj"):
        _ours(NEMOTRON_H, targets, 8)


@pytest.mark.parametrize("family,targets", NAMED, ids=[f"{f}-{'-'.join(t)}" for f, t in NAMED])
def test_named_adapters_are_peft_s(family, targets):
    config = CONFIGS[family]
    assert _ours(config, targets, 8) == _peft_count(config, list(targets), 8)


def test_peft_default_targets_for_nemotron_h():
    """peft's default for ``nemotron_h`` (no target_modules): q/k/v/o_proj, which only
    the attention block has."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as M

    default = tuple(M["nemotron_h"])
    assert _ours(NEMOTRON_H, default, 8) == _peft_count(NEMOTRON_H, None, 8)
    assert _ours(NEMOTRON_H, default, 8) < _ours(NEMOTRON_H, ("in_proj", *default), 8)


def test_a_name_no_layer_has_is_refused():
    from introspect.errors import IntrospectError

    with pytest.raises(IntrospectError, match="in_proj_qkvz"):
        _ours(QWEN3_5_TEXT, ("in_proj_qkvz",), 8)


#: The DeltaNet mixers' linears (peft's target names) and their classes.
MIXERS = {
    "qwen3_next": ("in_proj_qkvz", "in_proj_ba", "out_proj"),
    "qwen3_5_text": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"),
    "olmo_hybrid": ("q_proj", "k_proj", "v_proj", "a_proj", "b_proj", "g_proj", "o_proj"),
}


def _mixer(family: str):
    config = CONFIGS[family]
    keys = {k: v for k, v in config.items() if k != "model_type"}
    cfg = transformers.AutoConfig.for_model(config["model_type"], **keys)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    index = cfg.layer_types.index("linear_attention")
    return model.model.layers[index].linear_attn


def _lora_census(family: str, precision: str, B: int, T: int, dropout: float) -> int:
    """Bytes the real mixer saves with peft's adapters on its linears (its parameters
    frozen, the adapters FP32 as ``get_peft_model`` keeps them): every storage made
    inside it (:func:`hf_steps.mixer_saved_bytes`' rule: not its input, no parameter)."""
    from introspect.measure.census import census

    mixer = _mixer(family)
    mixer.requires_grad_(False)
    cfg = peft.LoraConfig(r=8, target_modules=list(MIXERS[family]), lora_dropout=dropout)
    peft.inject_adapter_in_model(cfg, mixer)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    mixer.to(dtype)
    for name, p in mixer.named_parameters():
        if "lora_" in name:
            p.data = p.data.float()
    holder = torch.nn.ModuleDict({"mixer": mixer})
    leaf = torch.randn(B, T, mixer.hidden_size, dtype=dtype, requires_grad=True)
    x = leaf * 1.0  # a norm's output, not a leaf

    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "amp")

    def forward():
        with autocast:
            return holder["mixer"](x).sum()

    cen = census(holder, forward, tokens=B * T, seq_len=T)
    return sum(row[4] for row in cen.rows if row[0].startswith("mixer"))


def _lora_closed(family: str, precision: str, B: int, T: int, dropout: float) -> int:
    """The DeltaNet kind's LoRA saved set (:func:`lora.per_layer`) on its mixer's own
    terms: the mixer's (``attention/``, but the block's ``attention/linear/out``, which
    the mixer's output makes outside it) and its adapters' (``lora/``), targets the
    mixer's linears only."""
    spec = spec_from_config(dict(CONFIGS[family]))
    kind = next(k for k, _ in spec.kinds if k.attention.kind == "linear")
    one = spec.for_kind(kind)
    attention = "eager" if precision == "fp32" else "memory_efficient"
    s = TrainingSetup(
        batch_size=B, seq_len=T, precision=precision, attention=attention, device="cpu",
        finetune="lora", lora_rank=8, lora_targets=MIXERS[family], lora_dropout=dropout,
        implementation="transformers",
    )  # fmt: skip
    layer = execution.layer_saved(one, s)
    mine = [k for k in layer if k.startswith(("attention/", "lora/"))]
    return sum(layer[k] for k in mine if k != "attention/linear/out")


@pytest.mark.parametrize("family", sorted(MIXERS))
@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_deltanet_lora_saved_set_equals_the_census(family, precision, B, T, dropout):
    """Frozen, the gated norm's weight keeps no normalized input and A_log's side no
    softplus output (``lora._frozen_deltanet``); out_proj's input is kept by its
    adapter (FP32: the input itself; BF16: its FP32 cast, in ``lora/inputs``); each
    adapter keeps its lora_A output; with dropout each its dropped input and mask (CPU:
    the input's dtype). Under autocast the frozen projections keep no BF16 cast of
    their input, and each adapter's weights get BF16 copies."""
    closed = _lora_closed(family, precision, B, T, dropout)
    assert closed == _lora_census(family, precision, B, T, dropout)


LORA = ["--finetune", "lora", "--lora-rank", "8"]


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("family", sorted(set(CONFIGS) - {"nemotron_h", "granitemoehybrid"}))
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
def test_lora_step_is_within_3_percent_of_the_dry_run(tmp_path, capsys, setup, family, B, T):
    """All-linear LoRA on the DeltaNet stacks (FP32 eager, autocast with checkpointing,
    BF16 SDPA): without checkpointing Qwen3-Next's peak inside the topmost
    DeltaNet's forward (``execution.mixer_forward`` with ``lora.deltanet_at_forward_peak``),
    the others' in backward, each DeltaNet layer's dropped last state update freed. In
    the kernel's backward the input projections' adapters are still held
    (``lora.deltanet_at_backward_peak``: OLMo-Hybrid at B=1, T=100 under autocast with
    checkpointing 1.034 of the closed form without them)."""
    row = measured(tmp_path, capsys, CONFIGS[family], [*SETUPS[setup], *LORA], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("setup", ["fp32 eager", "bf16 sdpa"])
@pytest.mark.parametrize("family", ["qwen3_5_text", "olmo_hybrid"])
def test_lora_on_the_top_layers_is_within_3_percent_of_the_dry_run(tmp_path, capsys, setup, family):
    """``--num-layers 2`` (peft's ``layers_to_transform``): the frozen blocks below keep
    nothing, at the forward's DeltaNet moment too (``execution.mixer_forward``)."""
    flags = [*SETUPS[setup], *LORA, "--num-layers", "2"]
    row = measured(tmp_path, capsys, CONFIGS[family], flags, 2, 64)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)
