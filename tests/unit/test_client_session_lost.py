"""The drivers log in again only when a request to the server says its session was lost (401, a lost
connection: `shepherd.client.relogin.requested`); an env's own ``OSError`` (a missing file, a dead device) is
raised, not taken for a lost session (it looped for good, logging in again each time). Sessions lost in a row
are logged into again after longer and longer waits, and the tenth is raised (`shepherd.client.relogin.Losses`)."""

from __future__ import annotations

import gymnasium as gym
import pytest

from shepherd.client.connection import ShepherdError
from shepherd.client.loops import run_env
from shepherd.client.relogin import SessionLost, requested
from shepherd.client.roles import RolesClient, run_aec, run_aec_envs, run_parallel


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


class Evicted(RolesClient):
    """A client whose every session is lost at its first step (a server that loses every session)."""

    def __init__(self):
        self.logins = 0
        self.session_key = "key"
        self.next_episode_config = None
        self.n_envs = 2

    def login_again(self):
        self.logins += 1

    def login(self, mode="train", n_envs=None):
        self.login_again()

    def step(self, *args, **kwargs):
        raise ShepherdError(401, "unknown or expired session_key")

    step_envs = step


class OneTurn:
    """An AEC env of one agent whose episodes never end on their own."""

    agents = ["a"]

    def reset(self, seed=None):
        pass

    def agent_iter(self):
        while True:
            yield "a"

    def last(self):
        return [0.0], 0.0, False, False, {}

    def step(self, action):
        pass


def sessions_lost_in_a_row(drive, monkeypatch) -> tuple[Evicted, list[float], str]:
    from shepherd.client import relogin

    client, waits = Evicted(), []
    monkeypatch.setattr(relogin.time, "sleep", waits.append)
    with pytest.raises(SessionLost) as raised:
        drive(client)
    return client, waits, str(raised.value)


@pytest.mark.parametrize("drive", [
    lambda client: run_env(client, "CartPole-v1", episodes=1),
    lambda client: run_aec(OneTurn(), client, episodes=1),
    lambda client: run_aec_envs([OneTurn(), OneTurn()], client, episodes=1),
], ids=["run_env", "run_aec", "run_aec_envs"])
def test_sessions_lost_in_a_row_wait_longer_each_time_and_the_tenth_is_raised(drive, monkeypatch):
    """A driver logged in again at once, for good, when every session was lost at its first step: it asked the
    server as fast as it answered. Now each loss in a row waits twice as long as the one before (0.5 s up to 30 s),
    and the tenth in a row is raised, naming its cause."""
    client, waits, message = sessions_lost_in_a_row(drive, monkeypatch)
    assert waits == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert "10 sessions lost in a row" in message and "unknown or expired session_key" in message
    assert client.logins == 9  # after each of the first nine


def test_an_episode_ended_between_lost_sessions_starts_the_waits_over(monkeypatch):
    from shepherd.client import relogin

    losses, lost, slept = relogin.Losses(), SessionLost("401"), []
    monkeypatch.setattr(relogin.time, "sleep", slept.append)
    losses.lost(lost)
    losses.lost(lost)
    losses.ended()
    losses.lost(lost)
    assert slept == [0.0, 0.5, 0.0]
