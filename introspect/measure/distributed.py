"""A real sharded training step in D processes on this machine, and each rank's peak.

``measure_sharded`` starts D worker processes (``python -m
introspect.measure.distributed_worker``)
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

from introspect._record import field_names
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
    #: The dry run's allocation stream replayed through the caching-allocator model
    #: (:mod:`introspect.allocator.recording`); empty unless a dry run asked for it.
    allocator_replay: dict = field(default_factory=dict)


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
    spec: ModelSpec, setup: TrainingSetup, *, timeout: float = 600.0, config: dict | None = None
) -> ShardedMeasurement:
    """Run the step in ``setup.devices`` processes and collect every rank's peak (of
    ``config``'s transformers class when given, else our reference model).

    Every worker is killed if any fails or the whole run passes ``timeout`` seconds."""
    return measure_many([(spec, setup)], timeout=timeout, configs=[config])[0]


def measure_many(
    jobs: list[tuple[ModelSpec, TrainingSetup]],
    *,
    timeout: float = 600.0,
    configs: list[dict | None] | None = None,
) -> list[ShardedMeasurement]:
    """Several sharded steps with the same D in one group of D processes (each builds a
    fresh model per job, so torch is imported once); one :class:`ShardedMeasurement`
    per job. Every worker is killed if any fails or the run passes ``timeout`` seconds.

    ``configs`` (one per job, or None): a Hugging Face config dict makes that job's model
    the config's own transformers class, stepped with the setup's loop (labels:
    ``model(input_ids=x, labels=x).loss``); None runs our reference model."""
    from introspect.measure.torch_model import check_buildable

    if not jobs:
        return []
    configs = configs or [None] * len(jobs)
    D = jobs[0][1].devices
    for (spec, setup), config in zip(jobs, configs, strict=True):
        check_measurable(spec, setup)
        if config is None:
            check_buildable(spec)
        if setup.devices != D:
            raise IntrospectError("measure_many: every job needs the same --devices")
    with tempfile.TemporaryDirectory(prefix="introspect-dist-") as tmp:
        payload = {
            "jobs": [
                {"spec": sp.to_dict(), "setup": st.to_dict(), "config": config}
                for (sp, st), config in zip(jobs, configs, strict=True)
            ],
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
            cmd = [
                sys.executable,
                "-m",
                "introspect.measure.distributed_worker",
                job_path,
                str(rank),
            ]
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
    return TrainingSetup(**{k: v for k, v in data.items() if k in field_names(TrainingSetup)})
