"""How the API reads a JSON body: strict RFC 8259 JSON within limits no real request comes near.

Python's parser accepts NaN and Infinity, turns 1e999 into infinity, spends quadratic time on a number of
many thousand digits (or refuses it with a ValueError past 4,300), and recurses once per nesting level, so a
body nested a thousand levels deep raised RecursionError (a 500). Every such body is refused here as invalid
JSON (a 400 problem), before any of it is validated or written.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Tollgate's deepest request (a page in the document's list) nests four levels; the rest is headroom.
MAX_DEPTH = 32
# Characters of one number literal; the largest number the API takes (a deadline in seconds) has six digits.
MAX_NUMBER_CHARS = 40


class UnacceptableJson(json.JSONDecodeError):
    """Well-formed text that is not JSON the API takes; its message says why, for the tenant to read."""


def _refuse_constant(name: str) -> Any:
    raise UnacceptableJson(f"{name} is not a JSON value", name, 0)


def _bounded_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnacceptableJson(f"a number has more than {MAX_NUMBER_CHARS} characters", text[:50], 0)
    return int(text)


def _bounded_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise UnacceptableJson(f"a number has more than {MAX_NUMBER_CHARS} characters", text[:50], 0)
    value = float(text)
    if not math.isfinite(value):
        raise UnacceptableJson("a number is too large to represent", text, 0)
    return value


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, walked without recursion (objects and arrays count one level each)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_request_json(text: str) -> Any:
    """Parses a request body; raises json.JSONDecodeError (UnacceptableJson for a limit) when it cannot."""
    try:
        value = json.loads(
            text, parse_constant=_refuse_constant, parse_int=_bounded_int, parse_float=_bounded_float
        )
    except RecursionError:
        raise UnacceptableJson(f"the body nests deeper than {MAX_DEPTH} levels", text[:50], 0) from None
    if _depth(value) > MAX_DEPTH:
        raise UnacceptableJson(f"the body nests deeper than {MAX_DEPTH} levels", text[:50], 0)
    return value
