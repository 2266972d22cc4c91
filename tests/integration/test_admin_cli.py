"""The admin commands of ``python run.py`` on a data folder that no server holds: every operation, and
one-line errors with exit status 2."""

import json
import zipfile

import pytest

from shepherd.admin import connect as connect_module
from shepherd.cli import main
from shepherd.storage import DataFolderLock, EpisodeReturn, Store

BOX4 = '[[4], "-inf", "inf"]'


def run(capsys, *argv):
    """Run ``python run.py ARGV`` in-process; returns (exit status, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # argparse's own errors
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys, *argv):
    code, out, err = run(capsys, *argv)
    assert code == 0, (argv, out, err)
    return out


def fails(capsys, *argv, status=2):
    code, out, err = run(capsys, *argv)
    assert code == status, (argv, code, out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    return err.strip()


def add_pole(capsys, data, owner="alice", name="pole", *extra):
    return ok(capsys, "agents", "add", owner, name, "--algorithm", "PPO", "--observation-space", BOX4,
              "--action-space", "2", "--param", "n_steps=16", "--param", "batch_size=16", "--param", "gamma=0.95",
              "--data", str(data), *extra)


def test_users_agents_and_keys_from_the_command_line(capsys, data):
    assert "no Shepherd data folder" in fails(capsys, "users", "list", "--data", str(data))
    assert "user alice added (id 1)" in ok(capsys, "users", "add", "alice", "--data", str(data))
    ok(capsys, "--data", str(data), "users", "add", "bob")  # --data before the command works too
    out = add_pole(capsys, data, "alice", "pole", "--key")
    assert "agent alice/pole added (id 1, PPO; served at the next server start)" in out
    key = out.strip().splitlines()[-1]
    assert len(key) >= 40
    store = Store(data)
    assert store.agent_for_key(key).name == "pole"
    assert store.agent(1).parameters == {"n_steps": 16, "batch_size": 16, "gamma": 0.95}  # typed
    store.close()
    assert key not in (data / "store.json").read_text()

    listing = ok(capsys, "users", "list", "--data", str(data))
    assert [line.split()[1:3] for line in listing.splitlines()[1:]] == [["alice", "1"], ["bob", "0"]]
    listing = ok(capsys, "agents", "list", "--data", str(data))
    assert listing.splitlines()[0].split()[:4] == ["ID", "AGENT", "ALGORITHM", "PHASE"]
    assert listing.splitlines()[1].split()[:5] == ["1", "alice/pole", "PPO", "stopped", "0"]
    shown = ok(capsys, "agents", "show", "pole", "--data", str(data))
    assert "observation space [[4], \"-inf\", \"inf\"]" in shown and "n_steps=16" in shown
    assert "API keys          1 'created with the agent'" in shown

    created = ok(capsys, "keys", "add", "alice/pole", "--label", "robot 2", "--data", str(data))
    second = created.strip().splitlines()[-1]
    assert second != key
    listing = ok(capsys, "keys", "list", "--data", str(data))
    assert "robot 2" in listing and key not in listing and second not in listing
    assert "API key 2 of agent alice/pole revoked" in ok(capsys, "keys", "revoke", "2", "--data", str(data))
    assert "revoked" in ok(capsys, "keys", "list", "pole", "--data", str(data)).splitlines()[2]
    store = Store(data)
    assert store.agent_for_key(second) is None and store.agent_for_key(key) is not None
    store.close()


def test_special_actions_on_a_stopped_agent(capsys, data, tmp_path):
    ok(capsys, "users", "add", "alice", "--data", str(data))
    add_pole(capsys, data)
    assert "has no saved model yet" in fails(capsys, "agents", "export", "pole", "--data", str(data))
    model = data / "agents" / "1" / "model.zip"
    model.parent.mkdir(parents=True)
    with zipfile.ZipFile(model, "w") as archive:  # a checkpoint as a server leaves it
        archive.writestr("shepherd.json", json.dumps({"schedule": {"steps": 1234}}))
    store = Store(data)
    for i in range(3):
        store.append_return(1, EpisodeReturn(float(i), 10.0 * i, 10, "train"))
    store.close()
    assert ok(capsys, "agents", "list", "--data", str(data)).splitlines()[1].split()[4] == "1234"
    target = tmp_path / "out" / "pole.zip"
    assert f"written to {target}" in ok(capsys, "agents", "export", "1", "-o", str(target), "--data", str(data))
    assert target.read_bytes() == model.read_bytes()
    target.write_bytes(b"precious")
    assert "exists; add --force" in fails(capsys, "agents", "export", "1", "-o", str(target), "--data", str(data))
    assert target.read_bytes() == b"precious"
    assert "written to" in ok(capsys, "agents", "export", "1", "-o", str(target), "--force", "--data", str(data))
    assert target.read_bytes() == model.read_bytes()
    store_before = (data / "store.json").read_bytes()
    for inside in (data / "store.json", data / "agents" / "1" / "returns.jsonl", data / "copy.zip"):
        err = fails(capsys, "agents", "export", "1", "-o", str(inside), "--force", "--data", str(data))
        assert "inside the data folder" in err
    assert (data / "store.json").read_bytes() == store_before and not (data / "copy.zip").exists()

    assert "learning curve of agent alice/pole deleted" in ok(capsys, "agents", "delete-curve", "pole",
                                                              "--data", str(data))
    store = Store(data)
    assert store.returns(1) == []
    store.close()
    out = ok(capsys, "agents", "delete-model", "pole", "--data", str(data))
    assert "deleted; it starts from scratch" in out and not model.exists()
    assert "has no saved model" in ok(capsys, "agents", "delete-model", "pole", "--data", str(data))
    model.write_bytes(b"x")
    assert "restarted" in ok(capsys, "agents", "restart", "alice/pole", "--data", str(data))
    assert not model.exists()


def test_the_admin_token_can_be_replaced_offline(capsys, data):
    ok(capsys, "users", "add", "alice", "--data", str(data))
    token = ok(capsys, "admin-token", "--data", str(data)).strip().splitlines()[-1]
    from shepherd.admin import AdminService

    store = Store(data)
    assert AdminService(store).authenticate(token).admin
    store.close()


@pytest.mark.parametrize("argv, words", [
    (["users", "add", "bad name"], "user name is 1 to 64"),
    (["users", "add", "alice"], "user 'alice' exists already"),
    (["agents", "show", "nothing"], "no agent 'nothing'"),
    (["agents", "show", "77"], "no agent '77'"),
    (["agents", "add", "nobody", "x", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2"],
     "no user named 'nobody'"),
    (["agents", "add", "alice", "x", "--algorithm", "A9C", "--observation-space", "2", "--action-space", "2"],
     "unknown algorithm 'A9C'"),
    (["agents", "add", "alice", "x", "--algorithm", "DQN", "--observation-space", "2", "--action-space",
      "[[2], -1, 1]"], "DQN cannot handle Box actions"),
    (["agents", "add", "alice", "x", "--algorithm", "PPO", "--observation-space", "[[2], 0", "--action-space", "2"],
     "not valid JSON"),
    (["agents", "add", "alice", "x", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2",
      "--param", "gama=0.9"], "PPO has no parameter 'gama'"),
    (["agents", "add", "alice", "x", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2",
      "--param", "n_steps=lots"], "must be an integer"),
    (["agents", "add", "alice", "x", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2",
      "--param", "gamma=NaN"], "finite"),
    (["agents", "add", "alice", "x", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2",
      "--param", "gamma"], "expected NAME=VALUE"),
    (["agents", "add", "alice", "pole", "--algorithm", "PPO", "--observation-space", "2", "--action-space", "2"],
     "has an agent named 'pole' already"),
    (["agents", "add", "alice", "x", "--observation-space", "2", "--action-space", "2"], "--algorithm"),
    (["keys", "revoke", "42"], "no API key with id 42"),
    (["keys", "revoke", "x"], "'x' is no key id: N for an agent's key, eN for an environment's"),
    (["agents", "restart"], "required: agent"),
    (["agents", "frobnicate", "pole"], "invalid choice"),
])
def test_wrong_input_is_one_line_and_exit_status_2(capsys, data, argv, words):
    ok(capsys, "users", "add", "alice", "--data", str(data))
    add_pole(capsys, data)
    message = fails(capsys, *argv, "--data", str(data))
    assert words in message


def test_ambiguous_names_ask_for_owner_and_name(capsys, data):
    for user in ("alice", "bob"):
        ok(capsys, "users", "add", user, "--data", str(data))
        add_pole(capsys, data, user, "pole")
    assert "several agents are named 'pole' (alice/pole, bob/pole)" in fails(capsys, "agents", "show", "pole",
                                                                              "--data", str(data))
    assert "agent bob/pole (id 2)" in ok(capsys, "agents", "show", "bob/pole", "--data", str(data))


def test_a_held_folder_without_a_server_address_is_a_clear_error(capsys, data, monkeypatch):
    ok(capsys, "users", "add", "alice", "--data", str(data))
    monkeypatch.setattr(connect_module, "PUBLISH_WAIT_SECONDS", 0.5)
    with DataFolderLock(data):  # as a server that is still starting, or another command
        message = fails(capsys, "users", "list", "--data", str(data), status=1)
    assert "another process holds the data folder" in message
    assert "alice" in ok(capsys, "users", "list", "--data", str(data))


def test_a_command_holds_the_folder_so_no_server_opens_the_store_meanwhile(capsys, data):
    from shepherd.admin.connect import connect
    from shepherd.storage import FolderBusy

    ok(capsys, "users", "add", "alice", "--data", str(data))
    with connect(data):
        with pytest.raises(FolderBusy, match="another Shepherd server"):
            DataFolderLock(data).acquire()
    lock = DataFolderLock(data)
    lock.acquire()  # free again once the command is done
    lock.release()


def test_help_texts_name_every_command(capsys):
    code, out, _ = run(capsys, "-h")
    assert code == 0
    for command in ("users", "agents", "keys", "admin-token"):
        assert command in out
    code, out, _ = run(capsys, "agents", "-h")
    for action in ("add", "list", "show", "export", "delete-model", "delete-curve", "restart"):
        assert action in out
