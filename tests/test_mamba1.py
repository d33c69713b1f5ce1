"""State-space layers as layer kinds (issue 22, item 2): the Mamba-1 mixer's closed form
(:mod:`introspect.refined.mamba1`) against a census of transformers' real
``MambaMixer``, ``FalconMambaMixer`` and ``JambaMambaMixer`` (their torch path: no
``mamba_ssm``, no ``causal_conv1d``), exact parameter counts against the meta-device
build, and the closed form of Mamba, Falcon-Mamba and Jamba stacks against the dry run of
the real class — ``introspect measure --device fake`` — for FP32 eager, autocast with
checkpointing, and BF16 (SDPA where the class has attention), within ±3%. Bad
state-space sizes are one line naming the file and key."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.layers import Attention  # noqa: E402
from introspect.refined import mamba1  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: Pure Mamba at a small shape: 3 blocks of 128 channels × 8 states, dt rank 4.
MAMBA = {
    "model_type": "mamba",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 3,
    "state_size": 8,
    "vocab_size": 256,
    "time_step_rank": 4,
}
FALCON_MAMBA = {**MAMBA, "model_type": "falcon_mamba"}
#: Jamba: mixers on layers 0 and 2, attention on 1 and 3; experts on layers 0 and 2.
JAMBA = {
    "model_type": "jamba",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "intermediate_size": 96,
    "attn_layer_period": 2,
    "attn_layer_offset": 1,
    "expert_layer_period": 2,
    "expert_layer_offset": 0,
    "num_experts": 4,
    "mamba_d_state": 8,
    "mamba_dt_rank": 4,
}
NORMS = {"mamba": "none", "falcon_mamba": "weightless", "jamba": "weighted"}


def _mixer(family: str, state: int, rank: int):
    if family == "mamba":
        from transformers.models.mamba.modeling_mamba import MambaMixer

        cfg = transformers.MambaConfig(
            hidden_size=HIDDEN, state_size=state, num_hidden_layers=2, time_step_rank=rank
        )
        layer = MambaMixer(cfg, 0)
    elif family == "falcon_mamba":
        from transformers.models.falcon_mamba.modeling_falcon_mamba import FalconMambaMixer

        cfg = transformers.FalconMambaConfig(
            hidden_size=HIDDEN, state_size=state, num_hidden_layers=2, time_step_rank=rank
        )
        # Its own weight init reads the dt/B/C norms before they exist (5.24); the
        # model builds it so too (FalconMambaBlock).
        layer = FalconMambaMixer(cfg, 0, initialize_mixer_weights=False)
    else:
        from transformers.models.jamba.modeling_jamba import JambaMambaMixer

        cfg = transformers.JambaConfig(
            hidden_size=HIDDEN,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            mamba_d_state=state,
            mamba_dt_rank=rank,
        )
        layer = JambaMambaMixer(cfg, 0)
    att = Attention(
        kind="mamba1",
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=1,
        mamba_inner_size=2 * HIDDEN,
        mamba_state_size=state,
        mamba_conv_kernel=4,
        mamba_dt_rank=rank,
        mamba_bcdt_norm=NORMS[family],
    )
    return layer, att


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(2, 5), (1, 7), (3, 1), (3, 9)])  # B or T of 1: no copy
@pytest.mark.parametrize("family,state,rank", [("mamba", 8, 4), ("falcon_mamba", 4, 6),
                                               ("jamba", 8, 4)])  # fmt: skip
def test_mamba1_saved_set_equals_the_census(precision, B, T, family, state, rank):
    torch.manual_seed(0)
    layer, att = _mixer(family, state, rank)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(mamba1.saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(layer, "mamba", precision, B, T, HIDDEN)


@pytest.mark.parametrize(
    "config",
    [
        MAMBA,
        {**MAMBA, "use_bias": True, "use_conv_bias": False, "tie_word_embeddings": False},
        {**MAMBA, "time_step_rank": "auto", "expand": 3},
        FALCON_MAMBA,
        {**FALCON_MAMBA, "use_bias": True},
    ],
)
def test_pure_state_space_stack_is_exact_and_holds_no_attention(config):
    spec = count_is_the_meta_build(config)
    assert [(r.kind.attention.kind, r.kind.feed_forward.ffn, r.kind.norms) for r in spec.runs] == [
        ("mamba1", "none", 1)
    ]
    assert spec.runs[0].count == config["num_hidden_layers"]


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"mamba_proj_bias": True, "mamba_conv_bias": False, "tie_word_embeddings": True},
        {"num_experts": 1},  # no routed experts: a gated MLP everywhere
        {"attn_layer_period": 4, "attn_layer_offset": 3, "mamba_dt_rank": "auto"},
    ],
)
def test_jamba_parametercount_is_the_meta_build(extra):
    spec = count_is_the_meta_build({**JAMBA, **extra})
    if not extra:
        kinds = [(r.kind.attention.kind, r.kind.feed_forward.num_experts) for r in spec.runs]
        assert kinds == [("mamba1", 4), ("full", 0), ("mamba1", 4), ("full", 0)]
        assert not any(r.kind.attention.rope for r in spec.runs if r.kind.attention.kind == "full")


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("variant,B,T", [("mamba", 2, 32), ("falcon_mamba", 1, 64),
                                         ("jamba", 2, 32)])  # fmt: skip
def test_mamba1_closed_form_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, setup, variant, B, T
):
    config = {"mamba": MAMBA, "falcon_mamba": FALCON_MAMBA, "jamba": JAMBA}[variant]
    flags = SETUPS[setup]
    if variant != "jamba" and "memory-efficient" in flags:
        # No attention: MambaForCausalLM refuses an SDPA request; BF16 is the setup.
        flags = ["--precision", "bf16", "--attention", "eager"]
    row = measured(tmp_path, capsys, config, flags, B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(
    "config,change,key",
    [
        (MAMBA, {"conv_kernel": 0}, "conv_kernel"),
        (MAMBA, {"time_step_rank": 0}, "time_step_rank"),
        (MAMBA, {"time_step_rank": -4}, "time_step_rank"),
        (MAMBA, {"expand": 0}, "expand"),
        (MAMBA, {"state_size": 0}, "state_size"),
        (FALCON_MAMBA, {"conv_kernel": 0}, "conv_kernel"),
        (JAMBA, {"mamba_d_conv": 0}, "mamba_d_conv"),
        (JAMBA, {"mamba_dt_rank": 0}, "mamba_dt_rank"),
        (JAMBA, {"attn_layer_offset": 2}, "attn_layer_offset"),  # not below the period
    ],
)
def test_inconsistent_state_space_sizes_are_one_line_naming_file_and_key(
    tmp_path, capsys, config, change, key
):
    path = tmp_path / "ssm.json"
    path.write_text(json.dumps({**config, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


@pytest.mark.parametrize(
    "flags,flag",
    [
        (["--finetune", "lora"], "--finetune lora"),
        (["--framework", "mlx"], "--framework mlx"),
        (["--tp", "2"], "--tp 2"),
    ],
)
def test_setups_the_mamba1_closed_form_does_not_model_are_refused(tmp_path, capsys, flags, flag):
    path = tmp_path / "mamba.json"
    path.write_text(json.dumps(MAMBA))
    assert main(["profile", str(path), *flags]) == 2
    line = one_line_error(capsys)
    assert line.split("error: ")[1].startswith(flag) and "Mamba-1" in line
