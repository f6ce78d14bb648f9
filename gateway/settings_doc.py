"""The settings reference, ``docs/settings.md``, generated from the settings models.

``python -m gateway.settings_doc > docs/settings.md`` rewrites it; a quick test fails
when the committed file and the models disagree. Each row comes from a field: its
variable and option, its type and bounds (the ``Field`` constraints), its default and
its docstring. Nothing here is written by hand but the section introductions.
"""

from __future__ import annotations

import enum
import re
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from engine_worker.contract.device_defaults import defaults_for
from engine_worker.contract.dlfp_config import DLFPConfig
from gateway.admission import AdmissionLimits
from gateway.settings import ADMISSION_FIELDS, DLFP_FIELDS, Settings

_OPTION_OVERRIDES = {"engine_args": "--engine-arg NAME=VALUE"}
"""Options that are not ``--field-name`` (the CLI takes engine arguments one by one)."""

INTRO = """\
# Settings

Every setting is a `DLFP_*` environment variable, may sit in a `.env` file in the working
directory, and is an option of `dlfp-gateway serve` (`dlfp-gateway serve --help` lists
them). An option given on the command line wins over the variable, and the variable over
`.env`. A bad value stops `serve` with exit status 2 and one line naming the setting.
Booleans are `true` or `false` as variables, `--name` or `--no-name` as options.

This page is generated from the settings models, each row from one field and its
docstring: edit the model, then run `python -m gateway.settings_doc > docs/settings.md`
(`tests/test_settings_doc.py` fails when the two disagree)."""

SERVER_INTRO = """\
## Server, model and engine

`Settings` in `gateway/settings.py`, read once at start. `--engine-arg NAME=VALUE` is
repeatable and passes any other vLLM engine argument
(`--engine-arg tensor_parallel_size=2 --engine-arg gpu_memory_utilization=0.85`); as a
variable, `DLFP_ENGINE_ARGS` is a JSON object (`{"pipeline_parallel_size": "2"}`), whose
booleans and numbers are read as their text."""

DLFP_INTRO = """\
## Controller and SLO targets

Declared once, in `CapParams` (`engine_worker/controller/params.py`), and validated as
`DLFPConfig` (`engine_worker/contract/dlfp_config.py`). The same fields, by the names in the first
column, make the `settings` object of `/admin/dlfp`, so each can also change while the
gateway runs ([operations](operations.md#runtime-tuning-admindlfp)). A field left unset
takes its device's default: the CPU column suits the embedded SmolLM2-135M on two cores,
the CUDA column holds the paper's cap bounds and step ([the scheduler](scheduler.md) explains
the controller). The fields are validated together: `min_cap_tokens <= initial_cap_tokens
<= max_cap_tokens`, `fixed_cap_tokens` within the cap's bounds, all four caps multiples of
`step_tokens`, every value finite."""

ADMISSION_INTRO = """\
## Admission limits

`AdmissionLimits` in `gateway/admission.py`. The same fields make the `settings` object of
`/admin/admission`, so each can also change while the gateway runs
([operations](operations.md#runtime-tuning-adminadmission))."""


def option(name: str, annotation: Any) -> str:
    """The ``serve`` option of a field, as its help spells it."""
    if name in _OPTION_OVERRIDES:
        return _OPTION_OVERRIDES[name]
    flag = "--" + name.replace("_", "-")
    if _without_none(annotation) == [bool]:
        return f"{flag} / --no-{name.replace('_', '-')}"
    return flag


def _without_none(annotation: Any) -> list[Any]:
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _bounds(metadata: Iterable[object]) -> str:
    found: dict[str, object] = {}
    for item in metadata:
        for attr in ("ge", "gt", "le", "lt", "min_length"):
            if getattr(item, attr, None) is not None:
                found[attr] = getattr(item, attr)
    parts = []
    if "ge" in found and "le" in found:
        parts.append(f"{_number(found.pop('ge'))} to {_number(found.pop('le'))}")
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    parts += [f"{symbols[k]} {_number(v)}" for k, v in found.items() if k in symbols]
    if found.get("min_length") == 1:
        parts.append("non-empty")
    return ", ".join(parts)


def _one_of(values: Iterable[object]) -> str:
    shown = [f"`{v}`" for v in values]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def type_text(annotation: Any, metadata: Iterable[object] = ()) -> str:
    """A field's type in words, with its bounds: ``integer, 0 to 65535``."""
    parts = _without_none(annotation)
    if len(parts) > 1:
        return ", or ".join(type_text(part) for part in parts)
    kind = parts[0]
    extra = list(metadata)
    if get_origin(kind) is Annotated:
        kind, *inner = get_args(kind)
        extra += [m for m in inner if not isinstance(m, FieldInfo)]
        extra += [m for f in inner if isinstance(f, FieldInfo) for m in f.metadata]
    if get_origin(kind) is Literal:
        return (
            "one of " + _one_of(get_args(kind))
            if len(get_args(kind)) > 1
            else f"`{get_args(kind)[0]}`"
        )
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return "one of " + _one_of(member.value for member in kind)
    words = {bool: "boolean", int: "integer", float: "number", str: "text", SecretStr: "secret"}
    if isinstance(kind, type) and issubclass(kind, Path):
        is_file = any(getattr(m, "path_type", None) == "file" for m in extra)
        text = "path of an existing file" if is_file else "path"
    elif get_origin(kind) is dict:
        text = "JSON object"
    else:
        text = words.get(kind, getattr(kind, "__name__", str(kind)))
    bounds = _bounds(extra)
    return f"{text}, {bounds}" if bounds else text


def default_text(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value in ("", {}):
        return "empty"
    return f"`{_number(value)}`"


def description(info: FieldInfo) -> str:
    """The docstring on one line, rst ``code`` as Markdown, pipes escaped for tables."""
    text = " ".join((info.description or "").split())
    return re.sub(r"``([^`]+)``", r"`\1`", text).replace("|", "\\|")


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _names(name: str, info: FieldInfo, annotation: Any) -> list[str]:
    return [
        f"`{name}`",
        f"`DLFP_{name.upper()}`",
        f"`{option(name, annotation)}`",
        type_text(annotation, info.metadata),
    ]


def _table(model: type[BaseModel], names: Iterable[str], defaults: list[BaseModel]) -> list[str]:
    default_heads = ["default"] if len(defaults) == 1 else ["CPU default", "CUDA default"]
    head = ["setting", "variable", "option", "type", *default_heads, "meaning"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name in names:
        info = model.model_fields[name]
        shown = [default_text(getattr(d, name)) for d in defaults]
        lines.append(_row([*_names(name, info, info.annotation), *shown, description(info)]))
    return lines


def _server_table() -> list[str]:
    own = [n for n in Settings.model_fields if n not in DLFP_FIELDS + ADMISSION_FIELDS]
    head = ["setting", "variable", "option", "type", "default", "meaning"]
    lines = [_row(head), _row(["---"] * len(head))]
    for name in own:
        info = Settings.model_fields[name]
        shown = default_text(info.get_default(call_default_factory=True))
        lines.append(_row([*_names(name, info, info.annotation), shown, description(info)]))
    return lines


def render() -> str:
    """The whole of ``docs/settings.md``."""
    dlfp_defaults: list[BaseModel] = [defaults_for(d).dlfp for d in ("cpu", "cuda")]
    sections = [
        INTRO,
        "\n".join([SERVER_INTRO, "", *_server_table()]),
        "\n".join([DLFP_INTRO, "", *_table(DLFPConfig, DLFP_FIELDS, dlfp_defaults)]),
        "\n".join(
            [ADMISSION_INTRO, "", *_table(AdmissionLimits, ADMISSION_FIELDS, [AdmissionLimits()])]
        ),
    ]
    return "\n\n".join(sections) + "\n"


if __name__ == "__main__":
    print(render(), end="")
