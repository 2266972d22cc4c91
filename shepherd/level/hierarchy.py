"""The HierarchyLevel of a single-env session of a selector (docs/levels.md): each env step is answered by the
active skill; when an option ends the selector gets one transition and chooses again.

As in Coach, a level is the environment of the level above: here the selector's environment is the options.
An option is an episode of its skill (``begin_episode`` at its first step, ``end_episode`` at its end, truncated
when it ends by ``option_steps``, terminated when the env's episode or the skill's own episode ends). The
selector sees one transition per option: the observation it started from (its act), the rewards received during
it discounted per env step by the selector's gamma (`Option.add`: an SMDP's reward), the observation now and
whether the env's episode ended. The selector's episode is the env's
episode, so its returns are ordinary episode returns, and its runtime counts every env step (one schedule for
the whole hierarchy). A step that ends an option waits for the selector's choice, then for the new skill's
action: its reply is a task consulting both learners.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from shepherd.agents import ActionFuture, ActMode
from shepherd.agents.core import Kind, Learner, Request
from shepherd.level.base import Calls, Level, SessionEnded, consulting, observations_of
from shepherd.level.episodes import MODES, EpisodeHost, Phase
from shepherd.level.lifecycle import Announce, Lifecycle
from shepherd.wire import BadRequest, StepInput

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Skill:
    """A skill as a level consults it: its name (the wire's ``option``), its learner, and when its own episode
    would end (a function of the observation; None: only by the env or ``option_steps``)."""

    name: str
    learner: Learner
    ends: Callable[[Any], Any] | None = None
    agent_id: int = 0  # its agent's store id
    takes_masks: bool = False  # its algorithm takes action masks (MaskablePPO)


class OptionHost(EpisodeHost, Protocol):
    """What a HierarchyLevel needs of its selector's agent: an `EpisodeHost` that also records the options."""

    def record_option(self, skill: str, steps: int, reward: float) -> None:
        """An option of ``skill`` ended after ``steps`` env steps that returned ``reward`` in all."""
        ...


def skill_mode(skills_learn: bool, phase: Phase) -> ActMode:
    """How a skill acts in an episode of ``phase``: greedily when frozen or in evaluation; else as it explores
    (also in heatup, where the options are random)."""
    if not skills_learn or MODES[phase] is ActMode.GREEDY:
        return ActMode.GREEDY
    return ActMode.EXPLORE


@dataclass
class Option:
    """The option under way: its skill (by index) and what it has run: its steps, the sum of their rewards (its
    record) and their sum discounted per env step (``gamma^k r_k``: the selector's reward, as an SMDP's)."""

    skill: int
    reward: float = 0.0
    steps: int = 0
    discounted: float = 0.0

    def add(self, reward: float, gamma: float) -> None:
        """One env step of the option, with the reward for its action."""
        self.discounted += gamma ** self.steps * reward
        self.reward += reward
        self.steps += 1


#: the key of the selector's call among a step's `Calls` (the others: the skills', by skill)
CHOICE = -1


class OptionsLevel(Level):
    """What a selector's levels share (single-env and vector): its agent, its skills, how long an option runs at
    most, how the skills act, the reply's fields, and the options' record."""

    snapshots = False  # a front end cannot answer a hierarchy from one policy's snapshot

    def __init__(self, host: OptionHost, skills: list[Skill], option_steps: int, skills_learn: bool,
                 action_space: Any, evaluate_only: bool = False, n_envs: int = 1,
                 announce: Announce = Announce.AT_END, gamma: float = 1.0) -> None:
        self.host = host
        #: the selector's discount, applied per env step within an option (its transition's reward, SMDP)
        self.gamma = gamma
        #: the env's episodes are the selector's (its phases, lessons and records)
        self.lifecycle = Lifecycle(host, n_envs, evaluate_only, announce)
        self.skills = skills
        self.consults = frozenset(skill.agent_id for skill in skills)
        self.option_steps = option_steps
        self.skills_learn = skills_learn
        self.action_space = action_space
        self.evaluate_only = evaluate_only
        self.closed = False
        self._used: set[int] = set()  # the skills this session's actors were actors of
        self._fields: dict[str, Any] = {}
        self._chain: asyncio.Task[None] | None = None  # a step's consulting task (`consulting`)
        #: the last step's learner calls (`resend`): the selector's choice (`CHOICE`), the skills' acts by skill
        self.calls: Calls[int] = Calls()
        self._reply: Callable[[], ActionFuture] | None = None  # the last step's reply, built from its calls

    @property
    def steps(self) -> int:
        return self.lifecycle.steps

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        """The selector's learner, and the skills' when they learn: each may be handed any of the observations."""
        if self.evaluate_only:
            return []
        observed = observations_of(step)
        return [(self.host.learner, observed)] + [(skill.learner, observed) for skill in self.skills
                                                   if self.skills_learn]

    def login_fields(self) -> dict[str, Any]:
        return self.lifecycle.login_fields()

    def reply_fields(self) -> dict[str, Any]:
        return self._fields

    def resend(self) -> ActionFuture:
        """Ask again, without counting the step anew, what a learner of the last step lost (`LearnerUnavailable`:
        its process died and was restarted from its checkpoint): a skill's acts, or where options began, the
        selector's choice unless it was answered, then the chosen skills' first acts (never a call answered)."""
        assert self._reply is not None, "resend before any step"
        return self._reply()

    def _note_configs(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The step's options fields, with what it says about episodes' configs (`Lifecycle.close_step`)."""
        fields.update(self.lifecycle.close_step())
        return fields

    def mask_space(self, runtime_space: Any, runtime_takes_masks: bool) -> Any:
        """The skills' action space when every skill takes masks: a step's mask goes to the skill that acts."""
        return self.action_space if all(skill.takes_masks for skill in self.skills) else None

    def skill_mode(self, phase: Phase) -> ActMode:
        return skill_mode(self.skills_learn, phase)

    def _record(self, option: Option) -> None:
        self.host.record_option(self.skills[option.skill].name, option.steps, option.reward)

    @staticmethod
    def _skill_ends(skill: Skill, obs: Any, where: str = "obs") -> bool:
        """Whether ``skill``'s own episode ends at ``obs`` (its preset's function), asked before a step changes
        anything: a function that raises on the observation refuses the step (400) with nothing taken."""
        if skill.ends is None:
            return False
        try:
            return bool(skill.ends(obs))
        except Exception as error:  # noqa: BLE001 - the preset's function: whatever it raises refuses the step
            logger.warning("skill %s's end function raised on a step's observation", skill.name, exc_info=True)
            raise BadRequest(f"{where}: skill {skill.name}'s end function raised {type(error).__name__} on this "
                             f"observation ({error}); nothing was taken") from None


class HierarchyLevel(OptionsLevel):
    """One single-env session of a selector over ``skills``: protocol messages -> options and learner calls.

    ``take_step`` returns the active skill's future action, or, when a new option starts, a future set once the
    selector chose and the chosen skill answered; None when the env's episode ended. Every reply adds
    ``"option"``: the skill that answered (None at an episode's end).
    """

    def __init__(self, actor_id: int, host: OptionHost, skills: list[Skill], option_steps: int, skills_learn: bool,
                 action_space: Any, evaluate_only: bool = False, gamma: float = 1.0) -> None:
        super().__init__(host, skills, option_steps, skills_learn, action_space, evaluate_only, gamma=gamma)
        self.actor_id = actor_id
        self.option: Option | None = None

    def take_step(self, step: StepInput) -> ActionFuture | None:
        lifecycle = self.lifecycle
        lifecycle.open_step()
        try:
            return self._step(step)
        finally:
            self._note_configs(self._fields)

    def step(self, obs: Any, reward: float, done: bool, truncated: bool = False, mask: Any = None
             ) -> ActionFuture | None:
        """`take_step` of a step given by its fields (a level driven by hand)."""
        return self.take_step(StepInput(obs, reward, done, truncated, mask=mask))

    def _step(self, step: StepInput) -> ActionFuture | None:
        """The step as the `Request`s of the selector (its option's discounted reward) and of the skill acting."""
        host, actor, lifecycle, obs = self.host, self.actor_id, self.lifecycle, step.obs
        if lifecycle.episodes[0] is not None and self.option is None:  # the selector's learner refused its choice
            lifecycle.end(0, completed=False)  # (400: an observation its networks cannot take): begun again here
        if lifecycle.episodes[0] is None:
            self._fields = {"option": None}
            if step.done:  # an episode that ended on its reset observation: nothing to learn or answer
                lifecycle.announce_again(0)
                return None
            phase = lifecycle.begin(0).phase
            return self._choose(functools.partial(host.learner.ask, Request(Kind.BEGIN, actor, obs, mode=MODES[phase])),
                                obs, step.mask)
        option = self.option
        assert option is not None
        skill = self.skills[option.skill]
        skill_ended = not step.done and self._skill_ends(skill, obs)  # before anything changes
        episode = lifecycle.count(0, step.reward)
        option.add(step.reward, self.gamma)
        mode, skill_mode = MODES[episode.phase], self.skill_mode(episode.phase)
        if step.done:  # (a time limit's end bootstraps over the actions its mask allows)
            skill.learner.tell(Request(Kind.END, actor, obs, step.reward, step.truncated, skill_mode, mask=step.mask))
            host.learner.tell(Request(Kind.END, actor, obs, option.discounted, step.truncated, mode))
            self._ended(option)
            lifecycle.end(0)
            self._fields = {"option": None}
            return None
        if skill_ended or option.steps >= self.option_steps:
            skill.learner.tell(Request(Kind.END, actor, obs, step.reward, not skill_ended, skill_mode, mask=step.mask))
            self._ended(option)
            return self._choose(functools.partial(host.learner.ask, Request(Kind.STEP, actor, obs, option.discounted,
                                                                            mode=mode)), obs, step.mask)
        self._fields = {"option": skill.name}
        self.calls.forget()
        self.calls.add(option.skill, functools.partial(skill.learner.ask, Request(Kind.STEP, actor, obs, step.reward,
                                                                                  mode=skill_mode, mask=step.mask)))
        self._reply = functools.partial(self.calls.call, option.skill)
        return self._reply()

    def _ended(self, option: Option) -> None:
        self._record(option)
        self.option = None

    def _choose(self, ask: Callable[[], ActionFuture], obs: Any, mask: Any) -> ActionFuture:
        """The reply of a step that starts an option: the selector's choice (``ask``), then the chosen skill's
        action (under the step's ``mask``)."""
        fields: dict[str, Any] = {}
        self._fields = fields
        self.calls.forget()
        self.calls.add(CHOICE, ask)

        def consult() -> ActionFuture:  # a retry asks again only what was lost: the choice, else the skill's act
            reply, self._chain = consulting(self._answer(self.calls.call(CHOICE), obs, mask, fields))
            return reply

        self._reply = consult
        return consult()

    async def _answer(self, choice: ActionFuture, obs: Any, mask: Any, fields: dict[str, Any]) -> tuple[Any, int]:
        index = int(await choice)
        if self.closed:  # the session ended while the selector chose
            raise SessionEnded
        skill = self.skills[index]
        episode = self.lifecycle.episodes[0]
        assert episode is not None
        self.option = Option(index)
        self._used.add(index)
        fields["option"] = skill.name
        future = self.calls.call(index, functools.partial(
            skill.learner.ask, Request(Kind.BEGIN, self.actor_id, obs, mode=self.skill_mode(episode.phase), mask=mask)))
        return await future, future.policy_version

    def close(self) -> None:
        """End the session: an unfinished episode is abandoned, every learner it used forgets the actor."""
        if self.closed:
            return
        self.closed = True
        self.lifecycle.abandon()
        self.host.learner.end_actor(self.actor_id)
        for index in sorted(self._used):
            self.skills[index].learner.end_actor(self.actor_id)
