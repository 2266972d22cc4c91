"""`shepherd.client`'s retries against a plain HTTP server on 127.0.0.1: a step the server held for its act timeout
and answered 503 (the step still in flight there, a long update) is sent again with its seq even when the hold
took longer than the client's retry budget; a server that refuses at once uses the budget up."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shepherd.client.connection import Client, ShepherdError

LOGIN = {"ok": True, "session_key": "s", "agent": "a", "observation_space": [[4], -1, 1], "action_space": 2}


def serve(answer, login=lambda logins: (200, LOGIN)):
    """A server whose steps ``answer(seqs seen so far, body)`` -> (status, body, hold) and whose logins
    ``login(logins so far, this one's included)`` -> (status, body)."""
    seen: list[int] = []
    logins: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.endswith("login_user/"):
                logins.append(1)
                status, out, hold = (*login(logins), 0.0)
            else:
                status, out, hold = answer(seen, body)
            time.sleep(hold)
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if status in (429, 503):
                self.send_header("Retry-After", "0.1")
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_step_held_for_the_act_timeout_then_503_is_sent_again_with_its_seq():
    def answer(seen, body):
        seen.append(body["seq"])
        if len(seen) == 1:  # the act timeout, longer than the client's whole retry budget
            return 503, {"error": "the agent did not answer within 1.5 s; send the same step again"}, 1.5
        return 200, {"action": 1, "policy_version": 1}, 0.0

    server, seen = serve(answer)
    client = Client(f"http://127.0.0.1:{server.server_address[1]}", "key", retry_seconds=1.0)
    try:
        client.login()
        assert client.step([0.0] * 4, 0.0, False) == 1
        assert seen == [1, 1]  # the same seq again
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_a_server_that_refuses_at_once_uses_the_retry_budget_up():
    def answer(seen, body):
        seen.append(body["seq"])
        return 503, {"error": "the agent is not available"}, 0.0

    server, seen = serve(answer)
    client = Client(f"http://127.0.0.1:{server.server_address[1]}", "key", retry_seconds=0.5)
    try:
        client.login()
        with pytest.raises(ShepherdError, match="not available"):  # it gives up: no hold extends the budget
            client.step([0.0] * 4, 0.0, False)
        assert len(seen) > 1 and set(seen) == {1}  # retried, with its seq, until the budget was used up
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_a_login_answered_429_is_tried_again_after_its_retry_after():
    from shepherd.client.relogin import login_retrying as _login

    server, _ = serve(None, lambda logins: (429, {"error": "too many sessions"}) if len(logins) == 1 else (200, LOGIN))
    client = Client(f"http://127.0.0.1:{server.server_address[1]}", "key")
    try:
        _login(client, "train", 10.0)
        assert client.session_key == "s" and client.seq == 0
    finally:
        client.close()
        server.shutdown()
        server.server_close()
