"""Dry run: the same torch step and tracker, with fake tensors and no real memory.

Under ``torch._subclasses.fake_tensor.FakeTensorMode`` every tensor has a shape, dtype
and device but no data, so the model, Adam's state and every activation are created and
freed exactly as in a real step while nothing is allocated. The live-storage tracker
counts their bytes the same way, so a 7B training step can be "measured" on a laptop:
the figures are what the real step would hold on CPU (kernels that pick a different
algorithm per device aside).

Mixture-of-experts models: transformers' default experts kernel (``grouped_mm``,
``transformers/integrations/moe.py``) routes without data-dependent shapes (sort, histc,
cumsum, then ``torch.nn.functional.grouped_mm`` over all experts with offsets), so it
runs under fake tensors as it is — except that torch's fake (meta) kernel for
``aten._grouped_mm`` (``torch/_meta_registrations.py`` ``_meta_grouped_mm_common``)
checks the CUDA kernel's BF16-only rule while the CPU kernel computes FP32 too.
:func:`grouped_mm_any_dtype` replaces that check, for the dry run only, by the output
allocation the meta kernel itself makes (``_create_grouped_mm_output_tensor``: an
(S, out) tensor in the input dtype), for unscaled non-BF16 calls. Autograd's node
(``GroupedMmBackward0``) and the backward's own ``_grouped_mm`` calls are torch's, so the
step keeps the real code path and allocates what the real CPU step allocates
(``tests/test_measure_hf.py`` checks an FP32 Mixtral byte for byte).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from introspect.measure.record import Measurement
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

#: The note a dry run of a mixture-of-experts model carries.
GROUPED_MM_NOTE = (
    "MoE experts: transformers' grouped_mm kernel, run as is; torch's fake grouped_mm "
    "accepts only BF16, so the dry run uses its allocation (an (S, out) output in the input "
    "dtype) without that check: exact for FP32 too"
)


@contextmanager
def fake_mode() -> Iterator[None]:
    """FakeTensorMode with :func:`grouped_mm_any_dtype`."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), grouped_mm_any_dtype():
        yield


@contextmanager
def grouped_mm_any_dtype() -> Iterator[None]:
    """``aten._grouped_mm``'s meta kernel without the BF16-only check (see the module
    docstring), restored on exit. Only the meta (shape) function is touched: real CPU
    and CUDA kernels are unchanged, and BF16 and scaled calls run torch's own check."""
    import torch
    from torch import _meta_registrations as metas
    from torch._subclasses.fake_tensor import FakeTensorMode

    common = getattr(metas, "_meta_grouped_mm_common", None)
    if common is None:
        yield
        return

    def any_dtype(mat_a, mat_b, scale_a=None, scale_b=None, offs=None, bias=None, *a, **k):
        if scale_a is not None or mat_a.dtype == torch.bfloat16:
            return common(mat_a, mat_b, scale_a, scale_b, offs, bias, *a, **k)
        torch._check(mat_a.dtype == mat_b.dtype, lambda: "grouped_mm: operand dtypes differ")
        return metas._create_grouped_mm_output_tensor(mat_a, mat_b, offs, k.get("out_dtype"))

    # FakeTensorMode keeps one class-wide cache of op results: none may outlive the kernel.
    FakeTensorMode.cache_clear()
    metas._meta_grouped_mm_common = any_dtype
    try:
        yield
    finally:
        metas._meta_grouped_mm_common = common
        FakeTensorMode.cache_clear()


@contextmanager
def module_surgery() -> Iterator[None]:
    """Inside FakeTensorMode, let peft and bitsandbytes rebuild a fake model's layers as
    they rebuild a real one's; outside one, nothing. Three of torch's steps fail on fake
    parameters where they work on real ones, and each is made to do what it does for real:

    * Moving: ``Module.to`` / ``Module._apply`` (``torch/nn/modules/module.py``) swaps
      every FakeTensor parameter with ``torch.utils.swap_tensors``, which refuses a
      tensor with a weak reference. ``FakeTensorConverter.from_meta_and_device``
      (``torch/_subclasses/fake_tensor.py``) memoizes each fake tensor it wraps around a
      fresh meta tensor in a ``WeakValueDictionary`` keyed by that meta tensor — a weak
      reference to every parameter ``nn.Parameter`` makes in fake mode (its ``detach``) —
      so peft's ``_move_adapter_to_device_of_base_layer``
      (``peft/tuners/tuners_utils.py``: each new adapter ``.to(base device, base dtype)``)
      fails. The memo is read only when the same meta tensor is wrapped twice, which a
      fresh output never is, so it is not written here: the swap then moves what the real
      ``.to`` moves (nothing for the same device and dtype; a cast, the old storage
      freed, for another dtype).
    * Copying: ``copy.deepcopy`` of a tensor copies its storage (``torch/_tensor.py``
      ``Tensor.__deepcopy__``), which a fake tensor's meta storage refuses; peft's
      ``ModulesToSaveWrapper`` (``peft/utils/other.py``, ``--train-embeddings``)
      deep-copies the embeddings. A fake tensor is copied as ``nn.Parameter.__deepcopy__``
      copies a parameter (``torch/nn/parameter.py``: a ``clone`` that keeps
      ``requires_grad``, once per tensor through the memo): a new storage of the same
      bytes, as the real copy makes.
    * Subclassing: ``Tensor._make_subclass(cls, data)`` over a fake tensor refuses a
      ``cls`` that is not a FakeTensor (the detached alias already is a FakeTensor
      object), so bitsandbytes' ``Params4bit(data)`` (``bitsandbytes/nn/modules.py``,
      also inside ``Linear4bit.__init__``) fails. Only for that case, which otherwise
      always raises, the subclass is made as ``cls`` mixed with FakeTensor
      (``FakeTensor.__new__`` over a meta alias of ``data``'s storage, as torch wraps a
      fake view): the same storage and shape, bitsandbytes' own ``to``/``_quantize``/
      ``__torch_function__``, and every operation on it is the fake mode's.

    Only this mode's converter, ``FakeTensor.__deepcopy__`` and
    ``torch.Tensor._make_subclass`` are touched, all restored on exit."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if mode is None:
        yield
        return
    converter = mode.fake_tensor_converter
    nested = "set_tensor_memo" in converter.__dict__  # inside another module_surgery
    converter.set_tensor_memo = lambda tensor, fake: None
    own_copy = FakeTensor.__dict__.get("__deepcopy__")
    FakeTensor.__deepcopy__ = _deepcopy_fake
    own_subclass = torch.Tensor.__dict__.get("_make_subclass")
    make_subclass = torch.Tensor._make_subclass
    torch.Tensor._make_subclass = staticmethod(
        lambda cls, data, *args, **kwargs: _subclass_of_fake(
            make_subclass, cls, data, *args, **kwargs
        )
    )
    try:
        yield
    finally:
        if not nested:
            del converter.set_tensor_memo
        _restore(FakeTensor, "__deepcopy__", own_copy)
        _restore(torch.Tensor, "_make_subclass", own_subclass)


@contextmanager
def class_init() -> Iterator[None]:
    """Inside FakeTensorMode, let a transformers class build as it builds for real; outside
    one, nothing. Two of its constructors' steps fail on fake tensors only:

    * Moving inside ``__init__``: a block cast with ``.to(dtype=torch.float32)`` as it is
      made (Hunyuan V4's ``HYV4HyperConnection``, ``models/hy_v4/modeling_hy_v4.py``;
      DeepSeek-V4's norms; Inkling's ``Conv1d``) swaps fake parameters, which the fake
      converter's weak memo refuses: :func:`module_surgery`'s first case, the same cure.
    * Truncated-normal init: ``torch.nn.init._no_grad_trunc_normal_``
      (``torch/nn/init.py``) samples by rejection, ``while mask.any()`` — a value read
      from a tensor, which a fake tensor has none of (``_local_scalar_dense``; Gemma 3's
      and Phi-4-multimodal's towers, ``transformers/initialization.py`` ``trunc_normal_``).
      torch itself returns a meta tensor unchanged there ("Meta tensors have no storage,
      so sampling is a no-op"); a fake tensor, whose storage is meta, is treated the same.
      Only the values are skipped: the parameter exists, with its bytes, as for real.

    ``torch.nn.init._no_grad_trunc_normal_`` is restored on exit."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if mode is None:
        yield
        return
    init = torch.nn.init
    own = init._no_grad_trunc_normal_

    def trunc_normal(tensor, *args, **kwargs):
        if isinstance(tensor, FakeTensor):
            return tensor
        return own(tensor, *args, **kwargs)

    init._no_grad_trunc_normal_ = trunc_normal
    try:
        with module_surgery():
            yield
    finally:
        init._no_grad_trunc_normal_ = own


@contextmanager
def even_expert_counts(model) -> Iterator[None]:
    """In a dry run of JetMoE, answer its router's per-expert token counts, which a fake
    tensor does not hold; everything else in the step is the class's own code.

    ``JetMoeTopKGating.forward`` (``transformers/models/jetmoe/modeling_jetmoe.py``,
    ``expert_size = gates.long().sum(0)`` then ``expert_size.tolist()``) reads how many
    of the T·k routed rows each expert takes, and ``JetMoeParallelExperts.forward``
    splits the sorted rows by those counts, runs one ``F.linear`` per expert and joins
    the outputs with ``torch.cat`` into one (T·k, out) tensor; backward gives each expert
    its whole weight's gradient whatever its count. So the held bytes depend on the
    counts' sum, T·k (each token picks ``top_k`` distinct experts), not on how they fall;
    only a chunk's transients follow its own count (fp32, T=64: the dry run 768 bytes
    under a real CPU step's 21.6 MB peak).
    Inside that forward only, ``.tolist()`` of a fake tensor of one count per expert
    (``FakeTensor.tolist``, ``torch/_subclasses/fake_tensor.py``) answers T·k spread
    evenly over the experts; real tensors, and every other tensor, are read as torch
    reads them (``tests/test_every_type.py`` holds the dry run to a
    real CPU step's peak). Outside FakeTensorMode, or for a model without JetMoE's
    router, nothing is touched; the router's ``forward`` is restored on exit."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    gates = {type(m) for m in model.modules() if type(m).__name__ == "JetMoeTopKGating"}
    if not gates or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
        yield
        return
    own_tolist = FakeTensor.__dict__["tolist"]  # FakeTensor.tolist: .item() per element

    def patched(forward):
        def routed(self, hidden_states):
            rows, experts = hidden_states.shape[0] * self.top_k, self.num_experts
            even = [rows // experts + (i < rows % experts) for i in range(experts)]

            def tolist(tensor):
                if tuple(tensor.shape) == (experts,):
                    return list(even)
                return own_tolist(tensor)

            FakeTensor.tolist = tolist
            try:
                return forward(self, hidden_states)
            finally:
                FakeTensor.tolist = own_tolist

        return routed

    owns = {cls: cls.__dict__["forward"] for cls in gates}
    for cls, forward in owns.items():
        cls.forward = patched(forward)
    try:
        yield
    finally:
        for cls, forward in owns.items():
            cls.forward = forward


@contextmanager
def checked_lengths(model) -> Iterator[None]:
    """In a dry run of XLM, answer the sanity check on its row lengths, which reads a
    value a fake tensor does not hold; everything else in the step is the class's own code.

    ``XLMModel.forward`` (``transformers/models/xlm/modeling_xlm.py`` l. 785-793, and
    ``get_masks`` l. 66) computes ``lengths = (input_ids != pad_index).sum(dim=1)`` and
    checks ``assert lengths.max().item() <= slen``. ``lengths.max()`` is made (its 8
    bytes counted, as for real); only its ``.item()`` is answered, with ``slen``: a count
    of the non-pad tokens of a row of ``slen`` tokens is at most ``slen``, so the check
    passes as it always does for real, and the value feeds nothing but the ``assert``
    (the masks are tensor ops on ``lengths`` itself). Inside that forward only, a 0-d
    integer fake tensor's ``.item()`` answers so; real tensors, and every other
    ``.item()``, are read as torch reads them. Outside FakeTensorMode, or for a model
    without ``XLMModel``, nothing is touched; the forward is restored on exit."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    models = {type(m) for m in model.modules() if type(m).__name__ == "XLMModel"}
    if not models or torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
        yield
        return
    own_item = FakeTensor.__dict__.get("item")  # None: torch.Tensor.item, which raises here

    def patched(forward):
        def checked(self, input_ids=None, *args, **kwargs):
            embeds = kwargs.get("inputs_embeds")
            slen = (input_ids if input_ids is not None else embeds).shape[1]

            def item(tensor):
                if tensor.dim() == 0 and not tensor.dtype.is_floating_point:
                    return int(slen)
                return torch.Tensor.item(tensor)

            FakeTensor.item = item
            try:
                return forward(self, input_ids, *args, **kwargs)
            finally:
                _restore(FakeTensor, "item", own_item)

        return checked

    owns = {cls: cls.__dict__["forward"] for cls in models}
    for cls, forward in owns.items():
        cls.forward = patched(forward)
    try:
        yield
    finally:
        for cls, forward in owns.items():
            cls.forward = forward


#: The note a dry run of XLM carries.
CHECKED_LENGTHS_NOTE = (
    "XLM's length check (assert lengths.max().item() <= slen): a fake tensor holds no "
    "value, so the .item() answers slen, the check's outcome for any row "
    "(introspect.measure.fake.checked_lengths)"
)


@contextmanager
def answered_reads(model) -> Iterator[None]:
    """:func:`even_expert_counts`, :func:`checked_lengths` and the upper bounds of
    :mod:`introspect.measure.fake_bounds` (LongCat-Flash's routing, BLT's patches)
    together: each a no-op but for its own class in a dry run."""
    from introspect.measure.fake_bounds import every_byte_a_patch, routed_to_real_experts

    with (
        even_expert_counts(model),
        checked_lengths(model),
        routed_to_real_experts(model),
        every_byte_a_patch(model),
    ):
        yield


def answered_notes(model) -> list[str]:
    """The notes of the reads :func:`answered_reads` answers for ``model``."""
    from introspect.measure.fake_bounds import bound_notes

    names = {type(m).__name__ for m in model.modules()}
    return bound_notes(model) + [
        note
        for name, note in (
            ("JetMoeTopKGating", EVEN_COUNTS_NOTE),
            ("XLMModel", CHECKED_LENGTHS_NOTE),
        )
        if name in names
    ]


#: Why a dry run cannot answer a type's step, read from transformers' source. (LongCat-Flash
#: and BLT, whose held bytes follow values of the data, are answered at their upper bound:
#: :mod:`introspect.measure.fake_bounds`.)
DRY_RUN_CANNOT = {
    "gemma4_unified_assistant": "Gemma4UnifiedAssistantForCausalLM is a drafter for "
    "assisted decoding: its forward takes the backbone's inputs_embeds and "
    "shared_kv_states, not token ids (modeling_gemma4_unified_assistant.py l. 172-173), "
    "so the class defines no training step of its own (a real step fails the same way); "
    "measure the backbone it drafts for (gemma4_unified)",
}


def cannot(model_type: str | None) -> str | None:
    """The one line for a ``model_type`` whose step no dry run answers
    (:data:`DRY_RUN_CANNOT`), else ``None``."""
    why = DRY_RUN_CANNOT.get(model_type or "")
    if why is None:
        return None
    return f"model_type {model_type!r}: the dry run cannot answer this step: {why}"


#: The note a dry run of JetMoE carries.
EVEN_COUNTS_NOTE = (
    "JetMoE's router counts: a fake tensor holds none, so its .tolist() answers T·k rows "
    "spread evenly over the experts (the held bytes depend on their sum only; "
    "introspect.measure.fake.even_expert_counts)"
)


def _restore(cls: type, name: str, own) -> None:
    if own is None:
        delattr(cls, name)
    else:
        setattr(cls, name, own)


def _deepcopy_fake(tensor, memo: dict):
    """``nn.Parameter.__deepcopy__``'s copy for a fake tensor (see :func:`module_surgery`)."""
    import torch

    if id(tensor) not in memo:
        with torch.no_grad():
            copied = tensor.clone(memory_format=torch.preserve_format)
        if isinstance(tensor, torch.nn.Parameter):
            copied = torch.nn.Parameter(copied, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = copied
    return memo[id(tensor)]


#: ``cls`` → ``cls`` mixed with FakeTensor (made once per class).
_FAKE_SUBCLASSES: dict[type, type] = {}


def _subclass_of_fake(make_subclass, cls, data, require_grad=False, *args, **kwargs):
    """``Tensor._make_subclass`` as torch has it, except over a fake tensor for a ``cls``
    torch would refuse (see :func:`module_surgery`)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._mode_utils import no_dispatch

    if not isinstance(data, FakeTensor) or issubclass(FakeTensor, cls) or args or kwargs:
        return make_subclass(cls, data, require_grad, *args, **kwargs)
    mixed = cls if issubclass(cls, FakeTensor) else _FAKE_SUBCLASSES.get(cls)
    if mixed is None:
        mixed = type(cls.__name__, (cls, FakeTensor), {"__module__": cls.__module__})
        mixed.__qualname__ = cls.__qualname__
        _FAKE_SUBCLASSES[cls] = mixed
    with no_dispatch():
        elem = torch.empty(0, dtype=data.dtype, device="meta")
        elem.set_(data.untyped_storage(), data.storage_offset(), data.shape, data.stride())
        return FakeTensor.__new__(
            mixed, data.fake_mode, elem, data.device, requires_grad=require_grad
        )


def dry_run(spec: ModelSpec, setup: TrainingSetup, *, census: bool = False) -> Measurement:
    """Build the reference model for ``spec`` inside FakeTensorMode and track one step.

    A size torch cannot represent (a storage over 2⁶³ bytes: torch's
    ``Storage size calculation overflowed``) is one :class:`IntrospectError` line; torch's
    own log line about it (``torch._subclasses.fake_tensor``) is silenced."""
    import logging

    from introspect import _record
    from introspect.errors import IntrospectError
    from introspect.measure.torch_step import build_reference, measure_step, run_census

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        with fake_mode():
            model = build_reference(spec, setup, "cpu")
            m = measure_step(model, setup, vocab=spec.vocab_size, device="fake")
            saved = run_census(model, setup, spec, "fake").terms if census else {}
    except (RuntimeError, OverflowError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IntrospectError(
            f"B={setup.batch_size}, T={setup.seq_len}: torch cannot build this step even "
            f"as fake tensors ({first[:200]}); use a smaller --seq or --batch"
        ) from e
    finally:
        log.setLevel(level)
    return _record.replace(
        m,
        census=saved,
        notes=m.notes + ("dry run: FakeTensorMode, no memory allocated",),
    )
