"""The algorithms agents can run (the catalog's table, `shepherd.agents.catalog`, and any `register` adds from
outside), their typed parameters (read from SB3) and the checks of an agent against them (their models are built
by `shepherd.agents.factories`).

Their parameters are the class's constructor arguments (see `shepherd.agents.parameters` for the types), less the
few a pooled learner cannot honour, plus a few of Shepherd's own (``n_envs``: rollout segments or replay buffer
columns, ``action_noise`` for continuous off-policy ones).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium import spaces

from shepherd.agents.catalog import (HIDDEN, SERVED, Algorithm, NOT_SERVED)
from shepherd.agents.filters import check_filters
from shepherd.agents.grid_cnn import GridCNN, grid_shape
from shepherd.agents.policy_kwargs import sb3_policy_kwargs
from shepherd.agents.sb3.advised import NOT_ADVISED
from shepherd.agents.sb3.mixing import advice_width
from shepherd.agents.parameters import (Parameter, ParameterError, ParamType, coerce,
                                        from_signature)
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.definition import AgentDefinition, Sharing
from shepherd.wire.images import ImageBox, is_image
from shepherd.wire.spaces import parse_space

#: every algorithm agents can run, by upper-case name (names are matched in any case: "crossq" is CrossQ):
#: the catalog's, and any `register` adds
ALGORITHMS: dict[str, Algorithm] = {algorithm.name.upper(): algorithm for algorithm in SERVED}
#: algorithms agents run that are not listed among those to choose from (a programmed selector), by upper-case name
UNLISTED: dict[str, Algorithm] = {algorithm.name.upper(): algorithm for algorithm in HIDDEN}


def register(algorithm: Algorithm, listed: bool = True) -> Algorithm:
    """Make an algorithm from outside Shepherd available to agents, presets, the admin API and ``run.py
    algorithms`` (Shepherd's own are the catalog's table, `shepherd.agents.catalog.SERVED`).

    Its parameters are read from its class's constructor (less ``excluded``, plus the family's own, see
    `parameters`); check them with ``run.py algorithms NAME``.

    Raises:
        ValueError: the name is taken, or the family is not an `SB3Algorithm` adapter.
    """
    if algorithm.name.upper() in ALGORITHMS or algorithm.name.upper() in UNLISTED:
        raise ValueError(f"an algorithm named {algorithm.name!r} is already registered")
    if algorithm.learner is None and not (isinstance(algorithm.family, type)
                                          and issubclass(algorithm.family, SB3Algorithm)):
        raise ValueError(f"{algorithm.name}: family {algorithm.family!r} is not an SB3Algorithm adapter (a "
                         "learner that is not SB3 gives learner=...)")
    # names are matched in any case: "crossq" is CrossQ
    (ALGORITHMS if listed else UNLISTED)[algorithm.name.upper()] = algorithm
    return algorithm


# Constructor arguments that are Shepherd's business, not the user's.
_NOT_PARAMETERS = {"self", "policy", "env", "tensorboard_log", "verbose", "device", "_init_setup_model",
                   "rollout_buffer_class", "rollout_buffer_kwargs", "replay_buffer_class",
                   "replay_buffer_kwargs", "stats_window_size"}

NOISES = ("normal", "ornstein-uhlenbeck")


#: the parameters of advice (``advised`` agents only; a pooled agent ignores them)
ADVICE_PARAMETERS = ("advice_strength", "advice_decay", "advice_keep")


def _advice_parameters(info: Algorithm) -> list[Parameter]:
    if info.advised is None:
        return []
    return [
        Parameter(info.name, "advice_strength", ParamType.FLOAT, 0.3, doc=(
            "advised agents: the power k of the advisor's policy in the mixed policy pi ∝ pi_own * pi_adv^k "
            "(0: every client learns independently)")),
        Parameter(info.name, "advice_decay", ParamType.INT, 0, doc=(
            "advised agents: steps of a client over which its advice strength falls linearly to zero "
            "(0: it never decays)")),
        Parameter(info.name, "advice_keep", ParamType.INT, 0, doc=(
            "advised agents: steps of a client over which a policy it adopted is kept, by distilling the "
            "client's policy towards it after every update with a weight falling from 1 to 0 (0: not kept)")),
    ]


def _shepherd_parameters(info: Algorithm) -> list[Parameter]:
    """Parameters Shepherd adds to SB3's, or whose SB3 form (an object) it replaces by plain values (none for a
    learner that is not SB3: its constructor's are all it takes)."""
    if info.learner is not None:
        return []
    if info.on_policy:
        return [Parameter(info.name, "n_envs", ParamType.INT, 1, doc=(
            "rollout segments (SB3's n_envs): a rollout is n_envs segments of n_steps transitions, each "
            "filled by one actor (a client, or one env of a vector client); use as many as actors")),
            *_advice_parameters(info)]
    replay_columns = Parameter(info.name, "n_envs", ParamType.INT, 1, doc=(
        "replay buffer columns (SB3's n_envs): transitions are stored in rows of n_envs, and train_freq and "
        "target updates count rows, as SB3 does with n_envs envs; a vector client with as many envs then "
        "learns exactly as SB3's learn()"))
    lag = Parameter(info.name, "max_policy_lag", ParamType.INT, 0, doc=(
        "client-acting sessions: how many policy versions behind an upload's samples may be (0: only the "
        "current one, SB3's schedule; more: the reply goes out before the training, so clients act while it "
        "trains)"))
    kept = Parameter(info.name, "checkpoint_replay_buffer", ParamType.BOOL, True, doc=(
        "checkpoints hold the replay buffer (replay_buffer.pkl beside model.zip, SB3's save_replay_buffer "
        "format), so a restart goes on learning exactly; false: smaller, faster checkpoints, and a restart "
        "forgets the transitions learned from and collects batch_size and learning_starts anew before training"))
    if not info.continuous:
        return [replay_columns, lag, kept]
    return [
        replay_columns, lag, kept,
        Parameter(info.name, "action_noise", ParamType.STR, None, nullable=True, choices=NOISES, doc=(
            "exploration noise added to the policy's action (scaled to [-1, 1]), one process per client: "
            "normal or ornstein-uhlenbeck; none by default, as in SB3")),
        Parameter(info.name, "action_noise_sigma", ParamType.FLOAT, 0.1,
                  doc="standard deviation of the action noise, in actions scaled to [-1, 1]"),
        Parameter(info.name, "action_noise_theta", ParamType.FLOAT, 0.15,
                  doc="rate of mean reversion of the ornstein-uhlenbeck noise"),
    ]


_HEATUP_DOC = "set by the schedule's heatup_steps (random actions that fill the replay buffer first)"


def parameters(algorithm: str) -> dict[str, Parameter]:
    """The typed parameters of an algorithm, read from its SB3 constructor.

    Raises:
        ParameterError: the algorithm is unknown.
    """
    info = algorithm_info(algorithm)
    found = from_signature(info.name, info.sb3_class, _NOT_PARAMETERS | dict(info.excluded).keys())
    if "learning_starts" in found:
        found["learning_starts"] = Parameter(info.name, "learning_starts", ParamType.INT,
                                             found["learning_starts"].default, doc=_HEATUP_DOC)
    for extra in _shepherd_parameters(info):
        found[extra.name] = extra
    return found


def algorithm_info(algorithm: str) -> Algorithm:
    """Raises ParameterError for an unknown algorithm, listing the available ones."""
    try:
        return ALGORITHMS.get(str(algorithm).upper()) or UNLISTED[str(algorithm).upper()]
    except KeyError:
        names = ", ".join(a.name for a in ALGORITHMS.values())
        reason = NOT_SERVED.get(str(algorithm).upper())
        if reason:
            raise ParameterError(f"{algorithm} is not served: {reason}; available: {names}") from None
        raise ParameterError(f"unknown algorithm {algorithm!r}; available: {names}") from None


def check_parameters(algorithm: str, values: dict[str, Any]) -> dict[str, Any]:
    """Check parameter values against their types; returns them converted (``"False"`` is False).

    Raises:
        ParameterError: an unknown name (the message lists the known ones), a wrong type, or a float that
            is not finite.
    """
    info = algorithm_info(algorithm)
    known = parameters(algorithm)
    excluded = dict(info.excluded)
    checked = {}
    for name, value in values.items():
        if name in excluded:
            raise ParameterError(f"{info.name} parameter {name!r} is not available in Shepherd: {excluded[name]}")
        if name not in known:
            raise ParameterError(f"{info.name} has no parameter {name!r}; known: {', '.join(sorted(known))}")
        checked[name] = coerce(known[name], value)
        if isinstance(checked[name], float) and not math.isfinite(checked[name]):
            raise ParameterError(f"{info.name} parameter {name!r} must be a finite number, got {value!r}")
    return checked


def check_spaces(algorithm: str, observation_space: spaces.Space, action_space: spaces.Space) -> None:
    """Raises ParameterError if the algorithm cannot act in ``action_space``, naming those that can."""
    info = algorithm_info(algorithm)
    if is_image(action_space):
        raise ParameterError("an image is an observation space, not an action space")
    if not isinstance(action_space, info.action_spaces):
        able = [a.name for a in ALGORITHMS.values() if isinstance(action_space, a.action_spaces)]
        raise ParameterError(f"{info.name} cannot handle {type(action_space).__name__} actions; "
                             f"algorithms that can: {', '.join(able) or 'none'}")
    images = [sub for sub in (observation_space.spaces.values() if isinstance(observation_space, spaces.Dict)
                              else [observation_space]) if is_image(sub)]
    if images and info.image_policy is None:
        able = [a.name for a in ALGORITHMS.values() if a.image_policy and isinstance(action_space, a.action_spaces)]
        raise ParameterError(f"{info.name} has no policy for image observations; algorithms that have one for "
                             f"{type(action_space).__name__} actions: {', '.join(able) or 'none'}")
    if isinstance(observation_space, spaces.Dict) and not info.dict_observations:
        able = [a.name for a in ALGORITHMS.values() if a.dict_observations and isinstance(action_space, a.action_spaces)]
        raise ParameterError(f"{info.name} has no policy for Dict observations; algorithms that have one for "
                             f"{type(action_space).__name__} actions: {', '.join(able) or 'none'}")
    if isinstance(action_space, spaces.Box) and not (
            np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise ParameterError("a Box action space needs finite low and high bounds: the policy's actions are "
                             "scaled into them")


#: how the clients of one agent share what they learn (`factories.LEARNER_FACTORIES` builds each mode's learner)
SHARING_MODES = tuple(mode.value for mode in Sharing)


def check_agent(definition: AgentDefinition) -> tuple[Algorithm, dict[str, Any]]:
    """Check a whole agent definition (spaces as JSON specs), as a preset or the admin service gives it;
    returns the algorithm and the typed parameter values.

    Raises:
        ParameterError: an unknown algorithm, spaces the algorithm cannot handle, a bad
            parameter (unknown, of the wrong type, or a float that is not finite), or a network that cannot
            take the observations (`check_extractor`).
        SpaceError: a space that is not valid JSON space syntax.
    """
    if not isinstance(definition.parameters, dict):
        raise ParameterError("parameters must be an object of name: value")
    info = check_agent_spaces(definition)
    values = check_parameters(info.name, definition.parameters)
    check_extractor(parse_space(definition.observation_space, "observation_space"), values)
    return info, values


def check_agent_spaces(definition: AgentDefinition) -> Algorithm:
    """`check_agent` without the parameters: the algorithm, the spaces, the filters and the sharing mode."""
    info = algorithm_info(definition.algorithm)
    observation_space = parse_space(definition.observation_space, "observation_space")
    action_space = parse_space(definition.action_space, "action_space")
    check_spaces(info.name, observation_space, action_space)
    try:
        check_filters(definition.filters, observation_space, info.on_policy)
    except ValueError as error:
        raise ParameterError(str(error)) from None
    if definition.sharing is Sharing.ADVISED:
        check_advisable(info, action_space)
    return info


#: the smallest image SB3's NatureCNN takes (its 8 x 8 stride-4, 4 x 4 stride-2 and 3 x 3 convolutions)
NATURE_CNN_SMALLEST = 36


def check_extractor(observation_space: spaces.Space, values: dict[str, Any]) -> None:
    """Raises ParameterError if the features extractor of the policy ``values`` (checked parameter values)
    make cannot take the observations: `GridCNN` on a space that is no grid, or SB3's NatureCNN (the default for
    images) on an image smaller than it takes; or if their ``policy_kwargs`` name an unknown one."""
    policy_kwargs = sb3_policy_kwargs(values.get("policy_kwargs")) or {}
    if policy_kwargs.get("features_extractor_class") is GridCNN:
        try:
            grid_shape(observation_space)
        except ValueError as error:
            raise ParameterError(str(error)) from None
        return
    subs = observation_space.spaces if isinstance(observation_space, spaces.Dict) else {"": observation_space}
    for key, sub in subs.items():
        if isinstance(sub, ImageBox) and min(sub.height, sub.width) < NATURE_CNN_SMALLEST:
            where = f"the image {key!r}" if key else "an image"
            raise ParameterError(
                f"{where} of {sub.height} x {sub.width} is smaller than SB3's NatureCNN takes ({NATURE_CNN_SMALLEST} x "
                f"{NATURE_CNN_SMALLEST}); name a network for small images in policy_kwargs: "
                '{"features_extractor_class": "GridCNN"}')


def check_advisable(info: Algorithm, action_space: spaces.Space) -> None:
    """Raises ParameterError, with the reason, if an algorithm cannot run an ``advised`` agent here."""
    if info.advised is None:
        deterministic = info.name in ("TD3", "DDPG")
        raise ParameterError(f"{info.name} cannot be advised: "
                             f"{NOT_ADVISED['deterministic' if deterministic else 'other']}")
    try:
        advice_width(action_space)
    except ValueError as error:
        raise ParameterError(f"{info.name} cannot be advised here: {error}") from None


def registry_records() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The algorithms and parameters tables as stored (name, continuous flag; typed parameters)."""
    algorithms = [{"name": a.name, "continuous": a.continuous, "on_policy": a.on_policy,
                   "action_spaces": [s.__name__ for s in a.action_spaces], "action_mask": a.masks,
                   "package": a.package} for a in ALGORITHMS.values()]
    params = [p.record() for a in ALGORITHMS.values() for p in parameters(a.name).values()]
    return algorithms, params
