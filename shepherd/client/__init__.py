"""A Shepherd client needing only the standard library, and loops that drive gymnasium envs with it.

    client = Client("http://127.0.0.1:8000", apikey)
    client.login()
    action = client.step(obs, 0.0, False)              # first step of an episode: its reset observation
    action = client.step(obs, reward, done, truncated=...)   # None once done is true
    client.logout()

A `VectorClient` steps N environments in one request, with SB3 ``VecEnv``'s automatic reset in the same
step (``docs/protocol.md``); `run_vector_env` drives a gymnasium vector env made by `make_vector_env`,
`run_sb3_vec_env` a stable-baselines3 ``VecEnv``::

    client = VectorClient("http://127.0.0.1:8000", apikey, n_envs=8)
    returns = run_vector_env(client, make_vector_env("CartPole-v1", 8), seed=0, episodes=100)

An `ActingClient` acts at the client (issue 35): it fetches the agent's behaviour policy as an ONNX file,
acts with it here and uploads its envs' experience in blocks; `run_acting_env` drives it. They need numpy and
onnxruntime, imported only when these names are first asked for::

    client = ActingClient("http://127.0.0.1:8000", apikey, n_envs=8)
    returns = run_acting_env(client, "CartPole-v1", seed=0, steps=50_000)

Run ``python -m shepherd.client --help`` to drive a gymnasium environment (or ``--n-envs`` of them)
against a server; the API key comes from the ``SHEPHERD_API_KEY`` environment variable so that it never
shows in a process list.
"""

from typing import TYPE_CHECKING, Any

from shepherd.client.connection import Client, ShepherdError, VectorClient, to_json
from shepherd.client.loops import (apply_config, env_action_mask, first_vector_step, gymnasium_vector_step,
                                   lesson_config, make_vector_env, run_env, run_sb3_vec_env, run_vector_env,
                                   sb3_vec_env_step)

if TYPE_CHECKING:
    from shepherd.client.acting import ActingClient, Block, StaleUpload, run_acting_env

#: the names of `shepherd.client.acting`, imported when first asked for (numpy and onnxruntime with them)
_ACTING = ("ActingClient", "Block", "StaleUpload", "run_acting_env")


def __getattr__(name: str) -> Any:
    if name in _ACTING:
        from shepherd.client import acting

        return getattr(acting, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ActingClient", "Block", "Client", "ShepherdError", "StaleUpload", "VectorClient", "apply_config",
           "env_action_mask", "first_vector_step", "gymnasium_vector_step", "lesson_config", "make_vector_env",
           "run_acting_env", "run_env", "run_sb3_vec_env", "run_vector_env", "sb3_vec_env_step", "to_json"]
