"""The local system's log lines: one readable line each, prefixed by the part of the system that wrote it."""

from __future__ import annotations

import io
import logging
import secrets

from aws_lambda_powertools import Logger

from tollgate.local.logs import ReadableFormatter, as_component


def capture(service: str) -> tuple[Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = Logger(service=service, logger_handler=handler)
    handler.setFormatter(ReadableFormatter())
    return logger, stream


def test_a_line_names_its_component_level_message_and_keys():
    logger, stream = capture(f"tollgate-{secrets.token_hex(3)}")

    as_component(
        "worker-2", lambda: logger.info("attempt finished", extra={"job_id": "j1", "state": "SUCCEEDED"})
    )()

    line = stream.getvalue().rstrip("\n")
    assert line.split()[1:] == ["worker-2", "INFO", "attempt", "finished", "job_id=j1", "state=SUCCEEDED"]


def test_without_a_component_the_service_names_the_line_and_exceptions_follow_it():
    service = f"tollgate-{secrets.token_hex(3)}"
    logger, stream = capture(service)

    try:
        raise RuntimeError("database unreachable")
    except RuntimeError:
        logger.exception("claim failed")

    first, *rest = stream.getvalue().splitlines()
    assert first.split()[1:4] == [service.removeprefix("tollgate-"), "ERROR", "claim"]
    assert any("RuntimeError: database unreachable" in line for line in rest)
