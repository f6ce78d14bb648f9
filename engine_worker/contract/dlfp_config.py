"""The runtime-tunable DLFP settings, validated as a whole.

One model travels three ways: from start-up settings into the engine core (via
vLLM's ``additional_config``), from ``/admin/dlfp`` into the running scheduler
(via the engine-core channel), and back out as the settings in force. It is
pure pydantic: no vLLM and no FastAPI import, so both sides can use it.

The settings are declared once, in ``controller.params.CapParams`` (standard library):
``DLFPConfig`` is derived from it field by field (type, default, bounds and attribute
docstring), and its model check is ``CapParams.check``. Its enums are the controller's own
(``controller.modes``).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
import types
import typing
from dataclasses import MISSING, Field, asdict, fields
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, create_model, model_validator
from pydantic import Field as ModelField

from engine_worker.controller.modes import ControllerMode, Observation, Plan, PrefillOrder
from engine_worker.controller.params import BOUNDS_KEY, Bounds, CapParams

__all__ = ["ControllerMode", "DLFPConfig", "Device", "Observation", "Plan", "PrefillOrder"]

Device = Literal["cpu", "cuda"]


class _SettingsModel(BaseModel, frozen=True):
    """What ``DLFPConfig`` adds to the declared fields: strictness and the model check."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False, allow_inf_nan=False)

    @model_validator(mode="after")
    def _check_bounds(self) -> Self:
        self.to_params()  # CapParams checks the rules between settings as it is built
        return self

    @classmethod
    def from_params(cls, params: CapParams) -> Self:
        """The model of settings the controller runs on."""
        return cls.model_validate(asdict(params))

    def to_params(self) -> CapParams:
        """The settings as the controller runs on them."""
        return CapParams.from_config(self)


def attribute_docstrings(cls: type) -> dict[str, str]:
    """Each field's attribute docstring in ``cls``'s source, cleaned as pydantic's
    ``use_attribute_docstrings`` cleans it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _bounded(annotation: Any, bounds: Bounds) -> Any:
    """``annotation`` with ``bounds`` on its number (a union's non-literal member)."""
    if bounds == Bounds():
        return annotation
    constraint = ModelField(ge=bounds.ge, le=bounds.le)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = [
            m if typing.get_origin(m) is Literal else Annotated[m, constraint]
            for m in typing.get_args(annotation)
        ]
        bounded: Any = members[0]
        for member in members[1:]:
            bounded = bounded | member
        return bounded
    return Annotated[annotation, constraint]


def _model_field(declared: Field[Any], annotation: Any, doc: str | None) -> tuple[Any, Any]:
    assert declared.default is not MISSING, f"setting {declared.name} needs a default"
    bounds: Bounds = declared.metadata.get(BOUNDS_KEY, Bounds())
    return _bounded(annotation, bounds), ModelField(default=declared.default, description=doc)


def _derived_model() -> type[_SettingsModel]:
    hints = typing.get_type_hints(CapParams)
    docs = attribute_docstrings(CapParams)
    declared: dict[str, Any] = {
        f.name: _model_field(f, hints[f.name], docs.get(f.name)) for f in fields(CapParams)
    }
    return create_model(
        "DLFPConfig",
        __base__=_SettingsModel,
        __module__=__name__,
        __doc__=CapParams.__doc__,
        **declared,
    )


if TYPE_CHECKING:  # mypy sees the declared fields; at run time they are derived

    class DLFPConfig(_SettingsModel, CapParams, frozen=True): ...

else:
    DLFPConfig = _derived_model()
