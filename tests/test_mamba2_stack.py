"""The pure Mamba-2 stack (``model_type`` mamba2, transformers' ``Mamba2ForCausalLM``) in
closed form (issue 22: pure state-space models as layer kinds): its reader
(``adapters/families/mamba.py`` :func:`~introspect.adapters.families.mamba.mamba2`), the
real ``Mamba2Mixer``'s saved set against :func:`introspect.refined.mamba2.saved` (its
``forward`` is ``NemotronHMamba2Mixer``'s line for line), the exact count against the
meta-device build, and the closed form of the stack against the dry run of the real class
(``introspect measure --device fake``) for FP32 eager, autocast with checkpointing and
BF16 eager (the class has no SDPA path), within ±3%. Bad sizes are one line naming the
file and key; LoRA on the mixer stays refused."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_steps import mixer_saved_bytes  # noqa: E402
from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from mixer_stacks import SETUPS, count_is_the_meta_build, measured, one_line_error  # noqa: E402

from introspect.cli import main  # noqa: E402
from introspect.refined import mamba2  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

HIDDEN = 64

#: Pure Mamba-2 at a small shape: 3 blocks, I = expand·d = 128 = 8 heads of 16, 2 groups
#: of 8 states, chunks of 16 (pad and eos inside the small vocabulary).
MAMBA2 = {
    "model_type": "mamba2",
    "hidden_size": HIDDEN,
    "num_hidden_layers": 3,
    "num_heads": 8,
    "head_dim": 16,
    "state_size": 8,
    "n_groups": 2,
    "chunk_size": 16,
    "vocab_size": 256,
    "pad_token_id": 0,
    "bos_token_id": 0,
    "eos_token_id": 0,
}

#: The setups the class runs: it has no SDPA path, so BF16 is run eager.
STACK_SETUPS = {
    "fp32 eager": SETUPS["fp32 eager"],
    "autocast + checkpointing": [*SETUPS["autocast + checkpointing"], "--attention", "eager"],
    "bf16 eager": ["--precision", "bf16", "--attention", "eager"],
}


def _mixer(heads: int, head_dim: int, state: int, groups: int, chunk: int):
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    cfg = transformers.Mamba2Config(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_heads=heads,
        head_dim=head_dim,
        expand=heads * head_dim // HIDDEN,
        state_size=state,
        n_groups=groups,
        chunk_size=chunk,
    )
    torch.manual_seed(0)
    layer = Mamba2Mixer(cfg, 0)
    spec = spec_from_config(
        {**MAMBA2, "num_heads": heads, "head_dim": head_dim, "expand": cfg.expand,
         "state_size": state, "n_groups": groups, "chunk_size": chunk}
    )  # fmt: skip
    return layer, spec.runs[0].kind.attention


@pytest.mark.parametrize("precision", ["fp32", "bf16", "amp"])
@pytest.mark.parametrize("B,T", [(1, 16), (2, 40), (1, 100)])  # one chunk, padded, several
@pytest.mark.parametrize("sizes", [(8, 16, 8, 2, 16), (4, 64, 16, 1, 32)])
def test_mamba2_mixer_saved_set_equals_the_census(precision, B, T, sizes):
    """The reader's mixer priced by :func:`mamba2.saved` is what the real ``Mamba2Mixer``
    saves, to the byte."""
    layer, att = _mixer(*sizes)
    setup = TrainingSetup(batch_size=B, seq_len=T, precision=precision)
    closed = sum(mamba2.saved(att, setup, HIDDEN).values())
    assert closed == mixer_saved_bytes(layer, "mixer", precision, B, T, HIDDEN)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"use_bias": True, "use_conv_bias": False, "tie_word_embeddings": True},
        {"n_groups": 1, "conv_kernel": 3, "expand": 4, "num_heads": 16},
        None,  # the class default (4096 wide, 64 layers, 128 heads of 64, 8 groups)
    ],
)
def test_mamba2_stack_is_exact_and_holds_no_attention(extra):
    if extra is None:
        config = {"model_type": "mamba2", **transformers.Mamba2Config().to_dict()}
    else:
        config = {**MAMBA2, **extra}
    spec = count_is_the_meta_build(config)
    kinds = [(r.kind.attention.kind, r.kind.feed_forward.ffn, r.kind.norms) for r in spec.runs]
    assert kinds == [("mamba2", "none", 1)]
    assert spec.runs[0].count == config["num_hidden_layers"]


def test_mamba_ssm_keys_the_class_ignores_are_noted():
    """``norm_before_gate`` and ``rms_norm`` (the original mamba_ssm keys) change nothing in
    transformers' classes: the reader says so and prices the class's gate-then-norm."""
    plain = spec_from_config(dict(MAMBA2))
    spec = spec_from_config({**MAMBA2, "norm_before_gate": True, "rms_norm": False})
    assert spec.n_params == plain.n_params
    noted = " ".join(spec.assumptions)
    assert "norm_before_gate=true ignored" in noted and "rms_norm=false ignored" in noted


@pytest.mark.parametrize("setup", list(STACK_SETUPS))
@pytest.mark.parametrize("B,T", [(2, 64), (1, 100)])
def test_mamba2_closed_form_is_within_3_percent_of_the_dry_run(tmp_path, capsys, setup, B, T):
    row = measured(tmp_path, capsys, MAMBA2, STACK_SETUPS[setup], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("fp32_stream", [True, False])
@pytest.mark.parametrize("B,T", [(2, 64), (4, 256)])
def test_a_bf16_step_prices_residual_in_fp32_either_way(tmp_path, capsys, fp32_stream, B, T):
    """``residual_in_fp32`` (the class default true) makes a BF16 step's stream FP32, and
    its final norm keeps x·rstd in FP32; false leaves the stream BF16. The spec carries
    the key, and the closed form follows the dry run both ways."""
    config = {**MAMBA2, "residual_in_fp32": fp32_stream}
    assert spec_from_config(dict(config)).residual_in_fp32 is fp32_stream
    row = measured(tmp_path, capsys, config, STACK_SETUPS["bf16 eager"], B, T)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_mamba2_forward_peak_at_the_default_widths_is_within_3_percent_of_the_dry_run(
    tmp_path, capsys, precision
):
    """At the class's widths (128 heads of 64, 8 groups of 128 states, chunks of 256) and
    T = 300 (two chunks, padded) the step's peak is inside the top layer's scan in the
    forward, not at the forward's end: the ``attention/mamba/forward`` moment (BF16 was
    0.967 of the dry run without it)."""
    config = {"model_type": "mamba2", **transformers.Mamba2Config().to_dict()}
    config.update(num_hidden_layers=2, vocab_size=512)
    flags = ["--precision", precision, "--attention", "eager"]
    row = measured(tmp_path, capsys, config, flags, 2, 300)
    assert row["measured_over_refined"] == pytest.approx(1.0, abs=0.03)


def test_a_checkpointed_mamba2_stack_keeps_no_causal_mask():
    """``Mamba2Model`` builds only ``create_recurrent_attention_mask``'s 2D padding mask
    (None for an unpadded batch): no (B, 1, T, T) mask for the checkpoints to keep."""
    from introspect.refined import hf_saved

    spec = spec_from_config(dict(MAMBA2))
    setup = TrainingSetup(
        batch_size=2, seq_len=64, precision="amp", activation_checkpointing=True, attention="eager"
    )
    assert not hf_saved.takes_causal_mask(spec)
    assert "activations/attention_mask" not in hf_saved.embedding(spec, setup)


@pytest.mark.parametrize(
    "change,key",
    [
        ({"expand": 3}, "expand"),  # 3·64 = 192, not 8 heads × 16
        ({"head_dim": 8}, "head_dim"),
        ({"n_groups": 3}, "n_groups"),  # does not divide 8 heads
        ({"conv_kernel": 0}, "conv_kernel"),
        ({"state_size": 0}, "state_size"),
        ({"chunk_size": -16}, "chunk_size"),
    ],
)
def test_inconsistent_mamba2_sizes_are_one_line_naming_file_and_key(tmp_path, capsys, change, key):
    path = tmp_path / "mamba2.json"
    path.write_text(json.dumps({**MAMBA2, **change}))
    assert main(["profile", str(path)]) == 2
    line = one_line_error(capsys)
    assert str(path) in line and key in line


def test_lora_on_the_mamba2_stack_is_refused(tmp_path, capsys):
    """LoRA on a Mamba-2 mixer's in_proj/out_proj is not modelled: one line naming the flag."""
    path = tmp_path / "mamba2.json"
    path.write_text(json.dumps(MAMBA2))
    assert main(["profile", str(path), "--finetune", "lora"]) == 2
    line = one_line_error(capsys)
    assert line.split("error: ")[1].startswith("--finetune lora") and "Mamba-2" in line
