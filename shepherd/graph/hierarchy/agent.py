"""A selector served with its level (docs/levels.md): `HierarchyAgent`, one `SelectorRuntime` (the selector's
learner, the hierarchy's one schedule counted in env steps, the use of its options) over skills that are other
served agents, found by name when a session opens."""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass, replace
from typing import Any, Callable

from shepherd.agents import AgentFailed, NotClientActing, checkpoint, parameters
from shepherd.graph.agent import AgentStatus, BadClient, Building, ServedAgent
from shepherd.graph.pooled import Pooled, PooledAgent
from shepherd.graph.runtime import AgentRuntime
from shepherd.hierarchy import LevelSpec, load_function
from shepherd.level import HierarchyLevel, HierarchyVectorLevel, Level, Skill
from shepherd.storage import AgentRecord, Store

logger = logging.getLogger(__name__)


@dataclass
class OptionUse:
    """How often a skill was chosen, how long its options ran and what they returned, since the selector began."""

    chosen: int = 0
    steps: int = 0
    reward: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "steps": self.steps, "reward": self.reward,
                "mean_steps": self.steps / self.chosen if self.chosen else None}


class SelectorRuntime(AgentRuntime):
    """A selector's runtime: an `AgentRuntime` (an `OptionHost`) that records its options' use, keeps it in its
    checkpoints, and checkpoints the skills that learn with it (a hierarchy's checkpoint holds every level)."""

    def __init__(self, record: AgentRecord, *args: Any, **kwargs: Any) -> None:
        level = record.definition.level
        assert level is not None, "a selector without a level"
        self.level: LevelSpec = level
        self.options = {name: OptionUse() for name in level.skills}  # before the base's metrics follow them
        #: the runtimes of the skills that learn from the hierarchy's steps (set when a session finds them)
        self.learning_skills: list[AgentRuntime] = []
        super().__init__(record, *args, **kwargs)

    @property
    def gamma(self) -> float:
        """The selector's discount (its ``gamma`` parameter, or its algorithm's default; 1 for one that has none,
        a programmed selector): an option's rewards are discounted by it per env step (SMDP)."""
        value = self.record.parameters.get("gamma")
        if value is None:
            known = parameters(self.record.algorithm).get("gamma")
            value = None if known is None else known.default
        return 1.0 if value is None else float(value)

    def record_option(self, skill: str, steps: int, reward: float) -> None:
        use = self.options.setdefault(skill, OptionUse())
        use.chosen += 1
        use.steps += steps
        use.reward += reward

    def checkpoint_state(self) -> dict[str, Any]:
        return {**super().checkpoint_state(),
                "options": {name: {"chosen": use.chosen, "steps": use.steps, "reward": use.reward}
                            for name, use in self.options.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        for name, saved in (state.get("options") or {}).items():
            if isinstance(saved, dict):
                self.options[name] = OptionUse(int(saved.get("chosen", 0)), int(saved.get("steps", 0)),
                                               float(saved.get("reward", 0.0)))

    def checkpoint(self) -> Any:
        for skill in self.learning_skills:
            if skill.learner.failure is None and skill.learner.alive:  # a skill stopped first wrote its own
                skill.checkpoint()
        return super().checkpoint()

    def options_used(self) -> dict[str, Any]:
        return {name: use.to_json() for name, use in list(self.options.items())}

    def metric_values(self) -> dict[str, Any]:
        values = super().metric_values()
        for name, use in list(self.options.items()):
            values[f"shepherd/options/{name}/chosen"] = use.chosen
            values[f"shepherd/options/{name}/steps"] = use.steps
        return values


class HierarchyAgent(PooledAgent):
    """A selector and its level: one runtime (the selector's), sessions leveled by `HierarchyLevel` over the skills
    (other served agents of its owner, found by ``find`` when a session opens)."""

    def __init__(self, runtime: SelectorRuntime, find: Callable[[str], ServedAgent | None]) -> None:
        super().__init__(runtime)
        self.selector = runtime
        self._find = find

    def skills(self, client: str | None = None, evaluate_only: bool = False) -> list[tuple[str, AgentRuntime]]:
        """Each skill's name and runtime for a session of ``client``, in the order of the selector's actions: a
        skill with one learner gives its runtime; an advised skill (a learner per client) the client's, built
        if new, or for an evaluation without a name its best client's (`ServedAgent.session_runtime`).

        Raises:
            AgentFailed: a skill is not served here (deleted, failed, restarting).
            BadClient: an advised skill and no client named (training), or a bad name.
            TooManyClients: an advised skill with the most clients, and a new name.
        """
        found = []
        for name in self.selector.level.skills:
            agent = self._find(name)
            runtime = None if agent is None else agent.runtime
            if agent is not None and runtime is None:  # a learner per client: the session's client's
                try:
                    runtime = agent.session_runtime(client, evaluate_only)
                except BadClient:
                    raise BadClient(f"agent {self.record.name} is a selector whose skill {name} is advised (a learner "
                                    "per client): a login names its client, as {\"apikey\": ..., \"client\": "
                                    "\"arm-3\"}") from None
            if runtime is None or runtime.learner.failure is not None:
                raise AgentFailed(f"agent {self.record.name}: its skill {name} is not served here (failed, restarting "
                                  "or deleted); serve it, then log in again")
            found.append((name, runtime))
        return found

    def prepared_with(self) -> list[int]:
        return [agent.record.id for agent in map(self._find, self.selector.level.skills) if agent is not None]

    def session_runtime(self, client: str | None, evaluate_only: bool) -> AgentRuntime:
        if client is not None and all(agent is None or agent.runtime is not None
                                      for agent in map(self._find, self.selector.level.skills)):
            raise BadClient(f"'client' names a client of an advised agent; agent {self.record.name} is a selector "
                            "(one learner for every client) and none of its skills is advised: leave 'client' out")
        return self.selector

    def session_level(self, runtime: AgentRuntime, evaluate_only: bool, n_envs: int | None,
                      acting: str, client: str | None = None) -> Callable[[int], Level]:
        name = self.record.name
        if acting == "client":
            raise NotClientActing(f"agent {name} is a selector with skills: its option state (which skill is active, "
                                  "for how many steps, and the skills' end functions, which run on the server) cannot "
                                  "travel with one policy file, so its sessions act at the server; log in with "
                                  "\"acting\": \"server\" (or leave it out)")
        level = self.selector.level
        found = self.skills(client, evaluate_only)
        if level.skills_learn:  # checkpointed with the selector (an advised skill: each client's that a session used)
            kept = [known for known in self.selector.learning_skills if known.learner.alive]  # a restarted skill's: gone
            self.selector.learning_skills = kept + [runtime for _, runtime in found
                                                    if all(runtime is not known for known in kept)]
        skills = [Skill(skill, runtime.learner, None if skill not in level.skill_ends else
                        load_function(level.skill_ends[skill]), runtime.record.id, runtime.takes_masks)
                  for skill, runtime in found]
        action_space = found[0][1].action_space

        def leveled(actor: int) -> Level:
            if n_envs is None:
                return HierarchyLevel(actor, self.selector, skills, level.option_steps, level.skills_learn,
                                      action_space, evaluate_only, self.selector.gamma)
            return HierarchyVectorLevel(actor, n_envs, self.selector, skills, level.option_steps, level.skills_learn,
                                        action_space, evaluate_only, self.selector.gamma)
        return leveled

    def describe_level(self) -> dict[str, Any]:
        """The level and each skill's use, as the admin API shows it."""
        level = self.selector.level
        return {**level.to_json(), "options": self.selector.options_used()}

    def status(self, model: dict[str, float] | None) -> AgentStatus:
        status = super().status(model)
        return replace(status, level=self.describe_level())

    def summary(self) -> str:
        level = self.selector.level
        return (f"{self.record.algorithm} selector over {', '.join(level.skills)} ({level.option_steps} steps per "
                f"option), {self.selector.tracker.steps} steps so far")


class Hierarchy(Pooled):
    """Builds a selector: the learner that proved its parameters (served), on a `SelectorRuntime`; what a folder
    no server serves says of it is a pooled agent's, with its level and its options' use from its checkpoint."""

    def stored_status(self, store: Store, record: AgentRecord, phase: str, failure: str | None,
                      model: dict[str, float] | None) -> AgentStatus:
        status = super().stored_status(store, record, phase, failure, model)
        try:
            saved = checkpoint.read_state(self.stored_model(store, record, None)).get("options") or {}
        except (OSError, KeyError, ValueError, TypeError, AttributeError, zipfile.BadZipFile):
            saved = {}  # no checkpoint yet, or one that cannot be read: the level alone
        options = {name: OptionUse(int(use.get("chosen", 0)), int(use.get("steps", 0)),
                                   float(use.get("reward", 0.0))).to_json()
                   for name, use in saved.items() if isinstance(use, dict)}
        return replace(status, level={**(record.level or {}), **({"options": options} if options else {})})

    def build(self, building: Building) -> HierarchyAgent:
        record = building.record
        runtime = SelectorRuntime(record, building.serve(building.proven, None), building.schedule, building.store,
                                  building.on_evaluation)
        if runtime.resume():
            logger.info("selector %s resumes from %s", record.name, runtime.model_path)
        return HierarchyAgent(runtime, building.find)

