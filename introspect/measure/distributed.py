"""A real sharded training step in D processes on this machine, and each rank's peak.

``measure_sharded`` starts D worker processes (``python -m introspect.measure.distributed``)
that join one ``torch.distributed`` group over gloo on 127.0.0.1 (a free port), each
build the reference model (:func:`introspect.measure.torch_model.build`, seed 0), wrap it
as the setup says and run the step as users write it — a warm-up step so Adam's state
exists, then one measured step:

* ``ddp`` — ``DistributedDataParallel(model, gradient_as_bucket_view=…)``, torch's Adam;
* ``zero`` (stage 1) — DDP plus ``ZeroRedundancyOptimizer(optimizer_class=Adam)``, as
  torch's documentation pairs them;
* ``fsdp`` — FSDP2: ``fully_shard`` on every block and then on the root (embedding, final
  norm, head), ``reshard_after_forward`` as set, under ``--precision mixed`` a
  ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``.

Peaks are live tensor storages, exact bytes: ``FSDPMemTracker`` for FSDP2 (it names
sharded and unsharded parameters, all-gather and reduce-scatter buffers) and
``MemTracker`` (:class:`~introspect.measure.tracker.PhaseMemTracker`) otherwise. DDP's
reducer allocates its gradient buckets in C++ when DDP is built, before any tracker can
see them, so they are counted apart: a comm hook (the default all-reduce, written as
``torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook``) records
every bucket buffer's storage, and the distinct ones not already counted are added to the
peak as ``comm/ddp_buckets`` (persistent, so alive at every moment).

Every process is started and ended by the caller: the parent waits with a timeout and
kills every worker on error or timeout. Results travel through a temporary directory.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: The strategies a measured sharded step runs.
MEASURED_SHARDING = ("ddp", "zero", "fsdp")


@dataclass(frozen=True)
class RankPeak:
    """One rank's measured peak, its phase and what was alive then, by category."""

    rank: int
    peak_bytes: int
    peak_phase: str
    categories: dict[str, int] = field(default_factory=dict)
    #: The largest live total inside each phase (forward, backward, optimizer).
    phase_peaks: dict[str, int] = field(default_factory=dict)
    #: ZeRO-1: parameters per rank in ZeroRedundancyOptimizer's own partition.
    partition: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ShardedMeasurement:
    """Every rank's peak; the figure is the largest rank's."""

    ranks: tuple[RankPeak, ...]
    sharding: str
    devices: int
    notes: tuple[str, ...] = ()

    @property
    def largest(self) -> RankPeak:
        return max(self.ranks, key=lambda r: r.peak_bytes)

    @property
    def spread(self) -> float:
        """(largest − smallest) / largest over the ranks' peaks."""
        peaks = [r.peak_bytes for r in self.ranks]
        return (max(peaks) - min(peaks)) / max(peaks)

    def to_json(self) -> dict[str, Any]:
        big = self.largest
        return {
            "sharding": self.sharding,
            "devices": self.devices,
            "peak_bytes": big.peak_bytes,
            "peak_rank": big.rank,
            "peak_phase": big.peak_phase,
            "categories": big.categories,
            "spread": self.spread,
            "ranks": [r.__dict__ for r in self.ranks],
            "notes": list(self.notes),
        }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_measurable(spec: ModelSpec, setup: TrainingSetup) -> None:
    """One line for a setup the sharded step does not run."""
    if setup.resolved_sharding not in MEASURED_SHARDING:
        raise IntrospectError(
            "a measured multi-process step needs --ddp, --zero 1 or --fsdp (got no sharding)"
        )
    if setup.resolved_sharding == "zero" and setup.zero_stage != 1:
        raise IntrospectError(
            f"--zero {setup.zero_stage}: torch measures ZeRO-1 (ZeroRedundancyOptimizer); "
            "use --zero 1, or --fsdp for stage 3"
        )
    if setup.precision == "mixed" and setup.resolved_sharding != "fsdp":
        raise IntrospectError(
            "--precision mixed is measured with --fsdp (MixedPrecisionPolicy); use fp32"
        )
    if setup.precision not in ("fp32", "mixed"):
        raise IntrospectError(f"--precision {setup.precision}: sharded steps measure fp32 or mixed")
    if setup.optimizer not in ("adam", "adamw"):
        raise IntrospectError("sharded steps are measured with --optimizer adam or adamw")
    if setup.activation_checkpointing or setup.cross_entropy != "standard":
        raise IntrospectError("sharded steps run without checkpointing, standard cross-entropy")
    if setup.devices > 8:
        raise IntrospectError(f"--devices {setup.devices}: at most 8 processes on this machine")


def measure_sharded(
    spec: ModelSpec, setup: TrainingSetup, *, timeout: float = 600.0
) -> ShardedMeasurement:
    """Run the step in ``setup.devices`` processes and collect every rank's peak.

    Every worker is killed if any fails or the whole run passes ``timeout`` seconds."""
    return measure_many([(spec, setup)], timeout=timeout)[0]


def measure_many(
    jobs: list[tuple[ModelSpec, TrainingSetup]], *, timeout: float = 600.0
) -> list[ShardedMeasurement]:
    """Several sharded steps with the same D in one group of D processes (each builds a
    fresh model per job, so torch is imported once); one :class:`ShardedMeasurement`
    per job. Every worker is killed if any fails or the run passes ``timeout`` seconds."""
    from introspect.measure.torch_model import check_buildable

    if not jobs:
        return []
    D = jobs[0][1].devices
    for spec, setup in jobs:
        check_measurable(spec, setup)
        check_buildable(spec)
        if setup.devices != D:
            raise IntrospectError("measure_many: every job needs the same --devices")
    with tempfile.TemporaryDirectory(prefix="introspect-dist-") as tmp:
        payload = {
            "jobs": [{"spec": sp.to_dict(), "setup": st.to_dict()} for sp, st in jobs],
            "port": free_port(),
            "dir": tmp,
            "devices": D,
        }
        job_path = os.path.join(tmp, "job.json")
        with open(job_path, "w") as f:
            json.dump(payload, f)
        _run_workers(job_path, D, tmp, timeout)
        out = []
        for j, (_, setup) in enumerate(jobs):
            ranks = []
            for rank in range(D):
                with open(os.path.join(tmp, f"rank{rank}_{j}.json")) as f:
                    ranks.append(RankPeak(**json.load(f)))
            notes = (
                "peaks from live tensor storages (torch FSDPMemTracker/MemTracker), exact bytes",
            )
            if setup.resolved_sharding in ("ddp", "zero"):
                notes += ("DDP's gradient buckets counted from its comm hook's bucket buffers",)
            out.append(ShardedMeasurement(tuple(ranks), setup.resolved_sharding, D, notes))
    return out


def _run_workers(job_path: str, D: int, tmp: str, timeout: float) -> None:
    """Start D workers, wait at most ``timeout`` seconds, end every one of them."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    procs: list[subprocess.Popen] = []
    logs = []
    timed_out = False
    try:
        for rank in range(D):
            log = open(os.path.join(tmp, f"rank{rank}.log"), "w+")
            logs.append(log)
            cmd = [sys.executable, "-m", "introspect.measure.distributed", job_path, str(rank)]
            procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
    try:
        codes = [p.returncode for p in procs]
        if timed_out or any(c != 0 for c in codes):
            rank = next((i for i, c in enumerate(codes) if c not in (0, -9)), 0)
            logs[rank].seek(0)
            tail = logs[rank].read().strip().splitlines()[-1:] or ["(no output)"]
            if timed_out:
                raise IntrospectError(
                    f"the {D}-process step passed --timeout {timeout:g} s; every process "
                    "was ended (use a smaller --seq or a larger --timeout)"
                )
            raise IntrospectError(
                f"the {D}-process step failed (rank {rank}, exit {codes[rank]}): {tail[0]}"
            )
    finally:
        for log in logs:
            log.close()


#: The categories a sharded row is compared in.
SPLIT = ("parameters", "gradients", "optimizer_state", "activations", "comm")


def measured_split(categories: dict[str, int]) -> dict[str, int]:
    """A rank's measured categories in :data:`SPLIT` (unsharded parameters and gradients
    with their kind; temporaries with the activations)."""
    out = dict.fromkeys(SPLIT, 0)
    for name, value in categories.items():
        base = name.split("/")[0]
        out["activations" if base in ("temporary", "other") else base] += value
    return out


def estimate_split(terms: dict[str, int]) -> dict[str, int]:
    """The refined estimate's peak terms in :data:`SPLIT` (the update's temporaries and
    gloo's reduce-scatter copy with the activations, as the tracker sees them: both are
    tensors made inside the step that no module or optimizer owns)."""
    out = dict.fromkeys(SPLIT, 0)
    for name, value in terms.items():
        if name.startswith("weights"):
            out["parameters"] += value
        elif name.startswith("grads"):
            out["gradients"] += value
        elif name.startswith("comm/") and name != "comm/gloo_copy":
            out["comm"] += value
        elif name.startswith("optimizer/") and name != "optimizer/temporaries":
            out["optimizer_state"] += value
        else:
            out["activations"] += value
    return out


# --- the worker -------------------------------------------------------------------------


def spec_from_dict(data: dict[str, Any]) -> ModelSpec:
    """A ModelSpec back from :meth:`ModelSpec.to_dict` (derived shapes dropped)."""
    return ModelSpec.from_dict(data)


def setup_from_dict(data: dict[str, Any]) -> TrainingSetup:
    """A TrainingSetup back from :meth:`TrainingSetup.to_dict`."""
    return TrainingSetup(
        **{k: v for k, v in data.items() if k in TrainingSetup.__dataclass_fields__}
    )


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
            result = _one_job(spec_from_dict(job["spec"]), setup_from_dict(job["setup"]), rank)
            result["rank"] = rank
            with open(os.path.join(payload["dir"], f"rank{rank}_{j}.json"), "w") as f:
                json.dump(result, f)
            gc.collect()
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _one_job(spec: ModelSpec, setup: TrainingSetup, rank: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from introspect.measure.torch_model import build
    from introspect.measure.torch_step import batch

    torch.manual_seed(0)
    model = build(spec, setup.attention)
    buckets: dict[int, Any] = {}
    if setup.resolved_sharding == "fsdp":
        model = _fully_shard(model, setup)
    else:
        model = _ddp(model, setup, buckets)
    optimizer = _optimizer(model, setup)
    input_ids, targets = batch(spec.vocab_size, setup, "cpu")
    # Each rank its own micro-batch, as a data loader's sampler gives it.
    input_ids = torch.roll(input_ids, shifts=rank, dims=1)
    targets = torch.roll(targets, shifts=rank, dims=1)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        logits = model(input_ids)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))
        loss.backward()
        optimizer.step()

    # Two warm-up steps: Adam's state exists after the first, and DDP rebuilds its
    # buckets in gradient-ready order at the start of the second forward.
    step()
    buckets.clear()
    step()
    dist.barrier()
    result = _measured_step(model, optimizer, step, setup, list(buckets.values()))
    if setup.resolved_sharding == "zero":
        result["partition"] = [
            sum(p.numel() for group in groups for p in group["params"])
            for groups in optimizer._partition_parameters()
        ]
    return result


def _fully_shard(model, setup: TrainingSetup):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy()
    if setup.precision == "mixed":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    reshard = setup.reshard_after_forward
    for layer in model.layers:
        fully_shard(layer, reshard_after_forward=reshard, mp_policy=mp)
    fully_shard(model, mp_policy=mp)  # root: default None = kept gathered
    return model


def _ddp(model, setup: TrainingSetup, bucket_tensors: dict[int, Any]):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils._python_dispatch import _disable_current_modes

    ddp = DistributedDataParallel(model, gradient_as_bucket_view=setup.gradient_as_bucket_view)

    def allreduce_hook(state, bucket):
        # torch's default_hooks.allreduce_hook, keeping each bucket's buffer; its ops run
        # outside the tracker, which has already counted the (persistent) buffers.
        tensor = bucket.buffer()
        bucket_tensors[bucket.index()] = tensor
        with _disable_current_modes():
            tensor.div_(dist.get_world_size())
            fut = dist.all_reduce(tensor, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

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
    from introspect.measure.live_tracker import storage_bytes

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
    return {
        "peak_bytes": sum(cats.values()),
        "peak_phase": phase.phase,
        "categories": cats,
        "phase_peaks": phase.phase_peaks,
    }


def _classify_unsharded_grads(model, tracker) -> list:
    """FSDPMemTracker names an unsharded gradient only in the unit's post-backward; until
    then autograd's fresh gradient counts as a backward temporary. A post-accumulate hook
    on every unsharded parameter names it a gradient as soon as it exists."""
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
            handles.append(fsdp_param.unsharded_param.register_post_accumulate_grad_hook(hook))
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
            total = sum(s.get("Total", 0) for s in tracker.get_tracker_snapshot().values())
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
