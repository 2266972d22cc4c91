"""A store write that fails (a full disk) raises, and the store in memory is the file's again: before, the change
stayed in memory (tinydb changes the dict the storage's `read` hands out before it writes), was served from then
on, and was written by the next unrelated write, though its caller was told it failed."""

import errno

import pytest

from shepherd.storage import Store
from shepherd.storage import jsonfile


def test_a_failed_add_agent_leaves_no_agent(tmp_path, monkeypatch):
    store = Store(tmp_path)
    user = store.add_user("u")
    real = jsonfile.atomic_write_bytes
    calls = {"n": 0}

    def full(path, data):
        calls["n"] += 1
        if calls["n"] == 3:  # _new_agent_id's upsert (2 writes) succeeds, the agent's insert hits a full disk
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(jsonfile, "atomic_write_bytes", full)
    with pytest.raises(OSError):
        store.add_agent(user.id, "a", "PPO", [[2], -1, 1], 2, {})
    monkeypatch.setattr(jsonfile, "atomic_write_bytes", real)
    in_memory = [a.name for a in store.agents()]
    store.add_user("v")  # any later write
    store.close()
    persisted = [a.name for a in Store(tmp_path).agents()]
    assert (in_memory, persisted) == ([], []), "the add_agent that raised ENOSPC is served and then persisted"
