"""What makes two requests the same request: content and result-changing options, nothing else."""

from tollgate.accept.models import CreateJobRequest
from tollgate.accept.service import estimate_tokens, request_hash
from tollgate.core.documents import canonicalize


def _request(**fields) -> CreateJobRequest:
    return CreateJobRequest.model_validate({"document": {"pages": [{"text": "Invoice 1"}]}, **fields})


DOC = canonicalize(["Invoice 1"])


def test_priority_deadline_and_metadata_are_not_identity():
    base = request_hash(_request(), DOC)
    assert request_hash(_request(priority=9), DOC) == base
    assert request_hash(_request(deadline_seconds=120), DOC) == base
    assert request_hash(_request(metadata={"filename": "a.pdf"}), DOC) == base


def test_explicit_defaults_equal_omitted_ones():
    assert request_hash(_request(model_policy="auto", options={}), DOC) == request_hash(_request(), DOC)


def test_result_changing_fields_are_identity():
    base = request_hash(_request(), DOC)
    assert request_hash(_request(model_policy="large"), DOC) != base
    assert request_hash(_request(options={"currency_hint": "EUR"}), DOC) != base
    assert request_hash(_request(), canonicalize(["Invoice 2"])) != base


def test_page_boundaries_are_part_of_the_content():
    assert canonicalize(["ab", "c"]).sha256 != canonicalize(["a", "bc"]).sha256
    assert canonicalize(["ab", "c"]).sha256 == canonicalize(("ab", "c")).sha256


def test_the_token_estimate_grows_with_the_text_and_reserves_the_output():
    short, long = canonicalize(["x" * 400]), canonicalize(["x" * 4000])
    assert estimate_tokens(long, 1000) - estimate_tokens(short, 1000) == 900
    assert estimate_tokens(short, 2000) - estimate_tokens(short, 1000) == 1000
