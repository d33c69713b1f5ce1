"""LoRA and QLoRA as a dry run: peft's (and bitsandbytes') own code over transformers'
class inside FakeTensorMode, held byte for byte to the real CPU step of the same setup.

Real modules and real steps on small shapes (``tests/small_configs.py``): each dry run
is compared with the real step's peak, phase, categories and saved-tensor census, which
it could miss in any of them (a cast adapter, a copied embedding, a dequantized weight).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from introspect.adapters.hf_config import spec_from_config  # noqa: E402
from small_configs import FAMILIES  # noqa: E402

from introspect.measure import hf_models  # noqa: E402
from introspect.setup import TrainingSetup  # noqa: E402

pytestmark = pytest.mark.slow

LLAMA, GEMMA = "llama, head_dim 48", "gemma, untied, bias"


def measure(family: str, device: str, **fields):
    raw = FAMILIES[family]
    spec = spec_from_config(raw, source=family)
    base = dict(batch_size=2, seq_len=32, implementation="transformers", loop="labels")
    setup = TrainingSetup(**(base | dict(finetune="lora", lora_rank=8) | fields))
    return hf_models.measure(raw, family, spec, setup, device=device, census=True)[0]


def assert_same_step(real, fake) -> None:
    assert real.device == "cpu" and fake.device == "fake"
    assert fake.peak_bytes == real.peak_bytes
    assert fake.peak_phase == real.peak_phase
    assert fake.categories == real.categories
    assert fake.census == real.census
    assert (fake.n_params, fake.trainable_params) == (real.n_params, real.trainable_params)


@pytest.mark.parametrize(
    "family, fields",
    [
        (LLAMA, {}),
        # BF16: peft casts each new FP32 adapter to its base layer's dtype (a swap).
        (LLAMA, dict(precision="bf16", lora_dropout=0.1, loop="logits")),
        # peft deep-copies the embeddings and head as modules_to_save.
        (GEMMA, dict(train_embeddings=True)),
        (GEMMA, dict(lora_targets=("all-linear",), activation_checkpointing=True)),
    ],
    ids=["llama", "llama-bf16-dropout", "gemma-emb", "gemma-all-linear-ckpt"],
)
def test_lora_dry_run_is_the_real_step(family, fields):
    real, fake = measure(family, "cpu", **fields), measure(family, "fake", **fields)
    assert real.trainable_params < real.n_params
    assert_same_step(real, fake)


def test_fake_lora_leaves_torch_as_it_was():
    """The dry run's changes to torch (its converter's memo, FakeTensor's deepcopy) last
    only while peft wraps: inside, a fake parameter is cast and deep-copied to a new
    storage; after, both are torch's own again."""
    import copy

    from torch._subclasses.fake_tensor import FakeTensor

    from introspect.measure.fake import fake_mode, swappable_parameters

    with fake_mode():
        converter = torch._C._get_dispatch_mode(
            torch._C._TorchDispatchModeKey.FAKE
        ).fake_tensor_converter
        with swappable_parameters():
            layer = torch.nn.Linear(4, 4).to(dtype=torch.bfloat16)
            twin = copy.deepcopy(layer)
        assert layer.weight.dtype == torch.bfloat16 and isinstance(layer.weight, FakeTensor)
        assert isinstance(twin.weight, torch.nn.Parameter) and twin.weight.requires_grad
        assert twin.weight.untyped_storage()._cdata != layer.weight.untyped_storage()._cdata
        assert twin.weight.untyped_storage().nbytes() == 32
        assert "__deepcopy__" not in FakeTensor.__dict__
        assert "set_tensor_memo" not in vars(converter)
