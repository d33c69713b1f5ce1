"""Dry runs that answer a data-dependent step with its upper bound: LongCat-Flash's routed
experts and BLT's entropy patches.

Both classes size what a step holds by values the step computes from its data, which a
fake tensor does not have. Each answer keeps the class's own code and replaces only the
values it reads (``aten.nonzero``'s row count, ``.item()``) by those of the case that holds
the most, derived from the source below and held to real CPU steps at a tiny shape in
``tests/test_dry_run_bounds.py``. The measurement then says "an upper bound" in its notes
(:data:`UPPER_BOUND`), and ``introspect profile`` prints that line with the answer.

LongCat-Flash (``transformers/models/longcat_flash/modeling_longcat_flash.py``):
``LongcatFlashExperts.forward`` (l. 180-204) one-hots the router's (N, k) top-k indices,
takes the experts hit with ``nonzero`` (l. 187), and for each, in ascending index order,
``int(expert_idx_tensor.item())`` (l. 189) and ``torch.where`` of its mask (l. 190) give
the n_e rows it takes. An index at or above ``n_routed_experts`` is one of the
``zero_expert_num`` identity experts (l. 195-196), which saves only its (n_e, H) input for
the weight multiply (l. 202); a real expert saves its input, the (n_e, 2I) gate/up output,
the activation, the product and the (n_e, H) down output (l. 198-202). So the saved
bytes grow with the rows routed to real experts, at most all N·k (top-k picks k distinct
experts per token, so n_e ≤ N). How the rows fall matters to the backward too: autograd
runs the later experts' nodes first, freeing each expert's saved tensors as its branch
runs, and every real expert's ``gate_up_proj[expert_idx]`` gives a whole-parameter gradient
(``SelectBackward0``) that is added to the one already accumulated, two copies at once from
the second expert on. What is still saved then is everything but the experts processed
before, so the step holds the most when the experts processed first (the highest indices
hit) take one row each and the rest take every token: the answer is that routing, with
every top-k row on a real expert (:func:`bound_routing`). At fp32, N = 256, k = 4 of 8
real experts, real CPU steps peak at 378.98 MB with the k experts taking every token,
383.6-383.8 MB spread evenly or at random, 379.9 MB at the router's own random init (some
rows on identity experts), 275.2 MB all on identity experts, and 388.65 MB in the bound's
routing, which is what the dry run holds.

BLT (``transformers/models/blt/modeling_blt.py``): ``BltPatcher.forward`` (l. 872-930) runs
its own small transformer under no gradient, and ``patch_lengths_from_entropies``
(l. 933-984) starts a patch at every byte whose next-byte entropy is over
``patching_threshold``: P = 2 + the most patches a row has (l. 972-976), so P ≤ T + 1, and
``process_patch_lengths`` (l. 805-849), when ``max_patch_length`` is set, splits long
patches into at most T segments a row (l. 848) — T + 1 only for ``max_patch_length`` 1 with
several rows, where a padded row's lengths sum to T + 1, a case this answer refuses.
``BltModel.forward`` (l. 1211-1302) then sizes the global transformer's sequence (P), the
encoder's patch pooling (B, P, H), both cross-attention masks (B, 1, P·k, T) and
(B, 1, T, P·k) and the decoder's cross-attention keys by P, and nothing by the values of
the patch lengths (``_patch_ids_from_lengths``, l. 1314-1324, and the masks are tensor
ops on them). So the step holds the most when every entropy is over the threshold: every
byte its own patch, the global transformer at its longest. The answer runs both functions
as they are, on real tensors, with every entropy over the threshold; the patcher's own
network runs fake as for any dry run, and its ``torch.distributions.Categorical`` argument
check (``torch/distributions/distribution.py``, ``if not torch._is_all_true(valid)``) is
answered as it passes for the patcher's finite logits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: How a measurement's note says that the dry run answered an upper bound.
UPPER_BOUND = "an upper bound: "

#: The note a dry run of LongCat-Flash carries.
ROUTED_NOTE = (
    UPPER_BOUND + "every top-k row routed to a real expert (LongcatFlashExperts: no row on "
    "the zero_expert_num identity experts, which save less; the experts the backward "
    "reaches first take one row each, the rest every token; "
    "introspect.measure.fake_bounds.routed_to_real_experts)"
)

#: The note a dry run of BLT carries.
PATCH_NOTE = (
    UPPER_BOUND + "every byte its own patch: the global transformer at its longest "
    "(BltPatcher: every next-byte entropy over patching_threshold, T + 1 patches with no "
    "max_patch_length; introspect.measure.fake_bounds.every_byte_a_patch)"
)


def bound_routing(tokens: int, top_k: int, routed: int, total: int) -> list[tuple[int, int]]:
    """The (expert index, rows) LongCat-Flash's experts loop visits, in its order, in the
    routing whose step holds the most (see the module docstring): with
    ``top_k ≤ routed``, experts 0..k-2 take all ``tokens`` rows, the last top-k slot puts
    one token on each of experts k..k+m-1 (m = min(routed - k, tokens - 1)) and the rest on
    expert k-1, so Σ rows = tokens·k, every row on a real expert, every token on k distinct
    experts. With ``top_k > routed`` every token takes every real expert and the remaining
    slots go to identity experts (indices routed..), all ``tokens`` rows each."""
    if top_k > routed:
        if top_k > total:
            raise ValueError(f"top-k {top_k} above the {total} experts")
        return [(e, tokens) for e in range(top_k)]
    tail = min(routed - top_k, tokens - 1)
    plan = [(e, tokens) for e in range(top_k - 1)]
    plan.append((top_k - 1, tokens - tail))
    plan += [(top_k + j, 1) for j in range(tail)]
    return plan


@contextmanager
def routed_to_real_experts(model) -> Iterator[None]:
    """In a dry run of LongCat-Flash, answer ``LongcatFlashExperts.forward``'s reads of its
    routing (``nonzero`` of the experts hit, each one's ``.item()``, ``torch.where`` of its
    mask; ``modeling_longcat_flash.py`` l. 187-190) with :func:`bound_routing`'s: the loop,
    the slices, the matmuls, the identity branch and ``index_add_`` are the class's own, run
    on fake tensors of the rows each expert takes. Only ``aten.nonzero`` and
    ``aten._local_scalar_dense`` of fake tensors inside that forward are answered, by a
    dispatch mode entered there; outside FakeTensorMode, or for a model without the class,
    nothing is touched, and the forward is restored on exit."""
    classes = {type(m) for m in model.modules() if type(m).__name__ == "LongcatFlashExperts"}

    def patched(forward: Callable) -> Callable:
        def bounded(self, hidden_states, top_k_index, top_k_weights):
            import torch

            plan = bound_routing(
                hidden_states.shape[0],
                top_k_index.shape[-1],
                self.num_routed_experts,
                self.total_experts,
            )
            experts = iter(plan)
            rows: list[int] = []

            def nonzero(arg):
                if not rows:  # l. 187: the experts hit, one row each
                    rows.append(0)
                    return torch.empty((len(plan), 1), dtype=torch.long, device=arg.device)
                return torch.empty((rows[-1], arg.dim()), dtype=torch.long, device=arg.device)

            def item(arg):  # l. 189: the next expert's index
                expert, n = next(experts)
                rows.append(n)
                return expert

            with _Answered(nonzero=nonzero, item=item):
                return forward(self, hidden_states, top_k_index, top_k_weights)

        return bounded

    with _patched_in_fake_mode(classes, "forward", patched):
        yield


@contextmanager
def every_byte_a_patch(model) -> Iterator[None]:
    """In a dry run of BLT, answer ``BltPatcher``'s patch lengths with every next-byte
    entropy over ``patching_threshold`` (see the module docstring): inside its forward,
    ``BltPatcher.patch_lengths_from_entropies`` and ``process_patch_lengths``
    (``modeling_blt.py`` l. 805-849, 933-984) run as they are on real tensors (entropies
    of +inf, over any threshold, in the fake entropies' shape), and their result comes back as a
    fake tensor of its shape, dtype and storage (allocated, so counted, as the real one is); the
    ``Categorical`` argument check's ``.item()`` of a fake bool answers True. Outside
    FakeTensorMode, or for a model without ``BltPatcher``, nothing is touched; everything
    is restored on exit. ``max_patch_length`` 1 with several rows is refused
    (:class:`~introspect.errors.DryRunCannot`): there a padded row's T + 1 segments can
    pass every-byte-a-patch's T."""
    patchers = {type(m) for m in model.modules() if type(m).__name__ == "BltPatcher"}

    def patched(forward: Callable) -> Callable:
        def bounded(self, input_ids=None, *args, **kwargs):
            import torch
            from torch._subclasses.fake_tensor import FakeTensor
            from torch.utils._python_dispatch import _disable_current_modes
            from transformers.models.blt import modeling_blt

            rows = (input_ids if input_ids is not None else kwargs["inputs_embeds"]).shape[0]
            if kwargs.get("max_patch_length") == 1 and rows > 1:
                from introspect.errors import DryRunCannot

                raise DryRunCannot(
                    "BLT with max_patch_length 1 and several rows: a padded row's segments "
                    "(modeling_blt.py l. 826-848) can outnumber every-byte-a-patch's T, so "
                    "no routing-free upper bound is answered; use --batch 1"
                )
            own_lengths = type(self).__dict__["patch_lengths_from_entropies"]
            own_process = modeling_blt.process_patch_lengths

            def lengths(entropies, sequence_length, patch_size=None, threshold=None):
                if not isinstance(entropies, FakeTensor):
                    return own_lengths.__func__(entropies, sequence_length, patch_size, threshold)
                with _disable_current_modes():  # no fake mode, no tracker: real values
                    high = torch.full(tuple(entropies.shape), float("inf"))  # > any threshold
                    return own_lengths.__func__(high, sequence_length, patch_size, threshold)

            def process(patch_lengths, max_patch_length):
                if isinstance(patch_lengths, FakeTensor):
                    return own_process(patch_lengths, max_patch_length)
                with _disable_current_modes():  # no fake mode, no tracker: real values
                    real = own_process(patch_lengths, max_patch_length)
                # its storage, not only its shape: a slice (l. 849) keeps the whole buffer
                size = real.untyped_storage().nbytes() // real.element_size()
                held = torch.empty(size, dtype=real.dtype, device="cpu")
                return held.as_strided(real.shape, real.stride(), real.storage_offset())

            def item(arg):
                if arg.dtype == torch.bool and arg.dim() == 0:
                    return True  # Categorical's argument check passes for finite logits
                return None

            type(self).patch_lengths_from_entropies = staticmethod(lengths)
            modeling_blt.process_patch_lengths = process
            try:
                with _Answered(item=item):
                    return forward(self, input_ids, *args, **kwargs)
            finally:
                type(self).patch_lengths_from_entropies = own_lengths
                modeling_blt.process_patch_lengths = own_process

        return bounded

    with _patched_in_fake_mode(patchers, "forward", patched):
        yield


def bound_notes(model) -> list[str]:
    """The notes of the upper bounds a dry run of ``model`` answers."""
    names = {type(m).__name__ for m in model.modules()}
    return [
        note
        for name, note in (("LongcatFlashExperts", ROUTED_NOTE), ("BltPatcher", PATCH_NOTE))
        if name in names
    ]


@contextmanager
def _patched_in_fake_mode(classes: set[type], name: str, patched: Callable) -> Iterator[None]:
    """Each class's own ``name`` replaced by ``patched(own)`` while inside FakeTensorMode;
    a no-op without classes or outside one; restored on exit."""
    import torch

    if not classes or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
        yield
        return
    owns = {cls: cls.__dict__[name] for cls in classes}
    for cls, own in owns.items():
        setattr(cls, name, patched(own))
    try:
        yield
    finally:
        for cls, own in owns.items():
            setattr(cls, name, own)


def _answered_mode():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._python_dispatch import TorchDispatchMode

    class Answered(TorchDispatchMode):
        """Answers ``aten.nonzero`` and ``aten._local_scalar_dense`` of fake tensors with
        the given functions (``item`` returning None: torch's own read); every other
        operation, and every real tensor, goes on as torch dispatches it."""

        def __init__(self, nonzero=None, item=None) -> None:
            super().__init__()
            self.answers = {
                torch.ops.aten.nonzero.default: nonzero,
                torch.ops.aten._local_scalar_dense.default: item,
            }

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            answer = self.answers.get(func)
            if answer is not None and args and isinstance(args[0], FakeTensor):
                out = answer(args[0])
                if out is not None:
                    return out
            return func(*args, **(kwargs or {}))

    return Answered


def _Answered(**answers):
    return _answered_mode()(**answers)
