"""``run.py agents delete`` and ``run.py users delete`` on a data folder that no server holds: what goes,
what stays in trash/, and the refusal of a user who owns agents (one line, nothing changed)."""

from shepherd.storage import Store
from tests.integration.test_admin_cli import add_pole, fails, ok


def test_deleting_an_agent_and_a_user_from_the_command_line(capsys, data):
    ok(capsys, "users", "add", "alice", "--data", str(data))
    ok(capsys, "users", "add", "bob", "--data", str(data))
    add_pole(capsys, data, "alice", "pole", "--key")
    add_pole(capsys, data, "alice", "cart")
    (data / "agents" / "1").mkdir(parents=True)
    (data / "agents" / "1" / "model.zip").write_bytes(b"a model")
    before = (data / "store.json").read_bytes()
    err = fails(capsys, "users", "delete", "alice", "--data", str(data))
    assert err == ("error: user alice owns 2 agent(s): alice/pole, alice/cart; delete them first, or delete the "
                   "user with its agents (--with-agents)")
    assert (data / "store.json").read_bytes() == before  # nothing changed
    assert fails(capsys, "users", "delete", "carol", "--data", str(data)) == "error: no user 'carol'"
    assert fails(capsys, "agents", "delete", "nope", "--data", str(data)) == "error: no agent 'nope'"
    out = ok(capsys, "agents", "delete", "alice/pole", "--data", str(data))
    assert out.startswith("agent alice/pole deleted: 0 session(s) ended, its API keys removed; its model and "
                          f"returns moved to {data / 'trash'}/1-pole-")
    assert [path.name.split("-")[:2] for path in (data / "trash").iterdir()] == [["1", "pole"]]
    assert not (data / "agents" / "1").exists()
    assert "user bob deleted" in ok(capsys, "users", "delete", "2", "--data", str(data))
    assert ok(capsys, "users", "delete", "alice", "--with-agents", "--data", str(data)).strip() == \
        "user alice deleted and its 1 agent(s)"
    store = Store(data)
    assert store.users() == [] and store.agents() == [] and store.api_keys() == []
    store.close()
