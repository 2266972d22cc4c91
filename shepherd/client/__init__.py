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

Run ``python -m shepherd.client --help`` to drive a gymnasium environment (or ``--n-envs`` of them)
against a server; the API key comes from the ``SHEPHERD_API_KEY`` environment variable so that it never
shows in a process list.
"""

from shepherd.client.connection import Client, ShepherdError, VectorClient, to_json
from shepherd.client.loops import (apply_config, env_action_mask, first_vector_step, gymnasium_vector_step,
                                   lesson_config, make_vector_env, run_env, run_sb3_vec_env, run_vector_env,
                                   sb3_vec_env_step)

__all__ = ["Client", "ShepherdError", "VectorClient", "apply_config", "env_action_mask", "first_vector_step",
           "gymnasium_vector_step", "lesson_config", "make_vector_env", "run_env", "run_sb3_vec_env", "run_vector_env",
           "sb3_vec_env_step", "to_json"]
