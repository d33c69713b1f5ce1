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


@pytest.mark.parametrize(
    "family, fields",
    [
        (LLAMA, dict(precision="bf16")),
        (LLAMA, dict(precision="bf16", double_quant=False, lora_dropout=0.1)),
        (GEMMA, dict(lora_targets=("all-linear",))),
        # Conv1D weights, transposed before quantizing; experts left at the working dtype.
        ("gpt2", dict(precision="bf16")),
        ("qwen3_moe", dict(precision="bf16")),
    ],
    ids=["llama-bf16", "llama-bf16-single-quant-dropout", "gemma-fp32-all-linear", "gpt2", "moe"],
)
def test_qlora_dry_run_is_the_real_step(family, fields):
    """bitsandbytes' own Linear4bit, Params4bit and MatMul4Bit over fake storage: the
    packed weights (parameters), the quant state (``other``, outside the tracker), the
    dequantized weights of backward and what MatMul4Bit saves (the census) all as the
    real step has them."""
    pytest.importorskip("bitsandbytes")
    fields = dict(finetune="qlora", **fields)
    real, fake = measure(family, "cpu", **fields), measure(family, "fake", **fields)
    assert real.categories["other"] > 0  # the NF4 quant state
    assert any("Params4bit" in n for n in fake.notes)
    assert_same_step(real, fake)


def test_matmul4bit_saves_no_input():
    """bitsandbytes 0.50.2's MatMul4Bit saves ``(None, B)`` (the packed weight, a
    parameter), not its input: with dropout before the adapters (so the adapters save
    the dropped copy, not the input itself), a QLoRA step's census is that of the same
    LoRA step over a BF16 base, term for term, while its parameters are smaller."""
    pytest.importorskip("bitsandbytes")
    fields = dict(precision="bf16", lora_dropout=0.1)
    plain = measure(LLAMA, "fake", **fields)
    nf4 = measure(LLAMA, "fake", finetune="qlora", **fields)
    assert nf4.census == plain.census
    assert nf4.categories["parameters"] < plain.categories["parameters"]


def test_adam8bit_dry_run_is_the_real_step():
    """bitsandbytes' Adam8bit runs in a dry run: its update has fake kernels, and its
    quantization maps (built from values) are the real step's CPU constants."""
    pytest.importorskip("bitsandbytes")
    fields = dict(finetune="qlora", precision="bf16", optimizer="adam8bit")
    real, fake = measure(LLAMA, "cpu", **fields), measure(LLAMA, "fake", **fields)
    assert any("Adam8bit" in n for n in fake.notes)
    assert_same_step(real, fake)


def test_qlora_dry_run_of_a_7b_llama():
    """Llama-2-7B's own config, QLoRA at T=512, as a dry run: it completes, N and the
    trained count are the model's with its adapters, and ``other`` is the NF4 quant
    state of every block linear as bitsandbytes stores it
    (``refined.lora.nf4_tensor_bytes``, checked against bitsandbytes in
    tests/test_lora.py) beyond the packed weights."""
    pytest.importorskip("bitsandbytes")
    from introspect.params import parameter_count
    from introspect.refined import lora

    raw, where = hf_models.source_config("meta-llama/Llama-2-7b-hf", None)
    spec = spec_from_config(raw, source=where)
    setup = TrainingSetup(
        batch_size=1,
        seq_len=512,
        implementation="transformers",
        loop="labels",
        finetune="qlora",
        precision="bf16",
        lora_rank=16,
    )
    m = hf_models.measure(raw, where, spec, setup, device="fake", census=False)[0]
    assert m.device == "fake" and m.peak_phase in ("forward", "backward", "optimizer")
    assert m.trainable_params == lora.trainable_parameters(spec, setup)
    assert m.n_params == parameter_count(spec) + m.trainable_params  # base and adapters
    packed = lora.block_linear_parameters(spec, setup) // 2
    assert m.categories["other"] == lora.quantized_bytes(spec, "nf4", True, setup) - packed
    assert m.peak_bytes > packed + m.categories["other"]


def test_fake_lora_leaves_torch_as_it_was():
    """The dry run's changes to torch (its converter's memo, FakeTensor's deepcopy) last
    only while peft wraps: inside, a fake parameter is cast and deep-copied to a new
    storage; after, both are torch's own again."""
    import copy

    from torch._subclasses.fake_tensor import FakeTensor

    from introspect.measure.fake import fake_mode, module_surgery

    with fake_mode():
        converter = torch._C._get_dispatch_mode(
            torch._C._TorchDispatchModeKey.FAKE
        ).fake_tensor_converter
        with module_surgery():
            layer = torch.nn.Linear(4, 4).to(dtype=torch.bfloat16)
            twin = copy.deepcopy(layer)
        assert layer.weight.dtype == torch.bfloat16 and isinstance(layer.weight, FakeTensor)
        assert isinstance(twin.weight, torch.nn.Parameter) and twin.weight.requires_grad
        assert twin.weight.untyped_storage()._cdata != layer.weight.untyped_storage()._cdata
        assert twin.weight.untyped_storage().nbytes() == 32
        assert "__deepcopy__" not in FakeTensor.__dict__
        assert "set_tensor_memo" not in vars(converter)
