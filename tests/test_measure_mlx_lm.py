"""mlx-lm's own classes measured: any model_type mlx-lm supports, its trainer's loss,
compiled or not, with its grad_checkpoint; one-line refusals."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from small_configs import MLX_LM  # noqa: E402

from introspect.errors import IntrospectError  # noqa: E402
from introspect.measure import mlx_lm_models  # noqa: E402
from introspect.params import parameter_count  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

CONFIGS = MLX_LM  # tests/small_configs.py's mlx-lm qwen2 and gpt2


def setup(framework="mlx", checkpointing=False):
    return TrainingSetup(
        seq_len=32, framework=framework, implementation="mlx_lm",
        attention="memory_efficient", activation_checkpointing=checkpointing,
    )  # fmt: skip


@pytest.mark.parametrize("name", list(CONFIGS))
def test_builds_mlx_lms_class_with_the_exact_parameter_count(name):
    model = mlx_lm_models.build(CONFIGS[name], name)
    assert type(model).__module__ == f"mlx_lm.models.{name}"
    from mlx.utils import tree_flatten

    n = sum(v.size for _, v in tree_flatten(model.parameters()))
    assert n == parameter_count(spec_from_config(CONFIGS[name], source=name))


@pytest.mark.parametrize("framework", ["mlx", "mlx_compiled"])
def test_trainer_step_measures_and_checkpointing_is_undone(framework):
    raw = CONFIGS["qwen2"]
    spec = spec_from_config(raw, source="qwen2")
    from mlx_lm.models.qwen2 import TransformerBlock

    call = TransformerBlock.__call__
    m = mlx_lm_models.measure(
        raw, "qwen2", spec, setup(framework, True), compiled=framework == "mlx_compiled"
    )
    assert TransformerBlock.__call__ is call  # grad_checkpoint patched the class; undone
    assert m.implementation == "mlx_lm" and m.peak_bytes > m.categories["parameters"]
    assert any("default_loss" in n for n in m.notes)
    assert any("grad_checkpoint" in n for n in m.notes)


def test_unknown_model_type_and_rejected_config_are_one_line():
    with pytest.raises(IntrospectError, match="does not support model_type"):
        mlx_lm_models.build({"model_type": "no_such_family"}, "x.json")
    with pytest.raises(IntrospectError, match="rejects"):
        mlx_lm_models.build({"model_type": "qwen2", "hidden_size": 64}, "x.json")
