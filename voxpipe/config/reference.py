"""The configuration reference: every knob, its default and its meaning."""

from __future__ import annotations

import inspect
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from voxpipe.config.engine_registry import ENGINES, SECTIONS
from voxpipe.config.settings import Config


def markdown_reference() -> str:
    """Every knob, its default and its meaning: the body of ``docs/configuration.md``."""
    lines = [
        "# Configuration",
        "",
        "Generated from `voxpipe/config.py` by `voxpipe config --markdown`; a test keeps it so.",
        "",
        "Set a field with an environment variable `VOXPIPE_<SECTION>__<FIELD>` (for example",
        "`VOXPIPE_TURN__SILENCE_MS=400`) or a JSON file passed as `--config FILE` or",
        '`VOXPIPE_CONFIG=FILE` (`{"turn": {"silence_ms": 400}}`). The file wins over the',
        "environment. `voxpipe config` prints the values in force.",
    ]
    top = {
        name: info for name, info in Config.model_fields.items() if not _is_section(info.annotation)
    }
    if top:
        lines += ["", "## Top level", "", "Fields outside any section (`VOXPIPE_<FIELD>`).", ""]
        lines += ["| field | default | meaning |", "| --- | --- | --- |"]
        for name, info in top.items():
            lines.append(f"| `{name}` | `{info.get_default()}` | {_meaning(info)} |")
    for section, field_info in Config.model_fields.items():
        model = field_info.annotation
        if section in top:
            continue
        assert isinstance(model, type) and issubclass(model, BaseModel)
        lines += ["", f"## `{section}`", "", inspect.cleandoc(model.__doc__ or ""), ""]
        lines += ["| field | default | meaning |", "| --- | --- | --- |"]
        for name, info in model.model_fields.items():
            default = info.get_default(call_default_factory=True)
            if section == "llm" and name == "system_prompt":
                default = "(a short voice-assistant prompt)"
            if isinstance(default, Path) and name == "cache_dir":
                default = "$XDG_CACHE_HOME/voxpipe or ~/.cache/voxpipe"
            lines.append(f"| `{name}` | `{default}` | {_meaning(info)} |")
    return "\n".join(lines + _engines_table()) + "\n"


def _meaning(info: FieldInfo) -> str:
    """A setting's docstring as one table cell: its line breaks folded, its pipes escaped."""
    return " ".join((info.description or "").split()).replace("|", "\\|")


def _engines_table() -> list[str]:
    """The engines each stage may run, as ``config/engine_registry.py`` registers them."""
    lines = ["", "## Engines", ""]
    lines += ["Registered in `voxpipe/config/engine_registry.py`; a section's `engine` names one."]
    lines += ["", "| setting | engine | what it is |", "| --- | --- | --- |"]
    for entry in ENGINES.entries():
        lines.append(f"| `{SECTIONS[entry.stage]}.engine` | `{entry.name}` | {entry.summary} |")
    return lines


def _is_section(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)
