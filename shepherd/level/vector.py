"""The VectorLevel of a vector session: N environments stepped together, with SB3 ``VecEnv``'s automatic reset.

It keeps N episodes, each env an actor of the learner, and hands every env's messages of one step to the
learner as one unit (``Learner.submit``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from shepherd.agents import ActionFuture, Kind, Request
from shepherd.level.base import Level
from shepherd.level.episodes import MODES, Episode, EpisodeHost, Phase, abandon, answered
from shepherd.lessons import EpisodeConfig
from shepherd.wire import EnvSteps, GreedyVectorStep, VectorStepInput


class VectorLevel(Level):
    """One vector session of one agent: N environments stepped together, each an actor of the learner.

    ``take_vector_step`` (`step`) takes the N envs' parts of one step (checked against the spaces) and returns the future of the
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
        #: each env's config for its next reset (announced at login, then whenever the env's episode started)
        self.pending: list[EpisodeConfig | None] = [host.next_config() for _ in range(n_envs)]
        self._fields: dict[str, Any] = {}

    def login_fields(self) -> dict[str, Any]:
        if all(setup is None for setup in self.pending):
            return {}
        return {"next_episode_configs": [None if setup is None else setup.config for setup in self.pending]}

    def reply_fields(self) -> dict[str, Any]:
        return self._fields

    def _begin(self, index: int, phase: Phase, started: list[Any], announced: list[Any]) -> Episode:
        """Env ``index``'s new episode, set up with the config announced for its reset; the next one is drawn."""
        setup = self.pending[index]
        if setup is not None:
            started[index] = setup.config
            self.pending[index] = next_setup = self.host.next_config()
            announced[index] = None if next_setup is None else next_setup.config
        return Episode(phase, setup=setup)

    def _note(self, started: list[Any], announced: list[Any]) -> None:
        self._fields = ({} if all(setup is None for setup in self.pending) else
                        {"next_episode_configs": announced, "episode_configs": started})

    def resend(self) -> ActionFuture:
        """Hand the last step's requests over again, without counting the step anew: its learner lost them
        (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        return self.host.learner.submit([dataclasses.replace(r, ticket=0, submitted=0.0) for r in self._sent])

    @property
    def n_envs(self) -> int:
        return len(self.actor_ids)

    def take_vector_step(self, step: VectorStepInput) -> ActionFuture:
        if step.n_envs != self.n_envs:
            raise self.wrong_shape(step.n_envs)
        return self.step(step.envs)

    def record_greedy_vector(self, step: GreedyVectorStep) -> ActionFuture:
        if step.n_envs != self.n_envs:
            raise self.wrong_shape(step.n_envs)
        assert self.evaluate_only, "a greedy step of a training session"
        return self.record(step.reward, step.ended, step.actions, step.version)

    def step(self, envs: EnvSteps) -> ActionFuture:
        """The learner's future of every env's action, a list in env order."""
        if len(envs.obs) != self.n_envs:
            raise ValueError(f"a step of this session has {self.n_envs} envs, not {len(envs.obs)}")
        host, group = self.host, self.group
        masks = envs.masks or [None] * self.n_envs
        started: list[Any] = [None] * self.n_envs
        announced: list[Any] = [None] * self.n_envs
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
            self.episodes[index] = self._begin(index, phase, started, announced)
            requests.append(Request(Kind.BEGIN, actor, envs.obs[index], 0.0, False, MODES[phase], group=group,
                                    mask=masks[index]))
        self._note(started, announced)
        self._sent = [dataclasses.replace(r) for r in requests]
        return host.learner.submit(requests)

    def record(self, rewards: list[float], ended: list[bool], actions: list[Any], version: int) -> ActionFuture:
        """A greedy step of an evaluate-mode vector session that another process answered with ``actions``
        (a front end, from its snapshot of the policy that ``version`` names): counted and recorded as `step`
        would, without asking the learner; the future gives those actions."""
        assert self.evaluate_only, "only evaluate-mode sessions are answered elsewhere"
        host = self.host
        started: list[Any] = [None] * self.n_envs
        announced: list[Any] = [None] * self.n_envs
        for index, episode in enumerate(self.episodes):
            if episode is not None:
                episode.count(rewards[index], host)
                self.steps += 1
                if not ended[index]:
                    continue
                host.end_episode(episode, completed=True)
            self.episodes[index] = self._begin(index, Phase.DEPLOY, started, announced)
        self._note(started, announced)
        return answered(actions, version)

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, the learner closes their partial data."""
        if self.closed:
            return
        self.closed = True
        abandon(self.host, self.episodes)
        self.host.learner.submit([Request(Kind.DROP, actor) for actor in self.actor_ids])
