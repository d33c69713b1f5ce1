"""A spec survives JSON: ``ModelSpec.from_dict(spec.to_dict())`` is the same spec, for every
bundled model (heterogeneous stacks, MoE, towers). The sharded step's worker processes
receive their spec this way."""

from __future__ import annotations

import json

import pytest
from introspect.adapters.bundled import models

from introspect.spec import ModelSpec


@pytest.mark.parametrize("model", models(), ids=lambda m: m.hub_id)
def test_spec_round_trips_through_json(model):
    spec = model.spec()
    assert ModelSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
