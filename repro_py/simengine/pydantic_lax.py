"""pydantic 2's lax-mode checks for the scalar and container types of sglang's request models.

Each check returns pydantic's error dicts (``type``, ``loc``, ``msg``, ``input``,
``ctx`` where pydantic has one) for a value at ``loc``, with pydantic's own
texts: a numeric string is a number, ``"yes"`` a boolean, ``2.0`` an integer,
``1.5`` not. ``validation`` puts them together in the request models' order.
"""

from __future__ import annotations

import math
from typing import Any

Loc = tuple[str | int, ...]
Error = dict[str, Any]

BOOL_STRINGS = {
    "0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
    "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True,
}  # fmt: skip


def err(kind: str, loc: Loc, msg: str, value: Any, ctx: dict[str, Any] | None = None) -> Error:
    out: Error = {"type": kind, "loc": ("body", *loc), "msg": msg, "input": value}
    if ctx is not None:
        out["ctx"] = ctx
    return out


def value_error(loc: Loc, message: str, value: Any) -> Error:
    """A validator's ``ValueError`` as pydantic reports it (the exception itself in ``ctx``)."""
    return err("value_error", loc, f"Value error, {message}", value, {"error": ValueError(message)})


def float_(value: Any, loc: Loc) -> list[Error]:
    if isinstance(value, int | float):
        return []
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            return [err("float_parsing", loc, "Input should be a valid number, unable to parse string as a number",
                        value)]
        return []
    return [err("float_type", loc, "Input should be a valid number", value)]


def int_(value: Any, loc: Loc) -> list[Error]:
    if isinstance(value, bool | int):
        return []
    if isinstance(value, float):
        if not math.isfinite(value):
            return [err("finite_number", loc, "Input should be a finite number", value)]
        if value != int(value):
            return [err("int_from_float", loc, "Input should be a valid integer, got a number with a fractional part",
                        value)]
        return []
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number == int(number)):
            return [err("int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer",
                        value)]
        return []
    return [err("int_type", loc, "Input should be a valid integer", value)]


def bool_(value: Any, loc: Loc) -> list[Error]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        if value in (0, 1):
            return []
        return [err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value)]
    if isinstance(value, str):
        if value.lower() in BOOL_STRINGS:
            return []
        return [err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value)]
    return [err("bool_type", loc, "Input should be a valid boolean", value)]


def str_(value: Any, loc: Loc) -> list[Error]:
    return [] if isinstance(value, str) else [err("string_type", loc, "Input should be a valid string", value)]


def dict_(value: Any, loc: Loc) -> list[Error]:
    return [] if isinstance(value, dict) else [err("dict_type", loc, "Input should be a valid dictionary", value)]


def list_(value: Any, loc: Loc) -> list[Error]:
    return [] if isinstance(value, list) else [err("list_type", loc, "Input should be a valid list", value)]


def model_object(value: Any, loc: Loc) -> list[Error]:
    """A nested model (or a union member that is one) given something that is not an object."""
    if isinstance(value, dict):
        return []
    return [err("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from",
                value)]


def list_of(item: str, value: Any, loc: Loc) -> list[Error]:
    """``list[str]`` / ``list[int]`` / ``list[list[int]]`` / ``list[dict[str,any]]``: the list, then each item."""
    if not isinstance(value, list):
        return list_(value, loc)
    errors: list[Error] = []
    for i, element in enumerate(value):
        errors += member(item, element, (*loc, i))
    return errors


def member(tag: str, value: Any, loc: Loc) -> list[Error]:
    """The errors of one union member, named by pydantic's tag for it (``str``, ``list[int]``, ...)."""
    if tag == "str":
        return str_(value, loc)
    if tag == "int":
        return int_(value, loc)
    if tag == "dict[str,any]":
        return dict_(value, loc)
    if tag.startswith("list[") and tag.endswith("]"):
        return list_of(tag[5:-1], value, loc)
    raise ValueError(f"pydantic_lax: no check for union member {tag!r}")


def union(tags: list[str], value: Any, loc: Loc) -> list[Error]:
    """A smart-mode union: valid when one member is; otherwise every member's errors, in pydantic's order."""
    errors: list[Error] = []
    for tag in tags:
        found = member(tag, value, (*loc, tag))
        if not found:
            return []
        errors += found
    return errors


def coerce(kind: str, value: Any) -> Any:
    """A checked value in its model type (``"0.5"`` -> 0.5, ``"yes"`` -> True, ``2.0`` -> 2)."""
    if value is None:
        return None
    if kind == "float":
        return float(value.strip()) if isinstance(value, str) else float(value)
    if kind == "int":
        return int(float(value.strip())) if isinstance(value, str) else int(value)
    if kind == "bool":
        return BOOL_STRINGS[value.lower()] if isinstance(value, str) else bool(value)
    if kind == "float_map":
        return {k: coerce("float", v) for k, v in value.items()}
    return value
