"""Coach's options as a user runs them (``run.py`` processes): ``--evaluate N`` from one model zip (``-crf``) stops
by itself after N env steps, exit 0, without a checkpoint; ``-asc`` without ``--clients`` stops once a remote
client's training reaches the validation target, exit 0, in the ``-e`` experiment's folder."""

import http.client
import json
import zipfile

from stable_baselines3 import PPO

from shepherd.client import Client, ShepherdError
from tests.conftest import TEST_PRESETS
from tests.integration.test_start_from import Unbounded, policy, same

TINY = str(TEST_PRESETS / "tiny_ppo.py")


def play_until_gone(url: str, key: str, episode: int = 5, most: int = 5_000) -> tuple[dict, int]:
    """Log in (as training) and step episodes of ``episode`` requests until the server stops answering; returns
    the login's reply and the steps answered (at most ``most`` requests: bounded)."""
    client = Client(url, key, timeout=30, retry_seconds=0)
    reply, answered = client.login(), 0
    try:
        for t in range(most):
            client.step([0.01 * (t % 5), 0.0, 0.0, 0.0], 1.0, t % episode == episode - 1)
            answered += 1
    except (ShepherdError, OSError, http.client.HTTPException):
        pass
    finally:
        client.close()
    return reply, answered


def test_evaluate_n_from_one_model_zip_stops_by_itself_and_changes_no_weight(server_factory, tmp_path):
    zip_path = tmp_path / "sb3.zip"
    PPO("MlpPolicy", Unbounded(), n_steps=16, batch_size=16, seed=3, policy_kwargs={"net_arch": [64, 64]}).save(zip_path)
    data = tmp_path / "data"
    server = server_factory(TINY, "--evaluate", "30", "-crf", str(zip_path), data=data)
    reply, answered = play_until_gone(server.url, server.api_key)
    assert reply["mode"] == "evaluate"
    code = server.process.wait(60)
    out = "".join(server.lines) + server.process.stdout.read()
    assert code == 0, server.log.read_text()
    assert 30 <= answered < 5_000 and "--evaluate 30: stopped at " in out, out
    assert "agent tiny:" in out and "episodes completed in evaluate mode" in out
    assert f"agent tiny starts from -crf {zip_path}" in out and "it stops after 30 env steps" in out
    model = data / "agents" / "1" / "model.zip"
    assert same(policy(model), policy(zip_path))  # the weights it started from, and no checkpoint since:
    with zipfile.ZipFile(model) as archive:
        assert json.loads(archive.read("shepherd.json")) == {"learner": {}}  # a checkpoint writes counters


def test_asc_stops_a_server_without_clients_at_the_target_in_the_experiment_s_folder(server_factory, tmp_path):
    preset = tmp_path / "reachable.yaml"
    preset.write_text(
        "owner: tests\nagents:\n  - name: tiny\n    algorithm: PPO\n    observation_space: [[4], -inf, inf]\n"
        "    action_space: 2\n    parameters: {n_envs: 2, n_steps: 16, batch_size: 32, n_epochs: 1, seed: 0}\n"
        "schedule: {steps_between_evaluation_periods: 40, evaluation_episodes: 1}\n"
        "validation: {env_id: CartPole-v1, target_return: 1, max_steps: 100_000}\n")  # any 5-step episode reaches it
    data = tmp_path / "data"
    server = server_factory(str(preset), "-asc", "-e", "run-1", "-s", "0.5", data=data)
    assert f"(data: {data / 'run-1'})" in "".join(server.lines)
    _, answered = play_until_gone(server.url, server.api_key)
    code = server.process.wait(60)
    out = "".join(server.lines) + server.process.stdout.read()
    assert code == 0 and "target reached: evaluation 1" in out, out + server.log.read_text()
    assert answered < 5_000  # it stopped by itself
    assert (data / "run-1" / "store.json").exists() and (data / "run-1" / "agents" / "1" / "model.zip").exists()
    assert not (data / "store.json").exists()  # the experiment's folder, not --data itself
