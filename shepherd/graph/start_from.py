"""Where a preset's agents start when they have no model of their own (Coach's checkpoint restore, ``run.py
-crd DIR`` and ``-crf FILE``): another data folder's checkpoints of the agents of the same names, or one model
zip for a one-agent preset. Every source is checked against the preset before anything starts (the same
algorithm, spaces and network); an agent that has a model in the served data folder resumes its own."""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from shepherd.agents import ParameterError, check_parameters, checkpoint, learner_for
from shepherd.definition import Sharing
from shepherd.graph.preset import AgentSpec, Preset, PresetError
from shepherd.graph.reconcile import learner_values
from shepherd.graph.runtime import CLIENTS_FOLDER
from shepherd.graph.schedule import Schedule
from shepherd.storage import AgentRecord, Store, StoreError
from shepherd.storage.peek import StoredAgent, read_agents
from shepherd.wire.spaces import parse_space, space_to_json

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StartingCheckpoints:
    """The model files each preset agent starts from: by agent name, (path in its folder, source file) pairs
    (a pooled agent's ``model.zip``; an advised agent's clients' ``clients/NAME/model.zip``). ``shown`` names
    the option in messages (``-crd DIR``)."""

    shown: str
    models: dict[str, tuple[tuple[str, Path], ...]] = field(default_factory=dict)
    #: the agents `lay` gave their models (the others resume their own)
    laid: list[str] = field(default_factory=list, compare=False)

    @classmethod
    def of_folder(cls, folder: Path, preset: Preset) -> StartingCheckpoints:
        """Every preset agent from the agent of the same name in the data folder ``folder`` (its owner's first,
        if several owners have one), checked.

        Raises:
            PresetError: one line: the folder is no data folder, an agent is missing there or has no model, or
                its algorithm, spaces or network differ from the preset's.
        """
        shown = f"-crd {folder}"
        try:
            stored = read_agents(folder)
        except StoreError as error:
            raise PresetError(f"{shown}: {error}") from None
        models = {}
        for spec in preset.agents:
            agent = _match(stored, spec.name, preset.owner, shown)
            if agent.record.algorithm.upper() != spec.algorithm.upper() or not _same_spaces(agent.record, spec):
                raise PresetError(
                    f"{shown}: agent {spec.name} is {agent.record.algorithm} with observations "
                    f"{agent.record.observation_space} and actions {agent.record.action_space} there, the preset's is "
                    f"{spec.algorithm} with {spec.observation_space} and {spec.action_space}: its model cannot start it")
            if agent.record.sharing != spec.sharing.value:
                raise PresetError(f"{shown}: agent {spec.name} is {agent.record.sharing} there, "
                                  f"{spec.sharing.value} in the preset")
            files = _model_files(agent.folder)
            if not files:
                raise PresetError(f"{shown}: agent {spec.name} has no checkpoint in {folder}")
            _check_fits(spec, preset.schedule, files, shown)
            models[spec.name] = files
        return cls(shown, models)

    @classmethod
    def of_file(cls, file: Path, preset: Preset) -> StartingCheckpoints:
        """The one agent of ``preset`` (pooled) from the model zip ``file`` (a checkpoint, or SB3's own zip),
        checked.

        Raises:
            PresetError: one line: the preset has several agents or an advised one, the file is missing or no
                model zip, or its spaces or network differ from the agent's.
        """
        shown = f"-crf {file}"
        if len(preset.agents) != 1:
            raise PresetError(f"{shown}: one model zip starts a preset of one agent, and this one has "
                              f"{len(preset.agents)}: start it from a data folder with -crd DIR")
        spec = preset.agents[0]
        if spec.sharing is not Sharing.POOLED:
            raise PresetError(f"{shown}: agent {spec.name} is {spec.sharing.value} (a model per client): start it "
                              "from a data folder with -crd DIR")
        if not Path(file).is_file():
            raise PresetError(f"{shown}: no such file")
        files = ((checkpoint.MODEL_FILE, Path(file)),)
        _check_fits(spec, preset.schedule, files, shown)
        return cls(shown, {spec.name: files})

    def lay(self, store: Store, record: AgentRecord) -> bool:
        """Copy the model files of the preset agent ``record`` into its folder, unless it has a model there (it
        resumes its own); returns whether it copied them."""
        files = self.models.get(record.name)
        if not files:
            return False
        folder = store.agent_folder(record.id)
        if checkpoint.model_path(folder).exists() or (folder / CLIENTS_FOLDER).is_dir():
            logger.info("agent %s resumes its own checkpoint in %s (%s starts agents without one)", record.name,
                        folder, self.shown)
            return False
        for relative, source in files:
            checkpoint.copy(source, folder / relative)
        logger.info("agent %s starts from %s", record.name, ", ".join(str(source) for _, source in files))
        self.laid.append(record.name)
        return True


def _match(stored: list[StoredAgent], name: str, owner: str, shown: str) -> StoredAgent:
    named = [agent for agent in stored if agent.record.name == name]
    if not named:
        raise PresetError(f"{shown}: the data folder holds no agent named {name}")
    own = [agent for agent in named if agent.owner == owner]
    if own:
        return own[0]
    if len(named) > 1:
        raise PresetError(f"{shown}: {len(named)} agents are named {name} there (owners "
                          f"{', '.join(agent.owner for agent in named)}), none of owner {owner}")
    return named[0]


def _same_spaces(record: AgentRecord, spec: AgentSpec) -> bool:
    return all(space_to_json(parse_space(saved)) == space_to_json(parse_space(declared))
               for saved, declared in ((record.observation_space, spec.observation_space),
                                       (record.action_space, spec.action_space)))


def _model_files(folder: Path) -> tuple[tuple[str, Path], ...]:
    """An agent folder's model files, by their path in it: its own, and each client's (an advised agent's)."""
    files = [(checkpoint.MODEL_FILE, checkpoint.model_path(folder))]
    clients = folder / CLIENTS_FOLDER
    if clients.is_dir():
        files += [(f"{CLIENTS_FOLDER}/{client.name}/{checkpoint.MODEL_FILE}", checkpoint.model_path(client))
                  for client in sorted(clients.iterdir())]
    return tuple((relative, path) for relative, path in files if path.is_file())


def _check_fits(spec: AgentSpec, schedule: Schedule, files: tuple[tuple[str, Path], ...], shown: str) -> None:
    """Every file loads into the network the preset builds for ``spec``.

    Raises:
        PresetError: one line naming the first file that does not, and the first differences.
    """
    try:
        learner = learner_for(spec, learner_values(spec.algorithm, check_parameters(spec.algorithm, spec.parameters),
                                                   schedule), schedule.improve_steps)
    except ParameterError as error:
        raise PresetError(f"agent {spec.name!r}: {error}") from None
    for _, path in files:
        try:
            differences = learner.checkpoint_mismatch(path)
        except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
            raise PresetError(f"{shown}: {path.name} is not a model zip ({type(error).__name__}: {error})") from None
        if differences:
            listed = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
            raise PresetError(f"{shown}: the model {path} does not fit agent {spec.name}'s network and spaces "
                              f"({listed})")
