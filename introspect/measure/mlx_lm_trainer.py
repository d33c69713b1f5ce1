"""mlx-lm's own ``train`` loop measured micro-batch by micro-batch: the peak of a step with
``grad_accumulation_steps`` as the trainer runs it.

``mlx_lm.tuner.trainer.train`` (``mlx_lm/tuner/trainer.py``) compiles one
``step(batch, prev_grad, do_update)`` with ``[model.state, optimizer.state,
mx.random.state]`` as its state, calls it once per iteration with the summed gradient
tree of the micro-batches before, and evaluates ``mx.eval(state, losses, n_tokens,
grad_accum)``. Nothing here copies that loop: ``train`` itself runs, with an
``iterate_batches`` that yields the same (B, T+1) batch every iteration
(:func:`introspect.measure.mlx_lm_models.trainer_batch`) and, before each one, reads and
resets ``mx.get_peak_memory()`` — the zip in ``train`` asks for the next batch at the top
of each iteration, so each reading is the iteration before's peak (its step and its
``mx.eval``). The first ``2·M`` iterations (``mx.compile`` traces each of the three
kinds of call: no ``prev_grad``, ``prev_grad`` without and with the update) are left out.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from introspect.spec import ModelSpec


def measure_trainer(raw: dict[str, Any], where: str, spec: ModelSpec, setup, *, cycles: int = 2):
    """The largest per-iteration peak of ``train`` over ``cycles`` optimizer steps of
    ``setup.grad_accum`` micro-batches each after the warm-up, and the per-iteration
    peaks (warm-up included). mlx-lm's class, LoRA/DoRA as
    :func:`introspect.measure.mlx_lm_models.to_lora`, Adam at 1e-4."""
    import mlx.core as mx
    import mlx.optimizers as optim
    from mlx_lm.tuner.trainer import TrainingArgs, default_loss, train

    from introspect.measure import mlx_lm_models, mlx_step

    model = mlx_lm_models.build(raw, where, mlx_step.check_setup(setup))
    if setup.finetune != "full":
        mlx_lm_models.to_lora(model, setup)
    mx.eval(model.parameters())
    batch = mlx_lm_models.trainer_batch(spec.vocab_size, setup)
    mx.eval(*batch)
    M = setup.grad_accum
    warm = 2 * M
    peaks: list[int] = []

    def batches(**_):
        first = True
        while True:
            mx.synchronize()
            if not first:
                peaks.append(mx.get_peak_memory())
            first = False
            mx.clear_cache()
            mx.reset_peak_memory()
            yield batch

    optimizer = optim.Adam(learning_rate=1e-4)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArgs(
            batch_size=setup.batch_size,
            iters=warm + cycles * M,
            steps_per_report=10**6,
            steps_per_eval=10**6,
            steps_per_save=10**6,
            max_seq_length=setup.seq_len + 1,
            adapter_file=str(Path(tmp) / "adapters.safetensors"),
            grad_accumulation_steps=M,
        )
        train(model, optimizer, [None], None, args, default_loss, batches)
    mx.synchronize()
    peaks.append(mx.get_peak_memory())  # the last iteration (and the final save: small)
    return max(peaks[warm:]), peaks
