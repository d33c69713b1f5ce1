"""introspect: how much memory will training this transformer take, and where does it go.

The flow (see DESIGN in the README): a source becomes a :class:`ModelSpec` through an
adapter; estimators turn a ModelSpec and a :class:`TrainingSetup` into a
:class:`Breakdown`; reports lay breakdowns and measurements side by side.
"""

from introspect.breakdown import Breakdown
from introspect.errors import IntrospectError
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec

__all__ = ["Breakdown", "IntrospectError", "ModelSpec", "TrainingSetup"]
__version__ = "0.1.0"
