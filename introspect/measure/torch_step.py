"""One torch training step, written as users write it, and its measured memory.

    opt.zero_grad(set_to_none=True)
    logits = model(input_ids)
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()
    opt.step()

The optimizer's state is created first, at its real shapes and dtypes
(:mod:`introspect.measure.optimizer_state`; on CUDA, and for an optimizer it does not
know, by a warm-up step), as the seed measures "after the Adam state has been created";
then one step is measured. On CUDA the peak is ``torch.cuda.max_memory_allocated()``
(reset after the warm-up); on CPU and in a dry run it is the live-storage tracker's
(:mod:`introspect.measure.live_tracker`).
The tracker also runs on CUDA, so every device reports the same categories.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from introspect.errors import IntrospectError
from introspect.measure import live_tracker
from introspect.measure.optimizer_state import prime_optimizer
from introspect.measure.record import Measurement, versions
from introspect.measure.supported import measured_dtype
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def reference_forward(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids)


def hf_forward(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """Hugging Face causal LMs return an output object; users take ``.logits``."""
    return model(input_ids=input_ids).logits


def check_setup(setup: TrainingSetup) -> torch.dtype:
    """The torch dtype of a measured step (see :func:`measured_dtype`)."""
    return TORCH_DTYPES[measured_dtype(setup, "torch")]


def make_optimizer(model: nn.Module, setup: TrainingSetup) -> torch.optim.Optimizer:
    params = model.parameters()
    if setup.optimizer == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if setup.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    return torch.optim.SGD(params, lr=1e-4, momentum=0.9 if setup.optimizer != "sgd" else 0)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    input_ids: torch.Tensor,
    targets: torch.Tensor,
    forward: Forward = reference_forward,
) -> torch.Tensor:
    """The step as users write it."""
    optimizer.zero_grad(set_to_none=True)
    logits = forward(model, input_ids)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
    loss.backward()
    optimizer.step()
    return loss.detach()


def batch(vocab: int, setup: TrainingSetup, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and next-token targets, (B, T) each."""
    g = torch.Generator(device="cpu").manual_seed(0)
    shape = (setup.batch_size, setup.seq_len + 1)
    tokens = torch.randint(0, vocab, shape, generator=g).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def build_reference(spec: ModelSpec, setup: TrainingSetup, device) -> nn.Module:
    from introspect.measure.torch_model import build

    torch.manual_seed(0)
    return build(spec, setup.attention, dtype=check_setup(setup), device=device)


def measure_step(
    model: nn.Module,
    setup: TrainingSetup,
    *,
    vocab: int,
    device: str = "cpu",
    forward: Forward = reference_forward,
    implementation: str = "reference",
) -> Measurement:
    """Warm up, reset, measure one step of ``model`` (already on ``device``).

    ``device`` is ``cpu``, ``cuda`` or ``fake`` (the caller has built the model inside a
    FakeTensorMode; see :mod:`introspect.measure.fake`).
    """
    check_setup(setup)
    tensor_device = "cpu" if device == "fake" else device
    optimizer = make_optimizer(model, setup)
    input_ids, targets = batch(vocab, setup, tensor_device)
    cuda = device == "cuda"
    # The optimizer's state made directly (no warm-up step) except on CUDA, whose first
    # step also sets up the allocator's and cuBLAS's workspaces.
    if cuda or not prime_optimizer(model, optimizer):
        train_step(model, optimizer, input_ids, targets, forward)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    tracker = live_tracker.LiveStorageTracker(model, optimizer)
    start = time.perf_counter()
    with tracker:
        train_step(model, optimizer, input_ids, targets, forward)
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    state = live_tracker.optimizer_state_bytes(optimizer)
    categories = live_tracker.categories(tracker.peak_kinds, state)
    peak = tracker.peak_bytes
    notes = []
    active = cache = None
    if cuda:
        tracked = peak
        peak = torch.cuda.max_memory_allocated()
        active, cache = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        categories["other"] += peak - tracked
        notes.append("peak from torch.cuda.max_memory_allocated(); other = allocator - tracker")
    else:
        notes.append("peak from live tensor storages (MemTracker's rules), exact bytes")
    # The tracker's own bookkeeping slows the step; time an untracked one when real.
    if device != "fake":
        start = time.perf_counter()
        train_step(model, optimizer, input_ids, targets, forward)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    n_params = sum(p.numel() for p in model.parameters())
    return Measurement(
        peak_bytes=peak,
        categories=categories,
        active_bytes=active,
        cache_bytes=cache,
        step_seconds=None if device == "fake" else seconds,
        tokens_per_second=None if device == "fake" else setup.tokens / seconds,
        peak_phase=tracker.peak_phase,
        backend="torch",
        device=device,
        implementation=implementation,
        n_params=n_params,
        versions=versions("torch", "transformers")
        | {"torch_threads": str(torch.get_num_threads())},
        setup=setup.to_dict(),
        notes=tuple(notes),
    )


def measure_reference(spec: ModelSpec, setup: TrainingSetup, device: str = "cpu") -> Measurement:
    """Build the reference model for ``spec`` and measure one step (``cpu`` or ``cuda``;
    use :func:`introspect.measure.fake.dry_run` for ``fake``)."""
    if device == "cuda" and not torch.cuda.is_available():
        raise IntrospectError("--device cuda: torch sees no CUDA device here; use --device cpu")
    model = build_reference(spec, setup, device)
    return measure_step(model, setup, vocab=spec.vocab_size, device=device)


def run_census(
    model: nn.Module,
    setup: TrainingSetup,
    spec: ModelSpec,
    device: str = "cpu",
    forward: Forward = reference_forward,
):
    """The saved-tensor census of one forward pass and loss of ``model``."""
    from introspect.measure.census import census

    input_ids, targets = batch(spec.vocab_size, setup, "cpu" if device == "fake" else device)

    def run():
        logits = forward(model, input_ids)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return census(
        model,
        run,
        tokens=setup.tokens,
        seq_len=setup.seq_len,
        head_size=spec.head_size,
        heads=spec.num_attention_heads,
    )
