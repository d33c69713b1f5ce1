"""Measurement: what one real training step (or a dry run of one) saw.

One record type for every backend, as torchtitan keeps one for its memory monitor. The
peak is the authoritative figure of the backend (``mx.get_peak_memory()``,
``torch.cuda.max_memory_allocated()``, or the live-storage tracker on CPU and in a dry
run); ``categories`` splits it only as far as the backend can tell things apart, and the
split always sums to the peak it describes.
"""

from __future__ import annotations

from introspect import _record
from introspect._record import field, record

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any

#: Category names, in report order. A backend reports the subset it can tell apart.
CATEGORIES = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "temporary",
    "other",
)


@record(kw_only=True)
class Measurement:
    """One measured (or dry-run) training step.

    ``peak_bytes`` is the step's peak once the optimizer's state exists (made directly,
    or by a warm-up step with the peak counter reset just before the measured step).
    ``categories`` is what was alive at that peak, by kind.
    ``active_bytes``/``cache_bytes`` are MLX's (or torch CUDA's allocated/reserved) after
    the step. ``peak_phase`` is forward, backward or optimizer where the backend can tell.
    """

    peak_bytes: int
    categories: dict[str, int] = field(default_factory=dict)
    active_bytes: int | None = None
    cache_bytes: int | None = None
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    peak_phase: str | None = None
    backend: str = ""
    device: str = ""
    compiled: bool = False
    #: Whose model ran: "reference", "mlx_lm" or "transformers".
    implementation: str = "reference"
    #: Every parameter of the model that ran (a LoRA model's frozen base and adapters).
    n_params: int = 0
    #: The parameters the optimizer updates (under LoRA, the adapters only).
    trainable_params: int | None = None
    versions: dict[str, str] = field(default_factory=dict)
    setup: dict[str, Any] = field(default_factory=dict)
    #: Saved-tensor census (torch only): term → bytes autograd kept for backward.
    census: dict[str, int] = field(default_factory=dict)
    #: Each measured step's peak when several were measured (MLX); ``peak_bytes`` is the
    #: largest.
    peak_samples: tuple[int, ...] = ()
    #: Peaks of parts of the step measured apart (MLX: loss and gradients alone, whole
    #: step), which place the peak where no tracker can.
    phase_peaks: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: Host memory the step's offloaded activations held at most (``--offload-activations``:
    #: the packed saved tensors), apart from the device's ``peak_bytes``; None without.
    host_peak_bytes: int | None = None
    #: The dry run's allocation stream replayed through torch's caching-allocator model
    #: (:mod:`introspect.allocator`), per device, expandable segments off and on; empty
    #: unless asked (``measure --device fake`` on torch).
    allocator_replay: dict[str, Any] = field(default_factory=dict)

    @property
    def framework(self) -> str:
        """The ``TrainingSetup.framework`` this step ran as."""
        if self.backend == "mlx":
            return "mlx_compiled" if self.compiled else "mlx"
        return self.backend

    def category_total(self) -> int:
        return sum(self.categories.values())

    def to_json(self) -> dict[str, Any]:
        out = _record.asdict(self)
        out["framework"] = self.framework
        out["notes"] = list(self.notes)
        out["peak_samples"] = list(self.peak_samples)
        return out


def versions(*modules: str) -> dict[str, str]:
    """Versions of python, the platform, and the named packages that are importable."""
    import importlib.metadata
    import platform  # here: its import compiles regexes, and only this reads it

    out = {"python": platform.python_version(), "platform": platform.platform(terse=True)}
    for name in modules:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out
