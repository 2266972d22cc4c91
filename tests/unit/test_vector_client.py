"""The vector client without a server: how a gymnasium SAME_STEP vector step and an SB3 VecEnv step become
the protocol's body, the bodies the clients send, and the drive loop's episodes, seeds and lost sessions
(against a scripted server that answers `post`)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import DummyVecEnv

from shepherd.client import connection as client_module
from shepherd.client import (Client, ShepherdError, VectorClient, first_vector_step, gymnasium_vector_step,
                             make_vector_env, run_sb3_vec_env, run_vector_env, sb3_vec_env_step)


def lean(obs) -> int:
    """Push the cart the way the pole leans: episodes of some length, ending both ways in CartPole."""
    return 1 if obs[2] > 0 else 0


class ScriptedServer(VectorClient):
    """A VectorClient whose `post` is answered here: it records every body and answers each step with the
    `lean` action of every observation; ``refuse`` maps the number of a step request (from 1) to the
    status it is refused with."""

    def __init__(self, n_envs: int, refuse: dict[int, int] | None = None) -> None:
        super().__init__("http://127.0.0.1:9", "key", n_envs, retry_seconds=0)
        self.refuse = refuse or {}
        self.logins: list[dict] = []
        self.steps: list[dict] = []

    def post(self, path, payload):
        if path == "/shepherd/login_user/":
            self.logins.append(payload)
            return {"ok": True, "session_key": f"session-{len(self.logins)}", "n_envs": payload["n_envs"]}
        if path == "/shepherd/logout/":
            return {"ok": True}
        self.steps.append(dict(payload))
        if len(self.steps) in self.refuse:
            raise ShepherdError(self.refuse[len(self.steps)], "refused by the script")
        return {"actions": [lean(obs) for obs in payload["obs"]]}


def reference_returns(seed: int, episodes: int, **kwargs) -> list[float]:
    """One CartPole played alone with `lean`: seeded once, then reset without a seed after each episode,
    as a vector env resets its copies."""
    env, returns = gym.make("CartPole-v1", **kwargs), []
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while len(returns) < episodes:
        obs, reward, terminated, truncated, _ = env.step(lean(obs))
        total += float(reward)
        if terminated or truncated:
            returns.append(total)
            obs, total = env.reset()[0], 0.0
    return returns


def test_a_same_step_vector_step_carries_the_final_observation_and_the_next_episodes_first():
    env = make_vector_env("CartPole-v1", 3)
    alone = gym.make("CartPole-v1")  # env 1 of the vector env, played alongside it
    obs, _ = env.reset(seed=10)
    body = first_vector_step(obs, 3)
    assert body == {"obs": obs.tolist(), "reward": [0.0] * 3, "terminated": [False] * 3, "truncated": [False] * 3}
    single, _ = alone.reset(seed=11)
    assert body["obs"][1] == single.tolist()
    while True:
        body = gymnasium_vector_step(*env.step(np.array([1, 1, 1])))
        single, _, terminated, _, _ = alone.step(1)
        if terminated:
            break
        assert body["obs"][1] == single.tolist() and body["terminated"][1] is False
    assert body["terminated"][1] is True and body["truncated"][1] is False and body["reward"][1] == 1.0
    assert body["final_obs"][1] == single.tolist()  # the ended episode's last observation ...
    assert body["obs"][1] == alone.reset()[0].tolist()  # ... and already the next episode's first
    assert [item is None for item in body["final_obs"]] == [not (a or b) for a, b in
                                                            zip(body["terminated"], body["truncated"])]
    env.close()


def test_a_time_limit_is_truncated_and_not_terminated():
    env = make_vector_env("CartPole-v1", 2, env_kwargs={"max_episode_steps": 3})
    env.reset(seed=0)
    bodies = [gymnasium_vector_step(*env.step(np.array([0, 1]))) for _ in range(3)]
    assert [body["truncated"] for body in bodies] == [[False, False], [False, False], [True, True]]
    assert bodies[2]["terminated"] == [False, False] and all(item is not None for item in bodies[2]["final_obs"])
    assert all("final_obs" not in body for body in bodies[:2])  # left out while no env ended
    env.close()


def test_gymnasiums_default_next_step_reset_is_refused_with_the_mode_to_use():
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    with pytest.raises(ValueError, match="SAME_STEP"):
        run_vector_env(ScriptedServer(2), env)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="SAME_STEP"):
        while True:  # the translation alone notices too: an end without a final observation
            gymnasium_vector_step(*env.step(np.array([1, 1])))
    env.close()


def test_dict_observations_become_one_object_per_env():
    batch = {"position": np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32), "mode": np.array([0, 2])}
    assert first_vector_step(batch, 2)["obs"] == [{"position": [1.0, 2.0], "mode": 0},
                                                  {"position": [3.0, 4.0], "mode": 2}]
    with pytest.raises(ValueError, match="batch of 3"):
        first_vector_step(batch, 3)


def test_an_sb3_vec_env_step_reads_terminal_observation_and_the_time_limit_flag():
    obs = np.zeros((3, 4), dtype=np.float32)
    infos = [{"terminal_observation": np.ones(4, dtype=np.float32), "TimeLimit.truncated": True},
             {}, {"terminal_observation": np.full(4, 2.0, dtype=np.float32), "TimeLimit.truncated": False}]
    body = sb3_vec_env_step(obs, np.array([1.0, 0.5, -1.0], dtype=np.float32), np.array([True, False, True]), infos)
    assert body == {"obs": [[0.0] * 4] * 3, "reward": [1.0, 0.5, -1.0], "terminated": [False, False, True],
                    "truncated": [True, False, False], "final_obs": [[1.0] * 4, None, [2.0] * 4]}
    assert "final_obs" not in sb3_vec_env_step(obs, np.zeros(3), np.zeros(3, dtype=bool), [{}, {}, {}])
    with pytest.raises(ValueError, match="infos\\[1\\] has no 'terminal_observation'"):
        sb3_vec_env_step(obs, np.zeros(3), np.array([False, True, False]), [{}, {}, {}])


@pytest.mark.parametrize("kwargs", [{}, {"max_episode_steps": 20}], ids=["terminations", "time limits"])
def test_an_sb3_dummy_vec_env_and_a_gymnasium_vector_env_send_the_same_bodies(kwargs):
    gymnasium_side, sb3_side = ScriptedServer(3), ScriptedServer(3)
    returns = run_vector_env(gymnasium_side, make_vector_env("CartPole-v1", 3, env_kwargs=kwargs), seed=4,
                             episodes=12)
    venv = DummyVecEnv([lambda: gym.make("CartPole-v1", **kwargs)] * 3)
    assert run_sb3_vec_env(sb3_side, venv, seed=4, episodes=12) == returns
    assert sb3_side.steps == gymnasium_side.steps
    assert any(body.get("final_obs") for body in sb3_side.steps)


def test_the_drive_collects_each_envs_returns_seeded_seed_plus_i_until_the_episodes_over_all_envs():
    server = ScriptedServer(3)
    returns = run_vector_env(server, make_vector_env("CartPole-v1", 3), seed=7, episodes=10)
    for i, env_returns in enumerate(returns):
        assert env_returns == reference_returns(7 + i, len(env_returns))
    total = sum(map(len, returns))
    assert total >= 10
    assert sum(map(ends, server.steps[:-1])) < 10  # stopped at the step that reached 10, not later
    assert [body["seq"] for body in server.steps] == list(range(1, len(server.steps) + 1))
    assert server.logins == [{"apikey": "key", "mode": "train", "n_envs": 3}]


def ends(body: dict) -> int:
    return sum(a or b for a, b in zip(body["terminated"], body["truncated"]))


def recorded_returns(steps: list[dict], refused: int, n_envs: int) -> list[list[float]]:
    """Each env's returns as a server records them from these step bodies: the refused one (a number from
    1) recorded nothing, and a new session key starts every env's episode over."""
    returns: list[list[float]] = [[] for _ in range(n_envs)]
    totals, session = [0.0] * n_envs, None
    for number, body in enumerate(steps, 1):
        if body["session_key"] != session:
            totals, session = [0.0] * n_envs, body["session_key"]
        if number == refused:
            continue
        for i in range(n_envs):
            totals[i] += body["reward"][i]
            if body["terminated"][i] or body["truncated"][i]:
                returns[i].append(totals[i])
                totals[i] = 0.0
    return returns


def test_a_lost_session_logs_in_again_and_starts_every_env_over_counting_only_answered_steps():
    rehearsal = ScriptedServer(2)  # the same seed plays the same steps: find a step that ends an episode
    run_vector_env(rehearsal, make_vector_env("CartPole-v1", 2), seed=0, episodes=6)
    lost = next(number for number, body in enumerate(rehearsal.steps, 1) if number > 10 and ends(body))
    server = ScriptedServer(2, refuse={lost: 401})
    returns = run_vector_env(server, make_vector_env("CartPole-v1", 2), seed=0, episodes=12, mode="evaluate")
    assert server.steps[lost - 1] == rehearsal.steps[lost - 1]  # the refused step ended an episode ...
    assert returns == recorded_returns(server.steps, lost, 2)  # ... which is not counted, nor its partial ones
    assert [login["mode"] for login in server.logins] == ["evaluate", "evaluate"]
    after = server.steps[lost]  # the first step of the new session: every env's reset observation, unseeded
    assert after["session_key"] == "session-2" and after["seq"] == 1
    assert after["reward"] == [0.0, 0.0] and after["terminated"] == after["truncated"] == [False, False]
    assert after["obs"] != server.steps[0]["obs"]
    assert sum(map(len, returns)) >= 12


def test_other_refusals_end_the_drive():
    with pytest.raises(ShepherdError) as caught:
        run_vector_env(ScriptedServer(2, refuse={3: 400}), make_vector_env("CartPole-v1", 2), episodes=5)
    assert caught.value.status == 400


def test_a_vector_step_is_retried_with_the_same_seq_and_body_after_503(monkeypatch):
    client = VectorClient("http://127.0.0.1:9", "key", 2)
    client.session_key = "s"
    sent, replies = [], [ShepherdError(503, "updating", retry_after=0.5), {"actions": [1, 0]}]

    def post(path, payload):
        sent.append((path, dict(payload)))
        reply = replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    monkeypatch.setattr(client, "post", post)
    monkeypatch.setattr(client_module.time, "sleep", lambda seconds: None)
    assert client.step([[0.0] * 4] * 2, [0.0, 0.0], [False, False], [False, False]) == [1, 0]
    assert sent[0] == sent[1] == ("/shepherd/env/", {"session_key": "s", "obs": [[0.0] * 4] * 2, "reward": [0.0, 0.0],
                                                      "terminated": [False, False], "truncated": [False, False],
                                                      "seq": 1})


def test_the_single_env_client_sends_the_body_it_always_sent(monkeypatch):
    client = Client("http://127.0.0.1:9", "key")
    sent = []
    monkeypatch.setattr(client, "post", lambda path, payload: sent.append((path, payload)) or {
        "session_key": "s", "action": 1})
    client.login("evaluate")
    assert client.step(np.zeros(2, dtype=np.float32), 0.0, False) == 1
    client.step([1.0, 2.0], 1.0, True, truncated=True)
    assert sent == [
        ("/shepherd/login_user/", {"apikey": "key", "mode": "evaluate"}),
        ("/shepherd/env/", {"session_key": "s", "obs": [0.0, 0.0], "reward": 0.0, "done": False, "info": {},
                            "seq": 1}),
        ("/shepherd/env/", {"session_key": "s", "obs": [1.0, 2.0], "reward": 1.0, "done": True, "info": {},
                            "truncated": True, "seq": 2})]


def test_a_vector_env_of_another_size_than_the_session_is_refused():
    with pytest.raises(ValueError, match="3 copies"):
        run_vector_env(ScriptedServer(2), make_vector_env("CartPole-v1", 3))
    with pytest.raises(ValueError, match="at least 1"):
        VectorClient("http://127.0.0.1:9", "key", 0)
