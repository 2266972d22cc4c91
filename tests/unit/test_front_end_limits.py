"""A front end checks the steps it answers from its snapshot with the head's bound on rewards (`run.py
--max-reward`): the supervisor hands it over on the front end's command line (it checked them with the default
1e6 while the head took what --max-reward allowed)."""

import asyncio

import pytest

from shepherd.front import __main__ as front_main
from shepherd.front.supervisor import FrontEnds, FrontEndSettings


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


def test_a_front_end_takes_the_bound_it_is_given():
    """The bound travels on the front end's config to its snapshot cache, which checks the steps it answers."""
    args = front_main.parse_args(["--head", "http://127.0.0.1:8", "--host", "127.0.0.1", "--port", "9",
                                  "--max-reward", "2.5e9"])
    assert front_main.front_config(args, "token").max_reward == 2.5e9


def test_a_greedy_step_beyond_the_bound_is_not_answered_from_a_snapshot():
    """`_greedy_item` parses with the bound it is given: a reward over it is refused (the step then goes to the
    head, which answers it 400), one within it is not."""
    from gymnasium import spaces as gym_spaces

    from shepherd.front.snapshot_cache import _greedy_item

    class Snapshot:  # what _greedy_item reads of one
        observation_space = gym_spaces.Box(-1, 1, (2,))
        action_space = gym_spaces.Discrete(2)
        mask_space = None
        check_mask = None
        version = 3

        def act(self, obs, mask):
            return 1

    step = {"session_key": "k", "obs": [0.0, 0.5], "reward": 100.0, "done": False}
    with pytest.raises(ValueError, match="100"):
        _greedy_item("k", step, Snapshot(), None, 10.0)
    assert _greedy_item("k", step, Snapshot(), None, 1000.0) is not None
