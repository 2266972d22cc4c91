"""The admin commands while a real server holds the data folder: they go through its admin API with the
credential it published, act at once on what it serves, and never open its store themselves."""

import http.client
import json
import os
import stat
import subprocess
import sys
import zipfile

import pytest

from shepherd.cli import main
from shepherd.client import Client, ShepherdError
from shepherd.client.roles import RolesClient
from shepherd.storage import read_server_file
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")
OBS4 = [0.0, 0.01, 0.0, -0.01]


def cli(capsys, *argv):
    code = main([*argv])
    out, err = capsys.readouterr()
    return code, out, err


def api(url, token, path, method="GET", body=None):
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        connection.request(method, "/shepherd/admin/api" + path, None if body is None else json.dumps(body), headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def play(client, episodes, steps=20):
    for _ in range(episodes):
        action = client.step(OBS4, 0.0, False)
        for step in range(steps):
            action = client.step(OBS4, 1.0, step == steps - 1)
        assert action is None


def test_commands_are_forwarded_to_the_running_server_which_alone_holds_the_folder(capsys, server_factory, tmp_path):
    data = tmp_path / "data"
    server = server_factory(TINY, data=data)
    published = data / "server.json"
    assert stat.S_IMODE(published.stat().st_mode) == 0o600
    assert server.admin_token and server.admin_token not in published.read_text()
    second = subprocess.run([sys.executable, str(ROOT / "run.py"), "-p", TINY, "--data", str(data), "--port", "0"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert second.returncode == 2 and second.stderr.strip().splitlines() == [  # one server per data folder
        f"error: another Shepherd server (or admin command) is using the data folder {data}; "
        "stop it, or give another --data"]
    assert server.process.poll() is None and read_server_file(data).url == server.url

    assert cli(capsys, "users", "add", "alice", "--data", str(data))[0] == 0
    status, users = api(server.url, server.admin_token, "/users")
    assert status == 200 and [u["name"] for u in users] == ["tests", "alice"]  # the server's store has it
    code, out, err = cli(capsys, "agents", "add", "alice", "pole", "--algorithm", "PPO", "--observation-space",
                         '[[4], "-inf", "inf"]', "--action-space", "2", "--param", "n_steps=16",
                         "--param", "batch_size=16", "--key", "--data", str(data))
    assert code == 0 and "(id 2, PPO; served now)" in out, err
    key = out.strip().splitlines()[-1]

    client = Client(server.url, key, timeout=30)
    try:
        assert client.login()["agent"] == "pole"  # served at once, no server restart
        play(client, episodes=3)
        listing = cli(capsys, "agents", "list", "--data", str(data))[1].splitlines()
        row = next(line.split() for line in listing if "alice/pole" in line)
        assert row[3] == "train" and row[4] == "60" and row[6] == "1"  # phase, steps, sessions

        target = tmp_path / "pole.zip"
        code, out, _ = cli(capsys, "agents", "export", "alice/pole", "-o", str(target), "--data", str(data))
        assert code == 0
        with zipfile.ZipFile(target) as archive:
            assert json.loads(archive.read("shepherd.json"))["schedule"]["steps"] == 60

        code, out, _ = cli(capsys, "agents", "restart", "alice/pole", "--data", str(data))
        assert code == 0 and "1 session(s) ended" in out
        with pytest.raises(ShepherdError) as refused:
            client.step(OBS4, 1.0, False)
        assert refused.value.status == 401
        assert client.login()["agent"] == "pole"  # the key itself still logs in, to the fresh agent
    finally:
        client.close()
    code, _, err = cli(capsys, "agents", "export", "alice/pole", "--data", str(data))
    assert code == 2 and "no saved model yet" in err

    code, out, _ = cli(capsys, "admin-token", "--data", str(data))
    new_token = out.strip().splitlines()[-1]
    assert api(server.url, server.admin_token, "/whoami")[0] == 401
    assert api(server.url, new_token, "/whoami") == (200, {"role": "admin", "agent": None})

    assert server.stop() == 0
    assert not published.exists()
    code, out, _ = cli(capsys, "agents", "list", "--data", str(data))  # now on the store itself
    assert code == 0 and "alice/pole" in out and "stopped" in out


def test_an_environments_keys_are_listed_and_revoked_through_the_running_server(capsys, server_factory, tmp_path):
    data = tmp_path / "data"
    server = server_factory(str(TEST_PRESETS / "roles_duel.py"), data=data)
    code, out, err = cli(capsys, "keys", "add", "tests/duel", "--label", "robot", "--data", str(data))
    assert code == 0 and "API key e2 for environment tests/duel" in out, err
    key = out.strip().splitlines()[-1]
    obs = {"hero": [0.0, 0.5], "rival": [0.0, 0.5]}
    session = RolesClient(server.url, key, timeout=30)
    try:
        assert set(session.login()["roles"]) == {"hero", "rival"}
        assert set(session.step(obs)) == {"hero", "rival"}  # the scripted rival answers too
        code, out, _ = cli(capsys, "keys", "list", "tests/duel", "--data", str(data))
        assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["e1", "e2"]
        code, out, _ = cli(capsys, "keys", "revoke", "e2", "--data", str(data))
        assert code == 0 and "API key e2 of environment tests/duel revoked" in out
        with pytest.raises(ShepherdError) as ended:  # its open session ended on the running server
            session.step(obs)
        assert ended.value.status == 401
        with pytest.raises(ShepherdError) as refused:
            session.login()
        assert refused.value.status == 401 and "unknown or revoked API key" in str(refused.value)
    finally:
        session.close()
    code, out, _ = cli(capsys, "keys", "list", "--data", str(data))
    assert code == 0 and next(line for line in out.splitlines() if line.startswith("e2")).split()[-1] == "revoked"
