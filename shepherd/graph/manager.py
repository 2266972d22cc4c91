"""The GraphManager: a preset's agents and schedule, and the sessions of the clients that drive them.

It serves every agent of the store, not only the preset's: agents added by the admin commands or API are
started when the server starts, or at once when added while it runs. They follow `DEFAULT_SCHEDULE`
(train forever, evaluate 5 episodes after every 10,000 training steps); an off-policy agent's heatup is
its ``learning_starts`` parameter (SB3's default when not set); ``create_graph(..., only_preset=True)``
leaves them out (`GraphManager.not_started`). An agent can be restarted: its sessions
end, its learner stops without a checkpoint, its model is deleted, and a fresh learner takes its place.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from typing import Any, Callable

from shepherd.agents import (AgentClosed, AgentFailed, ParameterError, ServedLearner,
                             algorithm_info, check_parameters, learner_for, parameters, registry_records)
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph.agent import Building, ServedAgent, of_kind
from shepherd.graph.kinds import kind_of
from shepherd.environments import EnvironmentSpec
from shepherd.graph.environments import environment_session, store_environments
from shepherd.graph.preset import AgentSpec, Preset, PresetError, PresetValidation, Problem
from shepherd.graph.runtime import AgentRuntime
from shepherd.graph.schedule import EvaluationResult, Schedule
from shepherd.graph.reconcile import learner_values, reconcile
from shepherd.graph.served import A, ServedAgents
from shepherd.graph.session_table import SessionTable
from shepherd.graph.sessions import Acted, Session, TooManyEnvs, Unauthorized
from shepherd.graph.serving import Serving
from shepherd.wire import Step
from shepherd.lessons import lessons_to_json
from shepherd.wire.spaces import SpaceError
from shepherd.storage import AgentRecord, Store, hash_key

logger = logging.getLogger(__name__)


#: the schedule of agents that no preset declares (added by the admin commands or API)
DEFAULT_SCHEDULE = Schedule(improve_steps=None, steps_between_evaluation_periods=10_000, evaluation_episodes=5)


class GraphManager:
    """Holds a preset's agents and schedule; serves them, and every other agent of the store (unless told
    to serve the preset's alone), to client sessions once `create_graph` ran.

    Building one does no I/O and starts nothing, so presets can be listed and checked cheaply.
    """

    def __init__(self, agents: list[AgentSpec], schedule: Schedule | None = None,
                 validation: PresetValidation | None = None, owner: str = "shepherd",
                 description: str = "", default_schedule: Schedule | None = None,
                 environments: tuple[EnvironmentSpec, ...] = ()) -> None:
        """A graph of a preset given by its parts (how a Python preset of the older form declares it;
        `of` builds one from a `Preset`)."""
        self.preset = Preset(tuple(agents), schedule or Schedule(), validation, owner, description,
                             environments=tuple(environments))
        self.default_schedule = default_schedule or DEFAULT_SCHEDULE
        self.evaluation_listeners: list[Callable[[AgentRuntime, EvaluationResult], None]] = []
        self._store: Store | None = None
        self._served: ServedAgents | None = None
        self._preset_ids: set[int] = set()  # the store ids of the preset's agents
        self.not_started: list[AgentRecord] = []  # stored agents left out by create_graph(only_preset=True)
        self._serving = Serving()
        self._sessions = SessionTable()
        #: builds a served learner in another process from the agent's record, values, training budget, the
        #: in-process learner built first and the client's name (an advised agent's clients; None: a pooled
        #: agent's) (`shepherd.agents.ray.cluster.RayLearners`, run.py --ray); None: every learner runs here
        self.remote_learners: Callable[[AgentRecord, dict[str, Any], int | None, ServedLearner, str | None],
                                       ServedLearner] | None = None

    @classmethod
    def of(cls, preset: Preset) -> GraphManager:
        """The graph of ``preset`` (nothing built or started yet)."""
        graph = cls([])
        graph.preset = preset
        return graph

    @property
    def name(self) -> str:
        return self.preset.name

    @property
    def agents(self) -> tuple[AgentSpec, ...]:
        return self.preset.agents

    @property
    def schedule(self) -> Schedule:
        return self.preset.schedule

    @property
    def validation(self) -> PresetValidation | None:
        return self.preset.validation

    @property
    def owner(self) -> str:
        return self.preset.owner

    @property
    def description(self) -> str:
        return self.preset.description

    @classmethod
    def offline(cls, store: Store, bounds: ParameterBounds = DEFAULT_BOUNDS) -> GraphManager:
        """A graph over a data folder that no server serves: it builds learners to check new agents and
        runs the lifecycle verbs on the folder (restart deletes the model, export reads it, ...), holding
        parameter values to ``bounds``."""
        graph = cls([])
        graph._serving = Serving(bounds=bounds)
        graph._attach(store)
        return graph

    def _attach(self, store: Store) -> None:
        self._store = store
        self._served = ServedAgents(store, lambda: self._sessions, self.build_agent,
                                    lambda runtime: runtime.learner.start(self._serving.deliver))

    @property
    def store(self) -> Store:
        """The store of the data folder (after `create_graph` or `offline`)."""
        if self._store is None:
            raise RuntimeError("the graph has no store yet: call create_graph first")
        return self._store

    @property
    def served(self) -> ServedAgents:
        """The served agents and their lifecycle verbs (after `create_graph` or `offline`)."""
        if self._served is None:
            raise RuntimeError("the graph serves nothing yet: call create_graph first")
        return self._served

    @property
    def runtimes(self) -> dict[int, AgentRuntime]:
        """The runtimes of the agents served by one learner (pooled), by store id (read-only use)."""
        return {} if self._served is None else self._served.runtimes

    def every_runtime(self) -> list[AgentRuntime]:
        """Every learner's runtime: the pooled agents' (as `runtimes`) and each advised agent's clients'."""
        return [] if self._served is None else self._served.every_runtime()

    @property
    def sessions(self) -> SessionTable:
        return self._sessions

    # -- checking ------------------------------------------------------------------------------
    @property
    def bounds(self) -> ParameterBounds:
        """The bounds parameter values are held to (the serving settings')."""
        return self._serving.bounds

    def check(self, bounds: ParameterBounds | None = None) -> None:
        """Check the preset without building anything heavy (`Preset.check`), its parameters held to ``bounds``
        (default: the serving settings').

        Raises:
            InvalidPreset: every problem found (algorithms, spaces, parameters, levels, the schedule).
        """
        self.preset.check(self._serving.bounds if bounds is None else bounds)

    def problems(self) -> list[Problem]:
        """Every problem of the preset (`check` raises them), each with its key path (``agents[0]...``)."""
        return self.preset.problems()

    def build_problems(self) -> list[Problem]:
        """Build every agent's learner (not started; nothing is written) and return the problems of those
        that stable-baselines3 refuses (a combination of parameters their types allow). Takes a few seconds
        per agent; call it on a preset that `check` passed."""
        problems = []
        for index, spec in enumerate(self.agents):
            try:
                learner_for(spec, learner_values(spec.algorithm, check_parameters(spec.algorithm, spec.parameters),
                                                 self.schedule), self.schedule.improve_steps)
            except (ParameterError, SpaceError) as error:
                problems.append(Problem(f"agents[{index}]", str(error)))
        return problems

    # -- building ------------------------------------------------------------------------------
    def create_graph(self, store: Store, serving: Serving | None = None, only_preset: bool = False) -> dict[str, str]:
        """Create what the preset declares in the store and start its agents (resuming checkpoints), to
        serve sessions as ``serving`` says. The store's other agents are started too, unless
        ``only_preset`` (but for the skills of the preset's selectors): they are then listed in `not_started`.

        Returns the API keys created now, by agent name (shown once; the store keeps only hashes).

        Raises:
            PresetError: the preset is invalid or contradicts what the store holds (`Preset.check_skills`, say).
        """
        self._serving = serving or Serving()
        self.check()
        self._sessions = SessionTable(self._serving.max_sessions_per_agent, self._serving.max_reward)
        self._attach(store)
        store.put_algorithms(*registry_records())
        owner = store.ensure_user(self.owner)
        folder_skills = self.preset.folder_skills()  # skills of the data folder: checked now that it is seen
        if folder_skills:
            self.preset.check_skills({record.name: record.definition for record in store.agents()
                                      if record.owner_id == owner.id})
        created_keys = {}
        for spec in self.agents:
            record = store.find_agent(owner.id, spec.name)
            parameters = check_parameters(spec.algorithm, spec.parameters)
            if record is None:
                record = store.add_agent(owner.id, spec.name, algorithm_info(spec.algorithm).name, spec.observation_space,
                                         spec.action_space, parameters, spec.sharing.value, spec.filters.to_json(),
                                         lessons_to_json(spec.lessons),
                                         None if spec.level is None else spec.level.to_json())
                created_keys[spec.name], _ = store.add_api_key(record.id, label="created by preset")
            else:
                record = reconcile(store, record, spec, parameters, functools.partial(self.schedule_for, record))
            if self._serving.start_from is not None:  # checked before the start (`StartingCheckpoints.check`)
                self._serving.start_from.lay(store, record)
            self._preset_ids.add(record.id)
            self._start(record)
        if self.preset.environments:  # every role names an agent, now that the data folder's are seen
            self.preset.check_environments({record.name: record.definition for record in store.agents()
                                            if record.owner_id == owner.id})
            created_keys.update(store_environments(store, owner.id, self.preset.environments))
        players = {name for environment in self.preset.environments for name in environment.agents()}
        self.not_started = []
        for record in store.agents():
            needed = record.owner_id == owner.id and (record.name in folder_skills or record.name in players)
            if only_preset and record.id not in self._preset_ids and not needed:
                self.not_started.append(record)
            elif record.id not in self.served.served_ids():
                try:
                    self._start(record)
                except Exception as error:  # noqa: BLE001 - one bad stored agent must not stop the others
                    self.served.failures[record.id] = f"cannot be started: {error}"
                    logger.error("agent %s (id %d) cannot be started: %s", record.name, record.id, error)
        return created_keys

    def _start(self, record: AgentRecord) -> ServedAgent:
        try:
            agent = self.build_agent(record)
        except ParameterError as error:  # SB3 refused a combination the types allow
            raise PresetError(f"agent {record.name!r}: {error}") from None
        self.served.install(agent)
        return agent

    def schedule_for(self, record: AgentRecord) -> Schedule:
        """The preset's schedule for its agents; `default_schedule` for the others, with an off-policy
        agent's ``learning_starts`` (or SB3's default) as its heatup."""
        if record.id in self._preset_ids:
            return self.schedule
        if algorithm_info(record.algorithm).on_policy:
            return replace(self.default_schedule, heatup_steps=0)
        starts = record.parameters.get("learning_starts")
        if starts is None:
            starts = parameters(record.algorithm)["learning_starts"].default
        return replace(self.default_schedule, heatup_steps=int(starts))

    def build_agent(self, record: AgentRecord, in_process: bool = False) -> ServedAgent:
        """A served agent of the kind its sharing mode registered (`shepherd.graph.agent.kind_of`), not started,
        with fresh learners resumed from its checkpoints (an advised agent: every client it had). Each
        learner (a pooled agent's, each client's of an advised one) is built by `remote_learners` when set,
        unless ``in_process`` (an export reads the model).
        Blocks (builds the model, reads the checkpoint): run it off the event loop.

        Raises:
            ParameterError, SpaceError: the stored agent cannot be built, or (unless ``in_process``) a stored
                value is outside its bound (`shepherd.agents.bounds`).
        """
        schedule = self.schedule_for(record)
        if not in_process:  # a served learner: a stored value outside its bound would hang or break it
            self.bounds.check(algorithm_info(record.algorithm).name, record.parameters)
        values = learner_values(record.algorithm, record.parameters, schedule)
        learner = learner_for(record.definition, values, schedule.improve_steps)  # proves the parameters
        remote = None if in_process else self.remote_learners

        def serve(local: ServedLearner, client: str | None) -> ServedLearner:
            return local if remote is None else remote(record, values, schedule.improve_steps, local, client)

        return kind_of(record).build(Building(
            record, schedule, self.store, learner, serve,
            lambda: learner_for(record.definition, values, schedule.improve_steps), self._evaluated,
            self._serving.max_clients_per_agent, functools.partial(self.served.by_name, record.owner_id)))

    def _evaluated(self, runtime: AgentRuntime, result: EvaluationResult) -> None:
        for listener in self.evaluation_listeners:
            listener(runtime, result)

    def runtime(self, agent_name: str | None = None) -> AgentRuntime:
        """The runtime of a preset agent by name (the first agent when no name is given)."""
        name = agent_name or self.agents[0].name
        for runtime in self.preset_runtimes():
            if runtime.record.name == name:
                return runtime
        raise KeyError(name)

    def preset_runtimes(self) -> list[AgentRuntime]:
        """The runtimes of the preset's own agents (the store may hold others)."""
        return [runtime for agent_id, runtime in self.runtimes.items() if agent_id in self._preset_ids]

    # -- sessions ------------------------------------------------------------------------------
    def login(self, apikey: str, evaluate_only: bool = False, n_envs: int | None = None,
              client: str | None = None, acting: str = "server") -> Session:
        """Open a session for the agent an API key belongs to: of ``n_envs`` envs (a vector session), or of
        one env (None). An advised agent's session is its named ``client``'s (a new name builds its learner
        here, which blocks: `prepare_client` first); an evaluation without a name is the best client's; a
        selector's is leveled over its skills (`ServedAgent.session_level`).

        Raises:
            BadClient: an advised agent's training login without a client name, or a bad or needless name.
            NotClientActing: a login acting at the client of an agent whose policy cannot act there (a selector's).
            TooManyClients: a new client name of an advised agent that has the most clients allowed.
            TooManyEnvs: ``n_envs`` is below 1 or above the server's limit per session.
            Unauthorized: the key is unknown or revoked, or its agent is not served here.
            TooManySessions: the agent has its maximum number of sessions.
            AgentClosed: the agent is restarting (retry in a moment).
            AgentFailed: the agent's learner could not be built (an admin can restart it), or a skill is not served.
        """
        limit = self._serving.max_envs_per_session
        if n_envs is not None and not 1 <= n_envs <= limit:
            raise TooManyEnvs(f"'n_envs' must be between 1 and {limit} (this server's --max-envs), not {n_envs}")
        record = self.store.agent_for_key(apikey) if isinstance(apikey, str) and apikey else None
        if record is None:
            environment = self.store.environment_for_key(apikey) if isinstance(apikey, str) and apikey else None
            if environment is None:
                raise Unauthorized("unknown or revoked API key")
            if acting != "server" or client is not None:
                raise TooManyEnvs("an environment's session is stepped at the server and names no client: log in "
                                  "with its key (\"mode\" and \"n_envs\" may be given)")
            counted, roles_level, actors = environment_session(environment, self.served,
                                                               evaluate_only or self._serving.evaluate_only, n_envs)
            return self._sessions.open(counted, roles_level, actors, hash_key(apikey))
        if self.served.restarting(record.id):
            raise AgentClosed(f"agent {record.name} is restarting; log in again in a moment")
        failure = self.served.failures.get(record.id)
        if failure is not None:
            raise AgentFailed(f"agent {record.name} {failure}")
        agent = self.served.agents.get(record.id)
        if agent is None:
            raise Unauthorized("this API key's agent is not served by this server")
        evaluate_only = evaluate_only or self._serving.evaluate_only
        runtime = agent.session_runtime(client, evaluate_only)
        if runtime.learner.failure is not None:
            raise AgentFailed(f"agent {runtime.label} failed ({runtime.learner.failure}); an admin can restart it")
        leveled = agent.session_level(runtime, evaluate_only, n_envs, acting, client)
        return self._sessions.open(runtime, leveled, n_envs or 1, hash_key(apikey))

    async def prepare_client(self, apikey: str, client: str | None) -> None:
        """Build a new client's learner off the event loop before `login` opens its session (nothing to
        do for a known name, a pooled agent or an unknown key: `login` then answers). The best client
        checkpoints first, so that the new one starts from its latest weights (`ServedAgent.prepare`).

        Raises:
            BadClient: a malformed name.
            TooManyClients: a new name, and the agent has the most clients this server allows.
        """
        record = self.store.agent_for_key(apikey) if isinstance(apikey, str) and apikey else None
        if record is not None:
            await self.served.prepare(record.id, client)

    def preset_agents(self) -> list[ServedAgent]:
        """The served agents of the preset, of every kind."""
        return [agent for agent_id, agent in self.served.agents.items() if agent_id in self._preset_ids]

    def preset_agent_id(self, agent_name: str) -> int:
        """The store id of a served preset agent, pooled or advised, by name.

        Raises:
            KeyError: no served preset agent of that name.
        """
        for agent in self.preset_agents():
            if agent.record.name == agent_name:
                return agent.record.id
        raise KeyError(agent_name)

    def preset_agent(self, agent_name: str, kind: type[A]) -> A:
        """A served agent of the preset, by name, as ``kind`` (`AdvisedAgent`, say).

        Raises:
            KeyError: no served preset agent of that name; TypeError: one of another kind.
        """
        return of_kind(self.served.agents.get(self.preset_agent_id(agent_name)), kind, agent_name)

    def session(self, key: Any) -> Session:
        """Raises Unauthorized for an unknown or expired session key."""
        return self._sessions.get(key)

    async def step(self, session: Session, step: Step) -> Acted:
        """One step of a session: the learner's action (None when the episode ended), awaited on the
        event loop that drives the graph. Raises what `Session.step` raises."""
        return await session.step(step, self._serving.act_timeout_seconds)

    @property
    def evaluates_only(self) -> bool:
        """Every login is answered in evaluate mode (`Serving.evaluate_only`)."""
        return self._serving.evaluate_only

    @property
    def act_timeout(self) -> float:
        """How long a step, or a client-acting session's plan or policy file, may wait for its learner."""
        return self._serving.act_timeout_seconds

    def logout(self, key: Any) -> None:
        self._sessions.end(self._sessions.get(key))

    def expire_sessions(self, idle_seconds: float) -> int:
        """End sessions idle for longer than ``idle_seconds``; returns how many ended. Sessions idle for longer
        than the serving's ``evaluation_hold_seconds`` hand back the evaluation episodes they hold."""
        released = self._sessions.release_idle(self._serving.evaluation_hold_seconds)
        if released:
            logger.info("%d evaluation episode(s) of idle sessions handed back to their periods", released)
        return self._sessions.expire(idle_seconds)

    # -- lifecycle (the verbs on one agent are `served`'s) ---------------------------------------
    def end_sessions(self) -> None:
        """End every session (their unfinished episodes are abandoned)."""
        self._sessions.end_all()

    def drain(self) -> None:
        """The server is stopping: every learner answers what it holds back."""
        if self._served is not None:
            self._served.drain()

    def abort(self) -> None:
        """Stop the learners started so far without writing anything (a start that failed half-way)."""
        if self._served is not None:
            self._served.abort()

    def close(self) -> None:
        """Checkpoint every agent (unless it serves `evaluates_only`) and stop the learners. Blocks: run it off the
        event loop, after `end_sessions`."""
        if self._served is not None:
            self._served.abort() if self._serving.evaluate_only else self._served.close()
