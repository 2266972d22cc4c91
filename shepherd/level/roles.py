"""RolesLevel: the session of an environment with roles (docs/protocol.md, "Environments with roles"): one step
carries the roles that act now, each role one env (actor) of the agent that plays it, on the one episode
lifecycle (a `Lifecycle` of one env per role, on its agent).

The turn rules are checked before anything changes: ``simultaneous`` (every live role in each step),
``alternate`` (the one whose turn it is, in the declared order from the first each episode, skipping roles
that ended) or ``any`` (one live role). A role that waits while others act learns one transition from its
action to its next turn, with the rewards sent for it meanwhile summed (kept until its next step or its end,
PettingZoo's cumulative reward); a role that ends sends its last observation once and gets no action; the
episode ends when every role has ended, and the step after begins the next one.

The configs of the roles whose agents have lessons (docs/lessons.md) are told as a single-env session's, by role,
for the whole environment (its client sets it up once per episode): the next episode's in the login reply and in
the reply to the step that ends an episode, and the episode's again, with its lessons, in the reply to its first
step. Each role's episode begins with the config told for it (its lifecycle draws the next at the role's end).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Collection, Protocol

import numpy as np

from shepherd.agents import ActionFuture, Kind, Request
from shepherd.level.base import Calls, Level, Reply
from shepherd.level.episodes import MODES, EpisodeHost, Trial, answered
from shepherd.level.lifecycle import Announce, Lifecycle
from shepherd.level.roles_steps import RolesStep, parse_roles_step
from shepherd.wire import BadRequest
from shepherd.wire.experience import ExperienceSpaces
from shepherd.wire.spaces import action_to_json

logger = logging.getLogger(__name__)



class RoleHost(EpisodeHost, Protocol):
    """What a role needs of the agent that plays it: its episodes (`EpisodeHost`) and its spaces."""

    @property
    def observation_space(self) -> Any: ...

    @property
    def action_space(self) -> Any: ...

    @property
    def takes_masks(self) -> bool: ...


@dataclass(eq=False)
class Role:
    """One role of an environment's session: played by an agent (``host``, as actor ``actor`` of its learner,
    with its episodes in ``lifecycle``) or by a scripted ``function(obs, mask) -> action`` (``script``)."""

    name: str
    player: str
    actor: int
    host: RoleHost | None = None
    script: Callable[..., Any] | None = None
    lifecycle: Lifecycle | None = None
    team: str = ""  # its team (`EnvironmentSpec.team_of`; "": a team of its own)
    held: float = 0.0  # rewards sent for it since its last step (kept for its next step or its end)
    begun: bool = False  # its episode has begun (a learning role's: with its learner)
    returned: float = 0.0  # its return in this episode: what decides without an outcome
    #: under self-play, who plays it this episode instead of its learning agent: a `Trial` of a frozen snapshot or
    #: a scripted function (None: its agent, learning), and its label (``snapshot:V``, ``latest``, ``module:function``)
    stand_in: Any = None
    label: str = ""

    @property
    def observation_space(self) -> Any:
        return None if self.host is None else self.host.observation_space

    @property
    def action_space(self) -> Any:
        return None if self.host is None else self.host.action_space


class RolesLevel(Level):
    """The session of one environment with roles (``turns``: ``simultaneous``, ``alternate`` or ``any``)."""

    snapshots = False  # several learners answer a step: no front end answers it from one snapshot
    takes_masks = False  # masks come by role (``"action_mask": {role: mask}``), checked here

    def __init__(self, environment: str, turns: str, roles: list[Role], evaluate_only: bool = False,
                 rate: Callable[[dict[str, list[str]], dict[str, float]], object] | None = None,
                 matchup: Callable[[], dict[str, tuple[str, Any]]] | None = None, group: int = 0) -> None:
        self.environment = environment
        self.turns = turns
        self.roles = {role.name: role for role in roles}
        self.order = [role.name for role in roles]
        self.evaluate_only = evaluate_only
        for role in roles:
            if role.host is not None:
                role.lifecycle = Lifecycle(role.host, 1, evaluate_only, Announce.AT_END)
        self.ended: set[str] = set()  # roles whose episode ended in the current episode of the environment
        self.turn = 0  # under alternate turns: the index of the role whose turn it is
        self.last_outcome: dict[str, float] | None = None  # the outcome the last ended episode carried
        #: rates each ended episode: each team's players and score (`shepherd.graph.ratings.Ratings.rate`)
        self.rate = rate
        #: under self-play, each episode's opponents (`shepherd.graph.selfplay.Ghost.matchup`)
        self.matchup = matchup
        #: the learners' group of its roles (`Request.group`): the roles one agent plays here step by turns, so
        #: its learner must never make one wait for another's progress (an on-policy rollout's segments)
        self.group = group or min(role.actor for role in roles)
        self.fresh = True  # no step of the current episode taken yet
        self._opponents: dict[str, str] | None = None  # the opponents the reply to the last step names
        self._configs: dict[str, Any] = {}  # what the reply to the last step says of episodes' configs
        self.closed = False
        self.calls: Calls[str] = Calls()  # the last step's calls of the acting roles, by role (`resend`)
        self._played: dict[str, Any] = {}  # the scripted roles' actions, played when the step was checked

    # -- the session's verbs ----------------------------------------------------------------------------
    def login_fields(self) -> dict[str, Any]:
        """The first episode's configs, by role (of the roles whose agents have lessons; {}: none has)."""
        pending = self._pending()
        return {"next_episode_config": {name: setup.config for name, setup in pending.items()}} if pending else {}

    def _pending(self) -> dict[str, Any]:
        """Each role's config for its next episode (`EpisodeConfig`), for the roles whose agents have lessons."""
        return {name: role.lifecycle.pending[0] for name, role in self.roles.items()
                if role.lifecycle is not None and role.lifecycle.pending[0] is not None}

    def introduction(self) -> dict[str, Any] | None:
        from shepherd.wire.spaces import space_to_json

        return {"environment": self.environment, "turns": self.turns,
                "roles": {name: {"agent": role.player,
                                 "observation_space": None if role.host is None else space_to_json(role.observation_space),
                                 "action_space": None if role.host is None else space_to_json(role.action_space)}
                          for name, role in self.roles.items()}}

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        """Each learning role's agent's learner with its role's observations (a snapshot's or a script's: none)."""
        if self.evaluate_only or not isinstance(step, RolesStep):
            return []
        observed: dict[int, tuple[Any, list[Any]]] = {}
        for name, obs in step.obs.items():
            role = self.roles.get(name)
            if role is not None and role.host is not None and role.stand_in is None:
                observed.setdefault(id(role.host.learner), (role.host.learner, []))[1].append(obs)
        return list(observed.values())

    def parse_step(self, data: dict[str, Any], checks: ExperienceSpaces) -> Any:
        """A step body checked by role (every error names the role and the field). Raises BadRequest."""
        return parse_roles_step(data, self.environment, self.roles, checks)

    # -- a step ---------------------------------------------------------------------------------------
    def take_roles(self, step: RolesStep) -> Reply[Any]:
        self.check(step)
        self.apply(step)
        return self.resend()

    def check(self, step: RolesStep) -> None:
        """Raises BadRequest naming the role and field of a step the turn rules refuse; nothing changes."""
        ending = [name for name in step.obs if step.terminated.get(name) or step.truncated.get(name)]
        acting = [name for name in self.order if name in step.obs and name not in ending]
        self._check_turns(step, acting, ending)
        self._played = {name: self._play(self.roles[name], step.obs[name], step.masks.get(name))
                        for name in acting if self.roles[name].host is None}

    def _play(self, role: Role, obs: Any, mask: Any) -> Any:
        """A scripted role's action, played before the step changes anything: its function is handed the
        observation as sent (no space checks it), so a function that raises on it refuses the step (400)."""
        assert role.script is not None
        try:
            return _action_of(role.script, obs, mask)
        except IllegalScriptedAction:  # its own fault on a step it took: a 500, logged (nothing was taken)
            raise
        except Exception as error:  # noqa: BLE001 - the preset's function: whatever it raises refuses the step
            logger.warning("environment %s: role %s's scripted player %s raised on a step's observation",
                           self.environment, role.name, role.player, exc_info=True)
            raise BadRequest(f"obs.{role.name}: role {role.name}'s scripted player {role.player} raised "
                             f"{type(error).__name__} on this observation ({error}); nothing was taken") from None

    def apply(self, step: RolesStep) -> None:
        """A checked step taken: held rewards, the roles that end, the learner calls of those that act (`resend`
        makes them)."""
        ending = [name for name in step.obs if step.terminated.get(name) or step.truncated.get(name)]
        acting = [name for name in self.order if name in step.obs and name not in ending]
        self._opponents = None
        self._configs = {}
        self.calls.forget()
        if self.fresh:
            self.fresh = False
            begun = self._pending()  # what each role's episode begins with (nothing draws before its end)
            if begun:
                self._configs = {"episode_config": {name: setup.config for name, setup in begun.items()},
                                 "lesson": {name: setup.lesson for name, setup in begun.items()}}
            if self.matchup is not None:  # once per episode, in the reply to its first step
                chosen = self.matchup()
                for name, role in self.roles.items():
                    role.label, role.stand_in = chosen.get(name, ("", None))
                self._opponents = {name: label for name, (label, _) in chosen.items()}
        for name, reward in step.reward.items():
            self.roles[name].held += reward
        for name in ending:
            self._end(self.roles[name], step.obs[name], bool(step.truncated.get(name)) and not step.terminated.get(name),
                      step.masks.get(name))
        for name in acting:
            role = self.roles[name]
            self.calls.add(name, self._act(role, step.obs[name], step.masks.get(name)))
        if acting and self.turns == "alternate":
            self.turn = self.order.index(acting[0]) + 1
        if len(self.ended) == len(self.roles):  # the episode ends: the step after begins the next one
            self.last_outcome = None if step.outcome is None else dict(step.outcome)
            self._settle(step.outcome)
            self.ended.clear()
            self.turn = 0
            self.fresh = True
            for role in self.roles.values():
                role.held = role.returned = 0.0
            upcoming = self._pending()
            if upcoming:  # the next episode's, as a single-env session's reply that ends an episode
                self._configs["next_episode_config"] = {name: setup.config for name, setup in upcoming.items()}

    def _check_turns(self, step: RolesStep, acting: list[str], ending: list[str]) -> None:
        """Raises BadRequest naming the role and field of a step the turn rules refuse; nothing changes before."""
        for field_name, names in (("obs", step.obs), ("reward", step.reward)):
            for name in names:
                if name in self.ended:
                    raise BadRequest(f"{field_name}.{name}: role {name} ended its episode already; it steps again "
                                     "in the next episode, once every role has ended")
        live = [name for name in self.order if name not in self.ended]
        if self.turns == "simultaneous":
            for name in live:
                if name not in step.obs:
                    raise BadRequest(f"obs.{name}: missing; under simultaneous turns every live role steps each step")
        elif self.turns == "alternate":
            expected = self._whose_turn(ending)  # a role ending now is skipped: the next may act in this step
            for name in acting:
                if name != expected:
                    raise BadRequest(f"obs.{name}: out of turn; it is {expected}'s turn (alternate turns go round in "
                                     "the declared order, skipping roles that ended)")
        elif len(acting) > 1:
            raise BadRequest(f"obs.{acting[1]}: out of turn; under 'any' turns one role acts per step")
        if step.outcome is not None and len(self.ended) + len(ending) < len(self.roles):
            raise BadRequest("outcome: only the step that ends the episode (every role has ended) carries one")

    def _settle(self, outcome: dict[str, float] | None) -> None:
        """An ended episode rated: each team's score is the mean of its roles' outcomes (a role left out of the
        outcome scores 0), or without one, the sum of its roles' returns."""
        if self.rate is None:
            return
        teams: dict[str, list[Role]] = {}
        for name in self.order:
            role = self.roles[name]
            teams.setdefault(role.team or name, []).append(role)
        if outcome is not None:
            scores = {team: sum(outcome.get(r.name, 0.0) for r in members) / len(members)
                      for team, members in teams.items()}
        else:
            scores = {team: sum(r.returned for r in members) for team, members in teams.items()}
        self.rate({team: [_rated_as(r) for r in members] for team, members in teams.items()}, scores)

    def _whose_turn(self, ending: Collection[str] = ()) -> str | None:
        for offset in range(len(self.order)):
            name = self.order[(self.turn + offset) % len(self.order)]
            if name not in self.ended and name not in ending:
                return name
        return None

    def _end(self, role: Role, obs: Any, truncated: bool, mask: Any = None) -> None:
        """The role's last observation: its episode ends (a learning role's last transition, with its held rewards;
        the observation's ``mask``, if sent, for a time limit's bootstrap)."""
        reward, role.held = role.held, 0.0
        self.ended.add(role.name)
        if role.begun:
            role.returned += reward
        if isinstance(role.stand_in, Trial):  # a snapshot's episode: nothing learned or recorded
            if role.begun:
                role.stand_in.end(Request(Kind.END, role.actor, obs, reward, truncated))
            role.begun = False
            return
        if role.host is None or role.stand_in is not None or not role.begun:
            role.begun = False
            return
        assert role.lifecycle is not None
        role.begun = False
        episode = role.lifecycle.count(0, reward)
        role.host.learner.submit([Request(Kind.END, role.actor, obs, reward, truncated, MODES[episode.phase],
                                          group=self.group, mask=mask)])
        role.lifecycle.end(0)

    def _act(self, role: Role, obs: Any, mask: Any) -> Callable[[], ActionFuture]:
        """The call answering the role's step: its first in the episode (its reward ignored) or its next, with
        the rewards since its last action."""
        reward, role.held = role.held, 0.0
        if role.begun:
            role.returned += reward
        if isinstance(role.stand_in, Trial):  # a snapshot plays it: greedy, not learned from
            first, role.begun = not role.begun, True
            return role.stand_in.ask(Request(Kind.STEP, role.actor, obs, 0.0 if first else reward, mask=mask))
        if role.host is None:  # played when the step was checked
            role.begun = True
            return functools.partial(answered, self._played.pop(role.name), 0)
        if role.stand_in is not None:  # a scripted opponent of the self-play
            role.begun = True
            return functools.partial(_scripted, role.stand_in, obs, mask, role.action_space)
        assert role.lifecycle is not None
        learner = role.host.learner
        if not role.begun:
            role.begun = True
            episode = role.lifecycle.begin(0)
            return functools.partial(_one, learner, Request(Kind.BEGIN, role.actor, obs, 0.0, False,
                                                            MODES[episode.phase], group=self.group, mask=mask))
        episode = role.lifecycle.count(0, reward)
        return functools.partial(_one, learner, Request(Kind.STEP, role.actor, obs, reward, False,
                                                        MODES[episode.phase], group=self.group, mask=mask))

    def resend(self) -> Reply[Any]:
        """Ask for the actions of the last step's acting roles: one reply of every role's. Asked again (a retry
        after a learner's process died: `LearnerUnavailable`), only the roles whose learner lost the call are asked
        anew (`Calls`): the others' learners have it already, and would take a transition twice."""
        futures = [(self.roles[name], future) for name, future in self.calls.made().items()]
        return asyncio.get_running_loop().create_task(_gathered(futures, self._opponents, self._configs))

    def reply_body(self, action: Any) -> dict[str, Any] | None:
        return action

    def release_held(self) -> int:
        return sum(role.lifecycle.release_evaluations() for role in self.roles.values() if role.lifecycle is not None)

    def close(self) -> None:
        """End the session: every role's unfinished episode is abandoned, its learner forgets the actor."""
        if self.closed:
            return
        self.closed = True
        for role in self.roles.values():
            if isinstance(role.stand_in, Trial):
                role.stand_in.abandon(role.actor)
            if role.host is not None and role.lifecycle is not None:
                role.lifecycle.abandon([role.actor])
                role.host.learner.end_actor(role.actor)


async def _gathered(futures: list[tuple[Role, ActionFuture]], opponents: dict[str, str] | None,
                    configs: dict[str, Any]) -> dict[str, Any]:
    actions, versions = {}, {}
    for role, future in futures:
        action = await future
        scripted = role.host is None or (role.stand_in is not None and not isinstance(role.stand_in, Trial))
        actions[role.name] = action if scripted else action_to_json(role.action_space, action)
        versions[role.name] = future.policy_version
    return {"actions": actions, "policy_versions": versions, **({"opponents": opponents} if opponents else {}),
            **configs}


def _rated_as(role: Role) -> str:
    """Who a role's result rates: its agent (learning), the snapshot of it that played (``agent@snapshot:V``), or
    the scripted function; the latest policy as an opponent is its agent itself (then not rated)."""
    if role.stand_in is None or role.label == "latest":
        return role.player
    return f"{role.player}@{role.label}" if isinstance(role.stand_in, Trial) else role.label


def _one(learner: Any, request: Request) -> ActionFuture:
    """One role's act as a group's request (`Learner.submit`): the future of its action alone."""
    answer = learner.submit([request])
    future = ActionFuture()

    def settle(done: Any) -> None:
        future.policy_version = getattr(done, "policy_version", 0)
        if done.cancelled():  # the actor was dropped while its request waited (the session ended)
            future.cancel()
            return
        error = done.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result()[0])

    answer.add_done_callback(settle)
    return future


class IllegalScriptedAction(RuntimeError):
    """A scripted player's action outside its role's action space or its mask: the preset's function is at
    fault, not the client (answered 500 and logged; the client's env would take the move or end the game on it)."""


def _action_of(script: Callable[..., Any], obs: Any, mask: Any, space: Any = None) -> Any:
    """``script``'s action (a plain value), checked against the mask the client sent (a discrete action must be
    one it allows) and ``space`` (a self-play opponent's: the agent's action space).

    Raises: IllegalScriptedAction; what the function raises."""
    action = script(obs, mask)
    action = action.tolist() if hasattr(action, "tolist") else action
    problem = _illegal(action, mask, space)
    if problem is not None:
        name = getattr(script, "__qualname__", repr(script))
        raise IllegalScriptedAction(f"scripted player {getattr(script, '__module__', '?')}:{name} returned "
                                    f"{action!r}, {problem}")
    return action


def _illegal(action: Any, mask: Any, space: Any) -> str | None:
    """What is wrong with a scripted action (None: nothing): outside ``space``, or a discrete one ``mask`` forbids."""
    if space is not None:
        try:
            inside = space.contains(action if isinstance(action, int) else np.asarray(action, dtype=space.dtype))
        except (TypeError, ValueError):
            inside = False
        if not inside:
            return f"not in its role's action space {space}"
    if mask is None or isinstance(action, bool) or not isinstance(action, int):
        return None
    try:
        allowed = np.asarray(mask, dtype=float).ravel()
    except (TypeError, ValueError):  # no mask of numbers (a scripted role's is unchecked): nothing to go by
        return None
    if not 0 <= action < allowed.size:
        return f"not one of the {allowed.size} actions of the mask it was handed"
    return None if allowed[action] else "which the mask it was handed forbids"


def _scripted(script: Callable[..., Any], obs: Any, mask: Any, space: Any) -> ActionFuture:
    """A self-play's scripted opponent's action (its role's observation checked against the agent's space, its
    action against the space and the mask). What it raises fails the step's reply, never the asks of the other
    roles (the step is taken whole)."""
    future = ActionFuture()
    future.policy_version = 0
    try:
        future.set_result(_action_of(script, obs, mask, space))
    except Exception as error:  # noqa: BLE001 - the preset's function: a bug of its own, answered 500 and logged
        future.set_exception(error)
    return future

