"""A selector's skill that its preset does not declare, found among the data folder's agents of the preset's owner
(docs/levels.md): served from its stored record and checkpoint and used as a skill; the level's checks apply to it
once the data folder is seen, each problem named by its key path."""

from __future__ import annotations

import pytest

from shepherd.cli.main import main
from shepherd.graph import AgentSpec, GraphManager, InvalidPreset, Schedule
from shepherd.http import CREATED_KEYS, GRAPH, ServerConfig, create_app
from shepherd.storage import Store
from tests.http.test_levels import OBS, TINY, login, make_client, post, run

OBS_RIGHT = [0.0, 1.0]
SCHEDULE = Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1)


def pilot_graph(skills=("balance",), obs=OBS):
    """A preset that declares only the selector: its skills are the data folder's."""
    level = {"skills": list(skills), "option_steps": 3}
    return GraphManager(owner="tests", agents=[AgentSpec("pilot", "PPO", obs, len(skills), TINY, level=level)],
                        schedule=SCHEDULE)


async def train_balance(aiohttp_client, tmp_path):
    """A first graph trains agent "balance" (16 steps: two PPO rollouts) and saves it in the data folder."""
    client = await make_client(aiohttp_client, tmp_path, GraphManager(
        owner="tests", agents=[AgentSpec("balance", "PPO", OBS, 2, TINY)], schedule=SCHEDULE))
    await run(client, (await login(client, "balance"))["session_key"], OBS_RIGHT, 16)
    balance = client.server.app[GRAPH].runtime("balance")
    await client.close()  # the server stops: the agent is checkpointed
    assert balance.model_path.exists()
    return balance.learner.policy_version



async def test_a_skill_of_the_data_folder_is_served_from_its_checkpoint_and_answers_the_selectors_steps(
        aiohttp_client, tmp_path):
    version = await train_balance(aiohttp_client, tmp_path)
    assert version > 0
    app = create_app(ServerConfig(pilot_graph(), tmp_path / "data", only_preset=True))  # still serves the skill
    client = await aiohttp_client(app)
    client.keys = app[CREATED_KEYS]
    assert set(client.keys) == {"pilot"}  # balance was the data folder's: no new key
    replies = await run(client, (await login(client, "pilot"))["session_key"], OBS_RIGHT, 5)
    assert [reply["option"] for reply in replies[:-1]] == ["balance"] * 5
    assert all(reply["action"] in (0, 1) for reply in replies[:-1]) and replies[-1] == {"action": None, "option": None}
    graph = app[GRAPH]
    balance = graph.served.by_name(graph.store.find_user("tests").id, "balance").runtime
    assert balance.learner.policy_version == version and balance.tracker.steps == 16  # resumed, frozen
    assert graph.not_started == []


def test_a_skill_neither_in_the_preset_nor_in_the_data_folder_is_refused_when_served(tmp_path):
    store = Store(tmp_path / "data")
    try:
        with pytest.raises(InvalidPreset) as raised:
            pilot_graph(("ghost",), OBS).create_graph(store)
        assert str(raised.value) == ("agents[0].level.skills[0]: unknown skill 'ghost': neither an agent of this "
                                     "preset nor an agent of the preset's owner in the data folder is named so")
        owner = store.ensure_user("tests")
        store.add_agent(owner.id, "wide", "PPO", [[3], -1.0, 1.0], 2, TINY)
        other = store.add_user("other")
        store.add_agent(other.id, "balance", "PPO", OBS, 2, TINY)  # another owner's: not this preset's skill
        with pytest.raises(InvalidPreset) as raised:
            pilot_graph(("wide", "balance"), OBS).create_graph(store)
        found = [(problem.path, problem.message) for problem in raised.value.problems]
        assert [path for path, _ in found] == ["agents[0].level.skills[0]", "agents[0].level.skills[1]"]
        assert "skill 'wide' (of the data folder) observes [[3], -1.0, 1.0]" in found[0][1]
        assert "unknown skill 'balance'" in found[1][1]
        assert store.find_agent(owner.id, "pilot") is None  # refused before anything was added
    finally:
        store.close()


async def test_run_py_check_says_a_skill_of_the_data_folder_is_checked_there_or_when_served(
        aiohttp_client, tmp_path, capsys):
    await train_balance(aiohttp_client, tmp_path)
    preset = tmp_path / "pilot.yaml"
    agent = "{name: pilot, algorithm: PPO, observation_space: [[2], -1.0, 1.0], action_space: 1, level: {skills: [%s]}}"
    preset.write_text("owner: tests\nagents:\n  - " + agent % "balance" + "\n")
    assert main(["check", str(preset)]) == 0
    assert ("skills of the data folder (not in the preset): balance; not checked here (give --data DIR), checked "
            "when the preset is served") in capsys.readouterr().out
    assert main(["check", str(preset), "--data", str(tmp_path / "data")]) == 0
    assert f"balance; checked in {tmp_path / 'data'}" in capsys.readouterr().out
    preset.write_text("owner: tests\nagents:\n  - " + agent % "ghost" + "\n")
    assert main(["check", str(preset), "--data", str(tmp_path / "data")]) == 2
    assert "pilot.yaml: agents[0].level.skills[0]: unknown skill 'ghost'" in capsys.readouterr().err


async def test_a_selector_over_a_data_folder_skill_is_refused_once_the_skill_is_deleted(aiohttp_client, tmp_path):
    await train_balance(aiohttp_client, tmp_path)
    client = await make_client(aiohttp_client, tmp_path, pilot_graph())
    graph = client.server.app[GRAPH]
    balance = graph.served.by_name(graph.store.find_user("tests").id, "balance")
    assert (await login(client, "pilot"))["agent"] == "pilot"
    await graph.served.delete(balance.record.id)
    refused = await post(client, "/shepherd/login_user/", {"apikey": client.keys["pilot"]}, status=503)
    assert "its skill balance is not served here" in refused["error"]
