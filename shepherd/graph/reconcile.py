"""A preset's agent met in the store: what its learner is built with (`learner_values`), and whether the
stored agent can take the preset's declaration (`reconcile`): the same algorithm and spaces, and changed
parameters or filters that still build a network its saved model loads into."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from shepherd.agents import ParameterError, algorithm_info, checkpoint as checkpoint_format, learner_for
from shepherd.definition import Filters
from shepherd.graph.preset import AgentSpec, PresetError
from shepherd.graph.schedule import Schedule
from shepherd.storage import AgentRecord, Store
from shepherd.lessons import lessons_to_json
from shepherd.wire.spaces import parse_space, space_to_json

logger = logging.getLogger(__name__)


def learner_values(algorithm: str, values: dict[str, Any], schedule: Schedule) -> dict[str, Any]:
    """The parameter values an agent's learner is built with: an off-policy agent's ``learning_starts`` is
    its schedule's ``heatup_steps``."""
    values = dict(values)
    if not algorithm_info(algorithm).on_policy:
        values["learning_starts"] = schedule.heatup_steps  # heatup is SB3's learning_starts
    return values


def reconcile(store: Store, record: AgentRecord, spec: AgentSpec, parameters: dict[str, Any],
              schedule: Callable[[], Schedule]) -> AgentRecord:
    """The stored agent that a preset's ``spec`` names, with the preset's checked ``parameters`` and filters
    (``schedule``: the agent's, as `GraphManager.schedule_for` gives it).

    Raises:
        PresetError: another algorithm or other spaces, or parameters and filters its saved model does not fit.
    """
    same_spaces = (space_to_json(parse_space(record.observation_space)) ==
                   space_to_json(parse_space(spec.observation_space)) and
                   space_to_json(parse_space(record.action_space)) == space_to_json(parse_space(spec.action_space)))
    if record.algorithm.upper() != spec.algorithm.upper() or not same_spaces:
        raise PresetError(
            f"agent {spec.name!r} exists in the store with algorithm {record.algorithm} and other spaces, "
            "so its model cannot serve the preset's: give the preset's agent another name, or serve the "
            "preset with another --data")
    filters = spec.filters.to_json()
    if record.parameters != parameters or record.filters != filters:
        check_model_fits(store, record, parameters, spec.filters, schedule())
        logger.info("agent %s: parameters and filters updated from the preset", spec.name)
        record = store.update_agent(record.id, parameters=parameters, filters=filters)
    lessons = lessons_to_json(spec.lessons)
    if record.lessons != lessons:  # no model to fit: the runtime keeps its lesson if the new list has it
        logger.info("agent %s: lessons updated from the preset", spec.name)
        record = store.update_agent(record.id, lessons=lessons)
    level = None if spec.level is None else spec.level.to_json()
    if record.level != level:  # the skills are other agents: the selector's own model still fits
        logger.info("agent %s: level updated from the preset", spec.name)
        record = store.update_agent(record.id, level=level)
    return record


def check_model_fits(store: Store, record: AgentRecord, parameters: dict[str, Any], filters: Filters,
                     schedule: Schedule) -> None:
    """Before the store takes a preset's changed parameters or filters: the agent's saved model must still
    load into the network they build (another ``net_arch`` or ``frame_stack``, say, does not).

    Raises:
        PresetError: one line with what differs and the choices; nothing was changed.
    """
    path = checkpoint_format.model_path(store.agent_folder(record.id))
    if not path.exists():
        return
    try:
        learner = learner_for(replace(record.definition, parameters=parameters, filters=filters),
                              learner_values(record.algorithm, parameters, schedule), schedule.improve_steps)
        differences = learner.checkpoint_mismatch(path)
    except ParameterError as error:
        raise PresetError(f"agent {record.name!r}: {error}") from None
    if differences:
        shown = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
        raise PresetError(
            f"agent {record.name!r}: the preset's parameters and filters build a network that no longer fits its saved "
            f"model ({shown}); nothing was changed. Choose one: start the agent afresh with `run.py agents "
            f"restart {record.name}` (its model is discarded), give the preset's agent another name, or "
            "serve the preset with another --data")
