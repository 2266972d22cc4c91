"""``run.py --front-ends K`` end to end over real loopback HTTP: K front-end processes answer the public port,
the head (the process run.py starts) keeps the sessions, agents and store (docs/front-ends.md)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from urllib.error import HTTPError
from urllib.parse import urlsplit

import pytest

from shepherd.client import Client, run_env
from shepherd.front.frames import FRONT_END_HEADER, INTERNAL_PATH, TOKEN_HEADER, Item, encode_items
from shepherd.storage import read_server_file
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")
pytestmark = pytest.mark.timeout(120)


def request(url: str, path: str, body: dict | bytes | None = None, headers: dict | None = None,
            source: str | None = None) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of one request on a new connection (from the loopback address
    ``source``, if given: all of 127.0.0.0/8 is this machine's)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30,
                                            source_address=None if source is None else (source, 0))
    try:
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        connection.request("POST" if data is not None else "GET", path, data, headers or {})
        response = connection.getresponse()
        raw = response.read()
        return response.status, dict(response.getheaders()), json.loads(raw) if raw else {}
    finally:
        connection.close()


def front_end_pid(headers: dict) -> int:
    return int(headers[FRONT_END_HEADER])


def front_end_pids(server) -> list[int]:
    for line in server.lines:
        if match := re.search(r"Front ends: \d+ processes answer \S+ \(pids ([\d, ]+)\)", line):
            return [int(pid) for pid in match.group(1).split(", ")]
    raise AssertionError("the server named no front ends")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def metric(server, name: str) -> float:
    """A sample of GET /metrics, read from the head's private port (loopback: no token needed)."""
    private = read_server_file(server.data).url
    with urllib.request.urlopen(private + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert values, f"no {name} in /metrics"
    return sum(values)


def test_a_preset_learns_through_two_front_ends(tmp_path):
    """MaskablePPO's maze preset, driven by 2 local clients through 2 front ends, reaches its target."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "-p", "maze_maskableppo", "--clients", "2", "--front-ends", "2",
         "--port", "0", "--data", str(tmp_path / "data")], cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "target reached" in result.stdout
    assert "Front ends: 2 processes" in result.stdout


def test_a_session_keeps_working_on_new_connections_across_front_ends(server_factory):
    server = server_factory(TINY, "--front-ends", "2")
    status, headers, login = request(server.url, "/shepherd/login_user/", {"apikey": server.api_key})
    assert status == 200, login
    answered_by = {front_end_pid(headers)}
    for seq in range(1, 201):  # a new connection each step: the kernel spreads them over both front ends
        status, headers, reply = request(server.url, "/shepherd/env/", {
            "session_key": login["session_key"], "obs": [0.0, 0.01, 0.0, -0.01], "reward": 1.0, "done": seq % 20 == 0,
            "seq": seq})
        assert status == 200, reply
        assert reply["action"] in ((None,) if seq % 20 == 0 else (0, 1))  # None: the episode ended
        answered_by.add(front_end_pid(headers))
        if len(answered_by) == 2 and seq >= 20:
            break
    assert answered_by == set(front_end_pids(server)), "both front ends answered the one session"
    status, _, reply = request(server.url, "/shepherd/logout/", {"session_key": login["session_key"]})
    assert status == 200 and reply == {"ok": True}
    status, _, reply = request(server.url, "/shepherd/env/", {"session_key": login["session_key"], "obs": [0.0] * 4,
                                                              "reward": 0.0, "done": False})
    assert status == 401, reply  # the session ended on the head, for every front end


def test_a_client_acting_session_learns_through_front_ends(server_factory):
    """Login, policy files (and their 304) and uploads of a client-acting session go through two front ends
    to the head, which learns every training block (a new version and file for each)."""
    from shepherd.client.acting import ActingClient, run_acting_env

    server = server_factory(str(TEST_PRESETS / "tiny_ppo_vector.py"), "--front-ends", "2")
    client = ActingClient(server.url, server.api_key, 4, seed=0)
    try:
        opened = client.login()
        assert (opened["acting"], opened["policy_version"], opened["steps"]) == ("client", 0, 16)
        run_acting_env(client, "CartPole-v1", seed=0, steps=3 * 64)  # training blocks (evaluation at 256)
        assert (client.policy_version, client.phase) == (3, "train") and client.fetches == 4
        parts = urlsplit(server.url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        for held, status in ((None, 200), (client.policy_version, 304)):
            body = {"session_key": client.session_key, **({} if held is None else {"policy_version": held})}
            connection.request("POST", "/shepherd/policy/", json.dumps(body), {"Content-Type": "application/json"})
            response = connection.getresponse()
            raw = response.read()
            assert response.status == status and response.getheader("Shepherd-Policy-Version") == "3", raw[:200]
            assert response.getheader(FRONT_END_HEADER) is not None
            if status == 200:
                assert response.getheader("Content-Type") == "application/octet-stream" and len(raw) > 1000
        connection.close()
    finally:
        client.close()
    assert metric(server, "shepherd_agent_learned_steps") == 3 * 64


def test_killing_a_front_end_mid_run_loses_and_repeats_no_step(server_factory):
    server = server_factory(TINY, "--front-ends", "2")
    first = front_end_pids(server)
    steps = steps_while_a_front_end_is_killed(server)
    # every step the clients got an answer for was recorded exactly once (retries after the kill included):
    # the agent's step counter equals the distinct (session, seq) of the steps it counts
    recorded = metric(server, "shepherd_agent_steps_total")
    assert recorded == steps, (recorded, steps)
    now = set(pid for pid in front_end_pids_now(server) if alive(pid))
    assert first[1] in now and first[0] not in now and len(now) == 2, (first, now)


def steps_while_a_front_end_is_killed(server, mode: str = "train") -> int:
    """Three clients step CartPole in ``mode`` for 7 s; the first front end is killed with kill -9 after 3 s.
    Returns how many steps the server should have counted: the distinct (session, seq) of the steps the
    clients were answered for, an episode's first excepted (none fails: checked)."""
    killed = front_end_pids(server)[0]
    sent: list[set[tuple[str, int]]] = [set() for _ in range(3)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def drive(index: int) -> None:
        client = Client(server.url, server.api_key, timeout=60)
        original = client._send_step

        beginning = {"session": None, "next": True}

        def send(payload):  # every (session, seq) of a step the server counts (an episode's first is none)
            if client.session_key != beginning["session"]:
                beginning.update(session=client.session_key, next=True)
            reply = original(payload)
            if not beginning["next"]:
                sent[index].add((client.session_key, payload["seq"]))
            beginning["next"] = payload["done"]
            return reply

        client._send_step = send
        try:
            while not stop.is_set():
                run_env(client, "CartPole-v1", seed=index, episodes=1, mode=mode)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            errors.append(error)
        finally:
            client.close()

    threads = [threading.Thread(target=drive, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    os.kill(killed, signal.SIGKILL)
    time.sleep(4)  # the clients go on through the other front end; the head starts a replacement
    stop.set()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    steps = sum(len(seqs) for seqs in sent)
    assert steps > 200
    return steps


def front_end_pids_now(server) -> set[int]:
    """The front ends answering now, by the header of many new connections."""
    pids = set()
    for _ in range(40):
        _, headers, _ = request(server.url, "/shepherd/health")
        pids.add(front_end_pid(headers))
    return pids


def test_the_admin_api_and_metrics_work_through_the_public_port(server_factory):
    server = server_factory(TINY, "--front-ends", "2")
    token = {"Authorization": f"Bearer {server.admin_token}"}
    status, headers, agents = request(server.url, "/shepherd/admin/api/agents", headers=token)
    assert status == 200 and [agent["name"] for agent in agents] == ["tiny"]
    assert front_end_pid(headers) in front_end_pids(server)
    status, _, reply = request(server.url, "/shepherd/admin/api/agents")
    assert status == 401, reply
    status, _, reply = request(server.url, "/shepherd/admin/api/agents", headers={"Authorization": "Bearer wrong"})
    assert status == 401, reply
    status, _, added = request(server.url, f"/shepherd/admin/api/agents/{agents[0]['id']}/keys", {"label": "x"},
                               headers={**token, "Content-Type": "application/json"})
    assert status in (200, 201) and "key" in added, added
    status, _, login = request(server.url, "/shepherd/login_user/", {"apikey": added["key"]})
    assert status == 200, login  # the key made through a front end logs in through one
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as reply:  # loopback: the real address
        assert b"shepherd_agent_steps_total" in reply.read()
    with pytest.raises(HTTPError) as refused:  # a client that went through a proxy is not loopback
        urllib.request.urlopen(urllib.request.Request(server.url + "/metrics",
                                                      headers={"X-Forwarded-For": "192.0.2.1"}), timeout=10)
    assert refused.value.code == 401
    refused.value.close()  # its reply's socket
    status, _, health = request(server.url, "/shepherd/health")
    assert status == 200 and health["status"] == "ok", health


def test_the_internal_endpoint_refuses_a_missing_or_wrong_token(server_factory):
    server = server_factory(TINY, "--front-ends", "1")
    private = read_server_file(server.data).url
    login = encode_items([Item("login", "198.51.100.7", json.dumps({"apikey": server.api_key}).encode())])
    status, _, reply = request(private, INTERNAL_PATH, login)
    assert status == 404, reply
    status, _, reply = request(private, INTERNAL_PATH, login, headers={TOKEN_HEADER: "not-the-token"})
    assert status == 401, reply
    status, _, reply = request(server.url, INTERNAL_PATH, login, headers={TOKEN_HEADER: "not-the-token"})
    assert status == 404, reply  # never reachable through a front end


def test_the_head_sees_each_clients_own_address(server_factory):
    """The login throttle counts the address the front end saw (not the front end's, not one a client
    names in a header): failures from 127.0.0.2 block 127.0.0.2 only."""
    server = server_factory(TINY, "--front-ends", "1")

    def fail() -> None:
        request(server.url, "/shepherd/login_user/", {"apikey": "wrong"},
                headers={"X-Shepherd-Client-Address": "127.0.0.3"}, source="127.0.0.2")

    for _ in range(7):  # five free failures, then each blocks the address for longer (answered when it ends)
        fail()
    blocking = threading.Thread(target=fail)  # blocks the address for 1 s, answered when the block ends
    blocking.start()
    status, headers, reply = 0, {}, None
    while blocking.is_alive():  # until the block is seen (a success from .2 forgives nothing: harmless)
        status, headers, reply = request(server.url, "/shepherd/login_user/", {"apikey": server.api_key},
                                         source="127.0.0.2")
        if status == 429:
            break
        time.sleep(0.05)
    other, _, _ = request(server.url, "/shepherd/login_user/", {"apikey": server.api_key}, source="127.0.0.3")
    blocking.join()
    assert status == 429, reply  # this client's own address is blocked
    assert "Retry-After" in headers
    assert other == 200  # another client's is not


def test_front_ends_stop_with_the_head(server_factory):
    server = server_factory(TINY, "--front-ends", "2")
    pids = front_end_pids(server)
    assert server.stop() == 0
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)


def test_front_ends_exit_when_the_head_is_killed(server_factory):
    server = server_factory(TINY, "--front-ends", "2")
    pids = front_end_pids(server)
    server.process.kill()
    server.process.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)


def test_front_ends_keep_the_connection_limits_of_the_public_port(server_factory):
    """--max-connections and --header-timeout hold on the front ends' port as on the head's own: silent
    connections over the limit are answered 503 and closed, the others closed after the header timeout (the
    per-address cap, which would answer this one address's 3rd connection 429, turned off)."""
    import socket

    server = server_factory(TINY, "--front-ends", "1", "--max-connections", "4", "--header-timeout", "0.5",
                            "--max-connections-per-address", "0")
    host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
    silent = [socket.create_connection((host, port), timeout=10) for _ in range(12)]  # never send a byte
    replies = []
    for connection in silent:
        chunks = []
        while chunk := connection.recv(4096):
            chunks.append(chunk)
        replies.append(b"".join(chunks))
        connection.close()
    refused = [reply for reply in replies if reply.startswith(b"HTTP/1.1 503 ") and b"maximum of open connections" in reply]
    assert len(refused) == 8 and replies.count(b"") == 4, replies
    status, _, _ = request(server.url, "/shepherd/login_user/", {"apikey": server.api_key})
    assert status == 200  # the slots are free again
