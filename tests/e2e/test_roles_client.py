"""`shepherd.client.roles` over real HTTP: a PettingZoo-style AEC env (alternate turns, action masks in its
observations) and a parallel one (simultaneous turns, agents ending at different steps) played through an
environment with roles, duck-typed as PettingZoo's two APIs are; each role's episodes recorded on its agent."""

from __future__ import annotations

import numpy as np
import pytest

from shepherd.client.roles import RolesClient, run_aec, run_aec_envs, run_parallel, run_parallel_envs
from shepherd.environments import EnvironmentSpec
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.http import ServerConfig
from tests.conftest import ServerThread

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "n_envs": 2, "policy_kwargs": {"net_arch": [8]}}


class TakeTurns:
    """AEC: two players take 3 turns each (a move of 0..2, the mask allowing only 1 and 2), then both end; the
    player who moved more wins 1."""

    possible_agents = ["p0", "p1"]

    length = 6  # turns of an episode

    def reset(self, seed=None):
        self.turn, self.moves, self.done = 0, {"p0": 0, "p1": 0}, False
        self.rewards = {"p0": 0.0, "p1": 0.0}
        self.left = list(self.possible_agents)

    def agent_iter(self):
        while self.left:
            yield self.left[0] if self.done else self.possible_agents[self.turn % 2]

    def last(self):
        agent = self.left[0] if self.done else self.possible_agents[self.turn % 2]
        obs = {"observation": np.array([self.turn / 6, 0.5], dtype=np.float32),
               "action_mask": np.array([0, 1, 1], dtype=np.int8)}
        reward, self.rewards[agent] = self.rewards[agent], 0.0
        return obs, reward, self.done, False, {}

    def step(self, action):
        if self.done:
            assert action is None
            self.left.pop(0)
            return
        assert action in (1, 2), action  # the mask held
        agent = self.possible_agents[self.turn % 2]
        self.moves[agent] += action
        self.turn += 1
        if self.turn == self.length:
            self.done = True
            winner = max(self.moves, key=self.moves.get)
            self.rewards = {a: (1.0 if a == winner else 0.0) for a in self.possible_agents}


class Uneven(TakeTurns):
    """`TakeTurns` whose episodes last 2 to 7 turns as their seeds say: copies out of step with each other."""

    def reset(self, seed=None):
        super().reset(seed)
        self.length = 2 + (seed or 0) % 6


class Race:
    """Parallel: two runners step together; ``slow`` ends after 2 steps, ``fast`` after 4; reward 1 per step."""

    def reset(self, seed=None):
        self.t = 0
        self.agents = ["fast", "slow"]
        return {a: [0.0, 0.0] for a in self.agents}, {}

    def step(self, actions):
        assert set(actions) == set(self.agents), actions
        self.t += 1
        observations = {a: [self.t / 4, 0.0] for a in self.agents}
        ends = {"fast": self.t >= 4, "slow": self.t >= 2}
        terminations = {a: ends[a] for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        self.agents = [a for a in self.agents if not ends[a]]
        return observations, rewards, terminations, {a: False for a in observations}, {}


def turns_and_race(tmp_path, player: dict, runner: dict) -> tuple[GraphManager, ServerThread]:
    """A server of two environments: ``turns`` (alternate, the MaskablePPO ``player`` in both roles) and ``race``
    (simultaneous, the PPO ``runner`` in both)."""
    graph = GraphManager(owner="tests", agents=[AgentSpec("player", "MaskablePPO", OBS, 3, player),
                                                AgentSpec("runner", "PPO", OBS, 2, runner)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("turns", {"p0": "player", "p1": "player"}, "alternate"),
                                       EnvironmentSpec("race", {"fast": "runner", "slow": "runner"})))
    return graph, ServerThread(ServerConfig(graph, tmp_path / "data", requests_per_second_per_key=None)).start_and_wait()


def test_pettingzoo_style_aec_and_parallel_envs_play_through_environments_with_roles(tmp_path):
    graph, thread = turns_and_race(tmp_path, TINY, TINY)
    keys = thread.server.created_keys
    try:
        client = RolesClient(thread.server.url, keys["environment turns"])
        assert client.login()["turns"] == "alternate"
        returns = run_aec(TakeTurns(), client, episodes=3, seed=1)
        assert len(returns) == 3 and all(sum(r.values()) == 1.0 for r in returns)
        client.logout()
        client.close()
        client = RolesClient(thread.server.url, keys["environment race"])
        client.login()
        assert run_parallel(Race(), client, episodes=2) == [{"fast": 4.0, "slow": 2.0}] * 2
        client.logout()
        client.close()
        store = graph.store
        for name, count in (("player", 6), ("runner", 4)):
            runtime = graph.runtime(name)
            runtime.checkpoint().result(30)
            assert len(store.returns(runtime.record.id)) == count  # each role's episode, on its agent
        runner = sorted(r.value for r in store.returns(graph.runtime("runner").record.id))
        assert runner == [2.0, 2.0, 4.0, 4.0]  # every reward after a role's first step, summed
    finally:
        thread.stop()


def test_copies_of_pettingzoo_style_envs_play_as_one_vector_session(tmp_path):
    """`run_aec_envs` and `run_parallel_envs`: copies stepped together, each with its own turns and episodes (a
    copy whose episode ended begins the next in the next request), every ended episode's returns as `run_aec`'s
    and `run_parallel`'s, recorded on the agents; the requests are the copies' turns, not one per copy."""
    graph, thread = turns_and_race(tmp_path, {**TINY, "n_envs": 16}, {**TINY, "n_envs": 4})
    keys = thread.server.created_keys
    try:
        client = RolesClient(thread.server.url, keys["environment turns"], timeout=30, retry_seconds=0)
        assert client.login(n_envs=8)["n_envs"] == 8
        returns = run_aec_envs([Uneven() for _ in range(8)], client, episodes=200, seed=1)
        # 200 episodes of 2-7 moves fill rollouts of 128 rows while the copies' other roles wait for their turns
        # holding their segments (the copies are one session to the learner: its acts never wait for an update
        # that a waiting copy's segment holds back)
        assert len(returns) == 200 and all(sum(r.values()) == 1.0 for r in returns)
        assert graph.runtime("player").learner.policy_version >= 3  # 3 updates
        client.logout()
        client.close()
        client = RolesClient(thread.server.url, keys["environment race"])
        client.login(n_envs=2)
        assert run_parallel_envs([Race(), Race()], client, episodes=4) == [{"fast": 4.0, "slow": 2.0}] * 4
        assert client.seq == 10  # 4 steps and the ended agents' last step, twice
        client.logout()
        client.close()
        store = graph.store
        for name, count, unfinished in (("player", 400, 8), ("runner", 8, 0)):
            runtime = graph.runtime(name)
            runtime.checkpoint().result(30)
            # each role's ended episode, on its agent; a copy left unfinished may have ended one of its roles
            assert count <= len(store.returns(runtime.record.id)) <= count + unfinished
    finally:
        thread.stop()


def log_out_from_elsewhere(client: RolesClient) -> None:
    """End ``client``'s session on the server, as a restart or an expiry would: its next step is answered 401."""
    other = RolesClient(client.url, "unused")
    other.session_key = client.session_key
    other.logout()
    other.close()


def test_the_pettingzoo_drivers_log_in_again_after_a_lost_session_and_start_its_episodes_over(tmp_path):
    """A session lost mid-episode (401): `run_aec`, `run_aec_envs` and `run_parallel_envs` log in again as they
    logged in (the copies too) and play the episodes under way from their start; no episode is lost or doubled
    (before, the 401 ended the drivers, and `python -m shepherd.client --pettingzoo` exited 1)."""
    graph, thread = turns_and_race(tmp_path, {**TINY, "n_envs": 8}, {**TINY, "n_envs": 4})
    keys = thread.server.created_keys
    lost = []

    class Losing(TakeTurns):
        def step(self, action):
            if self.turn == 3 and not lost:  # once, mid-episode
                lost.append(client.session_key)
                log_out_from_elsewhere(client)
            super().step(action)

    class LosingRace(Race):
        def step(self, actions):
            if self.t == 1 and len(lost) == 2:
                lost.append(client.session_key)
                log_out_from_elsewhere(client)
            return super().step(actions)

    try:
        client = RolesClient(thread.server.url, keys["environment turns"], retry_seconds=10)
        client.login()
        returns = run_aec(Losing(), client, episodes=3, seed=1)
        assert len(returns) == 3 and all(sum(r.values()) == 1.0 for r in returns)
        assert lost and client.session_key not in lost  # a new session
        client.login(n_envs=4)
        lost.clear()
        returns = run_aec_envs([Losing() for _ in range(4)], client, episodes=12, seed=1)
        assert len(returns) == 12 and all(sum(r.values()) == 1.0 for r in returns)
        assert len(lost) == 1 and client.session_key not in lost and client.info["n_envs"] == 4
        client.logout()
        client.close()
        client = RolesClient(thread.server.url, keys["environment race"], retry_seconds=10)
        client.login(n_envs=2)
        lost[:] = ["first", "second"]
        assert run_parallel_envs([LosingRace(), LosingRace()], client, episodes=4) == [{"fast": 4.0, "slow": 2.0}] * 4
        assert len(lost) == 3 and client.session_key != lost[2] and client.info["n_envs"] == 2
        client.logout()
        client.close()
    finally:
        thread.stop()


def make_race(**kwargs):
    race = Race()
    race.given = kwargs
    made.append(race)
    return race


made: list[Race] = []


def test_the_client_command_drives_a_pettingzoo_env(tmp_path, monkeypatch, capsys):
    from shepherd.client.__main__ import main

    graph = GraphManager(owner="tests", agents=[AgentSpec("runner", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("race", {"fast": "runner", "slow": "runner"}),))
    thread = ServerThread(ServerConfig(graph, tmp_path / "data", requests_per_second_per_key=None)).start_and_wait()
    try:
        monkeypatch.setenv("SHEPHERD_API_KEY", thread.server.created_keys["environment race"])
        assert main(["--url", thread.server.url, "--pettingzoo", f"{__name__}:make_race", "--episodes", "3"]) == 0
        assert "3 episodes, mean return by role: fast 4.0, slow 2.0" in capsys.readouterr().out
        assert main(["--url", thread.server.url, "--pettingzoo", f"{__name__}:make_race", "--episodes", "4",
                     "--n-envs", "2"]) == 0
        assert "4 episodes over 2 copies, mean return by role: fast 4.0, slow 2.0" in capsys.readouterr().out
        assert main(["--url", thread.server.url, "--pettingzoo", f"{__name__}:make_race", "--episodes", "1",
                     "--env-kwargs", '{"laps": 2}']) == 0
        assert made[-1].given == {"laps": 2}  # FACTORY's keyword arguments
        with pytest.raises(SystemExit):  # an environment's key names no client
            main(["--url", thread.server.url, "--pettingzoo", f"{__name__}:make_race", "--client", "left"])
    finally:
        thread.stop()


def test_the_javascript_example_plays_a_simultaneous_environment(tmp_path):
    import os
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    assert node, "Node.js is needed for the JavaScript example (.ci/run installs it)"
    pennies = [[2], 0.0, 1.0]
    graph = GraphManager(owner="tests", agents=[AgentSpec("matcher", "PPO", pennies, 2, TINY),
                                                AgentSpec("mismatcher", "PPO", pennies, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("pennies", {"matcher": "matcher",
                                                                   "mismatcher": "mismatcher"}),))
    thread = ServerThread(ServerConfig(graph, tmp_path / "data", requests_per_second_per_key=None)).start_and_wait()
    try:
        env = {**os.environ, "SHEPHERD_URL": thread.server.url,
               "SHEPHERD_API_KEY": thread.server.created_keys["environment pennies"]}
        script = Path(__file__).resolve().parents[2] / "examples" / "roles_client.js"
        result = subprocess.run([node, str(script), "3"], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert len(lines) == 3 and all(line.startswith(f"episode {i + 1}: matcher ") for i, line in enumerate(lines))
        table = graph.runtime("matcher").ratings.table("pennies")
        assert table["matcher"].games == table["mismatcher"].games == 3  # every episode's outcome rated
    finally:
        thread.stop()
