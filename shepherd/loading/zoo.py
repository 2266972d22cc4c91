"""RL Zoo's hyperparameter files read as they are: ``zoo:ALGO/ENV_ID`` and ``zoo:FILE.yml#ENV_ID`` presets.

RL Baselines3 Zoo keeps one YAML file per algorithm (``hyperparams/ppo.yml``), one entry per env id. This
module turns one entry into a preset's plain form (as `shepherd.loading.yaml_preset` builds presets), which
then goes through the same checks and ``-cp`` overrides as a YAML preset:

- ``zoo:ppo/CartPole-v1``: the entry ``CartPole-v1`` of ``hyperparams/ppo.yml`` of the installed
  ``rl_zoo3`` package (RL Zoo's own default entry when the file has none for the env, as RL Zoo does);
- ``zoo:path/to/ppo.yml#Pendulum-v1``: the entry ``Pendulum-v1`` of that file; the file's name without
  its suffix names the algorithm, as in RL Zoo's folder (``ppo``, ``sac``, ``ppo_lstm``, or any algorithm
  ``run.py algorithms`` lists);
- an env id may be any id ``gymnasium.make`` accepts, ``module:Env-v0`` included.

What applies is mapped (`map_entry`): the env's spaces (from ``gymnasium.make``), ``n_envs``,
``n_timesteps`` (the training budget), ``policy``, ``policy_kwargs`` (a Python expression in the file, read
with `ast`, never evaluated), ``lin_`` schedules, ``normalize`` and ``frame_stack`` (the agent's filters),
``noise_type``/``noise_std`` (action noise), ``learning_starts`` (the schedule's heatup), ``env_kwargs``;
what cannot is refused by name, one line each. ``-cp zoo.KEY=VALUE`` changes the entry before it is mapped
(``null`` removes the key); every other ``-cp`` changes the preset it maps to.
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from shepherd.agents import ParameterError, algorithm_info, parameters
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph.preset import InvalidPreset, Preset, PresetError, Problem
from shepherd.loading.overrides import Override, overridden, parse_override, seed_overrides
from shepherd.loading.yaml_preset import read_yaml_preset
from shepherd.loading.zoo_literal import ExpressionError, literal
from shepherd.wire.spaces import SpaceError, space_to_json

PREFIX = "zoo:"
#: RL Zoo's algorithm names (its hyperparams files' names) and the algorithms Shepherd serves them with
ZOO_ALGORITHMS = {"a2c": "A2C", "ddpg": "DDPG", "dqn": "DQN", "ppo": "PPO", "sac": "SAC", "td3": "TD3",
                  "crossq": "CrossQ", "qrdqn": "QRDQN", "tqc": "TQC", "trpo": "TRPO", "ppo_lstm": "RecurrentPPO",
                  "ppo_mask": "MaskablePPO"}
#: targets of envs whose gymnasium spec has no reward_threshold (the spec's threshold comes first)
DEFAULT_TARGETS = {"Pendulum-v1": -200.0, "MountainCarContinuous-v0": 90.0, "CartPole-v1": 475.0}
#: the owner of a zoo preset's agent
OWNER = "zoo"
#: the evaluation periods of a zoo preset's schedule in its budget
EVALUATIONS = 20
#: steps per second a zoo preset's validation assumes at least, for its timeout (never under 900 s)
SLOWEST_STEPS_PER_SECOND = 50

_NORMALIZE_KEYS = {"norm_obs": "normalize_observations", "norm_reward": "normalize_rewards",
                   "clip_obs": "clip_observations", "clip_reward": "clip_rewards", "gamma": "gamma",
                   "epsilon": "epsilon"}
_NOISES = {"normal": "normal", "ornstein-uhlenbeck": "ornstein-uhlenbeck"}
_REFUSED = {
    "env_wrapper": "RL Zoo wraps the env it runs; Shepherd's clients run the env, so wrap it in the client "
                   "(the server never sees the env)",
    "vec_env_wrapper": "RL Zoo wraps its VecEnv; Shepherd's clients run the envs, so wrap them in the client",
    "callback": "RL Zoo's callbacks run inside SB3's learn() loop, which a served learner does not run",
    "monitor_kwargs": "RL Zoo's Monitor wrapper runs around its env; Shepherd records episodes from the "
                      "clients' steps",
    "replay_buffer_class": "Shepherd's off-policy learner keeps SB3's own replay buffer (HER's needs goals "
                           "relabelled from whole episodes of one env)",
    "replay_buffer_kwargs": "Shepherd's off-policy learner keeps SB3's own replay buffer",
}
_HOW_TO_DROP = "; drop it with -cp zoo.{key}=null"


@dataclass(frozen=True)
class ZooSource:
    """Where a zoo preset's entry is: the hyperparameter file, the env id, and the algorithm's zoo name."""

    file: Path
    env_id: str
    zoo_algorithm: str
    text: str  # the preset as given, ``zoo:ppo/CartPole-v1``

    @property
    def shown(self) -> str:
        """How messages name the entry: ``rl_zoo3 hyperparams/ppo.yml#CartPole-v1`` or ``FILE#ENV``."""
        zoo = zoo_folder()
        if zoo is not None and self.file.parent == zoo:
            return f"rl_zoo3 hyperparams/{self.file.name}#{self.env_id}"
        return f"{self.file}#{self.env_id}"


def is_zoo(name: str) -> bool:
    return name.startswith(PREFIX)


def zoo_folder() -> Path | None:
    """The ``hyperparams`` folder of the installed rl_zoo3 package (not imported), or None."""
    try:
        found = importlib.util.find_spec("rl_zoo3")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    folder = Path(list(found.submodule_search_locations)[0]) / "hyperparams"
    return folder if folder.is_dir() else None


def zoo_source(text: str) -> ZooSource:
    """The entry a ``zoo:`` preset names.

    Raises:
        PresetError: the syntax is wrong, the file is missing, or rl_zoo3 is not installed (one line each).
    """
    spec = text[len(PREFIX):]
    usage = "write zoo:ALGO/ENV_ID (rl_zoo3's hyperparams/ALGO.yml) or zoo:FILE.yml#ENV_ID"
    if "#" in spec:
        file_text, _, env_id = spec.rpartition("#")
        file = Path(file_text)
        if not file_text or not env_id:
            raise PresetError(f"{text}: {usage}")
        if not file.is_file():
            raise PresetError(f"{text}: no file {file}")
        return ZooSource(file, env_id, file.stem.lower(), text)
    algorithm, slash, env_id = spec.partition("/")
    if not slash or not algorithm or not env_id:
        raise PresetError(f"{text}: {usage}")
    folder = zoo_folder()
    if folder is None:
        raise PresetError(f"{text}: reads rl_zoo3's hyperparams/{algorithm}.yml, and rl_zoo3 is not installed: "
                          f"pip install rl_zoo3, or give a file: zoo:path/to/{algorithm}.yml#{env_id}")
    file = folder / f"{algorithm.lower()}.yml"
    if not file.is_file():
        known = ", ".join(sorted(path.stem for path in folder.glob("*.yml")))
        raise PresetError(f"{text}: rl_zoo3 has no hyperparams/{algorithm}.yml; it has {known}")
    return ZooSource(file, env_id, algorithm.lower(), text)


def read_entry(source: ZooSource) -> tuple[dict[str, Any], bool]:
    """The file's entry for the env (a copy), and whether it is the file's ``default`` entry.

    Raises:
        PresetError: the file is not YAML, or has neither an entry for the env nor a default one.
    """
    data = read_yaml_preset(source.file)
    if not isinstance(data, dict):
        raise PresetError(f"{source.shown}: an RL Zoo file is a mapping of env id: hyperparameters")
    if source.env_id in data:
        entry, default = data[source.env_id], False
    elif "default" in data:
        entry, default = data["default"], True
    else:
        envs = [key for key in data if key not in ("atari", "default")]
        raise PresetError(f"{source.shown}: no entry for {source.env_id} and no default entry; the file has "
                          + ", ".join(map(str, envs[:30])) + (" ..." if len(envs) > 30 else ""))
    if not isinstance(entry, dict):
        raise PresetError(f"{source.shown}: the entry is not a mapping of hyperparameters")
    return dict(entry), default


# -- Python expressions in zoo files, read without evaluating them ---------------------------------------
def agent_name(zoo_algorithm: str, env_id: str) -> str:
    """``ppo-CartPole-v1``: letters, digits, ``_.-`` only (a ``module:Env-v0`` id loses its module)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{zoo_algorithm}-{env_id.rpartition(':')[2]}")[:64]


def target_for(env_id: str) -> float | None:
    """The env spec's ``reward_threshold``, else `DEFAULT_TARGETS`'s, else None."""
    try:
        threshold = gym.spec(env_id).reward_threshold
    except Exception:  # gymnasium raises several kinds for ids it cannot find; make() says which later
        threshold = None
    if threshold is not None:
        return float(threshold)
    return DEFAULT_TARGETS.get(env_id)


def _problem(key: str, message: str) -> Problem:
    return Problem(f"zoo.{key}", message)


def _policy_kwargs(value: Any, problems: list[Problem]) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = literal(value)
        except ExpressionError as error:
            problems.append(_problem("policy_kwargs", str(error) + _HOW_TO_DROP.format(key="policy_kwargs")))
            return None
    if not isinstance(value, dict):
        problems.append(_problem("policy_kwargs", f"must be a mapping, not {value!r}"))
        return None
    arch = value.get("net_arch")
    if isinstance(arch, list) and len(arch) == 1 and isinstance(arch[0], dict):
        value["net_arch"] = arch[0]  # SB3 reads [dict(pi=..., vf=...)] as dict(pi=..., vf=...) since 1.8
    return value


def _filters(entry: dict[str, Any], problems: list[Problem]) -> dict[str, Any]:
    """The agent's ``filters`` for ``normalize`` (true, or a mapping or Python expression of VecNormalize's
    arguments) and ``frame_stack``."""
    found: dict[str, Any] = {}
    normalize = entry.pop("normalize", False)
    if isinstance(normalize, str):
        try:
            normalize = literal(normalize)
        except ExpressionError as error:
            problems.append(_problem("normalize", str(error)))
            normalize = False
    if isinstance(normalize, dict):
        for key, value in normalize.items():
            if key in _NORMALIZE_KEYS:
                found[_NORMALIZE_KEYS[key]] = value
            else:
                problems.append(_problem(f"normalize.{key}", "VecNormalize's argument has no filter field here; "
                                         f"the filters take {', '.join(_NORMALIZE_KEYS)}"))
        found.setdefault("normalize_observations", True)  # VecNormalize's defaults
        found.setdefault("normalize_rewards", True)
        normalize = True
    if normalize is True:
        found.setdefault("normalize_observations", True)
        found.setdefault("normalize_rewards", True)
        if "gamma" in entry:  # RL Zoo scales rewards with the algorithm's discount
            found.setdefault("gamma", entry["gamma"])
    elif normalize not in (False, None):
        problems.append(_problem("normalize", f"must be true, false or VecNormalize's arguments, not {normalize!r}"))
    frame_stack = entry.pop("frame_stack", None)
    if frame_stack is not None:
        found["frame_stack"] = frame_stack
    return found


def map_entry(entry: dict[str, Any], source: ZooSource, default: bool = False) -> tuple[dict[str, Any], list[Problem]]:
    """A preset's plain form for a zoo entry, and the problems of the keys that cannot apply (each at
    ``zoo.KEY``). The preset's own checks (parameter names and types, spaces) come after, when it is built.

    Raises:
        PresetError: the algorithm is unknown, or gymnasium cannot make the env.
    """
    entry = dict(entry)
    problems: list[Problem] = []
    name = ZOO_ALGORITHMS.get(source.zoo_algorithm, source.zoo_algorithm)
    try:
        info = algorithm_info(name)
    except ParameterError as error:
        raise PresetError(f"{source.shown}: {error}") from None
    known = parameters(info.name)
    env_kwargs = entry.pop("env_kwargs", None) or {}
    if not isinstance(env_kwargs, dict):
        problems.append(_problem("env_kwargs", f"must be a mapping, not {env_kwargs!r}"))
        env_kwargs = {}
    try:
        env = gym.make(source.env_id, **env_kwargs)
    except Exception as error:  # gymnasium's errors for unknown ids, modules and kwargs vary
        raise PresetError(f"{source.shown}: gymnasium cannot make {source.env_id}: {type(error).__name__}: "
                          f"{error}") from None
    try:
        observation_space, action_space = env.observation_space, env.action_space
    finally:
        env.close()
    try:
        observations, actions = space_to_json(observation_space), space_to_json(action_space)
    except SpaceError as error:
        raise PresetError(f"{source.shown}: {source.env_id}'s spaces cannot be served: {error}") from None

    for key, reason in _REFUSED.items():
        if key in entry:
            entry.pop(key)
            problems.append(_problem(key, reason + _HOW_TO_DROP.format(key=key)))
    policy = entry.pop("policy", None)
    image = isinstance(observations, list) and bool(observations) and observations[0] == "Image"
    if policy is not None and policy not in info.policies and not (image and policy == info.image_policy):
        why = ("" if image else f" (and {source.env_id}'s observations are not images, which take "
                                f"{info.image_policy})" if info.image_policy else "")
        problems.append(_problem("policy", f"{policy}: Shepherd builds {info.name} with {' or '.join(info.policies)} "
                                           f"(for Dict observations){why}" + _HOW_TO_DROP.format(key="policy")))
    filters = _filters(entry, problems)
    use_sde = entry.pop("use_sde", None)
    if use_sde:
        reason = dict(info.excluded).get("use_sde", "")
        problems.append(_problem("use_sde", f"gSDE is not available in Shepherd: {reason}; drop it with "
                                            "-cp zoo.use_sde=null (SB3's Gaussian noise instead)"))
    for key in ("sde_sample_freq", "use_sde_at_warmup"):  # gSDE's own: refused with it, ignored without it
        entry.pop(key, None)

    n_timesteps = entry.pop("n_timesteps", None)
    budget: int | None = None
    if isinstance(n_timesteps, str):  # YAML reads 2e4 (no dot) as a string; RL Zoo's int() would refuse it too
        try:
            n_timesteps = float(n_timesteps)
        except ValueError:
            pass
    if n_timesteps is not None:
        if isinstance(n_timesteps, (int, float)) and not isinstance(n_timesteps, bool) and n_timesteps >= 1 \
                and math.isfinite(n_timesteps):
            budget = int(n_timesteps)
        else:
            problems.append(_problem("n_timesteps", f"must be a positive number, not {n_timesteps!r}"))
    if "policy_kwargs" in entry:
        kwargs = _policy_kwargs(entry.pop("policy_kwargs"), problems)
        if kwargs is not None:
            entry["policy_kwargs"] = kwargs
    if "noise_type" in entry or "noise_std" in entry:
        kind = str(entry.pop("noise_type", "normal")).strip()
        if kind not in _NOISES:
            problems.append(_problem("noise_type", f"{kind!r}: the noises are {', '.join(_NOISES)}"))
        else:
            entry["action_noise"] = _NOISES[kind]
        if "noise_std" in entry:
            entry["action_noise_sigma"] = entry.pop("noise_std")
    heatup = 0
    if not info.on_policy:
        starts = entry.pop("learning_starts", known["learning_starts"].default if "learning_starts" in known else 0)
        heatup = starts if isinstance(starts, int) and not isinstance(starts, bool) else 0
        if heatup != starts:
            problems.append(_problem("learning_starts", f"must be an integer, not {starts!r}"))

    schedule: dict[str, Any] = {"heatup_steps": heatup, "improve_steps": budget, "evaluation_episodes": 5}
    if budget is not None:
        schedule["steps_between_evaluation_periods"] = max(1, budget // EVALUATIONS)
    n_envs = entry.get("n_envs", 1)
    clients = min(n_envs, 4) if isinstance(n_envs, int) and n_envs >= 1 else 1  # the registry checks n_envs
    validation: dict[str, Any] = {"env_id": source.env_id, "clients": clients}
    if budget is not None:
        validation["max_steps"] = budget
        validation["timeout_seconds"] = float(max(900, budget // SLOWEST_STEPS_PER_SECOND))
    target = target_for(source.env_id)
    if target is not None:
        validation["target_return"] = target
    if env_kwargs:
        validation["env_kwargs"] = env_kwargs
    agent: dict[str, Any] = {"name": agent_name(source.zoo_algorithm, source.env_id), "algorithm": info.name,
                             "observation_space": observations, "action_space": actions, "parameters": entry}
    if filters:
        agent["filters"] = filters
    which = "its default entry" if default else source.env_id
    data = {"owner": OWNER,
            "description": f"RL Zoo's {source.zoo_algorithm} hyperparameters for {source.env_id} ({source.shown}"
                           f"{', ' + which if default else ''})",
            "agents": [agent], "schedule": schedule, "validation": validation}
    return data, problems


def load_zoo_preset(text: str, overrides: list[Override], problems: list[Problem],
                    bounds: ParameterBounds = DEFAULT_BOUNDS) -> Preset:
    """The `Preset` of a ``zoo:`` preset, its ``-cp zoo.KEY`` overrides applied to the entry and the
    others to the preset it maps to; every problem at once.

    Raises:
        InvalidPreset: the entry's keys that cannot apply, and the preset's problems, each located.
        PresetError: the source cannot be read (syntax, file, env id).
    """
    source = zoo_source(text)
    entry, default = read_entry(source)
    rest = []
    for override in overrides:
        if override.key[0] != "zoo":
            rest.append(override)
        elif len(override.key) != 2:
            problems.append(Problem("", "write -cp zoo.KEY=VALUE for a key of the RL Zoo entry", override.source))
        elif override.value is None:
            entry.pop(override.key[1], None)
        else:
            entry[override.key[1]] = override.value
    data, refused = map_entry(entry, source, default)
    try:
        return overridden(data, text, rest, [*problems, *refused], bounds)
    except InvalidPreset as error:
        raise error.located(source.shown) from None


def load(text: str, overrides: list[str] | tuple[str, ...], seed: int | None,
         bounds: ParameterBounds = DEFAULT_BOUNDS) -> Preset:
    """``load_preset`` for ``zoo:`` presets: parse the overrides, add ``--seed``'s, load.

    Raises:
        PresetError: as `load_zoo_preset`, and overrides that cannot be parsed.
    """
    problems: list[Problem] = []
    parsed = []
    for item in overrides:
        try:
            parsed.append(parse_override(item))
        except PresetError as error:
            problems.append(Problem("", str(error).removeprefix(f"-cp {item}: "), f"-cp {item}"))
    source = zoo_source(text)
    agent = {"agents": [{"name": agent_name(source.zoo_algorithm, source.env_id)}]}
    return load_zoo_preset(text, seed_overrides(agent, seed) + parsed, problems, bounds)
