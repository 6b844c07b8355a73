"""JSON Merge Patch (RFC 7396): how a reviewer's corrections apply to an extracted invoice.

A patch object merges member by member: a value replaces, an object merges into the object it meets, and
null removes the member. Anything but an object (an array, a string) replaces the target whole, so a
correction to one line item sends the whole ``line_items`` array.
"""

from __future__ import annotations

import copy
import types
import typing
from typing import Any

from pydantic import BaseModel


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied, as RFC 7396 section 2 defines it; neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = merge_patch(merged.get(name), value)
    return merged


def absent_as_null(model: type[BaseModel], data: Any) -> Any:
    """``data`` with every field of ``model`` that may be null but is absent set to null, at every level.

    A merge patch cannot set a member to null, only remove it (RFC 7396); the invoice schema requires every
    field, with null where nothing was read. So a reviewer who clears a value (``"iban": null``) removes it,
    and the schema reads the removed field as the null it may be. A field that may not be null stays absent,
    and the schema refuses it.
    """
    if not isinstance(data, dict):
        return data
    filled = dict(data)
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if name not in filled:
            if _allows_none(annotation):
                filled[name] = None
            continue
        nested = _model_in(annotation)
        if nested is not None:
            value = filled[name]
            filled[name] = (
                [absent_as_null(nested, item) for item in value]
                if isinstance(value, list)
                else absent_as_null(nested, value)
            )
    return filled


def _arguments(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _allows_none(annotation: Any) -> bool:
    return any(argument is type(None) for argument in _arguments(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, alone, as an option, or as the items of a list."""
    for argument in _arguments(annotation):
        (held,) = typing.get_args(argument) if typing.get_origin(argument) is list else (argument,)
        if isinstance(held, type) and issubclass(held, BaseModel):
            return held
    return None
