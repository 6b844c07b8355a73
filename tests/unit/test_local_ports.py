"""The local system's port checks: a port something listens on, or one asked for twice, is named before
anything starts; a bind that fails later becomes the same error, naming the port."""

from __future__ import annotations

import socket

import pytest

from tollgate_dev.local.ports import PortProblem, PortsUnavailable, binding, check_ports


@pytest.fixture
def taken():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_port_something_listens_on_is_named_with_the_field_that_asks_for_it(taken):
    free = free_port()

    problems = check_ports({"port": free, "ws_port": taken, "erp_port": 0})

    assert problems == [PortProblem("ws_port", taken, "is in use")]


def test_free_ports_and_any_free_port_are_no_problem():
    assert check_ports({"port": free_port(), "erp_port": 0, "ops_port": 0}) == []


def test_the_same_port_asked_for_twice_names_who_asked_first():
    port = free_port()

    problems = check_ports({"port": port, "erp_port": port})

    assert problems == [PortProblem("erp_port", port, "is asked for twice", clashes_with="port")]


def test_the_check_leaves_the_port_free_for_the_server():
    port = free_port()
    check_ports({"port": port})

    with socket.create_server(("127.0.0.1", port)):
        pass


def test_a_bind_that_fails_after_the_check_names_the_port(taken):
    with pytest.raises(PortsUnavailable) as raised, binding("ops_port", taken):
        socket.create_server(("127.0.0.1", taken)).close()

    assert raised.value.started
    assert raised.value.problems == [PortProblem("ops_port", taken, "is in use")]


def test_other_failures_inside_a_binding_pass_through():
    with pytest.raises(ValueError, match="not a port problem"), binding("port", 8080):
        raise ValueError("not a port problem")
