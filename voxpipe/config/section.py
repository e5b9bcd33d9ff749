"""The base of every part of the configuration."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A part of the configuration. Each setting's meaning is the docstring under it, which
    pydantic reads into the field's description: ``voxpipe config --markdown`` (and so
    docs/configuration.md) and the JSON schema are made from it."""

    model_config = ConfigDict(use_attribute_docstrings=True)
