"""Wiring's boto3 clients come into being on first use, once, from the environment of that moment."""

from __future__ import annotations

import threading

import pytest

from tollgate.core.aws import LazyClient, lazy_client


@pytest.fixture
def region(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    return "eu-west-1"


def test_a_lazy_client_is_made_on_first_use_and_forwards(region: str) -> None:
    client = lazy_client("s3")
    assert isinstance(client, LazyClient) and not client.created

    assert client.meta.region_name == region
    assert client.meta.service_model.service_name == "s3"
    assert client.created


def test_threads_racing_to_first_use_share_one_client(region: str) -> None:
    client = LazyClient("lambda")
    seen: list[object] = []
    start = threading.Barrier(8)

    def use() -> None:
        start.wait()
        seen.append(client.meta.events)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(seen) == 8 and len({id(events) for events in seen}) == 1
