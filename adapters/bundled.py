"""The reference models shipped in ``adapters/data/``, so the tool works offline.

Each is a published ``config.json`` copied verbatim (``data/<Org__Name>/config.json``) and
one row of ``data/index.json``: the Hub id, the exact parameter count of the published
checkpoint (a fact, not something this tool computed), whether the embeddings are tied,
a note and the source URL. Look-ups take the Hub id (any case) or the folder name.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from introspect._record import record
from introspect.spec import ModelSpec

from .hf_config import spec_from_config

TYPE_CHECKING = False  # typing's flag without importing typing (see introspect._record)
if TYPE_CHECKING:
    from typing import Any


@record
class BundledModel:
    """One row of ``data/index.json``."""

    hub_id: str
    folder: str
    model_type: str
    #: Exact parameter count of the published checkpoint.
    parameters: int
    tied: bool
    note: str
    #: Where the facts come from (the model's Hub page).
    source: str

    @property
    def config_resource(self) -> str:
        """The bundled config's path inside the package, for messages."""
        return f"introspect.adapters/data/{self.folder}/config.json"

    def config(self) -> dict[str, Any]:
        """The published config.json, as a fresh dict."""
        text = _data().joinpath(self.folder, "config.json").read_text(encoding="utf-8")
        return json.loads(text)

    def spec(self) -> ModelSpec:
        """The spec its config describes, with the published exact count as N."""
        spec = spec_from_config(self.config(), source=self.hub_id, path=self.config_resource)
        return spec.replace(num_parameters=self.parameters)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hub_id": self.hub_id,
            "folder": self.folder,
            "model_type": self.model_type,
            "parameters": self.parameters,
            "tied": self.tied,
            "note": self.note,
            "source": self.source,
        }


def _data() -> Path:
    """``adapters/data`` beside this file: a plain path, since importlib.resources costs
    a noticeable part of a closed-form command's start and the data always installs as
    ordinary files (pyproject's package-data)."""
    return Path(__file__).parent / "data"


@cache
def models() -> tuple[BundledModel, ...]:
    """Every bundled model, in ``index.json`` order."""
    index = json.loads(_data().joinpath("index.json").read_text(encoding="utf-8"))
    return tuple(BundledModel(**row) for row in index["models"])


def lookup(name: str) -> BundledModel | None:
    """The bundled model called ``name`` — its Hub id (case-insensitive) or its folder
    name ``Org__Name`` — or ``None``."""
    key = name.strip().rstrip("/").lower()
    for model in models():
        if key in (model.hub_id.lower(), model.folder.lower()):
            return model
    return None
