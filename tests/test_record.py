"""introspect._record: the frozen records of the closed-form path behave as the frozen
dataclasses they replace, checked side by side with ``dataclasses`` itself."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from functools import cached_property
from typing import ClassVar

import pytest

from introspect import _record
from introspect._record import FrozenInstanceError, field, record
from introspect.setup import TrainingSetup
from introspect.spec import ModelSpec


@record
class Point:
    """A positional record with defaults and a factory."""

    x: int
    y: int = 2
    tags: dict = field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PointDC:
    x: int
    y: int = 2
    tags: dict = dataclasses.field(default_factory=dict)


@record(kw_only=True)
class Checked:
    """Keyword-only, with a __post_init__ that fills a field and a cached property."""

    n: int
    label: str | None = None
    calls: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("n must be positive")
        if self.label is None:
            object.__setattr__(self, "label", f"n={self.n}")

    @cached_property
    def square(self) -> int:
        self.calls.append(1)
        return self.n * self.n


def test_construction_equality_hash_and_repr_as_a_dataclass():
    for a, b in ((Point(1), PointDC(1)), (Point(1, 5, tags={"k": 1}), PointDC(1, 5, {"k": 1}))):
        assert (a.x, a.y, a.tags) == (b.x, b.y, b.tags)
        assert repr(a) == repr(b).replace("PointDC", "Point")
    assert Point(1) == Point(1, 2) and Point(1) != Point(2)
    assert Point(1) != PointDC(1)  # another class is never equal, as with dataclasses
    assert Point(1).tags is not Point(1).tags  # a fresh factory value each time
    setups = {TrainingSetup(seq_len=8), TrainingSetup(seq_len=8), TrainingSetup(seq_len=9)}
    assert len(setups) == 2
    with pytest.raises(TypeError, match="unhashable"):  # a dict field, as a dataclass's
        hash(Point(3, 4))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Point(), "missing required argument 'x'"),
        (lambda: Point(1, 2, {}, 4), "positional arguments"),
        (lambda: Point(1, x=1), "multiple values for 'x'"),
        (lambda: Point(1, z=1), "unexpected keyword arguments ['z']"),
        (lambda: Checked(1), "positional arguments"),
    ],
)
def test_bad_arguments_are_type_errors(make, message):
    with pytest.raises(TypeError) as err:
        make()
    assert message in str(err.value)


def test_a_required_field_after_a_default_is_refused_as_dataclass_does():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default"):

        @record
        class Bad:
            a: int = 1
            b: int

    @record(kw_only=True)
    class Fine:  # keyword-only fields may come in any order
        a: int = 1
        b: int

    assert Fine(b=2).a == 1


def test_frozen_fields_post_init_and_cached_property():
    c = Checked(n=3)
    assert c.label == "n=3"
    with pytest.raises(FrozenInstanceError):
        c.n = 4
    with pytest.raises(FrozenInstanceError):
        del c.n
    assert isinstance(FrozenInstanceError(), AttributeError)
    assert c.square == 9 and c.square == 9 and c.calls == [1]  # computed once
    assert c == Checked(n=3, calls=[1])  # the cached value is not a field
    with pytest.raises(ValueError, match="positive"):
        Checked(n=0)


def test_replace_asdict_and_field_names():
    c = Checked(n=2, label="two")
    d = _record.replace(c, n=5)
    assert (d.n, d.label, c.n) == (5, "two", 2)
    with pytest.raises(ValueError):
        _record.replace(c, n=-1)  # __post_init__ runs again
    with pytest.raises(TypeError, match="no field 'm'"):
        _record.replace(c, m=1)
    assert _record.field_names(Checked) == ("n", "label", "calls")
    nested = Point(1, tags={"c": Checked(n=1), "list": [Point(2)], "tuple": (Point(3),)})
    as_dict = _record.asdict(nested)
    assert as_dict == {
        "x": 1,
        "y": 2,
        "tags": {
            "c": {"n": 1, "label": "n=1", "calls": []},
            "list": [{"x": 2, "y": 2, "tags": {}}],
            "tuple": ({"x": 3, "y": 2, "tags": {}},),
        },
    }
    assert as_dict["tags"] is not nested.tags
    assert _record.is_record(Point) and _record.is_record(nested) and not _record.is_record(1)


def test_pickle_and_copy_keep_the_value():
    for value in (Point(1, tags={"a": 1}), Checked(n=4), TrainingSetup(seq_len=8)):
        for other in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
            assert other == value and type(other) is type(value)


def test_the_spec_and_setup_round_trip_through_their_dicts():
    spec = ModelSpec(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=99)
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    setup = TrainingSetup(precision="amp", lora_targets=["q_proj"], finetune="lora")
    assert setup.lora_targets == ("q_proj",)  # a list given is kept as a tuple
    fields = {k: v for k, v in setup.to_dict().items() if k in _record.field_names(setup)}
    assert TrainingSetup(**fields) == setup


def test_class_variables_are_refused_rather_than_taken_for_fields():
    with pytest.raises(TypeError, match="ClassVar"):

        @record
        class WithClassVar:
            limit: ClassVar[int] = 3
