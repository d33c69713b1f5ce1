"""Activation offload (``--offload-activations``): the saved set on the host.

torch's ``save_on_cpu(pin_memory=True)`` (``torch/autograd/graph.py``) packs every tensor
autograd saves into a host copy as it is saved; the device's is freed unless Python
still references it, and each backward node unpacks a device copy of its own saved
tensors when it runs (:mod:`introspect.measure.activation_offload`). So the device holds,
at each moment of :mod:`introspect.refined.execution`'s timeline, its state, the
gradients made so far and the moment's transients as before, and of the saved set only:

* the loop's logits (``--loop logits``: a Python reference, kept on the device);
* at the loss's forward, what the loss has just computed (the log-softmax output) and,
  under autocast, autocast's cache of every BF16 weight copy (``cached_cast`` keeps them
  until the autocast region exits, ``aten/src/ATen/autocast_mode.cpp``; the saved copies
  on the host are a second copy);
* inside the loss's backward, the unpacked log-softmax output;
* at lm_head's backward, its unpacked input (the final norm's output) and its unpacked
  weight (a matmul saves its ``t()`` view, which ``save_on_cpu`` copies like any tensor);
* at a layer's backward, that layer's saved set (an upper bound on what its running node
  has unpacked), the layers below on the host.

Host memory (not on the device, not in the peak) holds every saved tensor and every
weight a matmul saved; ``measure`` reports it apart (``Measurement.host_peak_bytes``), the
closed form does not price it. torchtune's ``OffloadActivations`` keeps small tensors,
parameters and the output head's saved tensors on the device
(:func:`introspect.applies.notes` says so).

Approximate, not exact: against the measured step (real CPU == dry run to the byte),
transformers' Qwen2 at width 64, T = 64 and 256, FP32/BF16/autocast, eager and SDPA,
with and without checkpointing: within -17% … +17% (``tests/test_accumulation.py``).
The forward's per-layer working set (:func:`layer_forward`) counts the whole layer's
saved set beside the attention's T×T transients, which the real forward never holds
at once (over by up to 17% where the T×T tensors dominate), and misses the eager
forward's scaled, masked and dropped copies of the scores and the causal mask (under
by up to 17% under autocast, whose T×T tensors are BF16 and FP32); the order of a
forward layer's tensors is not modelled.
"""

from __future__ import annotations

from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec
from introspect.terms import LOG_SOFTMAX, LOGITS_OUTPUT

UNPACKED_WEIGHT = "activations/offload/unpacked_weight"
AUTOCAST_WEIGHT = "activations/logits/autocast_weight"


def on_device(saved_all: dict[str, int]) -> dict[str, int]:
    """Of the saved set, what stays on the device: the loop's logits."""
    return {k: v for k, v in saved_all.items() if k == LOGITS_OUTPUT}


def at_forward_end(saved_all: dict[str, int]) -> dict[str, int]:
    """Inside the loss's backward: the loop's logits and the unpacked log-softmax."""
    out = on_device(saved_all)
    if LOG_SOFTMAX in saved_all:
        out[LOG_SOFTMAX] = saved_all[LOG_SOFTMAX]
    return out


def at_head(spec: ModelSpec, setup: TrainingSetup, saved_all: dict[str, int], wb: int) -> dict:
    """lm_head's backward: the loop's logits, lm_head's unpacked input and weight (under
    autocast its saved BF16 copy, unpacked)."""
    out = on_device(saved_all)
    out["activations/final_norm"] = saved_all.get("activations/final_norm", 0)
    out[UNPACKED_WEIGHT] = saved_all.get(AUTOCAST_WEIGHT) or spec.vocab_size * spec.hidden_size * wb
    return out


def layer_forward(state: dict[str, int], kinds: dict[str, tuple[dict[str, int], int]]) -> dict:
    """A layer's forward with the saved set on the host: the state, that layer's saved
    set (each tensor alive on the device from when it is made until it is packed and no
    longer referenced: an upper bound on the layer's working set) and the attention's
    T×T transients, per layer kind as ``(execution.layer_saved, execution.attention_transient)``
    (passed in by the timeline, introspect/refined/execution.py). The largest kind's."""
    best: dict[str, int] = {}
    for saved, transient in kinds.values():
        layer = {f"activations/layer/{k}": v for k, v in saved.items()}
        layer["activations/layer/attention/forward"] = transient
        if sum(layer.values()) > sum(best.values()):
            best = layer
    return {**state, **best}
