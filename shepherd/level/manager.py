"""The LevelManager: turns one session's protocol messages into episodes, transitions and replies.

As in Coach, the agent never talks to the environment: the LevelManager stands between them. Here the
environment is a remote client, so the LevelManager keeps that session's episode state (phase, running
return, length) and forwards each message to the learner as ``begin_episode`` / ``step`` /
``end_episode``. The learner answers with a future action.

A vector session drives N environments at once, with SB3 ``VecEnv``'s automatic reset: `VectorLevel`
keeps N episodes, each env an actor of the learner, and hands every env's messages of one step to the
learner as one unit (``Learner.submit``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from shepherd.agents import ActionFuture, ActMode, Kind, Request, ThreadedLearner
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.wire import EnvSteps


class Phase(enum.Enum):
    """The phase an episode runs in, chosen when it starts and kept to its end."""

    HEATUP = "heatup"  # random actions; off-policy learners store them (SB3's learning_starts)
    TRAIN = "train"  # exploration policy; learned from
    EVALUATE = "evaluate"  # greedy, not learned from; its returns form the evaluation curve
    DEPLOY = "deploy"  # greedy, not learned from: evaluate-mode sessions and past the training budget
    TRIAL = "trial"  # greedy with another learner's policy, not learned from: how it does on this system


MODES = {Phase.HEATUP: ActMode.RANDOM, Phase.TRAIN: ActMode.EXPLORE, Phase.EVALUATE: ActMode.GREEDY,
         Phase.DEPLOY: ActMode.GREEDY, Phase.TRIAL: ActMode.GREEDY}


class Trial:
    """Another learner's greedy policy, played for ``episodes`` episodes on a session's own system.

    The policy is frozen when the trial first acts (`GreedyPolicy.frozen`: the weights its learner published
    last, and its observation statistics then), so every step of every episode of the trial plays one
    policy, whatever its learner learns meanwhile, and the host can adopt that very policy (``frozen``).
    Making a trial asks the learner to publish. The learner answers what the frozen copy cannot: steps
    before its weights arrived, masks a plan cannot apply, and every step of a learner without a numpy
    snapshot (``greedy`` None: images, recurrent policies, networks too large), whose trial plays it live.
    """

    def __init__(self, tried: str, learner: ThreadedLearner, episodes: int = 1) -> None:
        self.tried = tried  # whose policy it is (the host's name for it)
        self.learner = learner
        self.episodes = episodes
        self.returns: list[float] = []  # of the episodes played to their end
        self.frozen: GreedyPolicy | None = None
        self._live: set[int] = set()  # actors in an episode the learner answers part of
        greedy = getattr(learner, "greedy", None)
        if greedy is not None:
            greedy.prepare()  # its weights published by the time the trial starts

    @property
    def done(self) -> bool:
        return len(self.returns) >= self.episodes

    def ask(self, actor: int, reward: float, obs: Any, mask: Any) -> Callable[[], Future]:
        """The call that answers an actor's step of a trial episode (its first, or a later one)."""
        greedy = getattr(self.learner, "greedy", None)
        if self.frozen is None and greedy is not None:
            self.frozen = greedy.frozen()
        frozen = self.frozen
        if frozen is not None:
            answered = frozen.act(obs, mask)
            if answered is not None:
                return functools.partial(_answered, *answered)
        if actor in self._live:
            return functools.partial(self.learner.step, actor, reward, obs, ActMode.GREEDY, mask)
        self._live.add(actor)
        return functools.partial(self.learner.begin_episode, actor, obs, ActMode.GREEDY, mask)

    def end(self, actor: int, reward: float, obs: Any, truncated: bool) -> None:
        """An actor's trial episode ended (its last reward and observation)."""
        if actor in self._live:
            self.learner.end_episode(actor, reward, obs, truncated, ActMode.GREEDY)
        self.abandon(actor)

    def abandon(self, actor: int) -> None:
        """The tried learner forgets the actor at once."""
        if actor in self._live:
            self._live.discard(actor)
            self.learner.end_actor(actor)


def _answered(action: Any, version: int) -> ActionFuture:
    future = ActionFuture()
    future.policy_version = version
    future.set_result(action)
    return future


@dataclass
class Episode:
    phase: Phase
    total: float = 0.0
    length: int = 0
    trial: Trial | None = None  # a TRIAL episode's: the policy that answers it instead of the host's

    def count(self, reward: float, host: EpisodeHost) -> None:
        """One step of this episode (the reward for its last action), counted with the host too."""
        self.total += reward
        self.length += 1
        host.count_step(self.phase)


class EpisodeHost(Protocol):
    """What a LevelManager needs from the graph: the learner and the agent's schedule."""

    learner: ThreadedLearner

    def begin_episode(self) -> Phase: ...

    def begin_trial(self) -> Trial | None:
        """Another policy to try on this session's next episode instead (None: none)."""
        ...

    def count_step(self, phase: Phase) -> None: ...

    def end_episode(self, episode: Episode, completed: bool) -> None: ...


class LevelManager:
    """One client session of one agent.

    ``step`` takes one protocol message (already checked against the spaces) and returns the learner's
    future action, or None when the episode ended (the reply is then ``{"action": null}``).
    """

    def __init__(self, actor_id: int, host: EpisodeHost, evaluate_only: bool = False) -> None:
        self.actor_id = actor_id
        self.host = host
        self.evaluate_only = evaluate_only
        self.episode: Episode | None = None
        self.steps = 0
        self.closed = False
        self._asked: Callable[[], Future] | None = None  # the last learner call awaiting an action (`resend`)

    def resend(self) -> Future:
        """Hand the last step's learner call over again, without counting the step anew: its learner lost
        it (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        assert self._asked is not None, "resend before any step"
        return self._asked()

    def step(self, obs: Any, reward: float, done: bool, truncated: bool = False, mask: Any = None) -> Future | None:
        learner = self.host.learner
        episode = self.episode
        if episode is None:
            if done:  # an episode that ended on its reset observation: nothing to learn or answer
                return None
            trial = None if self.evaluate_only else self.host.begin_trial()
            if trial is not None:
                self.episode = Episode(Phase.TRIAL, trial=trial)
                self._asked = trial.ask(self.actor_id, 0.0, obs, mask)
                return self._asked()
            phase = Phase.DEPLOY if self.evaluate_only else self.host.begin_episode()
            self.episode = Episode(phase)
            self._asked = functools.partial(learner.begin_episode, self.actor_id, obs, MODES[phase], mask)
            return self._asked()
        episode.count(reward, self.host)
        self.steps += 1
        mode = MODES[episode.phase]
        trial = episode.trial
        if done:
            if trial is not None:
                trial.end(self.actor_id, reward, obs, truncated)
            else:
                learner.end_episode(self.actor_id, reward, obs, truncated, mode)
            self.episode = None
            self.host.end_episode(episode, completed=True)
            return None
        if trial is not None:
            self._asked = trial.ask(self.actor_id, reward, obs, mask)
        else:
            self._asked = functools.partial(learner.step, self.actor_id, reward, obs, mode, mask)
        return self._asked()

    def record(self, reward: float, done: bool, action: Any, version: int) -> Future | None:
        """A greedy step of an evaluate-mode session that another process answered with ``action`` (a front
        end, from its snapshot of the policy that ``version`` names): counted and recorded as `step` would,
        without asking the learner; the future gives that action, or None when the episode ended."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        episode = self.episode
        if episode is None:
            if done:
                return None
            self.episode = Episode(Phase.DEPLOY)
        else:
            episode.count(reward, self.host)
            self.steps += 1
            if done:
                self.episode = None
                self.host.end_episode(episode, completed=True)
                return None
        self._asked = functools.partial(_answered, action, version)
        return self._asked()

    def close(self) -> None:
        """End the session: an unfinished episode is abandoned, the learner closes its partial data."""
        if self.closed:
            return
        self.closed = True
        episode = self.episode
        if episode is not None:
            if episode.trial is not None:
                episode.trial.abandon(self.actor_id)
            self.host.end_episode(episode, completed=False)
            self.episode = None
        self.host.learner.end_actor(self.actor_id)


class VectorLevel:
    """One vector session of one agent: N environments stepped together, each an actor of the learner.

    ``step`` takes the N envs' parts of one step (checked against the spaces) and returns the future of the
    N actions, ``actions[i]`` answering ``obs[i]``. An env's first step, and an end reported before any step of its
    episode (the session's first call), start an episode: its reward and final observation are ignored.
    """

    def __init__(self, first_actor_id: int, n_envs: int, host: EpisodeHost, evaluate_only: bool = False) -> None:
        self.actor_ids = range(first_actor_id, first_actor_id + n_envs)
        self.group = first_actor_id  # names the session to the learner: its envs never wait on each other
        self.host = host
        self.evaluate_only = evaluate_only
        self.episodes: list[Episode | None] = [None] * n_envs
        self.steps = 0
        self.closed = False
        self._sent: list[Request] = []  # the last step's requests, as made (`resend`)

    def resend(self) -> ActionFuture:
        """Hand the last step's requests over again, without counting the step anew: its learner lost them
        (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        return self.host.learner.submit([dataclasses.replace(r, ticket=0, submitted=0.0) for r in self._sent])

    @property
    def n_envs(self) -> int:
        return len(self.actor_ids)

    def step(self, envs: EnvSteps) -> ActionFuture:
        """The learner's future of every env's action, a list in env order."""
        if len(envs.obs) != self.n_envs:
            raise ValueError(f"a step of this session has {self.n_envs} envs, not {len(envs.obs)}")
        host, group = self.host, self.group
        masks = envs.masks or [None] * self.n_envs
        requests: list[Request] = []
        for index, actor in enumerate(self.actor_ids):
            episode = self.episodes[index]
            if episode is not None:
                reward = envs.reward[index]
                episode.count(reward, host)
                self.steps += 1
                mode = MODES[episode.phase]
                if not envs.ended[index]:
                    requests.append(Request(Kind.STEP, actor, envs.obs[index], reward, False, mode, group=group,
                                            mask=masks[index]))
                    continue
                requests.append(Request(Kind.END, actor, envs.final_obs[index], reward, envs.truncated[index],
                                        mode, group=group))
                host.end_episode(episode, completed=True)
            phase = Phase.DEPLOY if self.evaluate_only else host.begin_episode()
            self.episodes[index] = Episode(phase)
            requests.append(Request(Kind.BEGIN, actor, envs.obs[index], 0.0, False, MODES[phase], group=group,
                                    mask=masks[index]))
        self._sent = [dataclasses.replace(r) for r in requests]
        return host.learner.submit(requests)

    def record(self, rewards: list[float], ended: list[bool], actions: list[Any], version: int) -> ActionFuture:
        """A greedy step of an evaluate-mode vector session that another process answered with ``actions``
        (a front end, from its snapshot of the policy that ``version`` names): counted and recorded as `step`
        would, without asking the learner; the future gives those actions."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        host = self.host
        for index, episode in enumerate(self.episodes):
            if episode is not None:
                episode.count(rewards[index], host)
                self.steps += 1
                if not ended[index]:
                    continue
                host.end_episode(episode, completed=True)
            self.episodes[index] = Episode(Phase.DEPLOY)
        return _answered(actions, version)

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, the learner closes their partial data."""
        if self.closed:
            return
        self.closed = True
        for index, episode in enumerate(self.episodes):
            if episode is not None:
                self.host.end_episode(episode, completed=False)
                self.episodes[index] = None
        self.host.learner.submit([Request(Kind.DROP, actor) for actor in self.actor_ids])
