"""ZeRO-3's gradient hand-off in the replay: what backward's hooks allocate, on which
stream, and when the caching allocator may reuse it (DeepSpeed v0.14.2,
``deepspeed/runtime/zero/stage3.py`` and ``deepspeed/runtime/comm/coalesced_collectives.py``).

* Each parameter's gradient is made by autograd on the default stream (``w · t`` bytes,
  the last layer's first). Its post-accumulate hook
  (``reduce_independent_p_g_buckets_and_remove_grads`` → ``__add_grad_to_ipg_bucket``,
  stage3.py:1230-1247) copies it into the IPG bucket under
  ``get_accelerator().stream(self.reduce_and_partition_stream)``, calls
  ``param.grad.record_stream(current_stream())`` and points ``param.grad.data`` at the
  bucket's slice: autograd's block is freed with a use on the reduce stream. The caching
  allocator (``CUDACachingAllocator.cpp`` ``free``: ``insert_events`` when
  ``stream_uses`` is not empty; ``process_events`` at each ``malloc``) returns such a
  block to its pool only once the event recorded on the reduce stream has completed;
  the host knows that for certain at ``reduce_and_partition_stream.synchronize()`` in
  ``independent_gradient_partition_epilogue`` (stage3.py:1082-1088). The replay has no
  clock, so it frees them there: the bound of a step whose host runs ahead of the device
  through backward (a GPU-bound step); a host-bound one frees them sooner.
* A bucket is reduced when the next gradient would overflow ``reduce_bucket_size``
  elements (stage3.py:1221) and at the epilogue. With ``reduce_scatter`` (DeepSpeed's
  default, stage3.py:105) ``__reduce_and_partition_ipg_grads`` takes
  ``__avg_scatter_grads`` (stage3.py:1269-1273) → ``reduce_scatter_coalesced``
  (coalesced_collectives.py), which ``torch.cat``\\ s every tensor's partitions, each
  padded to ``ceil(t / D)``, into one flat buffer on the reduce stream: ``w · D ·
  Σ ceil(t / D)`` bytes (none when the bucket is one tensor divisible by D, the
  function's own shortcut). ``partition_grads`` copies its slices into the contiguous
  gradient partition and the buffer is freed on the reduce stream: a block the default
  stream never reuses (``BlockPool`` keys on the stream).

Derived from DeepSpeed's and torch's source, not measured on a GPU.
"""

from __future__ import annotations

import math

from introspect.allocator.synthetic import REDUCE_STREAM, parameter_tensors


def buckets(tensors: list[int], bucket_size: int) -> list[list[int]]:
    """The IPG buckets backward fills, gradients in the order they arrive (the reverse
    of ``tensors``): a bucket is closed when the next one would pass ``bucket_size``
    elements and it holds any (stage3.py:1221)."""
    out: list[list[int]] = [[]]
    for t in reversed(tensors):
        if out[-1] and sum(out[-1]) + t > bucket_size:
            out.append([])
        out[-1].append(t)
    return [b for b in out if b]


def flat_buffer_bytes(bucket: list[int], devices: int, w: int) -> int:
    """``reduce_scatter_coalesced``'s ``torch.cat``: ``w · D · Σ ceil(t / D)`` (0 where
    the bucket is one tensor that D divides: ``tensors[0].view(-1)``)."""
    if len(bucket) == 1 and bucket[0] % devices == 0:
        return 0
    return w * devices * sum(math.ceil(t / devices) for t in bucket)


def with_gradient_handoff(events: list[tuple], spec, setup) -> list[tuple]:
    """``events`` with ZeRO-3's gradient hand-off: autograd's gradient of each parameter
    (``w · t`` bytes on the default stream, the parameters in reverse order) allocated
    through backward, each after its share of backward's own allocations (``j``-th of
    ``P`` after the ``⌊j·B/P⌋``-th of backward's ``B``), so it meets the cache while the
    activations are still held; then, at the epilogue (before the step's first event),
    each bucket's flat buffer (:func:`flat_buffer_bytes`) allocated and freed on the
    reduce stream, and the gradients freed — their ``record_stream`` events known passed
    at ``reduce_and_partition_stream.synchronize()``. Where
    :func:`introspect.refined.deepspeed.stage3_applies` does not hold, ``events``."""
    from introspect.refined import deepspeed
    from introspect.refined.precision import working_weight_bytes
    from introspect.refined.shard_shapes import DS_REDUCE_BUCKET

    if not deepspeed.stage3_applies(setup):
        return events
    w, D = working_weight_bytes(setup), setup.devices
    tensors = parameter_tensors(spec)
    grads = [("zero3_grad", i) for i in range(len(tensors))]
    made = [
        ("alloc", key, w * t, "backward", 0)
        for key, t in zip(grads, reversed(tensors), strict=True)
    ]
    epilogue: list[tuple] = []
    for i, bucket in enumerate(buckets(tensors, DS_REDUCE_BUCKET)):
        nbytes = flat_buffer_bytes(bucket, D, w)
        if nbytes:
            key = ("zero3_flat_buffer", i)
            epilogue += [("alloc", key, nbytes, "backward", REDUCE_STREAM), ("free", key)]
    epilogue += [("free", key) for key in grads]
    backward = [i for i, e in enumerate(events) if e[0] == "alloc" and e[3] == "backward"]
    end = next(
        (
            i
            for i, e in enumerate(events)
            if e[0] == "alloc" and e[3] in ("master_grads", "optimizer_step")
        ),
        len(events),
    )
    # each gradient after its share of backward's own allocations: the last layer's first
    at: dict[int, list[tuple]] = {}
    for j, event in enumerate(made):
        where = backward[j * len(backward) // len(made)] + 1 if backward else end
        at.setdefault(min(where, end), []).append(event)
    at.setdefault(end, []).extend(epilogue)
    out: list[tuple] = []
    for i in range(len(events) + 1):
        out += at.get(i, [])
        if i < len(events):
            out.append(events[i])
    return out


#: Bytes of ``torch.float64``: ``get_grad_norm_direct``'s ``.double()``.
FLOAT64 = 8


def with_grad_norm(events: list[tuple], spec, setup) -> list[tuple]:
    """``events`` with ZeRO-3's gradient norm before the step's first allocation:
    ``step`` → ``_get_norm_groups`` → ``get_grad_norm_direct`` (stage3.py:1717-1771,
    :2029 at v0.14.2) runs ``g.to(device).double().norm(2)`` on each parameter's gradient
    partition in turn: a float64 copy, ``8 · ceil(t / D)`` bytes, made on the default
    stream and freed once its norm (a scalar) is taken — after the overflow check, before
    the sub-group's FP32 conversion. Below the conversion's allocated bytes, so in the
    replay only; ``events`` where :func:`introspect.refined.deepspeed.stage3_applies`
    does not hold."""
    from introspect.refined import deepspeed

    if not deepspeed.stage3_applies(setup):
        return events
    D = setup.devices
    norm: list[tuple] = []
    for i, t in enumerate(parameter_tensors(spec)):
        key = ("zero3_grad_norm", i)
        norm += [("alloc", key, FLOAT64 * math.ceil(t / D), "master_grads", 0), ("free", key)]
    for i, event in enumerate(events):
        if event[0] == "alloc" and event[3] in ("master_grads", "optimizer_step"):
            if len(event) < 5 or event[4] == 0:  # after the overflow check's reduce stream
                return events[:i] + norm + events[i:]
    return events + norm
