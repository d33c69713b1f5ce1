"""The model's buffers: tensors a transformers class registers beside its parameters
(``nn.Buffer``), resident on the device from the build to the end of the step, in every
moment.

Most are small (a rotary ``inv_freq`` table holds head_dim/2 values), but three GPT-style
classes keep a causal mask of the whole context, which at a short training sequence can
outweigh the weights:

* GPT-Neo: one ``bias`` per layer, ``tril(ones(max_positions, max_positions,
  dtype=bool))`` (the local layers XOR-ed with the band beyond ``window_size``), B² bools
  each (``models/gpt_neo/modeling_gpt_neo.py`` l. 59-70);
* GPT-BigCode: one ``bias`` on the model, ``tril(ones(max_positions, max_positions,
  dtype=bool))`` (``models/gpt_bigcode/modeling_gpt_bigcode.py`` l. 381);
* OpenAI GPT: one ``bias`` per layer, ``tril(ones(n_positions, n_positions))`` in the
  load dtype, and the model's ``position_ids``, ``arange(n_positions)`` int64
  (``models/openai/modeling_openai.py`` l. 53, 306).

The boolean and integer buffers keep their bytes (``ModelSpec.buffer_bytes``). A floating
one is made under ``from_config``'s ``local_torch_dtype(dtype)`` (``modeling_utils.py``
``_from_config``), i.e. at the working weights' dtype, unless its code names FP32
explicitly (rotary tables: ``.float()``); these are counted at the working dtype, which
misses the rotary tables' FP32 by 2 bytes a value under BF16 (a few hundred bytes).
Read from the meta-device build (:func:`introspect.adapters.hf_transformers._buffers`);
a spec from a family reader carries none (its rotary tables are those few hundred bytes).
"""

from __future__ import annotations

from introspect.refined.precision import working_weight_bytes
from introspect.refined.reference import is_mlx
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import BUFFERS


def buffer_terms(spec: ModelSpec, setup: TrainingSetup) -> dict[str, int]:
    """``{"weights/buffers": buffer_bytes + float_buffer_elements · w}`` (w: the working
    weights' bytes) for transformers' classes on torch; empty for our reference model
    and MLX (neither registers these buffers) and for a spec without buffers."""
    if setup.implementation != "transformers" or is_mlx(setup):
        return {}
    total = spec.buffer_bytes + spec.float_buffer_elements * working_weight_bytes(setup)
    return {BUFFERS: total} if total else {}
