"""The MLX dry run of mlx-lm's LoRA step: the answer where the closed form's LoRA counts
are not derived for the family (:func:`introspect.refined.mlx.lora_not_derived`).

mlx-lm's own class for the source's config (``mlx_lm/models/<model_type>.py``), built with
its parameters left lazy (nothing allocated), converted as ``mlx_lm.lora`` converts it
(``model.freeze()``, ``linear_to_lora_layers``: :func:`introspect.measure.mlx_lm_models.
to_lora`), Adam over the adapters, ``default_loss`` on a (B, T+1) batch; the step's graph
traced with ``mx.export_function`` and replayed through MLX's CPU evaluator
(:mod:`introspect.measure.mlx_replay`), as the full fine-tuning dry run is. The same
replay the LoRA counts are read from, so it answers any family mlx-lm has a class for,
at any size; an ``--base-quant affine4``/``affine8`` base quantized first by mlx-lm's own
``quantize_model`` (``mlx_lm/utils.py``), as ``mlx_lm.convert -q`` stores it. With
``--checkpointing`` (mlx-lm's ``grad_checkpoint``, ``mlx_lm/tuner/trainer.py``:
``mx.checkpoint`` around every layer, which export cannot record) the step's graph is
built by hand, the same update: :func:`introspect.measure.mlx_replay_ckpt.
checkpointed_step`.
"""

from __future__ import annotations

from typing import Any

from introspect.refined.affine import affine_bits
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def dry_run(raw: dict[str, Any], where: str, spec: ModelSpec, setup: TrainingSetup):
    """The replayed peak of mlx-lm's LoRA step for ``raw`` (a config dict, from ``where``)
    at ``setup``, as a :class:`~introspect.measure.record.Measurement`."""
    import time

    from mlx.utils import tree_flatten

    from introspect.measure import mlx_lm_models, mlx_step
    from introspect.measure import mlx_replay as mr

    compiled = setup.framework == "mlx_compiled"
    dtype = mlx_step.check_setup(setup)
    model = mlx_lm_models.build(raw, where, dtype, evaluate=False)
    mlx_lm_models.tie_as_checkpoint(model, spec.model_type, spec.tie_word_embeddings)
    bits = affine_bits(setup)
    if bits:  # an mlx_lm.convert -q base: mlx-lm's own quantize_model, on the lazy weights
        from mlx_lm.utils import quantize_model

        quantize_model(model, {}, setup.group_size, bits)
    note = mlx_lm_models.to_lora(model, setup.replace(base_quant="auto"))
    optimizer = mlx_step.make_optimizer(setup)
    optimizer.init(model.trainable_parameters())
    vocab = getattr(model.args, "vocab_size", None) or spec.vocab_size
    batch = mr.mlx_lm_batch(vocab, setup.batch_size, setup.seq_len, evaluate=False)
    if setup.activation_checkpointing:  # mx.checkpoint's graph, built traceably
        from introspect.measure.mlx_replay_ckpt import checkpointed_step

        step = checkpointed_step(model, optimizer, compiled)
    else:
        step = mr.make_step(model, optimizer, mr.mlx_lm_loss, compiled)
    start = time.perf_counter()
    result = mr.predict(model, optimizer, step, batch, compiled)
    seconds = time.perf_counter() - start

    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    family = type(model).__module__.rsplit(".", 1)[-1]
    return mr.replay_measurement(
        model,
        optimizer,
        result,
        seconds,
        setup,
        implementation="mlx_lm",
        n_params=sum(v.size for _, v in tree_flatten(model.parameters())),
        trainable_params=trainable,
        notes=(f"mlx-lm {family}.Model from {where}", note),
    )


def answer(source: str | None, spec: ModelSpec, setup: TrainingSetup) -> dict[str, Any]:
    """``introspect profile``'s answer where the LoRA counts are not derived: the dry run
    of mlx-lm's class for the source's config (its peak and categories), or one line
    (:class:`~introspect.unmodelled.NotModelled`) where MLX or mlx-lm is missing."""
    import importlib.util

    from introspect.unmodelled import NotModelled

    if any(importlib.util.find_spec(m) is None for m in ("mlx", "mlx_lm")):
        raise NotModelled(
            f"{spec.source or spec.model_type}: mlx-lm's LoRA counts are not derived for "
            f"{spec.model_type} and the MLX dry run that answers needs mlx and mlx-lm: "
            "pip install 'introspect[compare]'"
        )
    from introspect.measure.hf_models import source_config

    raw, where = source_config(source, spec)
    m = dry_run(raw, where, spec, setup)
    return {
        "answer": "dry_run",
        "implementation": f"mlx-lm's {raw.get('model_type')} class",
        "setup": setup.to_dict(),
        "peak_bytes": m.peak_bytes,
        "peak_phase": m.peak_phase,
        "categories": dict(m.categories),
        "trainable_params": m.trainable_params,
        "notes": list(m.notes),
    }


def render(why: str, found: dict[str, Any]) -> str:
    """The not-derived line and the dry run's answer, as ``introspect profile`` prints them."""
    from introspect import report

    s = found["setup"]
    cats = ", ".join(f"{k} {report.gb(v)}" for k, v in found["categories"].items() if v)
    step = "compiled" if s["framework"] == "mlx_compiled" else "eager"
    return "\n".join(
        (
            why,
            f"answered by the MLX dry run of {found['implementation']} (its graph traced, "
            "nothing allocated, replayed through MLX's CPU evaluator; the closed form's "
            "estimates do not apply)",
            f"  B={s['batch_size']}, T={s['seq_len']}, {s['precision']}, {s['optimizer']}, "
            f"LoRA rank {s['lora_rank']} ({found['trainable_params']:,} adapter parameters), "
            f"{step}",
            f"  peak {report.gb(found['peak_bytes'])} GB ({found['peak_bytes']:,} bytes) at "
            f"{found['peak_phase']}",
            f"  at the peak: {cats}",
        )
    )
