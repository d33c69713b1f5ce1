"""MLX measurement: the reference model from a ModelSpec, compiled and uncompiled Adam
steps with mx.get_peak_memory(), and mlx-lm's own Llama."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from specs import VARIANTS  # noqa: E402

from introspect.measure import mlx_model, mlx_step  # noqa: E402
from introspect.params import parameter_count  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", list(VARIANTS))
def test_reference_parameter_count_is_exact(name):
    spec = VARIANTS[name]
    assert mlx_model.parameter_count(mlx_model.build(spec)) == parameter_count(spec)


@pytest.mark.parametrize("framework", ["mlx", "mlx_compiled"])
@pytest.mark.parametrize("attention", ["eager", "memory_efficient"])
def test_step_peak_is_positive_and_holds_the_state(framework, attention):
    spec = VARIANTS["rmsnorm-gqa-gated"]
    setup = TrainingSetup(seq_len=32, attention=attention, framework=framework)
    m = mlx_step.measure_reference(spec, setup, compiled=framework == "mlx_compiled")
    n = parameter_count(spec)
    assert m.framework == framework
    assert m.peak_bytes > 0
    assert m.active_bytes <= m.peak_bytes
    # Weights and Adam's m and v are alive throughout; the gradients exist at the update.
    assert m.peak_bytes >= 16 * n
    assert m.categories["parameters"] == 4 * n
    assert m.categories["optimizer_state"] >= 8 * n
    assert m.category_total() == m.peak_bytes
    assert m.tokens_per_second > 0


def test_eager_and_fast_attention_agree():
    spec = VARIANTS["rmsnorm-gqa-gated"]
    eager = mlx_model.build(spec, "eager")
    fast = mlx_model.build(spec, "memory_efficient")
    fast.update(eager.parameters())
    x = mx.random.randint(0, spec.vocab_size, (2, 12))
    assert mx.allclose(eager(x), fast(x), atol=1e-4).item()


def test_peak_grows_with_the_sequence():
    spec = VARIANTS["standard"]
    small, large = (
        mlx_step.measure_reference(spec, TrainingSetup(seq_len=t), compiled=False)
        for t in (16, 128)
    )
    assert large.peak_bytes > small.peak_bytes


def test_mlx_lm_llama_step():
    pytest.importorskip("mlx_lm")
    from mlx.utils import tree_flatten

    from introspect.measure.implementations import mlx_lm_llama

    spec = VARIANTS["rmsnorm-gqa-gated"]
    model = mlx_lm_llama(spec)
    assert sum(v.size for _, v in tree_flatten(model.parameters())) == parameter_count(spec)
    m = mlx_step.measure_step(
        model,
        TrainingSetup(seq_len=32),
        vocab=spec.vocab_size,
        compiled=True,
        implementation="mlx_lm",
    )
    assert m.implementation == "mlx_lm" and m.compiled
    assert m.peak_bytes >= 16 * parameter_count(spec)


def test_repeats_report_the_largest_peak():
    spec = VARIANTS["standard"]
    m = mlx_step.measure_reference(spec, TrainingSetup(seq_len=16), compiled=True, repeats=3)
    assert len(m.peak_samples) == 3
    assert m.peak_bytes == max(m.peak_samples)
    assert min(m.peak_samples) >= 16 * parameter_count(spec)


def test_phases_place_the_peak():
    spec = VARIANTS["standard"]
    m = mlx_step.measure_reference(spec, TrainingSetup(seq_len=32), compiled=True, phases=True)
    grads = m.phase_peaks["loss_and_gradients"]
    assert m.phase_peaks["step"] == m.peak_bytes
    # Evaluating the gradients keeps the weights and every gradient alive: 8N at least.
    assert grads >= 8 * parameter_count(spec)
    assert m.peak_phase == (
        "optimizer" if m.peak_bytes > grads * (1 + mlx_step.PHASE_MARGIN) else "forward/backward"
    )
