"""mlx-lm's LoRA where its counts do not describe the step — named keys not derived for
the structure, checkpointing with named keys or a dropout, another optimizer, the
reference model — gets no torch
moments (issue 23): one line says what is not derived, and ``introspect profile``
answers with the MLX dry run of mlx-lm's own class (checkpointed steps included:
``mx.checkpoint``'s graph built by hand, :mod:`introspect.measure.mlx_replay_ckpt`),
checked here against real mlx-lm LoRA steps at tiny shapes."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from specs import mlx_lm_setup  # noqa: E402

from introspect import refined  # noqa: E402
from introspect.refined import mlx  # noqa: E402
from introspect.refined.lora import adapter_parameters  # noqa: E402
from introspect.unmodelled import NotModelled  # noqa: E402

pytestmark = pytest.mark.slow

#: A tiny Qwen3 (q/k norms) and Llama (tied), no derivation shape (those: d = 128).
QWEN3 = dict(
    model_type="qwen3", hidden_size=96, num_hidden_layers=4, num_attention_heads=6,
    num_key_value_heads=2, head_dim=16, intermediate_size=160, vocab_size=3000,
    rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096, tie_word_embeddings=True,
)  # fmt: skip
LLAMA = dict(
    model_type="llama", hidden_size=96, num_hidden_layers=4, num_attention_heads=6,
    num_key_value_heads=2, intermediate_size=160, vocab_size=3000, rms_norm_eps=1e-5,
    rope_theta=10000.0, max_position_embeddings=4096, tie_word_embeddings=True,
)  # fmt: skip
#: Named keys no structure's counts are derived for.
UNDERIVED_KEYS = ("k_proj", "q_proj")


def spec_of(cfg: dict):
    return spec_from_config(cfg, source=cfg["model_type"], use_transformers=False)


def lora_setup(dtype: str = "fp32", compiled: bool = False, **kw):
    return mlx_lm_setup(dtype, compiled, batch=2, seq=128).replace(
        finetune="lora", lora_rank=4, **kw
    )


@pytest.mark.parametrize(
    "change,named",
    [
        (dict(lora_targets=UNDERIVED_KEYS), "with keys k_proj, q_proj"),
        (dict(activation_checkpointing=True, lora_dropout=0.05), "with --checkpointing and"),
        (dict(activation_checkpointing=True, lora_targets=UNDERIVED_KEYS), "with --checkpointing"),
        (dict(optimizer="sgd"), "with --optimizer sgd"),
        (dict(implementation="reference"), "with --impl reference"),
    ],
)
def test_lora_outside_the_counts_is_one_line_never_torch_moments(change, named):
    """A derived structure (Llama, Qwen3) with a setup its LoRA counts do not describe:
    the estimate refuses it in the one line that names what is not derived (the MLX dry
    run answers), the counts do not apply, and fit proposes nothing on it — where torch's
    moments priced it before. mlx-lm's default keys on the same spec stay derived."""
    from introspect.commands.fit import _model_takes

    for cfg in (LLAMA, QWEN3):
        spec = spec_of(cfg)
        assert mlx.structure_of(spec, lora_setup()) in mlx.LORA_STRUCTURES
        assert mlx.applies(lora_setup(), spec) and not mlx.lora_not_derived(spec, lora_setup())
        setup = lora_setup(**change)
        why = mlx.lora_not_derived(spec, setup)
        assert named in why and "answered by the MLX dry run" in why
        assert "\n" not in why and not mlx.applies(setup, spec)
        with pytest.raises(NotModelled, match="answered by the MLX dry run"):
            refined.estimate(spec, setup)
        assert not _model_takes(spec, setup) and _model_takes(spec, lora_setup())


def test_every_linear_named_is_mlx_lm_default_keys():
    """Naming every linear of the block converts the same modules as mlx-lm's default
    keys (``linear_to_lora_layers``): the all-linear counts, the same estimate."""
    spec = spec_of(LLAMA)
    every = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    named = lora_setup(lora_targets=every)
    assert mlx.lora_keys(spec, named) == () and not mlx.lora_not_derived(spec, named)
    assert refined.estimate(spec, named).total == refined.estimate(spec, lora_setup()).total


def test_profile_answers_underived_keys_with_the_dry_run_and_fit_refuses(tmp_path, capsys):
    """``introspect profile`` on mlx-lm's LoRA with keys not derived: the not-derived line
    and the MLX dry run of the class with those keys — within 5% of a real step with the
    same keys — and no closed-form or torch figure; ``introspect fit`` refuses in that
    one line instead of deciding on torch's moments."""
    from introspect.cli import main
    from introspect.measure import mlx_lm_models

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3))
    flags = ["--framework", "mlx", "--finetune", "lora", "--lora-rank", "4"]
    flags += ["--lora-targets", *UNDERIVED_KEYS, "--seq", "128", "--batch", "2"]
    assert main(["profile", str(path), *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimates"] is None and out["answer"] == "dry_run"
    assert "with keys k_proj, q_proj" in out["unmodelled"][0]
    answer = out["dry_run"]
    spec, setup = spec_of(QWEN3), lora_setup(lora_targets=UNDERIVED_KEYS)
    assert answer["trainable_params"] == adapter_parameters(spec, setup)
    assert any("keys self_attn." in n for n in answer["notes"])
    m = mlx_lm_models.measure(QWEN3, "qwen3", spec, setup, compiled=False, repeats=2)
    assert answer["peak_bytes"] == pytest.approx(m.peak_bytes, rel=0.05)
    assert main(["profile", str(path), *flags]) == 0
    text = capsys.readouterr().out
    assert "with keys k_proj, q_proj" in text and "torch" not in text
    assert f"({answer['peak_bytes']:,} bytes)" in text and "refined" not in text
    assert main(["fit", str(path), *flags, "--budget", "8GB"]) == 2
    err = capsys.readouterr().err.strip()
    assert "with keys k_proj, q_proj" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "cfg,change,dtype,compiled",
    [
        (QWEN3, {}, "fp32", False),
        (LLAMA, dict(num_layers=2), "fp32", False),
        (LLAMA, dict(lora_targets=("q_proj", "v_proj")), "bf16", True),
    ],
)
def test_checkpointed_lora_dry_run_beside_a_real_step(cfg, change, dtype, compiled):
    """mlx-lm's checkpointed LoRA step (``grad_checkpoint``: ``mx.checkpoint`` around
    every layer): the MLX dry run (the graph built by hand,
    :func:`introspect.measure.mlx_replay_ckpt.checkpointed_step`, over the adapters only;
    the frozen blocks below ``num_layers`` differentiated for nothing) within 5% of the
    real step's peak, and below the same step without checkpointing. With every linear
    adapted the closed form's checkpointed LoRA counts (``python
    benchmarks/mlx_derive_ckpt.py --lora``, read at d = 128: this shape is held out)
    price it, within 5% of the real step too; the named keys are not derived so."""
    from introspect.measure import mlx_lm_models, mlx_lora_dry_run

    spec = spec_of(cfg)
    setup = lora_setup(dtype, compiled, activation_checkpointing=True, **change)
    why = mlx.lora_not_derived(spec, setup)
    assert ("with --checkpointing" in why) == ("lora_targets" in change)
    dry = mlx_lora_dry_run.dry_run(cfg, cfg["model_type"], spec, setup)
    assert dry.trainable_params == adapter_parameters(spec, setup)
    m = mlx_lm_models.measure(cfg, cfg["model_type"], spec, setup, compiled=compiled, repeats=2)
    assert dry.peak_bytes == pytest.approx(m.peak_bytes, rel=0.05)
    if not why:
        assert refined.estimate(spec, setup).total == pytest.approx(m.peak_bytes, rel=0.05)
    plain = mlx_lora_dry_run.dry_run(
        cfg, cfg["model_type"], spec, setup.replace(activation_checkpointing=False)
    )
    assert dry.peak_bytes < plain.peak_bytes


@pytest.mark.parametrize("keys", sorted(mlx.NAMED_KEYS))
def test_named_keys_counts_are_derived_at_every_depth_up_to_ten(keys):
    """Each structure's counts for named keys (``python benchmarks/mlx_derive.py
    --lora-keys``) have, like the all-linear ones, whole tensors at L = 1–10, 16 and 32,
    so no depth up to 32 is extrapolated; they hold the adapters' kinds of those keys."""
    from introspect.refined.mlx_counts import all_counts

    derived = all_counts()
    for structure in mlx.NAMED_KEYS[keys]:
        for dtype in ("fp32", "bf16"):
            for compiled in (False, True):
                k = mlx.key(structure, dtype, compiled, lora=True, keys=keys)
                assert k.endswith("/lora/" + ",".join(keys))
                for c in derived[k]:
                    assert set(c.at) == set(mlx.DEPTHS)
                    assert set(c.shallow) == {1, 2, 3} and set(c.between) == {5, 6, 7, 8, 9}
                    for counts in (*c.at.values(), *c.shallow.values(), *c.between.values()):
                        assert all(isinstance(v, int) for v in counts.values())
                        assert "f·r" not in counts  # no adapter on the feed-forward


@pytest.mark.parametrize(
    "cfg,keys,dtype,compiled",
    [
        (QWEN3, ("q_proj", "v_proj"), "fp32", False),
        (QWEN3, ("q_proj", "v_proj"), "bf16", True),
        (LLAMA, ("q_proj", "k_proj", "v_proj", "o_proj"), "bf16", False),
        (LLAMA, ("q_proj", "v_proj"), "fp32", True),
        (dict(LLAMA, tie_word_embeddings=False), ("q_proj", "v_proj"), "bf16", False),
    ],
)
def test_named_keys_closed_form_within_5_percent_of_a_real_step(cfg, keys, dtype, compiled):
    """A real mlx-lm LoRA step with named keys at a shape no count was read at: the
    closed form from those keys' own counts — no not-derived line, no torch's moments —
    within 5% of its measured peak, and below the all-linear step's estimate."""
    from introspect.measure import mlx_lm_models

    spec = spec_of(cfg)
    setup = lora_setup(dtype, compiled, lora_targets=keys)
    assert mlx.lora_keys(spec, setup) == tuple(sorted(keys))
    assert not mlx.lora_not_derived(spec, setup) and mlx.applies(setup, spec)
    m = mlx_lm_models.measure(cfg, cfg["model_type"], spec, setup, compiled=compiled, repeats=2)
    assert m.trainable_params == adapter_parameters(spec, setup)
    estimate = refined.estimate(spec, setup)
    assert "torch" not in estimate.execution.label
    assert estimate.total == pytest.approx(m.peak_bytes, rel=0.05)
    assert estimate.total < refined.estimate(spec, lora_setup(dtype, compiled)).total


def test_the_mlx_tune_qv_row_is_priced_by_its_keys_counts_and_a_setup_without_by_the_dry_run():
    """benchmarks/metal_published.py's mlx-tune Qwen3-0.6B q/v row (issue 23: torch's
    moments, 5.873 GB at the bound, before): priced from Qwen3's q/v counts now, within
    5% of the MLX dry run of the same setup; the same row checkpointed, which no counts
    describe, is priced by the dry run (the label the not-derived line)."""
    import importlib.util
    import sys
    from pathlib import Path

    from introspect.adapters import resolve

    from introspect.measure import mlx_lora_dry_run
    from introspect.refined.implementations import resolve_attention
    from introspect.setup import TrainingSetup

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    loaded = importlib.util.spec_from_file_location(
        "metal_published", root / "benchmarks" / "metal_published.py"
    )
    published = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(published)
    (row,) = [r for r in published.ROWS if r["id"] == "mlx-tune-qwen3-0.6b-qv-T<=1024"]
    result = published.estimate_row(row)
    assert "torch" not in result["label"] and "not derived" not in result["label"]
    spec = resolve(row["model"]).spec
    setup = TrainingSetup(framework=published.framework_of(row), **row["flags"])
    setup = resolve_attention(spec, setup)
    assert mlx.lora_keys(spec, setup) == ("q_proj", "v_proj")
    dry = mlx_lora_dry_run.answer(row["model"], spec, setup)
    assert refined.estimate(spec, setup).total == pytest.approx(dry["peak_bytes"], rel=0.05)
    checkpointed = dict(row, flags=dict(row["flags"], activation_checkpointing=True, seq_len=256))
    result = published.estimate_row(checkpointed)
    assert "with --checkpointing: answered by the MLX dry run" in result["label"]
    assert all(k.startswith("dry_run/") for k, _ in result["largest_terms"])
    found = mlx_lora_dry_run.answer(
        row["model"], spec, setup.replace(activation_checkpointing=True, seq_len=256)
    )
    assert result["estimate_bytes"] >= found["peak_bytes"]


def test_fit_knob_rows_with_grad_checkpoint_are_searched_on_every_linear(tmp_path, capsys):
    """``introspect fit`` on mlx-lm's default LoRA (every linear) of a Qwen3: the knob
    table's grad_checkpoint rows are searched on the checkpointed LoRA counts (not
    derived before: no length), and checkpointing lets each num_layers take a longer
    sequence than without it."""
    from introspect.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3))
    flags = ["--framework", "mlx", "--finetune", "lora", "--lora-rank", "4", "--seq", "128"]
    flags += ["--budget", "1GB"]
    assert main(["fit", str(path), *flags, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["mlx_lora_knobs"]["rows"]
    assert {r["grad_checkpoint"] for r in rows} == {False, True}
    seq = {(r["num_layers"], r["grad_checkpoint"]): r["largest_seq"] for r in rows}
    assert not any("not_derived" in r for r in rows)
    for (k, ckpt), found in seq.items():
        assert all(found.values())
        if ckpt:
            assert all(found[b] > seq[(k, False)][b] for b in found)


def test_fit_knob_rows_with_grad_checkpoint_say_not_derived(tmp_path, capsys):
    """``introspect fit`` on mlx-lm's LoRA (named keys derived for Qwen3): the knob
    table's rows with grad_checkpoint on, which no counts describe (checkpointed LoRA is
    derived for every linear only), carry the not-derived
    line and no length (torch's moments searched them before); the others are searched
    on the closed form, and the setup itself fits."""
    from introspect.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3))
    flags = ["--framework", "mlx", "--finetune", "lora", "--lora-rank", "4", "--seq", "128"]
    flags += ["--lora-targets", "q_proj", "v_proj", "--budget", "1GB"]
    assert main(["fit", str(path), *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"]
    rows = out["mlx_lora_knobs"]["rows"]
    assert {r["grad_checkpoint"] for r in rows} == {False, True}
    for r in rows:
        if r["grad_checkpoint"]:
            assert "with --checkpointing" in r["not_derived"]
            assert set(r["largest_seq"].values()) == {None}
        else:
            assert "not_derived" not in r and all(r["largest_seq"].values())
    assert main(["fit", str(path), *flags]) == 0
    text = capsys.readouterr().out
    assert "not derived*" in text and "* LoRA counts not derived for" in text
