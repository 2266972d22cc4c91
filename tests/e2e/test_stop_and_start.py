"""Starting and stopping a real server: the stop's order (checkpoint and close, then withdraw server.json),
errors at stop reported as such, and a start that fails leaving no secret unseen."""

import json
import socket
import subprocess
import sys
import zipfile

from shepherd.client import Client
from tests.conftest import ROOT, TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")  # checkpoints every 200 steps and every second


def play(url: str, key: str, steps: int) -> None:
    client = Client(url, key, timeout=10, retry_seconds=0)
    try:
        client.login()
        client.step([0.0, 0.0, 0.0, 0.0], 0.0, False)
        for t in range(steps):
            client.step([0.01 * t, 0.0, 0.0, 0.0], 1.0, False)
    finally:
        client.close()


def test_a_stop_that_cannot_withdraw_server_json_still_checkpoints_and_says_what_failed(server_factory, tmp_path):
    data = tmp_path / "data"
    server = server_factory(TINY, data=data)
    play(server.url, server.api_key, 10)  # fewer than a periodic checkpoint's 200 steps (and within its second)
    server_file = data / "server.json"
    assert json.loads(server_file.read_text())["url"]
    server_file.unlink()
    server_file.mkdir()  # it can no longer be removed: as in a folder that became unwritable
    (server_file / "keep").write_text("")
    code = server.stop()
    err = server.log.read_text()
    assert code == 1, err
    assert "cannot serve" not in err and "Traceback" not in err
    assert "error: while stopping" in err and "server.json" in err
    with zipfile.ZipFile(data / "agents" / "1" / "model.zip") as archive:  # the final checkpoint was written
        assert json.loads(archive.read("shepherd.json"))["schedule"]["steps"] >= 10


def test_a_start_on_a_port_in_use_creates_no_secret_that_is_never_shown(server_factory, tmp_path):
    data = tmp_path / "data"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, str(ROOT / "run.py"), "-p", TINY, "--port", str(port),
                                 "--data", str(data)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and f"cannot serve on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "API key" not in result.stdout and "Admin token" not in result.stdout
    server = server_factory(TINY, data=data)  # the next start creates them, and shows them
    assert server.api_key and server.admin_token
    server.stop()
    again = server_factory(TINY, data=data)
    out = "".join(again.lines)
    assert "python run.py keys add tests/tiny" in out and "python run.py admin-token" in out
