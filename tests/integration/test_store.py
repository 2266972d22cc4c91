"""The tinydb store on disk: records, hashed keys, atomic writes, O(1) returns, damage detection."""

import json
import os
import threading

import pytest

from shepherd.storage import AlreadyExists, EpisodeReturn, NotFound, Store, StoreError
from shepherd.storage import returns as returns_module


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


def test_a_line_torn_after_a_configs_inner_brace_is_cut_off_not_counted(tmp_path, store):
    """A torn line that ends in a config's inner ``}`` looked whole once the next start ended it with a newline: it
    was counted but never read, and as the first line it made every poll of the curve a reset (the whole curve
    sent again). The next start cuts a torn tail off; an older log with such a line keeps its first record's time
    from the first line that parses."""
    agent = make_agent(store)
    store.append_return(agent.id, EpisodeReturn(1.0, 1.0, 10, "train", None, "L", {"goal": {"x": 1}, "seed": 3}))
    store.close()
    path = tmp_path / "data" / "agents" / str(agent.id) / "returns.jsonl"
    line = path.read_bytes()
    path.write_bytes(line[:line.index(b'{"x":1}') + len(b'{"x":1}')])  # a power cut tore it there
    reopened = Store(tmp_path / "data")
    for t in (2.0, 3.0):
        reopened.append_return(agent.id, EpisodeReturn(t, t, 10, "train"))
    page = reopened.returns_page(agent.id)
    assert page.total == 2 and [r.time for r in page.returns] == [2.0, 3.0]
    again = reopened.returns_page(agent.id, offset=page.total, first=page.returns[0].time)
    assert not again.reset and again.returns == []
    reopened.close()
    path.write_bytes(line[:line.index(b'{"x":1}') + len(b'{"x":1}')] + b"\n" + path.read_bytes())  # an older log
    older = Store(tmp_path / "data")
    page = older.returns_page(agent.id)
    assert page.total == 3 and [r.time for r in page.returns] == [2.0, 3.0]
    assert not older.returns_page(agent.id, offset=page.total, first=2.0).reset
    older.close()


def test_an_append_does_not_wait_for_a_read_in_progress(store, monkeypatch):
    """A long read (a curve of a million returns) must not hold up an episode's end, which runs on the loop."""
    agent = make_agent(store)
    for i in range(3):
        store.append_return(agent.id, EpisodeReturn(float(i), float(i), 10, "train"))
    real = returns_module.EpisodeReturn
    appended: list[bool] = []

    def parse(*args, **fields):
        if not appended:  # in the middle of the read: an episode ends on another thread
            appender = threading.Thread(target=store.append_return,
                                        args=(agent.id, real(9.0, 9.0, 9, "train")))
            appender.start()
            appender.join(timeout=10)  # a bound against a hang, not a measurement
            appended.append(not appender.is_alive())
        return real(*args, **fields)

    monkeypatch.setattr(returns_module, "EpisodeReturn", parse)
    store.returns(agent.id)
    monkeypatch.undo()
    assert appended == [True]
    assert [r.value for r in store.returns(agent.id)] == [0.0, 1.0, 2.0, 9.0]


def test_an_incremental_read_parses_only_the_new_returns(store, monkeypatch):
    agent = make_agent(store)
    for i in range(500):
        store.append_return(agent.id, EpisodeReturn(100.0 + i, float(i), 10, "train"))
    page = store.returns_page(agent.id)
    assert (page.total, page.offset, page.reset, len(page.returns)) == (500, 0, False, 500)
    store.append_return(agent.id, EpisodeReturn(700.0, 7.0, 7, "evaluate"))
    real = returns_module.EpisodeReturn
    parsed = []
    monkeypatch.setattr(returns_module, "EpisodeReturn", lambda *a, **k: parsed.append(1) or real(*a, **k))
    page = store.returns_page(agent.id, offset=500, first=100.0)
    assert (page.total, page.offset, page.reset) == (501, 500, False)
    assert page.returns == [real(700.0, 7.0, 7, "evaluate")] and len(parsed) == 1
    nothing_new = store.returns_page(agent.id, offset=501, first=100.0)
    assert nothing_new.returns == [] and len(parsed) == 1
    monkeypatch.undo()
    store.clear_returns(agent.id)
    store.append_return(agent.id, EpisodeReturn(900.0, 1.0, 1, "train"))
    after = store.returns_page(agent.id, offset=1, first=100.0)  # the curve was deleted: all of it again
    assert (after.total, after.offset, after.reset) == (1, 0, True) and [r.time for r in after.returns] == [900.0]
    assert store.returns_page(agent.id, offset=5).reset is True


def test_chunked_reads_give_every_return_once_and_skip_damaged_lines(tmp_path, store):
    agent = make_agent(store)
    for i in range(25):
        store.append_return(agent.id, EpisodeReturn(float(i), float(i), 1, "train"))
    store.close()
    path = tmp_path / "data" / "agents" / str(agent.id) / "returns.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"time": 2.0, "val')  # a crash in the middle of a write
    reopened = Store(tmp_path / "data")
    reopened.append_return(agent.id, EpisodeReturn(99.0, 99.0, 1, "train"))
    chunks = list(reopened.returns_chunks(agent.id, chunk_bytes=100))
    assert len(chunks) > 5
    assert [r.time for chunk in chunks for r in chunk] == [float(i) for i in range(25)] + [99.0]
    assert reopened.returns_page(agent.id).total == 26
    reopened.close()


def test_returns_as_json_text_are_checked_line_by_line(tmp_path, store):
    agent = make_agent(store)
    store.append_return(agent.id, EpisodeReturn(1.0, float("inf"), 5, "train"))  # json writes Infinity
    store.close()
    path = tmp_path / "data" / "agents" / str(agent.id) / "returns.jsonl"
    with open(path, "ab") as handle:
        handle.write(b'{"time": 2.0, "value": 3.0, "length": 4, "phase": "train"}\n{"what": 1}\n{"time": 3.0}')
    reopened = Store(tmp_path / "data")
    page = reopened.returns_json(agent.id)
    assert json.loads(b"[" + b",".join(page.pieces) + b"]") == [
        {"time": 1.0, "value": None, "length": 5, "phase": "train"},
        {"time": 2.0, "value": 3.0, "length": 4, "phase": "train"}]
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


def test_an_empty_or_missing_store_beside_agents_is_refused_not_reset(tmp_path):
    folder = tmp_path / "data"
    store = Store(folder)
    agent = make_agent(store)
    store.append_return(agent.id, EpisodeReturn(1.0, 5.0, 5, "train"))
    store.close()
    store_file = folder / "store.json"
    store_file.write_bytes(b"")  # a 0-byte store: the users, keys and admin token are gone
    with pytest.raises(StoreError, match=r"store\.json is empty") as error:
        Store(folder)
    assert str(folder / "agents") in str(error.value) and "backup" in str(error.value)
    assert store_file.read_bytes() == b""  # nothing written: the damage stays for the user to repair
    store_file.unlink()
    with pytest.raises(StoreError, match=r"store\.json is missing") as error:
        Store(folder)
    assert "agents" in str(error.value)
    assert not store_file.exists()


def test_an_empty_store_without_agents_is_refused_too(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "store.json").write_bytes(b"")
    with pytest.raises(StoreError, match="empty"):
        Store(folder)
    Store(tmp_path / "fresh").close()  # a folder with no store and no agents is a new one


def test_agent_ids_are_never_reused_so_no_agent_inherits_another_ones_folder(tmp_path):
    folder = tmp_path / "data"
    store = Store(folder)
    first = make_agent(store)
    store.append_return(first.id, EpisodeReturn(1.0, 5.0, 5, "train"))
    store.remove_agent(first.id)
    store.close()
    store = Store(folder)
    second = store.add_agent(store.ensure_user("bob").id, "other", "PPO", 2, 2, {})
    assert second.id != first.id
    (folder / "agents" / str(second.id + 1)).mkdir(parents=True)  # a folder no stored agent owns
    third = store.add_agent(store.ensure_user("bob").id, "third", "PPO", 2, 2, {})
    assert third.id not in (first.id, second.id, second.id + 1)
    assert store.returns(second.id) == [] and store.returns(third.id) == []
    store.close()


@pytest.mark.parametrize("content", [
    {"users": [1, 2]},
    {"users": {"1": "alice"}},
    {"users": {"one": {"name": "alice", "created": 1.0}}},
    {"users": {"1": {"name": 5, "created": 1.0}}},
    {"agents": {"1": {"name": "x"}}},
    {"api_keys": {"1": {"agent_id": 1}}},
    {"settings": {"1": {"name": "admin_token"}}},
    {"users": {"1": {"name": "alice", "created": 1.0}}, "agents": {"1": {
        "owner_id": 1, "name": "a", "algorithm": "PPO", "observation_space": 2, "action_space": 2,
        "parameters": [], "sharing": "pooled", "created": 0.0, "last_active": 0.0}}},
    {"environment_keys": {"1": {"environment_id": 1}}},  # (these three were a KeyError or TypeError later)
    {"environments": {"1": {"owner_id": 1, "name": "e", "definition": {}, "created": 1, "x": 1}}},
    {"environments": {"1": {"owner_id": 1, "name": "e", "definition": []}}},
])
def test_a_store_of_the_wrong_shape_is_refused_naming_the_file(tmp_path, content):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "store.json").write_text(json.dumps(content))
    with pytest.raises(StoreError, match="not a Shepherd store") as error:
        Store(folder).close()
    assert str(folder / "store.json") in str(error.value)


def test_a_store_that_is_a_folder_or_an_old_key_without_revoked_is_read(tmp_path):
    """A store.json that cannot be read is a StoreError naming it (an IsADirectoryError, reported by run.py as
    "cannot serve on HOST:PORT"); a key without ``revoked`` (optional in the shape) is a live key (a KeyError)."""
    folder = tmp_path / "folder"
    (folder / "store.json").mkdir(parents=True)
    with pytest.raises(StoreError, match="cannot be read") as error:
        Store(folder).close()
    assert str(folder / "store.json") in str(error.value)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "store.json").write_text(json.dumps({"api_keys": {"1": {"agent_id": 1, "hash": "h", "label": "",
                                                                      "created": 1}}}))
    store = Store(folder)
    assert [key.revoked for key in store.api_keys()] == [False]
    store.close()


def test_returns_and_agent_folders_are_private(tmp_path):
    from shepherd.storage import atomic_write_bytes

    folder = tmp_path / "data"
    store = Store(folder)
    agent = make_agent(store)
    atomic_write_bytes(store.agent_folder(agent.id) / "model.zip", b"zip")  # as a checkpoint writes it
    store.append_return(agent.id, EpisodeReturn(1.0, 5.0, 5, "train"))
    store.close()
    returns = folder / "agents" / str(agent.id) / "returns.jsonl"
    mode = lambda path: path.stat().st_mode & 0o777  # noqa: E731
    assert (mode(returns), mode(returns.parent), mode(folder / "agents")) == (0o600, 0o700, 0o700)
    os.chmod(returns, 0o644)  # as earlier versions left them
    os.chmod(returns.parent, 0o755)
    os.chmod(folder / "agents", 0o755)
    Store(folder).close()
    assert (mode(returns), mode(returns.parent), mode(folder / "agents")) == (0o600, 0o700, 0o700)


def test_a_clients_returns_name_it_and_are_kept_apart_and_old_logs_still_read(tmp_path, store):
    agent = make_agent(store)
    folder = tmp_path / "data" / "agents" / str(agent.id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "returns.jsonl").write_text('{"time":1.0,"value":5.0,"length":3,"phase":"train"}\n')  # written before clients
    store.append_return(agent.id, EpisodeReturn(2.0, 6.0, 4, "train", "arm-1"))
    store.append_return(agent.id, EpisodeReturn(3.0, 7.0, 5, "evaluate", "arm-2"))
    assert store.returns(agent.id) == [EpisodeReturn(1.0, 5.0, 3, "train"), EpisodeReturn(2.0, 6.0, 4, "train", "arm-1"),
                                       EpisodeReturn(3.0, 7.0, 5, "evaluate", "arm-2")]
    assert store.returns(agent.id, "arm-2") == [EpisodeReturn(3.0, 7.0, 5, "evaluate", "arm-2")]
    assert store.return_clients(agent.id) == ["arm-1", "arm-2"]
    page = store.returns_json(agent.id, client="arm-1")
    assert page.total == 1 and b'"client":"arm-1"' in b"".join(page.pieces)
    assert b"client" not in (folder / "returns.jsonl").read_bytes().splitlines()[0]  # a pooled record has none
    store.clear_returns(agent.id)
    assert store.returns(agent.id) == [] and store.returns(agent.id, "arm-1") == [] and store.return_clients(agent.id) == []
    store.append_return(agent.id, EpisodeReturn(4.0, 8.0, 6, "train", "arm-1"))  # a fresh curve, per client too
    assert [r.value for r in store.returns(agent.id, "arm-1")] == [8.0]


def test_an_agent_whose_owner_is_missing_is_named_in_one_line_and_never_adopted(tmp_path):
    """A damaged or hand-edited store: an agent's owner is gone. The server's summary names it ``userN`` in
    one line (a traceback before), and a user added later never takes the missing owner's id (it would
    silently own the agent)."""
    from types import SimpleNamespace

    from shepherd.cli.progress import agent_ref

    folder = tmp_path / "data"
    store = Store(folder)
    store.add_user("carol")
    bob = store.add_user("bob")  # the highest id: tinydb would give it again
    agent = store.add_agent(bob.id, "pole", "PPO", [[4], "-inf", "inf"], 2, {})
    store.close()
    content = json.loads((folder / "store.json").read_text())
    del content["users"][str(bob.id)]
    (folder / "store.json").write_text(json.dumps(content))
    store = Store(folder)
    record = store.agent(agent.id)
    assert agent_ref(SimpleNamespace(store=store), record) == (
        f"user{bob.id}/pole (id {agent.id}; its owner, user id {bob.id}, is missing from the store)")
    demo = store.add_user("demo")
    assert demo.id not in (bob.id, store.find_user("carol").id)
    assert store.find_agent(demo.id, "pole") is None
    store.close()


def test_deleting_a_user_deletes_their_environments_and_refuses_their_keys(store):
    """A deleted user's environments with roles went with them (they stayed in the store, their keys working)."""
    from shepherd.storage.records import hash_key

    user = store.ensure_user("carol")
    environment, _ = store.put_environment(user.id, "duel", {"roles": {"a": "x", "b": "x"}})
    key, _ = store.add_environment_key(environment.id)
    revoked, record = store.add_environment_key(environment.id)
    store.revoke_environment_key(record.id)
    other = store.put_environment(store.ensure_user("dave").id, "duel", {"roles": {"a": "y"}})[0]
    assert store.delete_user(user.id) == [hash_key(key)]  # the live key's sessions are ended by the caller
    assert store.environment_for_key(key) is None and store.environment_keys(environment.id) == []
    assert [e.name for e in store.environments()] == ["duel"] and store.environments()[0].id == other.id
