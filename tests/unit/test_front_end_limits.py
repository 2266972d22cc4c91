"""A front end checks the steps it answers from its snapshot with the head's bound on rewards (`run.py
--max-reward`): the supervisor hands it over on the front end's command line (it checked them with the default
1e6 while the head took what --max-reward allowed)."""

import asyncio

import pytest

from shepherd.front import __main__ as front_main
from shepherd.front.supervisor import FrontEnds, FrontEndSettings
from shepherd.wire import steps


async def test_the_supervisor_starts_front_ends_with_the_heads_reward_bound(monkeypatch):
    started = []

    async def capture(*argv, **_):
        started.append(argv)
        raise OSError("not started in this test")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", capture)
    settings = FrontEndSettings(1, "127.0.0.1", 9, "http://127.0.0.1:8", "token", 1 << 20, 30.0, 75.0, 35.0,
                                max_reward=2.5e9)
    with pytest.raises(OSError):
        await FrontEnds(settings)._spawn()
    argv = list(started[0])
    assert argv[argv.index("--max-reward") + 1] == "2500000000.0"


def test_a_front_end_takes_the_bound_it_is_given(monkeypatch):
    monkeypatch.setattr(steps, "_max_reward", [steps.DEFAULT_MAX_REWARD])  # restored after the test
    monkeypatch.setattr(front_main, "serve", lambda args, token: asyncio.sleep(0))
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("token\n"))
    assert front_main.main(["--head", "http://127.0.0.1:8", "--host", "127.0.0.1", "--port", "9",
                            "--max-reward", "2.5e9"]) == 0
    assert steps.max_reward() == 2.5e9
