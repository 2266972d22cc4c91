"""Parameters a live learner honours when they change between two updates (``run.py agents set-param``).

Which ones is stable-baselines3's business: an attribute that its ``train()`` (or DQN's ``_on_step``) reads
anew at every update changes the learning from the next update on; one that is baked into something built
with the model (a buffer's gamma, SAC's entropy optimiser, the networks) needs a restart. SB3 keeps some
of them as schedules built at construction (``lr_schedule``, PPO's ``clip_range``, DQN's
``exploration_schedule``): those are rebuilt here, exactly as the constructor builds them.
"""

from __future__ import annotations

from typing import Any

from stable_baselines3.common.utils import FloatSchedule, LinearSchedule as EpsilonSchedule

from shepherd.agents.bounds import ParameterBounds
from shepherd.agents.parameters import LinearSchedule, ParameterError
from shepherd.agents.registry import algorithm_info, check_parameters, parameters

#: what each live parameter changes, and which algorithms honour it (those that have the parameter, of
#: the family named: "on" on-policy, "off" off-policy, "any")
LIVE: dict[str, tuple[str, str]] = {
    "learning_rate": ("any", "the optimisers' learning rate (SB3 sets it from lr_schedule at every update)"),
    "ent_coef": ("on", "the entropy bonus's weight in the loss"),
    "vf_coef": ("on", "the value loss's weight"),
    "max_grad_norm": ("on", "the gradient clipping norm"),
    "n_epochs": ("on", "passes over each rollout"),
    "clip_range": ("on", "PPO's clipping of the policy ratio"),
    "tau": ("off", "the target networks' soft update coefficient"),
    "exploration_fraction": ("off", "the share of the budget over which epsilon falls"),
    "exploration_initial_eps": ("off", "epsilon at the start"),
    "exploration_final_eps": ("off", "epsilon at the end of its fall"),
}


def live_parameters(algorithm: str) -> list[str]:
    """The parameters of an algorithm that can change on a live learner."""
    info = algorithm_info(algorithm)
    known = parameters(info.name)
    family = "on" if info.on_policy else "off"
    return [name for name, (where, _) in LIVE.items() if name in known and where in ("any", family)]


def check_live(algorithm: str, values: dict[str, Any], bounds: ParameterBounds) -> dict[str, Any]:
    """The values, typed and checked as an agent's parameters, if every one can change without a restart
    and is within its bound of ``bounds`` (the server's, `shepherd.agents.bounds`).

    Raises:
        ParameterError: an unknown name or a bad value (the registry's message), a parameter that needs a
            restart (naming those that can change), or a value outside its bound (naming the bound and the
            option that changes it).
    """
    if not values:
        raise ParameterError("give at least one NAME=VALUE")
    checked = check_parameters(algorithm, values)
    live = live_parameters(algorithm)
    fixed = [name for name in checked if name not in live]
    if fixed:
        info = algorithm_info(algorithm)
        raise ParameterError(f"{', '.join(fixed)} of {info.name} {'needs' if len(fixed) == 1 else 'need'} a restart "
                             f"(run.py agents restart, which discards the model); {info.name} can change without "
                             f"one: {', '.join(live)}")
    bounds.check(algorithm_info(algorithm).name, checked)
    return checked


def apply(model: Any, values: dict[str, Any]) -> None:
    """Set checked values on a live SB3 model, on its learner's thread between two updates."""
    for name, value in values.items():
        schedule = LinearSchedule(float(value[4:])) if isinstance(value, str) and value.startswith("lin_") else value
        if name == "learning_rate":
            model.learning_rate = schedule
            model.lr_schedule = FloatSchedule(schedule)
        elif name == "clip_range":
            model.clip_range = FloatSchedule(schedule)
        else:
            setattr(model, name, value)
    if any(name.startswith("exploration_") for name in values):
        model.exploration_schedule = EpsilonSchedule(model.exploration_initial_eps, model.exploration_final_eps,
                                                     model.exploration_fraction)
