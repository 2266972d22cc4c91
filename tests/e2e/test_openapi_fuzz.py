"""Property-based fuzz of a running server against its OpenAPI description (schemathesis).

A bounded number of generated requests per operation; every response must be one the description
documents (status, headers, body schema) and none may be a 5xx. Some requests carry the real API key or
a live session key and a well-shaped observation, so the fuzz reaches past authentication and parsing.

The test counts the cases it ran (by operation and by status) and prints them (``pytest -s`` shows them), records
them as the test's ``fuzz_cases`` property (in a JUnit XML report) and, if ``SHEPHERD_FUZZ_REPORT`` names a
file, writes them there as JSON. CI runs 30 cases per operation; ``SHEPHERD_FUZZ_CASES=10000`` runs at least
that many in all (spread evenly over the operations), for a long run by hand:

    SHEPHERD_FUZZ_CASES=10000 SHEPHERD_FUZZ_REPORT=/tmp/fuzz.json .venv/bin/python -m pytest -s \
        tests/e2e/test_openapi_fuzz.py
"""

import collections
import json
import math
import os
import random
import time
from pathlib import Path

import pytest
import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance
from hypothesis import HealthCheck, given, settings

from shepherd.graph import GraphManager
from shepherd.loading import load_preset
from shepherd.http import ServerConfig
from shepherd.http.state import LOGIN_THROTTLE
from tests.conftest import TEST_PRESETS, ServerThread

LIVE: dict = {}
CHOICE = random.Random(5)
CASES_PER_OPERATION = 30  # in CI
LONG_RUN_CASES = int(os.environ.get("SHEPHERD_FUZZ_CASES") or 0)  # in all, for a long run by hand
REPORT = os.environ.get("SHEPHERD_FUZZ_REPORT")
ACTING_PATHS = ("/shepherd/policy/", "/shepherd/experience/")  # a client-acting session's calls


@pytest.fixture(scope="module")
def live_server(tmp_path_factory):
    config = ServerConfig(GraphManager.of(load_preset(str(TEST_PRESETS / "tiny_ppo.py"))), tmp_path_factory.mktemp("fuzz") / "data")
    thread = ServerThread(config).start_and_wait()
    # the fuzz fails logins on purpose, hundreds of times: do not slow it down as a guesser
    thread.server.app[LOGIN_THROTTLE].free = 10 ** 9
    LIVE["apikey"] = thread.server.created_keys["tiny"]
    LIVE["admin"] = thread.server.admin_token
    LIVE["agent_id"] = next(iter(thread.config.graph_manager.runtimes))
    yield thread
    thread.stop()
    LIVE.clear()


@schemathesis.hook
def map_body(ctx, body):
    """Now and then use real credentials and a well-shaped observation instead of random ones."""
    if not isinstance(body, dict) or not LIVE:
        return body
    if "apikey" in body and CHOICE.random() < 0.6:
        body["apikey"] = LIVE["apikey"]
    if "token" in body and CHOICE.random() < 0.6:  # a dashboard sign-in
        body["token"] = LIVE["admin"] if CHOICE.random() < 0.7 else LIVE["apikey"]
    operation = getattr(ctx.operation, "path", None)
    if operation in ACTING_PATHS and "session_key" in body and CHOICE.random() < 0.6:
        body["session_key"] = _live_acting_session(CHOICE.randint(1, 2))
    elif "session_key" in body and CHOICE.random() < 0.6:
        if isinstance(body.get("reward"), list) or CHOICE.random() < 0.3:  # a vector session of 1 to 3 envs
            n = CHOICE.randint(1, 3)
            body["session_key"] = _live_session(n)
            if CHOICE.random() < 0.7:
                body["obs"] = [[CHOICE.uniform(-1, 1) for _ in range(4)] for _ in range(n)]
            if CHOICE.random() < 0.5:  # a well-shaped vector step, now and then with an end
                ended = [CHOICE.random() < 0.3 for _ in range(n)]
                body.update(reward=[CHOICE.uniform(-1, 1) for _ in range(n)], terminated=ended,
                            truncated=[False] * n,
                            final_obs=[[0.0, 0.1, 0.2, 0.3] if end else None for end in ended])
                body.pop("done", None)
        else:
            body["session_key"] = _live_session()
            if CHOICE.random() < 0.7:
                body["obs"] = [CHOICE.uniform(-1, 1) for _ in range(4)]
    return body


@schemathesis.hook
def map_path_parameters(ctx, path_parameters):
    """Half the time the real agent's id, so the fuzz reaches past "no such agent" (404)."""
    if isinstance(path_parameters, dict) and "agent_id" in path_parameters and LIVE and CHOICE.random() < 0.5:
        path_parameters["agent_id"] = LIVE["agent_id"]
    return path_parameters


def _live_session(n_envs: int | None = None) -> str:
    """A new session of the real key (a vector session of ``n_envs`` envs if given); the previous one is logged
    out, so that a long run does not reach the agent's session limit (a case may have logged it out already:
    that reply does not matter)."""
    import requests

    if previous := LIVE.pop("session", None):
        requests.post(LIVE["url"] + "/shepherd/logout/", json={"session_key": previous}, timeout=10)
    login = {"apikey": LIVE["apikey"]} if n_envs is None else {"apikey": LIVE["apikey"], "n_envs": n_envs}
    reply = requests.post(LIVE["url"] + "/shepherd/login_user/", json=login, timeout=10)
    LIVE["session"] = reply.json()["session_key"]
    return LIVE["session"]


def _live_acting_session(n_envs: int) -> str:
    """A new client-acting session of the real key, of ``n_envs`` envs, ended after its case (`_end_acting`)."""
    import requests

    reply = requests.post(LIVE["url"] + "/shepherd/login_user/",
                          json={"apikey": LIVE["apikey"], "acting": "client", "n_envs": n_envs}, timeout=10)
    LIVE["acting_session"] = reply.json()["session_key"]
    return LIVE["acting_session"]


def _end_acting(response) -> None:
    """End the client-acting session a case used or opened: one holds rollout segments of the on-policy agent
    until it uploads or ends, and the steps of the fuzz's other sessions would wait for them."""
    import requests

    keys = [LIVE.pop("acting_session", None)]
    if response.request.path_url == "/shepherd/login_user/" and response.status_code == 200:
        reply = response.json()
        keys.append(reply["session_key"] if reply.get("acting") == "client" else None)
    for key in filter(None, keys):
        requests.post(LIVE["url"] + "/shepherd/logout/", json={"session_key": key}, timeout=10)


@pytest.mark.timeout(900 + LONG_RUN_CASES)
def test_every_response_matches_the_description_and_none_is_a_5xx(live_server, record_property):
    LIVE["url"] = live_server.server.url
    schema = schemathesis.openapi.from_url(live_server.server.url + "/shepherd/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/shepherd/login_user/", "/shepherd/env/", "/shepherd/logout/", *ACTING_PATHS} <= paths
    assert {"/shepherd/admin/api/agents", "/shepherd/admin/api/agents/{agent_id}/restart"} <= paths
    per_operation = math.ceil(LONG_RUN_CASES / len(operations)) if LONG_RUN_CASES else CASES_PER_OPERATION
    cases: collections.Counter[tuple[str, str]] = collections.Counter()  # (operation, status)
    started = time.monotonic()
    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=per_operation, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def fuzz(case):
            headers = {}
            if operation.path.startswith("/shepherd/admin/api/") and CHOICE.random() < 0.8:
                # mostly the admin token or the agent's key, so the fuzz gets past authentication
                token = LIVE["admin"] if CHOICE.random() < 0.7 else LIVE["apikey"]
                headers["Authorization"] = f"Bearer {token}"
            response = case.call(headers=headers)
            _end_acting(response)
            cases[operation.label, str(response.status_code)] += 1
            assert response.status_code < 500, f"{operation.label}: {response.status_code} {response.text}"
            if operation.path.endswith("/admin-token") and response.status_code == 200:
                LIVE["admin"] = response.json()["token"]  # the fuzz replaced it: use the new one
            # whether an observation is valid depends on the agent's spaces, known only at run time, so
            # "schema-valid data must be accepted" cannot hold for env/; the description documents 400
            excluded = [positive_data_acceptance]
            case.validate_response(response, excluded_checks=excluded)

        fuzz()
    total = sum(cases.values())
    statuses: collections.Counter[str] = collections.Counter()
    by_operation: dict[str, dict[str, int]] = {}
    for (label, status), count in sorted(cases.items()):
        statuses[status] += count
        by_operation.setdefault(label, {})[status] = count
    figures = {"cases": total, "operations": len(operations), "max_examples_per_operation": per_operation,
               "seconds": round(time.monotonic() - started, 1), "by_status": dict(sorted(statuses.items())),
               "by_operation": by_operation}
    print(f"\nschemathesis: {total} cases over {len(operations)} operations in {figures['seconds']} s; "
          f"statuses {json.dumps(figures['by_status'])}")
    record_property("fuzz_cases", total)
    if REPORT:
        Path(REPORT).write_text(json.dumps(figures, indent=2))
    assert total >= (LONG_RUN_CASES or len(operations) * 10), figures  # the fuzz really ran
