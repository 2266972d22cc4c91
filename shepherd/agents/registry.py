"""The algorithms Shepherd serves, their typed parameters (read from SB3) and the spaces they handle (their
models are built by `shepherd.agents.factories`).

Every algorithm is an SB3 (or sb3-contrib) class wrapped by a family adapter: PPO and A2C by the on-policy
learner, DQN, SAC, TD3 and DDPG by the off-policy learner; the sb3-contrib ones register themselves in
``contrib.py`` the same way. Their parameters are the class's constructor arguments (see
`shepherd.agents.parameters` for the types), less the few a pooled learner cannot honour, plus a few of
Shepherd's own (``n_envs``: rollout segments or replay buffer columns, ``action_noise`` for continuous
off-policy ones).

Adding an algorithm is one call of `register` with an `Algorithm`: its class, its family (the adapter
that feeds it; an adapter subclass where the algorithm needs more than its family gives, as masks or
recurrent state do), the action spaces it handles, and the constructor arguments it cannot take here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from gymnasium import spaces
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3

from shepherd.agents.filters import check_filters
from shepherd.agents.sb3.advised import NOT_ADVISED, AdvisedOnPolicyAdapter, advice_width
from shepherd.agents.sb3.off_policy import OffPolicyAdapter
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.parameters import (Parameter, ParameterError, ParamType, coerce,
                                        from_signature)
from shepherd.agents.sb3.base import SB3Algorithm
from shepherd.agents.worker import ThreadedLearner
from shepherd.definition import AgentDefinition, Sharing
from shepherd.wire.images import is_image
from shepherd.wire.spaces import parse_space

EVERY_ACTION_SPACE = (spaces.Discrete, spaces.Box, spaces.MultiDiscrete, spaces.MultiBinary)
_GSDE = "gSDE's exploration matrix would be shared by every client of the agent; use the default noise"
OFF_POLICY_EXCLUDED = (
    ("n_steps", "n-step returns need one client's consecutive steps, and the replay buffer mixes clients"),
    ("optimize_memory_usage", "it takes the next observation from the next row, which may be another client's"),
)


@dataclass(frozen=True)
class Algorithm:
    """An SB3 algorithm, the family adapter that feeds it, and which action spaces it handles; or a learner
    that is not SB3 (``learner``: builds the worker's `shepherd.agents.algorithm.Algorithm` from the agent's
    name, spaces, parameter values and training budget; ``sb3_class`` then names the class whose constructor
    gives its parameters, and ``family`` is unused)."""

    name: str
    sb3_class: type[Any]
    #: the adapter that feeds the model (model, agent name, total steps): `OnPolicyAdapter`,
    #: `OffPolicyAdapter` or a subclass of one
    family: Callable[[Any, str, int | None], SB3Algorithm]
    action_spaces: tuple[type[spaces.Space], ...]
    # parameters SB3 has but a pooled learner cannot honour, with the reason
    excluded: tuple[tuple[str, str], ...] = ()
    #: whether a step may carry an ``action_mask`` (sb3-contrib's MaskablePPO)
    masks: bool = False
    #: whether it takes Dict observations (SB3's MultiInputPolicy)
    dict_observations: bool = True
    #: where the class comes from, as `run.py algorithms` shows it
    package: str = "stable-baselines3"
    #: its SB3 policy names for vector observations and for Dict ones (RecurrentPPO's are LSTM policies)
    policies: tuple[str, str] = ("MlpPolicy", "MultiInputPolicy")
    #: its SB3 policy for image observations (NatureCNN's; None: it has none, and refuses images)
    image_policy: str | None = "CnnPolicy"
    #: the adapter of an ``advised`` agent's client learners (None: the algorithm cannot be advised)
    advised: Callable[..., SB3Algorithm] | None = None
    #: a learner that is not SB3: (agent name, observation space, action space, values, total steps) -> the
    #: algorithm a `ThreadedLearner` drives (None: an SB3 class fed by ``family``)
    learner: Callable[[str, spaces.Space, spaces.Space, dict[str, Any], int | None], Any] | None = None

    @property
    def on_policy(self) -> bool:
        return isinstance(self.family, type) and issubclass(self.family, OnPolicyAdapter)

    @property
    def continuous(self) -> bool:
        """The original Shepherd's flag: whether the algorithm handles continuous (Box) actions."""
        return spaces.Box in self.action_spaces


ON_POLICY_EXCLUDED = (("use_sde", _GSDE), ("sde_sample_freq", _GSDE))
SAC_EXCLUDED = OFF_POLICY_EXCLUDED + (("use_sde", _GSDE), ("sde_sample_freq", _GSDE), ("use_sde_at_warmup", _GSDE))

#: every algorithm agents can run, by upper-case name (filled by `register`)
ALGORITHMS: dict[str, Algorithm] = {}
#: algorithms of the SB3 family that are not served, with the reason (`run.py algorithms` shows them)
NOT_SERVED: dict[str, str] = {}
#: algorithms agents run that are not listed among those to choose from (a programmed selector, declared with
#: ``selector:`` in a preset), by upper-case name
UNLISTED: dict[str, Algorithm] = {}


def register(algorithm: Algorithm, listed: bool = True) -> Algorithm:
    """Make an algorithm available to agents, presets, the admin API and ``run.py algorithms``.

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


register(Algorithm("PPO", PPO, OnPolicyAdapter, EVERY_ACTION_SPACE, ON_POLICY_EXCLUDED,
                   advised=AdvisedOnPolicyAdapter))
register(Algorithm("A2C", A2C, OnPolicyAdapter, EVERY_ACTION_SPACE, ON_POLICY_EXCLUDED,
                   advised=AdvisedOnPolicyAdapter))
register(Algorithm("DQN", DQN, OffPolicyAdapter, (spaces.Discrete,), OFF_POLICY_EXCLUDED))
register(Algorithm("SAC", SAC, OffPolicyAdapter, (spaces.Box,), SAC_EXCLUDED))
register(Algorithm("TD3", TD3, OffPolicyAdapter, (spaces.Box,), OFF_POLICY_EXCLUDED))
register(Algorithm("DDPG", DDPG, OffPolicyAdapter, (spaces.Box,), OFF_POLICY_EXCLUDED))

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


#: how each sharing mode builds an agent's learner: (algorithm, name, spaces, values, total steps, filters) ->
#: learner; an advised agent's factory builds one client's learner, once per client name. Filled by
#: `shepherd.agents.factories` (imported at the end of this module)
LEARNER_FACTORIES: dict[Sharing, Callable[..., ThreadedLearner]] = {}

#: how the clients of one agent share what they learn (`LEARNER_FACTORIES` builds each mode's learner)
SHARING_MODES = tuple(mode.value for mode in Sharing)


def check_agent(definition: AgentDefinition) -> tuple[Algorithm, dict[str, Any]]:
    """Check a whole agent definition (spaces as JSON specs), as a preset or the admin service gives it;
    returns the algorithm and the typed parameter values.

    Raises:
        ParameterError: an unknown algorithm, a sharing mode without a learner, spaces the algorithm cannot handle, or a bad
            parameter (unknown, of the wrong type, or a float that is not finite).
        SpaceError: a space that is not valid JSON space syntax.
    """
    if definition.sharing not in LEARNER_FACTORIES:
        raise ParameterError(f"knowledge sharing {definition.sharing.value!r} has no learner here")
    if not isinstance(definition.parameters, dict):
        raise ParameterError("parameters must be an object of name: value")
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
    return info, check_parameters(info.name, definition.parameters)


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


from shepherd.agents.sb3 import contrib  # noqa: E402,F401  (registers sb3-contrib's algorithms)
from shepherd.agents import programmed  # noqa: E402,F401  (registers the programmed selector)
from shepherd.agents import factories  # noqa: E402,F401  (fills LEARNER_FACTORIES)
