"""The stdlib client against a server that is not there: one line saying so, a non-zero exit, no long wait;
a server that was reached and went away is still retried."""

import os
import socket
import subprocess
import sys

import pytest

from shepherd.client import relogin as client_module
from shepherd.client import Client
from tests.conftest import ROOT


@pytest.fixture
def closed_port():
    """A port on 127.0.0.1 that is bound but not listening: connecting to it is refused."""
    with socket.socket() as reserved:
        reserved.bind(("127.0.0.1", 0))
        yield reserved.getsockname()[1]


def test_a_client_pointed_at_no_server_says_so_in_one_line_and_exits_non_zero(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    result = subprocess.run([sys.executable, "-m", "shepherd.client", "--env", "CartPole-v1", "--url", url],
                            cwd=ROOT, capture_output=True, text=True, timeout=50,  # its retries would take 60 s
                            env={**os.environ, "SHEPHERD_API_KEY": "not-a-real-key"})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot reach the Shepherd server at {url}: ")
    assert "refused" in lines[0].lower() and "Traceback" not in result.stderr


def test_a_server_reached_before_is_still_retried_when_it_refuses(closed_port, monkeypatch):
    client = Client(f"http://127.0.0.1:{closed_port}", "key")
    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)
    attempts = []

    def login(mode):
        attempts.append(mode)
        if len(attempts) < 3:
            raise ConnectionRefusedError(111, "Connection refused")
        client.session_key = "session"

    monkeypatch.setattr(client, "login", login)
    client.reached = True  # as after any answer: the server went away (restarting, say)
    client_module.login_retrying(client, "train", retry_seconds=60)
    assert attempts == ["train"] * 3 and client.session_key == "session"

    client.reached, attempts[:] = False, []  # never reached: the first refusal is final
    with pytest.raises(ConnectionRefusedError):
        client_module.login_retrying(client, "train", retry_seconds=60)
    assert attempts == ["train"]
