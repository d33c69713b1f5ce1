"""Real training steps and dry runs, to hold the estimates against.

* :mod:`.record` — :class:`Measurement`, the one record every backend returns.
* :mod:`.torch_model`, :mod:`.mlx_model` — reference models built from any ModelSpec.
* :mod:`.torch_step` — a torch step as users write it; CPU (live-storage tracker) and
  CUDA (``torch.cuda.max_memory_allocated``); :mod:`.tracker` is the tracker.
* :mod:`.fake` — the same torch step under FakeTensorMode: any size, no memory.
* :mod:`.mlx_step` — an MLX Adam step, compiled (as the seed) or not.
* :mod:`.census` — what autograd saves for backward, grouped into the seed's terms.
* :mod:`.implementations` — a Llama config for a ModelSpec (nominal sizes, shape flags).
* :mod:`.hf_models` — transformers' own class for any model_type, from the raw config.
* :mod:`.mlx_lm_models` — mlx-lm's own class for any model_type, with its trainer's loss.
* :mod:`.compare`, :mod:`.runner` — measurement beside both estimates.

torch and MLX are imported only by the submodules that need them; importing this
package imports neither.
"""

from introspect.measure.record import CATEGORIES, Measurement

__all__ = ["CATEGORIES", "Measurement"]
