"""Named SQL queries: every block parses, names are unique, unknown names fail loudly."""

import re

import pytest

from tollgate.db.queries import load_queries, parse_queries


def test_blocks_are_split_by_name_lines():
    text = "-- name: first\nSELECT 1\n\n-- name: second\n-- a comment kept with the query\nSELECT 2\n"
    assert parse_queries(text, "x.sql") == {
        "first": "SELECT 1",
        "second": "-- a comment kept with the query\nSELECT 2",
    }


def test_a_name_defined_twice_is_refused():
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x.sql")


def test_an_empty_query_is_refused():
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n\n-- name: b\nSELECT 1\n", "x.sql")


def test_the_projects_queries_load_and_unknown_names_fail():
    queries = load_queries()
    assert "insert_job" in queries.names()
    assert "insert_outbox_event" in queries.names()
    with pytest.raises(AttributeError, match="no query named"):
        _ = queries.no_such_query


def test_queries_use_named_parameters_only():
    queries = load_queries()
    for name in queries.names():
        sql = getattr(queries, name)
        assert "%s" not in sql, f"{name} uses a positional parameter"
        # Comments first: an apostrophe in prose would otherwise pair with a quote in the SQL.
        code = re.sub(r"--[^\n]*", "", sql)
        without_literals = re.sub(r"'[^']*'", "''", code)
        assert "{" not in without_literals, f"{name} looks like a template"
