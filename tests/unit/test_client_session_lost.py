"""The drivers log in again only when a request to the server says its session was lost (401, a lost
connection: `shepherd.client.loops.requested`); an env's own ``OSError`` (a missing file, a dead device) is
raised, not taken for a lost session (it looped for good, logging in again each time)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from shepherd.client.connection import ShepherdError
from shepherd.client.loops import SessionLost, requested, run_env
from shepherd.client.roles import RolesClient, run_aec, run_parallel


class Relogging(RolesClient):
    """A client whose every step answers nothing, counting its logins again."""

    def __init__(self):
        self.logins = 0
        self.session_key = "key"
        self.next_episode_config = None

    def login_again(self):
        self.logins += 1
        if self.logins > 5:
            raise RuntimeError("looped: logged in again and again")

    def login(self, mode="train", n_envs=None):
        self.login_again()

    def step(self, *args, **kwargs):
        return 0 if args else {}


class BrokenAEC:
    def agent_iter(self):
        return iter([])

    def reset(self, seed=None):
        raise FileNotFoundError("roms/pong.bin")


class BrokenParallel:
    def reset(self, seed=None):
        raise FileNotFoundError("roms/pong.bin")


class BrokenDevice(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        raise BrokenPipeError("the device's pipe closed")


@pytest.mark.parametrize("run, env", [(run_aec, BrokenAEC), (run_parallel, BrokenParallel)])
def test_an_env_that_raises_oserror_is_not_a_lost_session_for_the_pettingzoo_drivers(run, env):
    client = Relogging()
    with pytest.raises(FileNotFoundError):
        run(env(), client, episodes=1)
    assert client.logins == 0


def test_an_env_that_raises_oserror_is_not_a_lost_session_for_run_env():
    gym.register("BrokenDevice-v0", entry_point=BrokenDevice)
    client = Relogging()
    try:
        with pytest.raises(BrokenPipeError):
            run_env(client, "BrokenDevice-v0", episodes=1)
    finally:
        gym.registry.pop("BrokenDevice-v0")
    assert client.logins == 0


def test_what_a_request_raises_is_a_lost_session_only_for_401_and_lost_connections():
    def raising(error):
        def call():
            raise error
        return call

    for error in (ShepherdError(401, "unknown or expired session_key"), ConnectionResetError("reset"),
                  ConnectionRefusedError("refused")):
        with pytest.raises(SessionLost):
            requested(raising(error))
    with pytest.raises(ShepherdError):
        requested(raising(ShepherdError(400, "obs.p0: outside the space")))
    assert requested(lambda: 7) == 7
