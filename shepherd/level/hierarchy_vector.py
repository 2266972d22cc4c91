"""The HierarchyVectorLevel of a selector's vector session (docs/levels.md): N envs stepped together, each with its
own episode and option, as `HierarchyLevel` keeps one env's, with SB3 ``VecEnv``'s automatic reset.

One step makes every env's requests: the selector's (the transitions of the options that ended, the first act of
the episodes that began) go to the selector's learner as one unit (``Learner.submit``); once it chose, each
skill's (the steps of its options under way, the ends of those that ended, the first step of those it now
begins) go to that skill's learner as one unit. The reply lists every env's action, and ``"options"`` lists the
skill that answered each env.
"""

from __future__ import annotations

from typing import Any

from shepherd.agents import ActionFuture, Kind, Request
from shepherd.level.base import SessionEnded, consulting, submitting
from shepherd.level.episodes import MODES
from shepherd.level.hierarchy import CHOICE, Option, OptionHost, OptionsLevel, Skill
from shepherd.level.lifecycle import Announce
from shepherd.wire import EnvSteps, VectorStepInput


class HierarchyVectorLevel(OptionsLevel):
    """One vector session of a selector over ``skills``: N envs, each an actor of the selector and of the skills.
    Its reply fields are ``{"options": [NAME, ...]}``, filled in before the reply is done."""

    def __init__(self, first_actor_id: int, n_envs: int, host: OptionHost, skills: list[Skill], option_steps: int,
                 skills_learn: bool, action_space: Any, evaluate_only: bool = False, gamma: float = 1.0) -> None:
        super().__init__(host, skills, option_steps, skills_learn, action_space, evaluate_only, n_envs,
                         Announce.AT_BEGIN, gamma)
        self.actor_ids = range(first_actor_id, first_actor_id + n_envs)
        self.group = first_actor_id
        self.options: list[Option | None] = [None] * n_envs
        self._acting: dict[int, list[int]] = {}  # each skill's envs its last step's acts answer, in order

    @property
    def n_envs(self) -> int:
        return len(self.actor_ids)

    def take_vector_step(self, step: VectorStepInput) -> ActionFuture:
        if step.n_envs != self.n_envs:
            raise self.wrong_shape(step.n_envs)
        return self.step(step.envs)

    def _request(self, kind: Kind, index: int, obs: Any, reward: float, truncated: bool, mode: Any,
                 mask: Any = None) -> Request:
        return Request(kind, self.actor_ids[index], obs, reward, truncated, mode, group=self.group, mask=mask)

    def step(self, envs: EnvSteps) -> ActionFuture:
        """The future of every env's action, a list in env order."""
        host, lifecycle = self.host, self.lifecycle
        masks = envs.masks or [None] * self.n_envs  # each env's, for the skill that acts in it
        ends = {index: self._skill_ends(self.skills[option.skill], envs.obs[index], f"obs[{index}]")
                for index, option in enumerate(self.options)  # asked before anything changes: one that raises
                if option is not None and lifecycle.episodes[index] is not None and not envs.ended[index]}  # refuses
        lifecycle.open_step()
        choosing: list[int] = []  # the envs whose next option the selector chooses now, in its requests' order
        selector: list[Request] = []
        skills: dict[int, list[Request]] = {}
        for index in range(self.n_envs):
            episode, option = lifecycle.episodes[index], self.options[index]
            if episode is not None and option is not None:
                reward, obs = envs.reward[index], envs.obs[index]
                lifecycle.count(index, reward)
                option.add(reward, self.gamma)
                mode, acting = MODES[episode.phase], self.skill_mode(episode.phase)
                asked = skills.setdefault(option.skill, [])
                if envs.ended[index]:
                    final, truncated = envs.final_obs[index], envs.truncated[index]
                    asked.append(self._request(Kind.END, index, final, reward, truncated, acting))
                    selector.append(self._request(Kind.END, index, final, option.discounted, truncated, mode))
                    self._ended(index, option)
                    lifecycle.end(index)
                else:
                    ended = ends[index]
                    if not ended and option.steps < self.option_steps:
                        asked.append(self._request(Kind.STEP, index, obs, reward, False, acting, masks[index]))
                        continue
                    asked.append(self._request(Kind.END, index, obs, reward, not ended, acting, masks[index]))
                    selector.append(self._request(Kind.STEP, index, obs, option.discounted, False, mode))
                    self._ended(index, option)
                    choosing.append(index)
                    continue
            phase = lifecycle.begin(index).phase
            selector.append(self._request(Kind.BEGIN, index, envs.obs[index], 0.0, False, MODES[phase]))
            choosing.append(index)
        fields = self._fields = self._note_configs({})
        self.calls.forget()
        self._acting = {}
        if selector:
            self.calls.add(CHOICE, submitting(host.learner, selector))

        def consult() -> ActionFuture:  # a retry asks again only what was lost: the choice, else the skills' acts
            choice = self.calls.call(CHOICE) if CHOICE in self.calls else None
            acts = {skill: list(requests) for skill, requests in skills.items()}
            reply, self._chain = consulting(self._answer(choice, choosing, acts, envs.obs, masks, fields))
            return reply

        self._reply = consult
        return consult()

    def _ended(self, index: int, option: Option) -> None:
        self._record(option)
        self.options[index] = None

    async def _answer(self, choice: ActionFuture | None, choosing: list[int], skills: dict[int, list[Request]],
                      obs: list[Any], masks: list[Any], fields: dict[str, Any]) -> tuple[list[Any], int]:
        chosen = [] if choice is None else [int(index) for index in await choice]
        if self.closed:  # the session ended while the selector chose
            raise SessionEnded
        for index, skill in zip(choosing, chosen):
            episode = self.lifecycle.episodes[index]
            assert episode is not None
            self.options[index] = Option(skill)
            self._used.add(skill)
            skills.setdefault(skill, []).append(
                self._request(Kind.BEGIN, index, obs[index], 0.0, False, self.skill_mode(episode.phase), masks[index]))
        for skill, requests in skills.items():  # each skill's acts, made once a step (a retry: only if lost)
            if skill not in self.calls:  # its acting envs, in the order of its acts, read before the learner
                # takes the requests (a learner in this process may rewrite a request's kind as it batches it)
                self._acting[skill] = [self.actor_ids.index(r.actor) for r in requests
                                       if r.kind in (Kind.BEGIN, Kind.STEP)]
                self.calls.add(skill, submitting(self.skills[skill].learner, requests))
        futures = {skill: self.calls.call(skill) for skill in skills}
        acting = {skill: self._acting[skill] for skill in skills}
        answers = {skill: list(await future) for skill, future in futures.items()}
        actions: list[Any] = [None] * self.n_envs
        for skill, acts in acting.items():  # each skill's answers, in the order of its acts
            for index, action in zip(acts, answers[skill]):
                actions[index] = action
        fields["options"] = [None if option is None else self.skills[option.skill].name for option in self.options]
        return actions, min((future.policy_version for future in futures.values()), default=0)

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, every learner it used forgets its envs."""
        if self.closed:
            return
        self.closed = True
        self.lifecycle.abandon()
        drops = [Request(Kind.DROP, actor) for actor in self.actor_ids]
        self.host.learner.submit(drops)
        for skill in sorted(self._used):
            self.skills[skill].learner.submit(list(drops))
