"""`run.py --clients N --envs-per-client M`: the command lines of the local client processes."""

from shepherd.cli import progress as serve
from shepherd.graph import PresetValidation

VALIDATION = PresetValidation(env_id="CartPole-v1", target_return=1.0, max_steps=100, env_kwargs={"x": 1})


async def started(monkeypatch, *args) -> list[tuple]:
    calls = []

    async def exec_(*command, **kwargs):
        assert kwargs["env"]["SHEPHERD_API_KEY"] == "key"  # never on the command line
        calls.append(command)

    monkeypatch.setattr(serve.asyncio, "create_subprocess_exec", exec_)
    await serve.start_clients("http://127.0.0.1:1", "key", VALIDATION, *args)
    return calls


def option(command: tuple, name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


async def test_clients_of_one_env_are_started_as_before(monkeypatch):
    calls = await started(monkeypatch, 3)
    assert [option(command, "--seed") for command in calls] == ["0", "1", "2"]
    assert all(option(command, "--n-envs") is None and "key" not in command for command in calls)
    assert option(calls[0], "--env-kwargs") == '{"x": 1}' and option(calls[0], "--env") == "CartPole-v1"


async def test_clients_of_m_envs_are_vector_sessions_whose_envs_never_share_a_seed(monkeypatch):
    calls = await started(monkeypatch, 3, 4)
    assert [option(command, "--n-envs") for command in calls] == ["4"] * 3
    assert [option(command, "--seed") for command in calls] == ["0", "4", "8"]  # envs 0-3, 4-7, 8-11


async def test_seed_shifts_every_client_s_env_seeds(monkeypatch):
    calls = await started(monkeypatch, 2, 3, 100)  # run.py --clients 2 --envs-per-client 3 --seed 100
    assert [option(command, "--seed") for command in calls] == ["100", "103"]  # envs 100-102, 103-105
