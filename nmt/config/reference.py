"""The Markdown reference of every config key (docs/config.md), generated from the dataclasses."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from nmt.config.sections import Config


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is None:
        return getattr(hint, "__name__", str(hint))
    return str(hint).replace(" | ", " or ").replace("nmt.config.sections.", "")  # a bar would split the table cell


def reference_markdown() -> str:
    """Markdown reference of every key, generated from the dataclasses."""
    lines = ["# Configuration reference", "",
             "Generated from `nmt/config/` by `nmt-config-doc`; do not edit by hand.", "",
             "A config is a YAML file of the sections below. `nmt.load_config(source, overrides=None)` reads one (or "
             "a dict in its shape, or a `Config`) and changes keys with `overrides`, a dict of dotted keys to "
             "Python values: `nmt.load_config(\"run.yaml\", overrides={\"train.max_steps\": 60, \"model.attention\": "
             "\"dot\"})`. On the command line `--set train.max_steps=60` does the same, its value read as YAML. "
             "Every key is checked when the config is loaded, each attention variant's own settings included, "
             "before any data is read and without importing torch: an unknown key is refused with the nearest "
             "valid one, a bad value with the key, the file and (for YAML errors) the line.", ""]
    top = typing.get_type_hints(Config)
    simple = [f for f in dataclasses.fields(Config) if not dataclasses.is_dataclass(top[f.name])]
    sections = [f for f in dataclasses.fields(Config) if dataclasses.is_dataclass(top[f.name])]
    groups = [("top level", Config, simple)] + [
        (f.name, top[f.name], dataclasses.fields(top[f.name])) for f in sections]
    for title, cls, flds in groups:
        hints = typing.get_type_hints(cls)
        lines += [f"## `{title}`", "", (cls.__doc__ or "").strip(), "",
                  "| key | type | default | meaning |", "|---|---|---|---|"]
        for f in flds:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            doc = f.metadata.get("doc", "")
            if f.metadata.get("choices"):
                doc += " One of: " + ", ".join(f"`{c}`" for c in f.metadata["choices"]) + "."
            if f.metadata.get("bounds"):
                doc += f" Allowed: {f.metadata['bounds'].describe(hints[f.name] is int)}."
            lines.append(f"| `{f.name}` | {_type_name(hints[f.name])} | `{default!r}` | {doc} |")
        lines.append("")
    return "\n".join(lines)
