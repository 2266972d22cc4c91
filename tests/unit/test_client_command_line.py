"""``python -m shepherd.client`` refuses in one line (exit status 2, before it contacts a server) what it cannot
run: keyword arguments that are not a JSON object, an env gymnasium cannot make, a PettingZoo factory that cannot be
imported, and counts below 1 (before: tracebacks, and `--episodes -3` ran nothing and exited 0)."""

from __future__ import annotations

import pytest

from shepherd.client.__main__ import main


@pytest.mark.parametrize("argv, words", [
    (["--env-kwargs", "{bad"], "--env-kwargs is not JSON"),
    (["--env-kwargs", "[1]"], "--env-kwargs must be a JSON object"),
    (["--env", "NoSuchEnv-v0"], "--env NoSuchEnv-v0 cannot be made: NameNotFound"),
    (["--env", "CartPole-v1", "--env-kwargs", '{"no_such_keyword": 1}'], "--env CartPole-v1 cannot be made"),
    (["--pettingzoo", "nosuchmodule:env"], "--pettingzoo nosuchmodule:env cannot be made: ModuleNotFoundError"),
    (["--episodes", "-3"], "--episodes must be at least 1"),
    (["--steps", "0", "--acting", "client"], "--steps must be at least 1"),
    (["--url", "ftp://127.0.0.1"], "argument --url: 'ftp://127.0.0.1' must be an http:// or https:// URL"),
    (["--url", "http://127.0.0.1:99999"], "Port out of range"),
])
def test_what_the_client_cannot_run_is_one_line_before_any_server(argv, words, monkeypatch, capsys):
    monkeypatch.setenv("SHEPHERD_API_KEY", "x")
    with pytest.raises(SystemExit) as exited:
        main(["--url", "http://127.0.0.1:1", *argv])
    assert exited.value.code == 2
    assert words in capsys.readouterr().err.strip().splitlines()[-1]
