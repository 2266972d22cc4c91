"""A lesson config nested deeper than JSON replies can carry (issue 48, M9): ``POST /agents`` answers 400 and stores
nothing; and a stored record that cannot be shown (written into the store by other means) does not break the
listing of the others, on the admin API and on ``run.py agents list``."""

from __future__ import annotations

import pytest

from shepherd.http.state import STORE
from tests.http.test_admin_api import API, BOX4, SMALL_PPO


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def deep_lessons(depth: int = 300) -> list:
    return [{"name": "deep", "config": {"length": nested(depth)}}]


async def test_a_config_nested_300_deep_gets_400_and_nothing_is_stored(api):
    before = await api.get_json("/agents")
    reply = await api.add_agent("tests", "deep", lessons=deep_lessons(), status=400)
    assert "lessons[0].config.length" in reply["error"] and "deep" in reply["error"]
    assert await api.get_json("/agents") == before  # nothing stored: the listing answers, without it
    assert [agent["name"] for agent in before] == ["pole"]


async def test_a_config_nested_a_few_levels_is_taken(api):
    reply = await api.add_agent("tests", "shallow", lessons=deep_lessons(5))
    assert reply["lessons"][0]["config"]["length"] == nested(5)


@pytest.fixture
def unshowable(api):
    """An agent record in the store whose lessons no JSON reply can carry (written as an older server might have)."""
    store = api.app[STORE]
    record = store.add_agent(store.find_user("tests").id, "deep", "PPO", BOX4, 2, dict(SMALL_PPO))
    store._db.table("agents").update({"lessons": deep_lessons()}, doc_ids=[record.id])
    return record.id


async def test_a_stored_record_that_cannot_be_shown_does_not_break_the_listing(api, unshowable):
    agents = await api.get_json("/agents")
    assert [agent["name"] for agent in agents] == ["pole", "deep"]
    pole, deep = agents
    assert pole["phase"] != "failed" and pole["failure"] is None  # the others as ever
    assert deep["phase"] == "failed" and deep["failure"].startswith("its stored record cannot be shown: ")
    assert deep["lessons"] is None and deep["owner"] == "tests" and deep["algorithm"] == "PPO"
    assert await api.get_json(f"/agents/{unshowable}") == deep
    assert (await api.get_json("/agents", token=api.pole_key)) == [pole]  # a key holder sees its own


async def test_a_stored_record_that_cannot_be_shown_can_be_deleted(api, unshowable):
    reply = await api.client.post(API + f"/agents/{unshowable}/delete", headers=api.headers(None))
    assert reply.status == 200, await reply.text()
    assert [agent["name"] for agent in await api.get_json("/agents")] == ["pole"]


async def test_run_py_agents_list_shows_the_others(api, unshowable, capsys):
    from shepherd.cli.agents import list_agents
    from shepherd.admin import ADMIN as admin_principal
    from shepherd.http.state import ADMIN
    ops = api.app[ADMIN].acting_as(admin_principal)
    assert await list_agents(ops, None) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any("tests/pole" in line for line in lines)
    assert any("tests/deep" in line and "failed" in line for line in lines)
