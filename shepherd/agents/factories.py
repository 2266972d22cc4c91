"""The learner factories: an agent's SB3 model built from its checked parameters, wrapped in its family's
adapter on a worker, one factory per sharing mode (`LEARNER_FACTORIES`).

`sb3_arguments` turns parameter values into SB3's constructor arguments; `build_learner` builds a pooled
agent's learner, `build_advised_learner` one client's of an advised agent; `learner_for` picks by the
definition's sharing mode.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.noise import ActionNoise, NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from shepherd.agents import greedy_policy
from shepherd.agents.advice import Advice
from shepherd.agents.sb3.mixing import AdvisedDictRolloutBuffer, AdvisedRolloutBuffer, advice_width
from shepherd.agents.filters import Filtering, ImageLayout, check_filters, policy_space, stacked_space
from shepherd.agents.parameters import LinearSchedule, ParameterError
from shepherd.agents.policy_kwargs import sb3_policy_kwargs
from shepherd.agents.registry import (ADVICE_PARAMETERS, algorithm_info, check_advisable, check_agent,
                                      check_parameters, check_spaces, parameters)
from shepherd.agents.sb3.base import SpacesEnv
from shepherd.agents.sizes import check_memory
from shepherd.agents.sb3.off_policy import OffPolicyAdapter
from shepherd.agents.onnx_greedy import OnnxGreedy
from shepherd.agents.worker import ThreadedLearner
from shepherd.definition import AgentDefinition, Filters, Sharing
from shepherd.wire.images import is_image
from shepherd.wire.spaces import parse_space


def _action_noise(kwargs: dict[str, Any], action_space: spaces.Space) -> ActionNoise | None:
    kind = kwargs.pop("action_noise", None)
    sigma = kwargs.pop("action_noise_sigma", 0.1)
    theta = kwargs.pop("action_noise_theta", 0.15)
    if kind is None:
        return None
    shape = action_space.shape or ()
    mean = np.zeros(shape, dtype=np.float32)
    deviation = np.full(shape, sigma, dtype=np.float32)
    if kind == "normal":
        return NormalActionNoise(mean, deviation)
    return OrnsteinUhlenbeckActionNoise(mean, deviation, theta=theta)


def sb3_arguments(algorithm: str, action_space: spaces.Space, values: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """SB3 constructor keyword arguments for parameter values, and the number of envs (rollout segments).

    What an agent's model is built with; the parity benchmark builds SB3's own model with it too.

    Raises:
        ParameterError: bad parameter values.
    """
    info = algorithm_info(algorithm)
    known = parameters(algorithm)
    kwargs = check_parameters(algorithm, values)
    for name in ADVICE_PARAMETERS:  # the advised learner's, not SB3's
        if kwargs.pop(name, 0) < 0:
            raise ParameterError(f"{info.name} parameter {name!r} must be 0 or more")
    if kwargs.pop("max_policy_lag", 0) < 0:  # the adapter's (`build_learner`), not SB3's
        raise ParameterError(f"{info.name} parameter 'max_policy_lag' must be 0 or more")
    kwargs.pop("checkpoint_replay_buffer", None)  # the adapter's too
    n_envs = kwargs.pop("n_envs", 1)
    if n_envs < 1:
        raise ParameterError(f"{info.name} parameter 'n_envs' must be at least 1")
    if info.continuous and not info.on_policy:
        kwargs["action_noise"] = _action_noise(kwargs, action_space)
    for key, value in list(kwargs.items()):
        if isinstance(value, str) and value.startswith("lin_") and known[key].schedule:
            kwargs[key] = LinearSchedule(float(value[4:]))
    if "policy_kwargs" in kwargs:
        kwargs["policy_kwargs"] = sb3_policy_kwargs(kwargs["policy_kwargs"])
    return kwargs, n_envs


def policy_name(observation_space: spaces.Space, algorithm: str = "PPO") -> str:
    """The SB3 policy an algorithm's model is built with for the observation space the policy sees
    (`policy_space`'s): ``MultiInputPolicy`` for a Dict (whose images SB3's CombinedExtractor gives a
    NatureCNN each), ``CnnPolicy`` for an image (as SB3's ``is_image_space`` finds one), else ``MlpPolicy``."""
    info = algorithm_info(algorithm)
    vector, dictionary = info.policies
    if isinstance(observation_space, spaces.Dict):
        return dictionary
    if is_image_space(observation_space) and info.image_policy is not None:
        return info.image_policy
    return vector


def build_learner(algorithm: str, name: str, observation_space: spaces.Space, action_space: spaces.Space,
                  values: dict[str, Any], total_steps: int | None, filters: Filters | None = None) -> ThreadedLearner:
    """Build a fresh SB3 model for the spaces, wrapped in its family's adapter on a worker (not yet started),
    behind the agent's ``filters`` (the model sees the observation space they make: stacked frames).

    Raises:
        ParameterError: bad parameters, filters, or spaces the algorithm cannot handle.
    """
    info = algorithm_info(algorithm)
    if info.learner is not None:  # not SB3: its own algorithm on the same worker, no filters or snapshot
        check_spaces(algorithm, observation_space, action_space)
        if filters is not None and filters.active:
            raise ParameterError(f"{info.name} takes no filters (they are SB3 learners' observation side)")
        return ThreadedLearner(info.learner(name, observation_space, action_space,
                                            check_parameters(algorithm, values), total_steps))
    filters = filters or Filters()
    check_spaces(algorithm, observation_space, action_space)
    try:
        check_filters(filters, observation_space, info.on_policy)
    except ValueError as error:
        raise ParameterError(str(error)) from None
    kwargs, n_envs = sb3_arguments(algorithm, action_space, values)
    seen = policy_space(filters, observation_space)
    check_memory(info.name, info.on_policy, seen, action_space, kwargs, n_envs)
    env = DummyVecEnv([lambda: SpacesEnv(seen, action_space)] * n_envs)
    try:
        model = info.sb3_class(policy_name(seen, algorithm), env, device="cpu", verbose=0, **kwargs)
        model.set_logger(Logger(folder=None, output_formats=[]))
        adapter = info.family(model, name, total_steps)
        if isinstance(adapter, OffPolicyAdapter):
            checked = check_parameters(algorithm, values)
            adapter.max_policy_lag = checked.get("max_policy_lag", 0)
            adapter.checkpoint_replay_buffer = bool(checked.get("checkpoint_replay_buffer", True))
    except (ValueError, AssertionError, TypeError, KeyError, MemoryError) as error:
        raise ParameterError(f"{info.name} rejected its parameters: {error}") from None
    return _threaded(adapter, filters, observation_space, seen, info.name)


def _threaded(adapter: Any, filters: Filters, observation_space: spaces.Space, seen: spaces.Space,
              algorithm: str) -> ThreadedLearner:
    """The adapter behind its filters on a worker, with a numpy greedy snapshot of its policy if it has one, else
    (an image agent without filters) its greedy ONNX file for greedy steps."""
    model = adapter.model
    adapter.use_layout(ImageLayout(stacked_space(filters, observation_space)))
    filtering = None
    if filters.active:
        filtering = Filtering(filters, observation_space, float(getattr(model, "gamma", 0.99)))
        adapter.use_filters(filtering)
    greedy = None
    if filters.frame_stack <= 1:  # stacks are kept per actor by the learner: it answers every step
        greedy = greedy_policy.greedy_policy_of(model.policy, seen, adapter, adapter.actions, adapter.name, filtering)
    learner = ThreadedLearner(adapter, greedy)
    if greedy is None and is_image(observation_space) and not filters.active:
        from shepherd.agents.export.behaviour import GREEDY_FILE  # onnx: only for image agents

        learner.file_greedy = OnnxGreedy(functools.partial(learner.behaviour, GREEDY_FILE, adapter.name, algorithm),
                                         adapter, adapter.name)
    return learner


def build_advised_learner(algorithm: str, name: str, observation_space: spaces.Space, action_space: spaces.Space,
                          values: dict[str, Any], total_steps: int | None,
                          filters: Filters | None = None) -> ThreadedLearner:
    """Build the learner of one client of an advised agent (not yet started): the algorithm's advised
    adapter, whose `Advice` (``learner.algorithm.advice``) the graph gives an advisor. Greedy acts are the
    client's own policy's, unmixed (answered from a numpy snapshot where the policy has one, as a pooled
    agent's; a trial of the client's policy on another client's system plays a frozen copy of it).

    Raises:
        ParameterError: bad parameters, spaces the algorithm cannot handle, or an algorithm without advice.
    """
    info = algorithm_info(algorithm)
    check_spaces(algorithm, observation_space, action_space)
    check_advisable(info, action_space)
    assert info.advised is not None  # checked
    kwargs, n_envs = sb3_arguments(algorithm, action_space, values)
    checked = check_parameters(algorithm, values)
    advice = Advice(checked.get("advice_strength", 0.3), checked.get("advice_decay", 0),
                    checked.get("advice_keep", 0))
    filters = filters or Filters()
    try:
        check_filters(filters, observation_space, info.on_policy)
    except ValueError as error:
        raise ParameterError(str(error)) from None
    seen = policy_space(filters, observation_space)  # each client's learner has its own filters' statistics
    kwargs["rollout_buffer_class"] = (AdvisedDictRolloutBuffer if isinstance(seen, spaces.Dict)
                                      else AdvisedRolloutBuffer)
    kwargs["rollout_buffer_kwargs"] = {"advice_width": advice_width(action_space)}
    check_memory(info.name, info.on_policy, seen, action_space, kwargs, n_envs)
    env = DummyVecEnv([lambda: SpacesEnv(seen, action_space)] * n_envs)
    try:
        model = info.sb3_class(policy_name(seen, algorithm), env, device="cpu", verbose=0, **kwargs)
        model.set_logger(Logger(folder=None, output_formats=[]))
        adapter = info.advised(model, name, total_steps, advice)
    except (ValueError, AssertionError, TypeError, KeyError, MemoryError) as error:
        raise ParameterError(f"{info.name} rejected its parameters: {error}") from None
    return _threaded(adapter, filters, observation_space, seen, info.name)


#: how each sharing mode builds an agent's learner: (algorithm, name, spaces, values, total steps, filters) ->
#: learner; an advised agent's factory builds one client's learner, once per client name
LEARNER_FACTORIES: dict[Sharing, Callable[..., ThreadedLearner]] = {
    Sharing.POOLED: build_learner, Sharing.ADVISED: build_advised_learner}


def learner_for(definition: AgentDefinition, values: dict[str, Any], total_steps: int | None) -> ThreadedLearner:
    """The learner of an agent, as its sharing mode builds it (not yet started).

    Raises:
        ParameterError: bad parameters, spaces the algorithm cannot handle, or an unknown sharing mode.
    """
    check_agent(definition)
    return LEARNER_FACTORIES[definition.sharing](definition.algorithm, definition.name, parse_space(definition.observation_space),
                   parse_space(definition.action_space), values, total_steps, filters=definition.filters)
