"""Evaluate-mode steps answered by the front ends from snapshots of the greedy policy (``run.py --front-ends K``,
docs/front-ends.md "Greedy steps from snapshots"), over real loopback HTTP: the actions are the head's, and
the head records every step once (seq, retries, episodes, counters), whichever process answered it."""

from __future__ import annotations

import http.client
import json
import time
import urllib.request
from urllib.parse import urlsplit

import pytest

from shepherd.front.frames import SNAPSHOT_PATH, TOKEN_HEADER
from shepherd.front.snapshot_cache import SNAPSHOT_HEADER
from shepherd.storage import read_server_file
from tests.conftest import TEST_PRESETS
from tests.e2e.test_front_ends import request, steps_while_a_front_end_is_killed

TINY = str(TEST_PRESETS / "tiny_ppo.py")
pytestmark = pytest.mark.timeout(120)


class Connection:
    """One kept-alive connection (as a client library keeps one): its requests reach one front end."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)

    def post(self, path: str, body: dict) -> tuple[int, dict, dict]:
        self.connection.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        response = self.connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())

    def close(self) -> None:
        self.connection.close()


def samples(server, name: str, having: str = "") -> float:
    """The sum of a metric's samples whose line starts with ``name`` and has ``having`` (the head's /metrics,
    from its private port)."""
    private = read_server_file(server.data).url
    with urllib.request.urlopen(private + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and having in line)


def deploy_steps(server) -> float:
    """The steps of evaluate-mode sessions the head counted."""
    return samples(server, "shepherd_agent_steps_total{", 'phase="deploy"')


OBSERVATIONS = [[0.01 * i, -0.02 * i, 0.03 * (i % 5), 0.5 - 0.1 * (i % 11)] for i in range(60)]


def test_evaluate_steps_are_answered_from_the_front_ends_snapshot_and_recorded_once(server_factory):
    server = server_factory(TINY, "--front-ends", "1")
    public, private = Connection(server.url), Connection(read_server_file(server.data).url)
    try:
        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate"})
        assert status == 200, login
        key = login["session_key"]
        answered_here, actions = 0, []
        for seq, obs in enumerate(OBSERVATIONS, start=1):
            done = seq % 20 == 0
            status, headers, reply = public.post("/shepherd/env/", {"session_key": key, "obs": obs, "reward": 1.0,
                                                                     "done": done, "seq": seq})
            assert status == 200, reply
            if done:
                assert reply == {"action": None} or reply["action"] is None
            else:
                assert reply["action"] in (0, 1)
            answered_here += SNAPSHOT_HEADER in headers
            if SNAPSHOT_HEADER in headers and not done:
                assert int(headers[SNAPSHOT_HEADER]) == reply["policy_version"]
            actions.append(reply.get("action"))
            if seq == 1:
                time.sleep(0.5)  # the front end fetches the snapshot the login's answer noted
        assert answered_here >= len(OBSERVATIONS) - 2, answered_here  # all but the first one or two

        # the same observations, answered by the head itself (its private port: no front end in between)
        status, _, head_login = private.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate"})
        head_actions = []
        for seq, obs in enumerate(OBSERVATIONS, start=1):
            status, headers, reply = private.post("/shepherd/env/", {
                "session_key": head_login["session_key"], "obs": obs, "reward": 1.0, "done": seq % 20 == 0})
            assert status == 200 and SNAPSHOT_HEADER not in headers, reply
            head_actions.append(reply.get("action"))
        assert actions == head_actions

        # recorded on the head: every step after an episode's first, once; three episodes ended
        assert deploy_steps(server) == 2 * (len(OBSERVATIONS) - 3)

        # a retry gets the same answer and is not counted again; the same seq with another step is refused
        last = len(OBSERVATIONS)
        status, _, first = public.post("/shepherd/env/", {"session_key": key, "obs": OBSERVATIONS[0], "reward": 1.0,
                                                          "done": False, "seq": last + 1})
        counted = deploy_steps(server)
        status, headers, again = public.post("/shepherd/env/", {"session_key": key, "obs": OBSERVATIONS[0],
                                                                "reward": 1.0, "done": False, "seq": last + 1})
        assert status == 200 and again == first and SNAPSHOT_HEADER in headers
        assert deploy_steps(server) == counted
        status, _, refused = public.post("/shepherd/env/", {"session_key": key, "obs": OBSERVATIONS[1],
                                                            "reward": 1.0, "done": False, "seq": last + 1})
        assert status == 409 and "seq" in refused["error"], refused

        # a bad step gets the head's own words; "obs": null ends the session for every process
        status, _, bad = public.post("/shepherd/env/", {"session_key": key, "obs": [0.0, 1.0], "reward": 0.0,
                                                        "done": False, "seq": last + 2})
        status_head, _, bad_head = private.post("/shepherd/env/", {"session_key": head_login["session_key"],
                                                                   "obs": [0.0, 1.0], "reward": 0.0, "done": False})
        assert (status, bad) == (status_head, bad_head) and status == 400, (bad, bad_head)
        status, _, reply = public.post("/shepherd/env/", {"session_key": key, "obs": None})
        assert status == 200 and reply == {"ok": True}
        status, _, reply = public.post("/shepherd/env/", {"session_key": key, "obs": OBSERVATIONS[0], "reward": 0.0,
                                                          "done": False, "seq": last + 3})
        assert status == 401, reply
    finally:
        public.close()
        private.close()


def test_training_steps_still_go_to_the_head(server_factory):
    server = server_factory(TINY, "--front-ends", "1")
    public = Connection(server.url)
    try:
        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key})
        assert status == 200, login
        for seq, obs in enumerate(OBSERVATIONS[:30], start=1):
            status, headers, reply = public.post("/shepherd/env/", {
                "session_key": login["session_key"], "obs": obs, "reward": 1.0, "done": seq % 10 == 0, "seq": seq})
            assert status == 200 and SNAPSHOT_HEADER not in headers, reply
            time.sleep(0.01)
    finally:
        public.close()


def test_without_snapshots_evaluate_steps_go_to_the_head(server_factory):
    """--no-front-end-snapshots: the head notes no snapshot, so every step of an evaluate session reaches it."""
    server = server_factory(TINY, "--front-ends", "1", "--no-front-end-snapshots")
    public = Connection(server.url)
    try:
        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate"})
        assert status == 200, login
        for seq, obs in enumerate(OBSERVATIONS[:30], start=1):
            status, headers, reply = public.post("/shepherd/env/", {
                "session_key": login["session_key"], "obs": obs, "reward": 1.0, "done": seq % 10 == 0, "seq": seq})
            assert status == 200 and SNAPSHOT_HEADER not in headers, reply
            if seq == 1:
                time.sleep(0.5)  # time enough to fetch a snapshot, had the head noted one
        assert deploy_steps(server) == 30 - 3  # recorded: every step after an episode's first
        assert samples(server, "shepherd_snapshot_steps_total ") == 0
    finally:
        public.close()


def test_killing_a_front_end_while_evaluate_clients_step_records_every_step_once(server_factory):
    """Three evaluate-mode clients step CartPole through 2 front ends, one killed with kill -9 meanwhile: the
    clients go on through the other (retrying with the same seq), and the head counted each step they were
    answered for exactly once, most of them answered from a front end's snapshot."""
    server = server_factory(TINY, "--front-ends", "2")
    steps = steps_while_a_front_end_is_killed(server, mode="evaluate")
    assert deploy_steps(server) == steps, (deploy_steps(server), steps)
    assert samples(server, "shepherd_snapshot_steps_total ") > steps / 2


def test_the_snapshot_endpoint_refuses_a_missing_or_wrong_token(server_factory):
    server = server_factory(TINY, "--front-ends", "1")
    private = read_server_file(server.data).url
    path = SNAPSHOT_PATH + "?name=1@1"
    for url, headers, expected in [(private, {}, 404), (private, {TOKEN_HEADER: "not-the-token"}, 401),
                                   (server.url, {TOKEN_HEADER: "not-the-token"}, 404)]:
        status, _, reply = request(url, path, headers=headers)
        assert status == expected, (url, headers, reply)


def vector_step(key: str, seq: int, n_envs: int, ended_at: int = 7) -> dict:
    """A vector step of ``n_envs`` envs; env 1 ends every ``ended_at`` steps (with its final observation)."""
    obs = [OBSERVATIONS[(seq + 13 * env) % len(OBSERVATIONS)] for env in range(n_envs)]
    ended = [env == 1 and seq % ended_at == 0 for env in range(n_envs)]
    return {"session_key": key, "obs": obs, "reward": [1.0] * n_envs, "terminated": ended,
            "truncated": [False] * n_envs, "final_obs": [OBSERVATIONS[seq % 7] if end else None for end in ended],
            "seq": seq}


def test_vector_evaluate_steps_are_answered_from_the_snapshot_and_recorded_once(server_factory):
    """A vector session in evaluate mode: every env's action from the front end's snapshot in one pass, the
    same actions as the head's own, each env's steps counted once by the head, retries answered alike."""
    server = server_factory(TINY, "--front-ends", "1")
    public, private = Connection(server.url), Connection(read_server_file(server.data).url)
    n_envs, count = 3, 30
    try:
        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate",
                                                                 "n_envs": n_envs})
        assert status == 200 and login["n_envs"] == n_envs, login
        key, answered_here, actions = login["session_key"], 0, []
        for seq in range(1, count + 1):
            status, headers, reply = public.post("/shepherd/env/", vector_step(key, seq, n_envs))
            assert status == 200 and len(reply["actions"]) == n_envs, reply
            assert all(action in (0, 1) for action in reply["actions"])
            answered_here += SNAPSHOT_HEADER in headers
            actions.append(reply["actions"])
            if seq == 1:
                time.sleep(0.5)  # the front end fetches the snapshot the login's answer noted
        assert answered_here >= count - 2, answered_here
        assert samples(server, "shepherd_snapshot_steps_total ") >= count - 2

        status, _, head_login = private.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate",
                                                                       "n_envs": n_envs})
        head_actions = []
        for seq in range(1, count + 1):
            status, headers, reply = private.post("/shepherd/env/", vector_step(head_login["session_key"], seq, n_envs))
            assert status == 200 and SNAPSHOT_HEADER not in headers, reply
            head_actions.append(reply["actions"])
        assert actions == head_actions
        # every env's steps after its first, once, in each of the two sessions
        assert deploy_steps(server) == 2 * n_envs * (count - 1)

        counted = deploy_steps(server)
        status, headers, again = public.post("/shepherd/env/", vector_step(key, count, n_envs))
        assert status == 200 and again["actions"] == actions[-1] and SNAPSHOT_HEADER in headers
        assert deploy_steps(server) == counted
        other = vector_step(key, count, n_envs)
        other["reward"] = [0.5] * n_envs
        status, _, refused = public.post("/shepherd/env/", other)
        assert status == 409 and "seq" in refused["error"], refused
        status, _, bad = public.post("/shepherd/env/", {**vector_step(key, count + 1, n_envs), "obs": [[0.0]] * n_envs})
        assert status == 400 and "obs" in bad["error"], bad
        status, _, wrong = public.post("/shepherd/env/", vector_step(key, count + 1, n_envs + 1))
        assert status == 400 and "envs" in wrong["error"], wrong
    finally:
        public.close()
        private.close()


def test_binary_steps_go_through_front_ends_and_evaluate_ones_are_answered_from_snapshots(server_factory):
    """Steps with binary tensors (docs/protocol.md, "Binary tensors") through a front end: a training session's
    batched to the head (the frame carries the body's JSON length), an evaluate session's answered from the
    front end's snapshot, whose parser reads the same layout."""
    from shepherd.client import Client, run_env

    server = server_factory(TINY, "--front-ends", "1")
    # the front end fetches the snapshot once a login's answer notes it, in the background: on a loaded machine
    # the first evaluate session's steps may all go to the head, so evaluate sessions go on (at most 10)
    # until the snapshot has answered some
    for mode in ("train", *["evaluate"] * 10):
        client = Client(server.url, server.api_key, timeout=30, binary=True)
        try:
            assert len(run_env(client, "CartPole-v1", seed=0, episodes=3, mode=mode)) == 3
            assert client.binary
            client.logout()
        finally:
            client.close()
        if mode == "evaluate" and samples(server, "shepherd_snapshot_steps_total ") > 10:
            break
    assert samples(server, "shepherd_snapshot_steps_total ") > 10


EYES = str(TEST_PRESETS / "tiny_eyes.py")


def image(i: int) -> list:
    """The i-th of the four kinds of test frame (`tests.frames`), as JSON."""
    import numpy as np

    from tests.frames import paint

    return paint(np.zeros((36, 36, 3), np.uint8), i, np.random.default_rng(i)).tolist()


def test_an_image_agents_evaluate_steps_are_answered_from_its_greedy_file(server_factory):
    """A CnnPolicy agent (no numpy snapshot: convolutions): the front end answers its evaluate steps, single and
    vector, from the agent's greedy ONNX file with onnxruntime; the actions are the head's own, recorded once."""
    server = server_factory(EYES, "--front-ends", "1")
    public, private = Connection(server.url), Connection(read_server_file(server.data).url)
    count, n_envs = 24, 2
    try:
        sessions = []
        for connection in (public, private):
            status, _, login = connection.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate"})
            assert status == 200, login
            sessions.append(login["session_key"])
        answered_here, actions = 0, {0: [], 1: []}
        for side, connection in enumerate((public, private)):
            for seq in range(1, count + 1):
                status, headers, reply = connection.post("/shepherd/env/", {
                    "session_key": sessions[side], "obs": image(seq), "reward": 0.0, "done": False, "seq": seq})
                assert status == 200 and reply["action"] in range(4), reply
                actions[side].append(reply["action"])
                if side == 0:
                    answered_here += SNAPSHOT_HEADER in headers
                    if SNAPSHOT_HEADER in headers:
                        assert int(headers[SNAPSHOT_HEADER]) == reply["policy_version"]
                if seq == 1 and side == 0:
                    time.sleep(2.0)  # the front end fetches the greedy file (built by the learner) the login noted
        assert answered_here >= count - 2, answered_here
        assert len(set(actions[1])) > 1 and actions[0] == actions[1], actions
        assert deploy_steps(server) == 2 * (count - 1)

        status, _, login = public.post("/shepherd/login_user/", {"apikey": server.api_key, "mode": "evaluate",
                                                                 "n_envs": n_envs})
        assert status == 200, login
        before = samples(server, "shepherd_snapshot_steps_total ")
        for seq in range(1, 9):
            obs = [image(seq + 11 * env) for env in range(n_envs)]
            status, headers, reply = public.post("/shepherd/env/", {
                "session_key": login["session_key"], "obs": obs, "reward": [0.0] * n_envs,
                "terminated": [False] * n_envs, "truncated": [False] * n_envs, "seq": seq})
            assert status == 200 and SNAPSHOT_HEADER in headers, (seq, reply)
            assert reply["actions"] == [actions[1][seq + 11 * env - 1] for env in range(n_envs)]  # the head's
        assert samples(server, "shepherd_snapshot_steps_total ") == before + 8
    finally:
        public.close()
        private.close()
