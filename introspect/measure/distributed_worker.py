"""The worker of :mod:`introspect.measure.distributed`: one rank of a sharded step.

``python -m introspect.measure.distributed_worker JOB RANK`` joins the gloo group named
in the job file, runs each job's step (a fresh reference model, wrapped as the setup
says; two warm-up steps, then one tracked step) and writes ``rank{RANK}_{j}.json`` per
job. See :mod:`introspect.measure.distributed` for what is measured and how.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from introspect.measure.distributed import setup_from_dict, spec_from_dict
from introspect.refined.implementations import resolve_attention
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


def _worker(job_path: str, rank: int) -> None:
    import gc

    import torch
    import torch.distributed as dist

    with open(job_path) as f:
        payload = json.load(f)
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{payload['port']}",
        rank=rank,
        world_size=payload["devices"],
    )
    try:
        for j, job in enumerate(payload["jobs"]):
            spec, setup = spec_from_dict(job["spec"]), setup_from_dict(job["setup"])
            setup = resolve_attention(spec, setup)  # --attention left out: the class's own
            result = _one_job(spec, setup, rank, job.get("config"))
            result["rank"] = rank
            with open(os.path.join(payload["dir"], f"rank{rank}_{j}.json"), "w") as f:
                json.dump(result, f)
            gc.collect()
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _one_job(
    spec: ModelSpec,
    setup: TrainingSetup,
    rank: int,
    config: dict | None = None,
    *,
    wrap_kwargs: dict[str, Any] | None = None,
    wrapped: Any = None,
    warmups: int = 2,
) -> dict[str, Any]:
    """One rank's step and its peak. The dry run (:mod:`introspect.measure.fake_sharded`)
    calls it too: ``wrap_kwargs`` go to every ``fully_shard`` call (or to DDP), and
    ``wrapped`` (model → None) runs on the wrapped model before the optimizer is made,
    and ``warmups`` steps run before the tracked one.

    ``--finetune lora``: peft's ``get_peft_model`` (:func:`introspect.measure.peft_step.wrap`)
    on the built FP32 class before DDP or ``fully_shard``, as torchtune's LoRA recipes
    and accelerate's FSDP plugin order them (adapters first, then the sharding wrapper)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from introspect.measure.torch_step import batch

    torch.manual_seed(0)
    if config is None:
        from introspect.measure.torch_model import build

        model = build(spec, setup.attention)
    else:
        from introspect.measure import hf_models

        model = hf_models.build(
            config, "sharded job", attention=setup.attention, dtype=torch.float32
        )
    quant_state = 0
    if setup.finetune != "full":
        from introspect.measure import peft_step

        model = peft_step.wrap(model, spec, setup, torch.float32)
        # QLoRA's NF4 quant state: plain tensors on each Linear4bit, neither parameters
        # nor buffers, so no tracker sees them and fully_shard leaves them whole.
        quant_state = peft_step.quant_state_bytes(model)
    buckets: dict[int, Any] = {}
    if setup.resolved_sharding == "fsdp":
        model = _fully_shard(model, setup, **(wrap_kwargs or {}))
    else:
        model = _ddp(model, setup, buckets, **(wrap_kwargs or {}))
    if wrapped is not None:
        wrapped(model)
    optimizer = _optimizer(model, setup)
    input_ids, targets = batch(spec.vocab_size, setup, "cpu")
    # Each rank its own micro-batch, as a data loader's sampler gives it.
    input_ids = torch.roll(input_ids, shifts=rank, dims=1)
    targets = torch.roll(targets, shifts=rank, dims=1)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        if config is None:
            logits = model(input_ids)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))
        elif setup.loop == "labels":  # the HF Trainer's compute_loss
            loss = model(input_ids=input_ids, labels=input_ids).loss
        else:
            logits = model(input_ids=input_ids).logits
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        loss.backward()
        optimizer.step()

    # Two warm-up steps: Adam's state exists after the first, and DDP rebuilds its
    # buckets in gradient-ready order at the start of the second forward (the dry run,
    # which declines the rebuild, needs one). The last warm-up's buckets are the step's.
    for _ in range(warmups):
        buckets.clear()
        step()
    dist.barrier()
    result = _measured_step(model, optimizer, step, setup, list(buckets.values()))
    if quant_state:  # alive at every moment of the step
        result["peak_bytes"] += quant_state
        result["categories"]["other"] = result["categories"].get("other", 0) + quant_state
        result["phase_peaks"] = {k: v + quant_state for k, v in result["phase_peaks"].items()}
    if setup.resolved_sharding == "zero":
        result["partition"] = [
            sum(p.numel() for group in groups for p in group["params"])
            for groups in optimizer._partition_parameters()
        ]
    return result


def _fully_shard(model, setup: TrainingSetup, **shard_kwargs):
    """FSDP2 as users write it: ``fully_shard`` on every decoder block, then the root;
    ``shard_kwargs`` (the dry run's ``mesh``, ``offload_policy``) go to every call."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy()
    if setup.precision == "mixed":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = setup.reshard_after_forward
    # Every decoder block its own unit: our model's ``layers``; a transformers class keeps
    # them in its base model (``model.model.layers``, GPT-2's ``transformer.h``).
    # Under peft the class is inside its PeftModel (get_base_model).
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    base = inner if hasattr(inner, "layers") else inner.base_model
    blocks = base.layers if hasattr(base, "layers") else base.h
    for layer in blocks:
        fully_shard(layer, reshard_after_forward=reshard, mp_policy=mp, **shard_kwargs)
    fully_shard(model, mp_policy=mp, **shard_kwargs)  # root: default None = kept gathered
    return model


def _ddp(model, setup: TrainingSetup, bucket_tensors: dict[int, Any], **ddp_kwargs):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils._python_dispatch import _disable_current_modes

    ddp = DistributedDataParallel(
        model, gradient_as_bucket_view=setup.gradient_as_bucket_view, **ddp_kwargs
    )

    def allreduce_hook(state, bucket):
        # torch's default_hooks.allreduce_hook, keeping each bucket's buffer; its ops run
        # outside the tracker, which has already counted the (persistent) buffers.
        tensor = bucket.buffer()
        bucket_tensors[bucket.index()] = tensor
        with _disable_current_modes():
            tensor.div_(dist.get_world_size())
            fut = dist.all_reduce(tensor, async_op=True).get_future()
        # torch's ``fut.value()[0]``; a fake process group (the dry run) completes its
        # work with no value, and the reduction is in place: the bucket itself.
        return fut.then(lambda f: (f.value() or [tensor])[0])

    ddp.register_comm_hook(None, allreduce_hook)
    return ddp


def _optimizer(model, setup: TrainingSetup):
    import torch

    cls = torch.optim.AdamW if setup.optimizer == "adamw" else torch.optim.Adam
    if setup.resolved_sharding == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, lr=1e-4)
    return cls(model.parameters(), lr=1e-4)


def _measured_step(model, optimizer, step, setup, buckets) -> dict[str, Any]:
    from introspect.allocator import recording
    from introspect.measure.live_tracker import LiveStorageTracker, storage_bytes

    replay_with = recording.wanted()  # a dry run's allocation stream, when asked
    if replay_with is not None:
        local_opt = optimizer.optim if hasattr(optimizer, "optim") else optimizer
        # DDP's buckets exist before the step: allocated first, with the state.
        recorder = LiveStorageTracker(model, local_opt, external=buckets, record=True)
        inner = step

        def step() -> None:
            with recorder:  # inside the tracker below: both see the same operations
                inner()

    if setup.resolved_sharding == "fsdp":
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        tracker = FSDPMemTracker(model, optimizer)
        phase = _PhaseWatch(tracker)
        hooks = _classify_unsharded_grads(model, tracker)
        with tracker:
            step()
        for h in hooks:
            h.remove()
        cats = _fsdp_categories(tracker.get_tracker_snapshot("peak"))
    else:
        from torch.distributed._tools.mem_tracker import _MemRefType

        from introspect.measure.tracker import PhaseMemTracker, categories_at_peak

        local = optimizer.optim if hasattr(optimizer, "optim") else optimizer
        tracker = PhaseMemTracker()
        tracker.track_external(model, local)
        # DDP's buckets exist since the last rebuild, before the tracker: counted from
        # the start as "Other" (nothing else in this step is).
        for tensor in buckets:
            tracker._update_and_maybe_create_winfos(tensor, _MemRefType.OTH)
        phase = _PhaseWatch(tracker)
        with tracker:
            step()
        state = storage_bytes([v for s in local.state.values() for v in s.values()])
        cats = categories_at_peak(tracker, state)
        cats["comm"] = cats.pop("other")
        if setup.gradient_as_bucket_view:
            # The gradients are views into the buckets: one storage, counted as buckets.
            cats["comm"] += cats.pop("gradients")
            cats["gradients"] = 0
    out = {
        "peak_bytes": sum(cats.values()),
        "peak_phase": phase.phase,
        "categories": cats,
        "phase_peaks": phase.phase_peaks,
    }
    if replay_with is not None:
        out["allocator_replay"] = recording.summarize(recorder.stream(), *replay_with)
    return out


def _classify_unsharded_grads(model, tracker) -> list:
    """FSDPMemTracker names an unsharded gradient only in the unit's post-backward; until
    then autograd's fresh gradient counts as a backward temporary. A post-accumulate hook
    on every unsharded parameter that requires one (a frozen LoRA base has none) names
    it a gradient as soon as it exists."""
    from torch.distributed._tools.fsdp2_mem_tracker import _FSDPRefType
    from torch.distributed.fsdp import FSDPModule

    def hook(param) -> None:
        if param.grad is not None:
            tracker._update_and_maybe_create_winfos(param.grad, _FSDPRefType.UNSHARDED_GRAD)

    handles = []
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        group = module._get_fsdp_state()._fsdp_param_group
        for fsdp_param in group.fsdp_params if group else ():
            if fsdp_param.sharded_param.requires_grad:  # not LoRA's frozen base
                unsharded = fsdp_param.unsharded_param
                handles.append(unsharded.register_post_accumulate_grad_hook(hook))
    return handles


class _PhaseWatch:
    """The phase a tracker's peak rose in (forward, backward, optimizer), and each
    phase's own peak (total live bytes) — the moments the estimate compares."""

    def __init__(self, tracker) -> None:
        self.phase = ""
        self.phase_peaks: dict[str, int] = {}
        original = tracker._update_peak_stats

        def update(peak_state):
            before = dict(tracker._peak_mem)
            original(peak_state)
            if tracker._in_opt:
                now = "optimizer"
            elif tracker._mod_tracker.is_bw:
                now = "backward"
            else:
                now = "forward"
            # The tracker's own current snapshot, read in place: get_tracker_snapshot()
            # deep-copies it, on every operation.
            total = sum(s.get("Total", 0) for s in tracker._curr_mem_snap.values())
            self.phase_peaks[now] = max(self.phase_peaks.get(now, 0), total)
            if tracker._peak_mem != before:
                self.phase = now

        tracker._update_peak_stats = update


#: FSDPMemTracker's kinds → our categories (``comm`` = communication buffers).
FSDP_KINDS = {
    "Sharded Param": "parameters",
    "Unsharded Param": "parameters/unsharded",
    "Buffer": "parameters",
    "Sharded Grad": "gradients",
    "Unsharded Grad": "gradients/unsharded",
    "Activation": "activations",
    "Temp": "temporary",
    "All Gather": "comm",
    "Reduce Scatter": "comm",
    "OptState": "optimizer_state",
    "Inputs": "activations",
}


def _fsdp_categories(snap) -> dict[str, int]:
    out: dict[str, int] = {}
    for dev_snap in snap.values():
        for kind, value in dev_snap.items():
            name = getattr(kind, "value", kind)
            if name == "Total":
                continue
            key = FSDP_KINDS.get(name, "other")
            out[key] = out.get(key, 0) + value
    return out


if __name__ == "__main__":
    _worker(sys.argv[1], int(sys.argv[2]))
