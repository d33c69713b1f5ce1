"""A model of torch's CUDA caching allocator (pure Python, no torch import).

:mod:`~introspect.allocator.config` reads ``PYTORCH_CUDA_ALLOC_CONF`` as torch does;
:mod:`~introspect.allocator.caching` is the allocator; :mod:`~introspect.allocator.replay`
runs a recorded stream through it; :mod:`~introspect.allocator.synthetic` builds a stream
from the closed form's tensors. Every figure is derived from torch's source, not measured
on a GPU.
"""
