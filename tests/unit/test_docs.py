"""The configuration reference in docs/ is generated from the config and must not drift."""

from __future__ import annotations

from pathlib import Path

from voxpipe.config import Config, markdown_reference

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_current() -> None:
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == markdown_reference(), "run: voxpipe config --markdown > docs/configuration.md"


def test_every_knob_is_documented() -> None:
    for section, info in Config.model_fields.items():
        model = info.annotation
        if not hasattr(model, "model_fields"):  # a top-level field (``agent``)
            assert info.description, f"{section} has no description"
            continue
        assert model is not None
        for name, field in model.model_fields.items():
            assert field.description, f"{section}.{name} has no description"
