"""The chaos run's AWS gate: traffic passes while it is open; closing it refuses new connections and cuts
the ones in flight; it opens again on the same port."""

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tollgate_dev.chaos.gate import Gate


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gate():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    gate = Gate(server.server_address[1]).open()
    yield gate
    gate.close()
    server.shutdown()
    server.server_close()


def get(connection: http.client.HTTPConnection, path: str) -> bytes:
    connection.request("GET", path)
    return connection.getresponse().read()


def port_of(gate: Gate) -> int:
    return int(gate.url.rsplit(":", 1)[1])


def test_requests_pass_through_the_open_gate(gate):
    connection = http.client.HTTPConnection("127.0.0.1", port_of(gate), timeout=5)

    assert get(connection, "/one") == b"/one"
    assert get(connection, "/two") == b"/two", "a kept-alive connection goes on working"


def test_a_closed_gate_refuses_and_cuts_then_opens_again_on_the_same_port(gate):
    kept = http.client.HTTPConnection("127.0.0.1", port_of(gate), timeout=5)
    assert get(kept, "/before") == b"/before"
    port = port_of(gate)

    gate.close()

    with pytest.raises(ConnectionRefusedError):
        get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/new")
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        get(kept, "/in-flight")

    gate.open()

    assert port_of(gate) == port
    assert get(http.client.HTTPConnection("127.0.0.1", port, timeout=5), "/after") == b"/after"
