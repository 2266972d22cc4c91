"""The numbers of every command line are refused at parsing when no bound can hold them (`shepherd.arguments`):
``nan`` compared false with each check after parsing and passed (sessions that never expired, no rate limit, steps
that timed out at once), ``-s inf`` was a traceback, and a port past 65535 passed the address check, which wraps it,
then failed at the bind after the data folder, its admin token and keys were made (and never shown). Options put
before ``run.py deploy`` were overwritten by the deploy server's defaults (it served on 8000, not the port asked)."""

from __future__ import annotations

import pytest

from shepherd.cli.main import main
from shepherd.deploy.cli import build_parser as deploy_parser
from tests.conftest import TEST_PRESETS

TINY = str(TEST_PRESETS / "tiny_ppo.py")


@pytest.mark.parametrize("argv, words", [
    (["--port", "70000"], "argument --port: must be from 0 to 65535"),
    (["--port", "80.5"], "argument --port: must be a whole number"),
    (["--session-timeout", "nan"], "argument --session-timeout: must be a positive number of seconds"),
    (["--act-timeout", "inf"], "argument --act-timeout: must be a positive number of seconds"),
    (["--idle-timeout", "0"], "argument --idle-timeout: must be a positive number of seconds"),
    (["--rate-limit", "nan"], "argument --rate-limit: must be a number of at least 0"),
    (["-s", "inf"], "argument -s/--checkpoint-save-secs/--checkpoint_save_secs: must be a positive number"),
    (["-s", "0"], "must be a positive number of seconds"),
    (["--port", "9000", "deploy", "x.onnx"], "the deploy server's options come after `deploy`"),
    (["--seed", "-1"], "argument --seed: must be from 0 to 4294967295"),  # was blamed on the preset's PPO
    (["--seed", "4294967296"], "argument --seed: must be from 0 to 4294967295"),
])
def test_a_number_no_bound_holds_is_one_line_and_nothing_is_made(argv, words, tmp_path, capsys):
    data = tmp_path / "data"
    with pytest.raises(SystemExit) as exited:
        main(["-p", TINY, "--data", str(data), *argv])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert words in line
    assert not data.exists()


def test_the_rate_limit_may_be_0_and_the_deploy_server_refuses_alike(capsys):
    from shepherd.cli.main import build_parser

    assert build_parser().parse_args(["-p", "x", "--rate-limit", "0"]).rate_limit == 0.0
    for argv in (["p.onnx", "--session-timeout", "nan"], ["p.onnx", "--port", "65536"]):
        with pytest.raises(SystemExit):
            deploy_parser().parse_args(argv)
    assert "must be" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["-p", "cartpole_ppo", "--clients", "4", "agents", "list"], "-p is for serving a preset; `agents` does not use it"),
    (["--port", "9001", "--evaluate", "5", "algorithms"], "--port is for serving a preset; `algorithms` does not use it"),
    (["-l", "-cp", "agents.x.parameters.seed=1"], "-l lists the presets and exits: -cp does nothing with it"),
    (["-l", "-p", "nosuchpreset"], "-l lists the presets and exits: -p does nothing with it"),
])
def test_serving_options_beside_a_command_or_l_are_refused_not_ignored(argv, words, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and words in capsys.readouterr().err


def test_the_options_commands_use_are_taken_before_them(tmp_path, capsys):
    assert main(["-v", "-l"]) == 0
    assert main(["--data", str(tmp_path), "-e", "run-1", "check", TINY, "-cp", "schedule.evaluation_episodes=2"]) == 0


def test_python_m_shepherd_deploy_is_the_deploy_command():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "shepherd.deploy", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "--session-timeout SECONDS" in result.stdout


def test_a_data_folder_that_is_a_file_is_named_not_blamed_on_the_address(tmp_path, capsys):
    """``--data FILE`` was "cannot serve on 127.0.0.1:8000: Not a directory" (the lock file's error, taken for the
    bind's); the admin commands and ``check`` take the same type."""
    data = tmp_path / "data"
    data.write_text("not a folder")
    for argv in (["-p", TINY, "--data", str(data)], ["agents", "list", "--data", str(data)],
                 ["check", TINY, "--data", str(data)]):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"argument --data: '{data}' is a file, not a folder" in line


def test_the_client_refuses_a_seed_numpy_cannot_take(capsys):
    from shepherd.client.__main__ import build_parser as client_parser

    with pytest.raises(SystemExit):
        client_parser().parse_args(["--seed", "-1"])
    assert "argument --seed: must be from 0" in capsys.readouterr().err
