"""One torch training step, written as users write it, and its measured memory.

    opt.zero_grad(set_to_none=True)
    logits = model(input_ids)                                     # --loop logits
    loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
    # or: loss = model(input_ids=x, labels=x).loss               # --loop labels
    loss.backward()
    opt.step()

The loops (:func:`logits_loss`, :func:`labels_loss`) and precisions (:class:`TorchStep`)
are described where they are defined.

The optimizer's state is created first, at its real shapes and dtypes
(:mod:`introspect.measure.optimizer_state`; on CUDA, with an FP32 master copy, and for an
optimizer it does not know, by a warm-up step), as the seed measures "after the Adam state
has been created"; then one step is measured. On CUDA the peak is
``torch.cuda.max_memory_allocated()`` (reset after the warm-up); on CPU and in a dry run
it is the live-storage tracker's (:mod:`introspect.measure.live_tracker`).
The tracker also runs on CUDA, so every device reports the same categories.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from introspect.errors import IntrospectError
from introspect.measure import live_tracker
from introspect.measure.live_tracker import optimizer_state_bytes, storage_bytes
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


def make_optimizer(model: nn.Module, setup: TrainingSetup, params=None) -> torch.optim.Optimizer:
    """The setup's optimizer over ``params`` (the model's by default), with
    ``--optimizer-impl`` passed to torch: ``single_tensor`` → ``foreach=False``,
    ``foreach`` → ``foreach=True``, ``fused`` → ``fused=True``, ``auto`` → torch's own
    choice (single-tensor for CPU and fake tensors, ``_default_to_fused_or_foreach``)."""
    params = list(model.parameters() if params is None else params)
    if setup.optimizer == "adam8bit":
        return _adam8bit(params)
    if setup.optimizer == "adafactor":
        return _adafactor(params)
    kwargs = OPTIMIZER_IMPL_KWARGS[setup.optimizer_impl]
    try:
        if setup.optimizer == "adam":
            return torch.optim.Adam(params, lr=1e-4, **kwargs)
        if setup.optimizer == "adamw":
            return torch.optim.AdamW(params, lr=1e-4, **kwargs)
        momentum = 0.9 if setup.optimizer != "sgd" else 0
        return torch.optim.SGD(params, lr=1e-4, momentum=momentum, **kwargs)
    except (RuntimeError, ValueError) as err:
        raise IntrospectError(
            f"--optimizer-impl {setup.optimizer_impl.replace('_', '-')}: torch refuses it "
            f"for {setup.optimizer}: {str(err).splitlines()[0]}"
        ) from err


#: ``TrainingSetup.optimizer_impl`` → torch optimizer keyword arguments.
OPTIMIZER_IMPL_KWARGS: dict[str, dict] = {
    "auto": {},
    "single_tensor": {"foreach": False},
    "foreach": {"foreach": True},
    "fused": {"fused": True},
}


def _adam8bit(params) -> torch.optim.Optimizer:
    """bitsandbytes' ``Adam8bit`` (block-wise 8-bit m and v; tensors under 4096 values
    keep 32-bit state, ``bitsandbytes/optim/optimizer.py`` ``min_8bit_size``).

    Made with a dry run's fake mode suspended: its constructor builds the two 256-value
    quantization maps (``fill_qmap``: ``create_dynamic_map`` reads values with
    ``.tolist()``) as the real step's CPU constants; its update has fake kernels
    (``bitsandbytes/_ops.py`` ``optimizer_update_8bit_blockwise``)."""
    import logging

    # Its CPU backend logs a warning at import when an optional kernels package is
    # missing (as peft_step.wrap silences it): not the user's concern for a measured step.
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    try:
        import bitsandbytes as bnb
    except ImportError as err:
        raise IntrospectError(
            "--optimizer adam8bit runs bitsandbytes' Adam8bit, which is not installed: "
            "pip install bitsandbytes (or use --optimizer adam)"
        ) from err
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return bnb.optim.Adam8bit(params, lr=1e-4)


def _adafactor(params) -> torch.optim.Optimizer:
    """transformers' ``Adafactor`` as the HF Trainer's ``optim="adafactor"`` builds it
    (``transformers/trainer_optimizer.py`` ``_get_adafactor``: ``scale_parameter=False,
    relative_step=False`` with the Trainer's learning rate; ``beta1=None``)."""
    from transformers.optimization import Adafactor

    return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)


def optimizer_impl_note(setup: TrainingSetup, device: str) -> str:
    """What torch runs for the update, in words."""
    name = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "sgd_momentum": "SGD(momentum)"}
    if setup.optimizer == "adam8bit":
        return "optimizer: bitsandbytes Adam8bit (8-bit block-wise m and v)"
    if setup.optimizer == "adafactor":
        return (
            "optimizer: transformers.optimization.Adafactor(scale_parameter=False, "
            "relative_step=False), the HF Trainer's optim='adafactor' (factored FP32 "
            "second moment, no first moment)"
        )
    impl = setup.optimizer_impl
    if setup.optimizer_in_backward:
        name = {k: f"{v} per parameter in its post-accumulate-grad hook" for k, v in name.items()}
    if impl == "auto":
        impl = "foreach" if device == "cuda" else "single_tensor"
        why = f" (torch's default for {'CUDA' if device == 'cuda' else 'CPU/fake'} tensors)"
    else:
        why = " (asked for)"
    return f"optimizer: torch.optim.{name[setup.optimizer]}, {impl.replace('_', '-')}{why}"


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


#: A loop's loss: (model, input_ids, targets) → (loss, what the training code still
#: references until the step returns).
Loss = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, object]]


def logits_loss(forward: Forward = reference_forward) -> Loss:
    """``--loop logits``: the training code takes the logits and calls cross-entropy
    itself; its ``logits`` variable keeps the B·T·V logits alive through backward and the
    update, beside what cross-entropy saved (its log-softmax output)."""

    def loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
        logits = forward(model, input_ids)
        value = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return value, logits

    return loss


def labels_loss(model: nn.Module, input_ids: torch.Tensor, targets: torch.Tensor):
    """``--loop labels``: ``model(input_ids=x, labels=x).loss``, the output object dropped,
    as transformers' users and the HF Trainer's ``compute_loss`` write it
    (``transformers/trainer.py``: ``outputs = model(**inputs)``, ``loss = outputs["loss"]``).
    The model's ``ForCausalLMLoss`` (``transformers/loss/loss_utils.py``) upcasts the
    logits to FP32 (a no-op for FP32 logits), pads the labels by one and shifts them, and
    calls cross-entropy; once the output is dropped only cross-entropy's saved
    log-softmax output remains of the B·T·V tensors."""
    return model(input_ids=input_ids, labels=input_ids).loss, None


class TorchStep:
    """One training step for a setup's precision, loss loop and optimizer.

    * ``fp32``, ``bf16``: the model already in that dtype; optimizer state in it too.
    * ``amp``: ``torch.autocast(device, bfloat16)`` around forward and loss, FP32 weights,
      gradients and optimizer state (plain PyTorch; the HF Trainer's ``bf16=True``).
    * ``mixed``: the model in BF16 (working weights and their BF16 gradients) and an FP32
      master copy the optimizer updates. After backward each BF16 gradient is copied into
      an FP32 gradient of its master tensor and freed, one tensor at a time; the update
      runs in FP32 over the master and its result is copied back into the BF16 weights
      (DeepSpeed's ``BF16_Optimizer``: ``update_hp_grads`` then ``clear_lp_grads``; FSDP2's
      ``MixedPrecisionPolicy(param_dtype=bfloat16)`` keeps the FP32 sharded parameters as
      the master, with FP32 gradients for the update).

    With ``grad_accum`` M > 1 the step runs M forward/backward passes of the micro-batch,
    each loss divided by M, before the update (the HF Trainer's ``training_step``);
    the gradients of the first stay alive and the later add into them.
    """

    def __init__(
        self, model: nn.Module, setup: TrainingSetup, loss: Loss, device_type: str
    ) -> None:
        self.model, self.loss, self.device_type = model, loss, device_type
        self.precision = setup.precision
        self.grad_accum = setup.grad_accum
        self.offload_activations = setup.offload_activations
        #: Told of each saved tensor packed to the host (the tracker's ``to_host``).
        self.on_host: Callable[[torch.Tensor], None] | None = None
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.master: list[torch.Tensor] = []
        if setup.precision == "mixed":
            self.master = [p.detach().float().requires_grad_() for p in self.params]
        if setup.optimizer_in_backward:
            self.optimizer = _in_backward(model, setup, self.params)
        else:
            self.optimizer = make_optimizer(model, setup, self.master or None)

    def __call__(self, input_ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        if self.master:
            self.model.zero_grad(set_to_none=True)
        held = None
        for _ in range(self.grad_accum):
            # A plain loop: ``held`` binds the previous micro-batch's until the new loss
            # returns (introspect.refined.accumulation's previous logits).
            with self._saved_tensors():
                if self.precision == "amp":
                    with torch.autocast(self.device_type, dtype=torch.bfloat16):
                        loss, held = self.loss(self.model, input_ids, targets)
                else:
                    loss, held = self.loss(self.model, input_ids, targets)
            if self.grad_accum > 1:  # the HF Trainer's training_step: loss / M
                loss = loss / self.grad_accum
            loss.backward()  # later micro-batches add into the .grad the earlier made
        if self.master:
            for work, master in zip(self.params, self.master, strict=True):
                if work.grad is not None:
                    master.grad = work.grad.float()
                    work.grad = None
        self.optimizer.step()
        if self.master:
            with torch.no_grad():
                for work, master in zip(self.params, self.master, strict=True):
                    work.copy_(master)
        del held  # the training code's own references end with the step
        return loss.detach()

    def _saved_tensors(self):
        """Where forward's saved tensors live: the device, or the host with
        ``--offload-activations`` (:mod:`introspect.measure.activation_offload`)."""
        if not self.offload_activations:
            return contextlib.nullcontext()
        from introspect.measure.activation_offload import save_on_host

        return save_on_host(self.device_type, self.on_host)


def _in_backward(model: nn.Module, setup: TrainingSetup, params: list):
    """``--optimizer-in-backward``: one optimizer per parameter, stepped by its
    post-accumulate-grad hook (:mod:`introspect.measure.in_backward`)."""
    from introspect.measure.in_backward import InBackward

    if setup.precision == "mixed":
        raise IntrospectError(
            "--optimizer-in-backward with --precision mixed: the measured step hooks the "
            "working BF16 weights, and the FP32 master's update in the hook is not written; "
            "use --precision bf16 or amp, or `introspect profile` for the estimate alone"
        )
    return InBackward(params, lambda one: make_optimizer(model, setup, one))


def make_step(
    model: nn.Module,
    setup: TrainingSetup,
    *,
    device: str,
    forward: Forward = reference_forward,
    loop: str = "logits",
) -> TorchStep:
    loss = _loop_loss(setup, loop, forward)
    return TorchStep(model, setup, loss, "cuda" if device == "cuda" else "cpu")


def _loop_loss(setup: TrainingSetup, loop: str, forward: Forward) -> Loss:
    """The loop's loss: a library's chunked loss for ``--cross-entropy torchtune | trl |
    liger`` (:mod:`introspect.measure.losses`), else the loop's own."""
    from introspect.measure import losses

    if setup.cross_entropy in losses.LIBRARY_LOSSES:
        return losses.library_loss(setup.cross_entropy)
    return labels_loss if loop == "labels" else logits_loss(forward)


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


def weight_count(p) -> int:
    """Weights in parameter ``p``: a bitsandbytes ``Params4bit`` packs two 4-bit weights
    per byte, so its ``numel`` is half its weights; its quant state keeps the shape."""
    state = getattr(p, "quant_state", None)
    return state.shape.numel() if state is not None else p.numel()


def measure_step(
    model: nn.Module,
    setup: TrainingSetup,
    *,
    vocab: int,
    device: str = "cpu",
    forward: Forward = reference_forward,
    implementation: str = "reference",
    loop: str | None = None,
    witness: Callable[[nn.Module, torch.optim.Optimizer, list], Any] | None = None,
    inputs: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Measurement:
    """Warm up, reset, measure one step of ``model`` (already on ``device``).

    ``witness(model, optimizer, master)``, when given, makes a second tracker entered
    around the measured step, outside the live-storage tracker, so both see the same
    operations (the tests enter torch's own ``MemTracker`` there:
    :func:`introspect.measure.tracker.witness`).

    ``device`` is ``cpu``, ``cuda`` or ``fake`` (the caller has built the model inside a
    FakeTensorMode; see :mod:`introspect.measure.fake`). ``loop`` is ``logits`` or
    ``labels`` (:func:`logits_loss`, :func:`labels_loss`); None follows the
    implementation: the setup's own loop when the model is the setup's implementation,
    else that implementation's default (the reference model's loop is ``logits``).
    ``inputs`` replaces the random (ids, targets) batch (an image-and-text batch:
    :mod:`introspect.measure.vision_batch`).
    """
    check_setup(setup)
    if loop is None:
        from introspect.setup import default_loop

        loop = (
            setup.loop if implementation == setup.implementation else default_loop(implementation)
        )
    tensor_device = "cpu" if device == "fake" else device
    step = make_step(model, setup, device=device, forward=forward, loop=loop)
    optimizer = step.optimizer
    input_ids, targets = inputs or batch(vocab, setup, tensor_device)
    cuda = device == "cuda"
    # The optimizer's state made directly (no warm-up step) except on CUDA, whose first
    # step also sets up the allocator's and cuBLAS's workspaces, and with a master copy,
    # whose gradients the warm-up step also leaves in place.
    if cuda or step.master or not prime_optimizer(model, optimizer):
        step(input_ids, targets)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    from introspect.allocator import recording

    replay_with = recording.wanted() if device != "cuda" else None
    tracker = live_tracker.LiveStorageTracker(
        model, optimizer, external=step.master, record=replay_with is not None
    )
    outer = witness(model, optimizer, step.master) if witness else contextlib.nullcontext()
    step.on_host = tracker.to_host
    start = time.perf_counter()
    with outer, tracker:
        step(input_ids, targets)
    step.on_host = None
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    state = optimizer_state_bytes(optimizer)
    categories = master_as_state(
        live_tracker.categories(tracker.peak_kinds, state), step.master, tracker.peak_phase
    )
    peak = tracker.peak_bytes
    notes = [optimizer_impl_note(setup, device), *step_notes(setup, loop)]
    if setup.offload_activations:
        notes.append(
            "activations offloaded (torch's save_on_cpu(pin_memory=True)): host memory "
            f"{tracker.host_peak_bytes / 1e9:.3f} GB at most ({tracker.host_peak_bytes:,} "
            "bytes of packed saved tensors), not in the device peak"
        )
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
        step(input_ids, targets)
        if cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    n_params = sum(weight_count(p) for p in model.parameters())
    trainable = sum(weight_count(p) for p in model.parameters() if p.requires_grad)
    setup = setup.replace(loop=loop)
    return Measurement(
        peak_bytes=peak,
        categories=categories,
        active_bytes=active,
        cache_bytes=cache,
        step_seconds=None if device == "fake" else seconds,
        tokens_per_second=None if device == "fake" else setup.tokens * setup.grad_accum / seconds,
        peak_phase=tracker.peak_phase,
        backend="torch",
        device=device,
        implementation=implementation,
        n_params=n_params,
        trainable_params=trainable,
        versions=versions("torch", "transformers")
        | {"torch_threads": str(torch.get_num_threads())},
        setup=setup.to_dict(),
        notes=tuple(notes),
        host_peak_bytes=tracker.host_peak_bytes if setup.offload_activations else None,
        allocator_replay=recording.summarize(tracker.stream(), *replay_with)
        if replay_with is not None
        else {},
    )


def master_as_state(
    categories: dict[str, int], master: list[torch.Tensor], phase: str | None = None
) -> dict[str, int]:
    """The tracker files the FP32 master copy (tracked as external tensors) under
    ``other``; the estimates call it optimizer state (``optimizer/master_weights``). Its
    FP32 gradients, made between backward and the update, are filed with the tensors
    made outside a module (``activations``); at an optimizer-phase peak they are alive
    and are the step's gradients."""
    if not master:
        return categories
    out = dict(categories)
    moved = min(out.get("other", 0), storage_bytes(master))
    out["other"] -= moved
    out["optimizer_state"] += moved
    if phase == "optimizer":
        grads = min(out["activations"], storage_bytes(m.grad for m in master))
        out["activations"] -= grads
        out["gradients"] += grads
    return out


def step_notes(setup: TrainingSetup, loop: str) -> list[str]:
    """The loop and precision of the step, in words."""
    from introspect.measure.losses import NOTES, note

    if setup.cross_entropy in NOTES:
        return [note(setup.cross_entropy), *_precision_notes(setup)]
    notes = [
        "loop labels: loss = model(input_ids=x, labels=x).loss, output dropped (the HF "
        "Trainer's compute_loss)"
        if loop == "labels"
        else "loop logits: logits = model(x); loss = F.cross_entropy(logits, y); the logits "
        "are held through backward"
    ]
    return notes + _precision_notes(setup)


def _precision_notes(setup: TrainingSetup) -> list[str]:
    notes = []
    if setup.precision == "amp":
        notes.append("precision amp: torch.autocast(bfloat16) over FP32 weights, grads, Adam")
    elif setup.precision == "mixed":
        notes.append(
            "precision mixed: BF16 weights and grads; FP32 master copy (counted as optimizer "
            "state) with FP32 grads and optimizer state for the update"
        )
    return notes


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
    loop: str = "logits",
    inputs: tuple[torch.Tensor, torch.Tensor] | None = None,
):
    """The saved-tensor census of one forward pass and loss of ``model`` (the loop's
    loss, under autocast for ``amp``); ``inputs`` as :func:`measure_step` takes them."""
    from introspect.measure.census import census

    input_ids, targets = inputs or batch(
        spec.vocab_size, setup, "cpu" if device == "fake" else device
    )
    loss = _loop_loss(setup, loop, forward)

    def run():
        if setup.precision == "amp":
            with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
                return loss(model, input_ids, targets)[0]
        return loss(model, input_ids, targets)[0]

    return census(
        model,
        run,
        tokens=input_ids.numel(),
        seq_len=input_ids.shape[-1],
        head_size=spec.head_size,
        heads=spec.num_attention_heads,
    )
