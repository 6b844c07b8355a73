"""Each job type declares every reason code its validation policy gives, so the review queue's filter (the
CLI's --reason, the API's ?reason=) can refuse a code no policy gives instead of answering an empty list."""

from __future__ import annotations

import ast
import inspect
import sys

from tollgate.jobtypes.registry import JOB_TYPES, RETIRED_REVIEW_REASONS, REVIEW_REASONS


def codes_given(source: str) -> set[str]:
    """The codes a policy's source passes to ``report.fail(...)``; a code that is not a literal is a
    failure of its own, since no one could list it."""
    codes = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fail":
            first = node.args[0]
            assert isinstance(first, ast.Constant) and isinstance(first.value, str), ast.unparse(node)
            codes.add(first.value)
    return codes


def _policy_source(job_type) -> str:
    # The module of the type's declared codes is the module of the policy that gives them.
    module = next(
        m
        for m in list(sys.modules.values())
        if getattr(m, "REASON_CODES", None) is job_type.review_reasons
        and m.__name__.startswith("tollgate.jobtypes.")
    )
    return inspect.getsource(module)


def test_each_type_declares_exactly_the_codes_its_policy_gives():
    for job_type in JOB_TYPES.values():
        assert codes_given(_policy_source(job_type)) == job_type.review_reasons, job_type.name


def test_the_check_catches_a_code_the_declaration_misses():
    planted = 'def validate(report):\n    report.fail("total_mismatch", "total", "x")\n    report.fail("new_rule", "x", "y")\n'

    assert codes_given(planted) - JOB_TYPES["invoice_extraction"].review_reasons == {"new_rule"}


def test_the_queue_filters_by_every_current_code_and_the_retired_ones():
    current = set().union(*(t.review_reasons for t in JOB_TYPES.values()))

    assert set(REVIEW_REASONS) == current | RETIRED_REVIEW_REASONS
    assert not RETIRED_REVIEW_REASONS & current, "a retired code is given again: drop it from the retired set"
    assert list(REVIEW_REASONS) == sorted(REVIEW_REASONS)
