"""The ``/generate`` API contract check of sglang 0.5.23 (``generate_contract_error``), driven by recorded decoders.

sglang checks a ``/generate`` body, after FastAPI has parsed it into
``GenerateReqInput``, against its generated JSON contract
(``sglang/api/v1/api_types.py``: ``GenerateRequest.from_json_value``) and answers
``400 {"error": "<serde-style text>"}`` on a violation. ``refgen`` records each
decoder's branches (``[key, expression]``) from the wheel; this module reads
those expressions and applies them with the generated code's texts
(``invalid type: string "hot", expected f64``, ``unknown field `foo`, expected
one of ...``). Every ``SamplingParams`` key is checked; of ``GenerateRequest``
the keys the simulated engine reads (``MODELED``); other top-level keys are
not checked. An expression shape this module does not know is an error at
import-free test time (``tests/simengine/test_request_parity.py``), not a
silent pass.
"""

from __future__ import annotations

import re
from typing import Any

from repro_py.simengine import sglang_reference

MODELED = ("rid", "text", "input_ids", "stream", "sampling_params")
_SCALAR = re.compile(r"^_expect_(int|float|str|bool)\(x, expected='([^']*)'\)$")
_DECODER = re.compile(r"^decode_(\w+)\(x\)$")
_MAP = re.compile(
    r"^\{k: _expect_(\w+)\(e, expected='([^']*)'\) for k, e in _expect_map\(x, expected='([^']*)'\)\.items\(\)\}$"
)
_SEQ = re.compile(r"^\[_expect_(\w+)\(e, expected='([^']*)'\) for e in _expect_seq\(x, expected='([^']*)'\)\]$")
_DEFAULTED = re.compile(r"^(.+?) if x is None else (.+)$")
DECODERS = ("StringOrList", "StringList", "TokenIdsOrList", "TokenIds", "TokenIdsList", "Int64List",
            "SamplingParamsOrList", "SamplingParamsList", "SamplingParams", "WatermarkRequestConfig")  # fmt: skip


class ContractError(ValueError):
    """The body violates the contract; the text is the generated decoder's."""


def _unexpected(v: Any) -> str:
    """serde's ``Unexpected`` display, as the generated code writes it."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean `{'true' if v else 'false'}`"
    if isinstance(v, int):
        return f"integer `{v}`"
    if isinstance(v, float):
        return f"floating point `{v}`"
    if isinstance(v, str):
        return f'string "{v}"'
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _invalid(v: Any, expected: str) -> ContractError:
    return ContractError(f"invalid type: {_unexpected(v)}, expected {expected}")


def _scalar(kind: str, v: Any, expected: str) -> None:
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool),
        "float": isinstance(v, int | float) and not isinstance(v, bool),
        "str": isinstance(v, str),
        "bool": isinstance(v, bool),
        "map": isinstance(v, dict),
        "seq": isinstance(v, list),
    }[kind]
    if not ok:
        raise _invalid(v, expected)


def _unknown_field(key: str, fields: list[str]) -> ContractError:
    if not fields:
        return ContractError(f"unknown field `{key}`, there are no fields")
    if len(fields) == 1:
        return ContractError(f"unknown field `{key}`, expected `{fields[0]}`")
    if len(fields) == 2:
        return ContractError(f"unknown field `{key}`, expected `{fields[0]}` or `{fields[1]}`")
    listed = ", ".join(f"`{f}`" for f in fields)
    return ContractError(f"unknown field `{key}`, expected one of {listed}")


def understood(expression: str) -> bool:
    """Whether ``apply`` knows this decoder expression (every SamplingParams one must be)."""
    match = _DEFAULTED.match(expression)
    body = match.group(2) if match else expression
    decoder = _DECODER.match(body)
    return bool(body == "x" or _SCALAR.match(body) or _MAP.match(body) or _SEQ.match(body)
                or (decoder and decoder.group(1) in DECODERS))  # fmt: skip


def apply(expression: str, x: Any) -> None:
    """Check ``x`` as one recorded decoder expression does (``None if x is None else ...``)."""
    match = _DEFAULTED.match(expression)
    if match:
        if x is None:
            return
        expression = match.group(2)
    if expression == "x":
        return
    if scalar := _SCALAR.match(expression):
        _scalar(scalar.group(1), x, scalar.group(2))
    elif mapping := _MAP.match(expression):
        _scalar("map", x, mapping.group(3))
        for item in x.values():
            _scalar(mapping.group(1), item, mapping.group(2))
    elif seq := _SEQ.match(expression):
        _scalar("seq", x, seq.group(3))
        for item in x:
            _scalar(seq.group(1), item, seq.group(2))
    elif decoder := _DECODER.match(expression):
        decode(decoder.group(1), x)
    else:
        raise ValueError(f"contract: no reading of the decoder expression {expression!r}")


def _struct(name: str, x: Any, *, deny_unknown: bool, only: tuple[str, ...] | None = None) -> None:
    _scalar("map", x, f"struct {name}")
    table = dict(sglang_reference.contract()[name])
    for key, item in x.items():
        if key in table:
            if only is None or key in only:
                apply(table[key], item)
        elif deny_unknown:
            raise _unknown_field(key, list(sglang_reference.contract()[f"{name}_fields"]))


def decode(name: str, x: Any) -> None:
    """The generated ``decode_<name>`` helpers the recorded expressions call."""
    if name in ("StringOrList", "SamplingParamsOrList"):
        if isinstance(x, list):
            decode(name.replace("OrList", "List"), x)
        elif name == "StringOrList":
            _scalar("str", x, "a value or an array of values for StringOrList")
        else:
            _scalar("map", x, "a value or an array of values for SamplingParamsOrList")
            decode("SamplingParams", x)
    elif name == "TokenIdsOrList":
        if not isinstance(x, list):
            raise _invalid(x, "a value or an array of values for TokenIdsOrList")
        flat = not x or (isinstance(x[0], int | float) and not isinstance(x[0], bool))
        decode("TokenIds" if flat else "TokenIdsList", x)
    elif name in ("StringList", "TokenIds", "Int64List", "TokenIdsList", "SamplingParamsList"):
        _scalar("seq", x, "a sequence")
        for item in x:
            if name == "StringList":
                _scalar("str", item, "a string")
            elif name == "TokenIdsList":
                decode("TokenIds", item)
            elif name == "SamplingParamsList":
                decode("SamplingParams", item)
            else:
                _scalar("int", item, "i64")
    elif name in ("SamplingParams", "WatermarkRequestConfig"):
        _struct(name, x, deny_unknown=True)
    else:
        raise ValueError(f"contract: no decode_{name}")


def generate_contract_error(body: dict[str, Any]) -> str | None:
    """The contract violation in a ``/generate`` body (the keys in ``MODELED``), or None."""
    try:
        _struct("GenerateRequest", body, deny_unknown=False, only=MODELED)
    except ContractError as exc:
        return str(exc)
    return None
