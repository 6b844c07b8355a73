"""The local system's log lines: one readable line each, prefixed by the part of the system that wrote it."""

from __future__ import annotations

import io
import logging
import secrets

from aws_lambda_powertools import Logger

from tollgate_dev.local.logs import ReadableFormatter, as_component, logs_into


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


def test_logs_into_a_file_keep_the_terminal_for_progress_and_put_every_handler_back(tmp_path, capsys):
    # Given a service logger with a terminal handler of its own, as the API's Powertools logger has
    service = f"tollgate-{secrets.token_hex(3)}"
    logger = Logger(service=service)
    handler = logging.getLogger(service).handlers[0]
    before = (handler.stream, handler.formatter, list(logging.getLogger().handlers))

    # When the block runs, a tollgate line and a library's warning are logged
    with logs_into(tmp_path / "demo" / "demo.log") as path:
        logger.info("job accepted", extra={"job_id": "j1"})
        logging.getLogger(f"somelib.{service}").warning("connection pool is full")

    # Then both are in the file, nothing reached the terminal, and the handlers are as they were
    first, second = path.read_text(encoding="utf-8").splitlines()
    assert first.split()[1:] == [service.removeprefix("tollgate-"), "INFO", "job", "accepted", "job_id=j1"]
    assert second.endswith(f"somelib.{service} WARNING connection pool is full")
    assert capsys.readouterr() == ("", "")
    assert (handler.stream, handler.formatter, list(logging.getLogger().handlers)) == before
