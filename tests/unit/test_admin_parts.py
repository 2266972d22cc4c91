"""Small parts of the admin surface: sign-ins and their CSRF tokens, the data-folder lock and the published
server file, and how the command line names agents."""

import os
import stat

import pytest

from shepherd.admin import AgentView, Invalid, match_agent
from shepherd.http import signins as signins_module
from shepherd.http.signins import SignInTable, csrf_matches
from shepherd.storage import (DataFolderLock, FolderBusy, NotFound, ServerFile, Store, read_server_file, remove_server_file,
                              write_server_file)


def test_sign_ins_expire_when_idle_and_a_credential_past_its_limit_loses_its_own_oldest(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(signins_module.time, "monotonic", lambda: now[0])
    table = SignInTable(idle_seconds=60, per_credential=2)
    first = table.open("digest-1")
    assert table.get(first.id) == first and len(first.id) >= 40 and first.csrf != first.id
    now[0] += 59
    assert table.get(first.id) == first  # using it keeps it open ...
    now[0] += 59
    assert table.get(first.id) == first
    now[0] += 61
    assert table.get(first.id) is None  # ... idle for too long, it is gone
    admin = table.open("admin")
    a, b = table.open("key"), table.open("key")
    assert table.get(a.id) == a  # a is now the key's most recently used, b its oldest
    for _ in range(1000):  # a key holder signing in over and over ...
        c = table.open("key")
    assert table.get(admin.id) == admin  # ... never signs another credential out
    assert table.get(b.id) is None and table.get(a.id) is None and table.get(c.id) == c and len(table) == 3
    table.end(c.id)
    assert table.get(c.id) is None and table.get(None) is None and table.get("") is None
    table.end(admin.id)
    assert len(table) == 1 and set(table._by_digest) == {"key"}  # nothing left behind for ended ones


def test_csrf_tokens_must_match_exactly():
    signin = SignInTable().open("digest")
    assert csrf_matches(signin, signin.csrf)
    for wrong in (None, "", signin.csrf[:-1], signin.csrf + "x", "é" * 43):
        assert not csrf_matches(signin, wrong)


def test_the_folder_lock_is_exclusive_and_released(tmp_path):
    first = DataFolderLock(tmp_path)
    first.acquire()
    second = DataFolderLock(tmp_path)
    with pytest.raises(FolderBusy, match="another Shepherd server"):
        second.acquire()
    assert second.try_acquire() is False and not second.held
    first.release()
    assert second.try_acquire() is True
    second.release()


def test_the_data_folder_and_the_lock_file_are_private(tmp_path):
    """docs/getting-started.md: the data folder is 0700, its files 0600, whatever the umask; a data folder an earlier version
    left 0755 (with a 0644 lock) is made private; an existing folder that holds no store is left as it is."""
    previous = os.umask(0o022)
    try:
        mode = lambda path: stat.S_IMODE(path.stat().st_mode)  # noqa: E731
        with DataFolderLock(tmp_path / "data"):
            assert (mode(tmp_path / "data"), mode(tmp_path / "data" / "server.lock")) == (0o700, 0o600)
        os.chmod(tmp_path / "data", 0o755)
        os.chmod(tmp_path / "data" / "server.lock", 0o644)
        with DataFolderLock(tmp_path / "data"):
            assert (mode(tmp_path / "data"), mode(tmp_path / "data" / "server.lock")) == (0o700, 0o600)
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        os.chmod(shared, 0o755)
        store = Store(shared)  # not a data folder yet: not changed (a warning says so) ...
        store.add_user("alice")
        store.close()
        assert mode(shared) == 0o755 and mode(shared / "store.json") == 0o600
        Store(shared).close()  # ... now it is one
        assert mode(shared) == 0o700
    finally:
        os.umask(previous)


def test_the_server_file_is_private_and_tolerates_damage(tmp_path):
    assert read_server_file(tmp_path) is None
    info = ServerFile("http://127.0.0.1:8123", "secret", 42)
    write_server_file(tmp_path, info)
    assert stat.S_IMODE((tmp_path / "server.json").stat().st_mode) == 0o600
    assert read_server_file(tmp_path) == info
    (tmp_path / "server.json").write_text("{half")
    assert read_server_file(tmp_path) is None
    remove_server_file(tmp_path)
    remove_server_file(tmp_path)
    assert not (tmp_path / "server.json").exists()


def view(agent_id, owner, name):
    return AgentView(id=agent_id, owner=owner, name=name, algorithm="PPO", observation_space=2, action_space=2,
                     parameters={}, sharing="pooled", filters={}, created=0.0, last_active=0.0, served=False, phase="stopped",
                     steps=0, steps_per_second=0.0, sessions=0, episodes=0, mean_train_return=None,
                     last_evaluation=None, failure=None, model=None)


def test_agents_are_named_by_id_owner_and_name_or_a_unique_name():
    views = [view(1, "alice", "pole"), view(2, "bob", "pole"), view(3, "bob", "arm")]
    assert match_agent(views, "2").ref == "bob/pole"
    assert match_agent(views, "alice/pole").id == 1
    assert match_agent(views, " arm ").id == 3
    with pytest.raises(Invalid, match=r"several agents are named 'pole' \(alice/pole, bob/pole\)"):
        match_agent(views, "pole")
    for missing in ("9", "carol/pole", "leg", "alice/arm"):
        with pytest.raises(NotFound):
            match_agent(views, missing)
    assert AgentView.from_json({**views[0].to_json(), "added_later": 1}) == views[0]
