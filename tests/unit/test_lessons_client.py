"""shepherd.client and lessons (docs/lessons.md): a config set on env.unwrapped (an unknown name refused in one
line) or through the user's function, before each episode's reset, for one env and for vector envs (against a
scripted server that announces configs as the protocol does)."""

import gymnasium as gym
import pytest

from shepherd.client import Client, VectorClient, apply_config, make_vector_env, run_env, run_vector_env


def test_apply_config_sets_attributes_of_the_unwrapped_env_and_refuses_an_unknown_name_in_one_line():
    env = gym.make("CartPole-v1")
    apply_config(env, {"length": 0.7, "force_mag": 12.0})
    assert env.unwrapped.length == 0.7 and env.unwrapped.force_mag == 12.0
    with pytest.raises(ValueError) as caught:
        apply_config(env, {"length": 0.3, "pole_colour": "red"})
    assert "'pole_colour'" in str(caught.value) and "\n" not in str(caught.value)
    assert env.unwrapped.length == 0.7  # nothing set when a name is refused
    seen = []
    apply_config(env, {"anything": 1}, lambda e, config: seen.append((e, config)))
    assert seen == [(env, {"anything": 1})]


class ScriptedSingle(Client):
    """Announces config k (length 0.1 * k) at login and when episode k - 1 ends; episodes are 3 steps."""

    def __init__(self):
        super().__init__("http://127.0.0.1:9", "key", retry_seconds=0)
        self.announced = 1
        self.t = 0

    def post(self, path, payload):
        if path == "/shepherd/login_user/":
            return {"ok": True, "session_key": "s", "next_episode_config": {"length": 0.1}}
        self.t += 1
        if payload["done"] or self.t == 4:
            self.t = 0
            self.announced += 1
            return {"action": None, "next_episode_config": {"length": 0.1 * self.announced}}
        return {"action": 0, "policy_version": 0}


def test_run_env_applies_each_announced_config_before_the_reset():
    client = ScriptedSingle()
    applied = []
    run_env(client, "CartPole-v1", seed=0, episodes=3, apply=lambda env, config: applied.append(config["length"]))
    assert applied == pytest.approx([0.1, 0.2, 0.3])


class ScriptedVector(VectorClient):
    """Announces a distinct length for each env's next reset: at login, and whenever the env's episode began;
    checks that an env that reset inside a step did so with the length it was told."""

    def __init__(self, env, n):
        super().__init__("http://127.0.0.1:9", "key", n, retry_seconds=0)
        self.env, self.counter, self.pending, self.checked = env, 0, [], 0

    def fresh(self):
        self.counter += 1
        return {"length": 0.3 + 0.01 * self.counter}

    def post(self, path, payload):
        n = self.n_envs
        if path == "/shepherd/login_user/":
            self.pending = [self.fresh() for _ in range(n)]
            self.first = True
            return {"ok": True, "session_key": "s", "n_envs": n, "next_episode_configs": list(range(n)),
                    "configs": list(self.pending)}  # docs/lessons.md: indices into the reply's configs
        started = [self.first or t or u for t, u in zip(payload["terminated"], payload["truncated"])]
        self.first = False
        announced, configs = [None] * n, []
        for i, begun in enumerate(started):
            if begun:
                assert self.env.envs[i].unwrapped.length == self.pending[i]["length"], i
                self.checked += 1
                self.pending[i] = self.fresh()
                announced[i] = len(configs)
                configs.append(self.pending[i])
        return {"actions": [1 if obs[2] > 0 else 0 for obs in payload["obs"]], "policy_version": 0,
                "next_episode_configs": announced, "episode_configs": [None] * n, "configs": configs}


def test_run_vector_env_applies_each_envs_config_at_its_own_reset():
    env = make_vector_env("CartPole-v1", 2)
    client = ScriptedVector(env, 2)
    run_vector_env(client, env, seed=0, episodes=6)
    assert client.checked >= 2 + 6
    env.close()


def test_run_sb3_vec_env_applies_each_envs_config_through_its_lesson_config_wrapper():
    from stable_baselines3.common.vec_env import DummyVecEnv

    from shepherd.client import lesson_config, run_sb3_vec_env

    venv = DummyVecEnv([lambda: lesson_config(gym.make("CartPole-v1")) for _ in range(2)])
    client = ScriptedVector(venv, 2)
    run_sb3_vec_env(client, venv, seed=0, episodes=6)
    assert client.checked >= 2 + 6
    bare = DummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    with pytest.raises(ValueError, match="lesson_config"):
        run_sb3_vec_env(ScriptedVector(bare, 2), bare, seed=0, episodes=1)
