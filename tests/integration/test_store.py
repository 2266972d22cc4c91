"""The tinydb store on disk: records, hashed keys, atomic writes, O(1) returns, damage detection."""

import json
import os

import pytest

from shepherd.storage import AlreadyExists, EpisodeReturn, NotFound, Store, StoreError


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "data")
    yield store
    store.close()


def make_agent(store):
    user = store.ensure_user("alice")
    return store.add_agent(user.id, "thermostat", "PPO", [[2], 0, 40], 3, {"gamma": 0.9})


def test_users_agents_and_keys_persist_and_only_hashes_are_stored(tmp_path, store):
    agent = make_agent(store)
    key, record = store.add_api_key(agent.id, "laptop")
    assert len(key) >= 40 and store.agent_for_key(key) == agent
    assert store.agent_for_key(key + "x") is None
    store.close()
    assert key not in (tmp_path / "data" / "store.json").read_text()
    reopened = Store(tmp_path / "data")
    assert reopened.agent_for_key(key).name == "thermostat"
    assert reopened.agent(agent.id).parameters == {"gamma": 0.9}
    reopened.revoke_api_key(record.id)
    assert reopened.agent_for_key(key) is None
    reopened.close()
    assert Store(tmp_path / "data").agent_for_key(key) is None


def test_names_are_unique_and_missing_records_are_errors(store):
    agent = make_agent(store)
    with pytest.raises(AlreadyExists):
        store.add_user("alice")
    with pytest.raises(AlreadyExists):
        store.add_agent(agent.owner_id, "thermostat", "DQN", 2, 2, {})
    with pytest.raises(NotFound):
        store.agent(999)
    with pytest.raises(NotFound):
        store.add_api_key(999)


def test_appending_a_return_does_not_rewrite_the_store(tmp_path, store):
    agent = make_agent(store)
    store_file = tmp_path / "data" / "store.json"
    before = store_file.stat()
    for i in range(50):
        store.append_return(agent.id, EpisodeReturn(float(i), float(i), 10, "train"))
    after = store_file.stat()
    assert (before.st_mtime_ns, before.st_size, before.st_ino) == (after.st_mtime_ns, after.st_size, after.st_ino)
    returns = store.returns(agent.id)
    assert len(returns) == 50 and returns[-1] == EpisodeReturn(49.0, 49.0, 10, "train")


def test_a_torn_last_return_line_is_skipped_and_the_next_append_is_intact(tmp_path, store):
    agent = make_agent(store)
    store.append_return(agent.id, EpisodeReturn(1.0, 5.0, 5, "train"))
    store.close()
    path = tmp_path / "data" / "agents" / str(agent.id) / "returns.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"time": 2.0, "val')  # a crash in the middle of a write
    reopened = Store(tmp_path / "data")
    assert [r.value for r in reopened.returns(agent.id)] == [5.0]
    reopened.append_return(agent.id, EpisodeReturn(3.0, 7.0, 7, "evaluate"))
    assert [r.value for r in reopened.returns(agent.id)] == [5.0, 7.0]
    reopened.close()


def test_a_failed_write_leaves_the_previous_file_whole(tmp_path, store, monkeypatch):
    make_agent(store)
    store_file = tmp_path / "data" / "store.json"
    before = store_file.read_bytes()

    def crash(*args):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        store.add_user("bob")
    monkeypatch.undo()
    assert store_file.read_bytes() == before
    assert not [p for p in store_file.parent.iterdir() if p.name.endswith(".tmp")]


def test_a_damaged_store_is_a_clear_error_not_a_reset(tmp_path):
    folder = tmp_path / "data"
    Store(folder).close()
    (folder / "store.json").write_text('{"users": {"1": {"na')
    with pytest.raises(StoreError, match="damaged"):
        Store(folder)
    (folder / "store.json").write_text(json.dumps([1, 2]))
    with pytest.raises(StoreError, match="not a Shepherd store"):
        Store(folder)
