"""What every level is: the environment of the level above it (here, a remote client's session), taking each
kind of step by a method of its own.

A step is handed over by its own type (`shepherd.wire.Step.hand_to` calls the method for its kind), so a
session never asks which kind of step or level it holds. A level answers the kinds it drives; the others
are refused here with what the client should send instead. Adding a kind of step is one typed value at the
edge (`shepherd.wire`), one method here (refusing) and in the levels that take it, and one route row.

A reply is awaitable (`Reply`): the learner's future action of a one-learner level (`ActionFuture`, which
the session waits on without a thread hand-off of its own), or a task of a level whose step consults more
than one learner (a selector, then a skill).

A level keeps the learner calls of its last step in `Calls`, and builds the step's reply from them. The step's
retry after a learner's process died (`Level.resend`) builds the reply again from the same `Calls`: only the
calls whose learner lost them are made again, so that no learner takes a transition twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Awaitable, Callable, Generic, Hashable, Protocol, TypeVar

from shepherd.level.lifecycle import Lifecycle
from shepherd import wire
from shepherd.agents import ActionFuture, Request, lost
from shepherd.wire import GreedyStep, GreedyVectorStep, StepInput, VectorStepInput


def observations_of(step: Any) -> list[Any]:
    """A single-env or vector step's observations: its obs, and a vector step's ended episodes' last ones."""
    if isinstance(step, StepInput):
        return [step.obs]
    if isinstance(step, VectorStepInput):
        return list(step.envs.obs) + [obs for obs in step.envs.final_obs if obs is not None]
    return []
from shepherd.wire.experience import Experience, ExperienceSpaces

T = TypeVar("T", covariant=True)
K = TypeVar("K", bound=Hashable)


class WrongShape(ValueError):
    """A vector step on a single-env session, the reverse, or a vector step with another number of envs."""


class Calls(Generic[K]):
    """The learner calls of a level's last step, by key (an env, a role, a skill), each made at most once unless
    its learner lost it.

    A level `forget`s the last step's calls when it takes a step, `add`s each call's maker (without calling it)
    or makes it at once (`call`), and builds the step's reply from their futures (`made`). A retry of the step
    after a learner's process died (`Level.resend`: `LearnerUnavailable`) builds the reply again the same way:
    a call is made again only if its future was lost (`lost`). One answered, or still waiting, is not: its
    learner has the request, and would take the transition twice."""

    def __init__(self) -> None:
        self._makers: dict[K, Callable[[], ActionFuture]] = {}
        self._futures: dict[K, ActionFuture] = {}

    def forget(self) -> None:
        """A new step: the last one's calls are no longer asked again."""
        self._makers.clear()
        self._futures.clear()

    def add(self, key: K, make: Callable[[], ActionFuture]) -> None:
        """The call ``key`` of this step, made by ``make`` when its future is first wanted (`call`, `made`)."""
        self._makers[key] = make

    def call(self, key: K, make: Callable[[], ActionFuture] | None = None) -> ActionFuture:
        """The future of the call ``key``: made now (by ``make``, or the maker `add`ed) if it was not made yet
        or its learner lost it; else the one made before."""
        if make is not None:
            self._makers[key] = make
        future = self._futures.get(key)
        if future is None or lost(future):
            future = self._futures[key] = self._makers[key]()
        return future

    def made(self) -> dict[K, ActionFuture]:
        """Every call's future, in the order the calls were added (`call` each)."""
        return {key: self.call(key) for key in list(self._makers)}

    def __contains__(self, key: object) -> bool:
        return key in self._makers


def submitting(learner: Any, requests: list[Request]) -> Callable[[], ActionFuture]:
    """The maker of a call that submits ``requests`` to ``learner`` (`Calls.add`): the requests themselves the
    first time, then fresh copies of them as they were when the maker was made (a learner in this process
    may rewrite a request as it takes it: its ticket, its kind)."""
    sent = [dataclasses.replace(request) for request in requests]
    first = [requests]
    return lambda: learner.submit(first.pop() if first else
                                  [dataclasses.replace(request, ticket=0, submitted=0.0) for request in sent])


class Reply(Awaitable[T], Protocol[T]):
    """A step's reply: awaitable, and readable once done (the action; None when the episode ended)."""

    def done(self) -> bool: ...

    def result(self) -> T: ...

    def cancelled(self) -> bool: ...

    def exception(self) -> BaseException | None: ...

    def add_done_callback(self, fn: Callable[[Any], object]) -> None: ...


class Level:
    """A session's level. Subclasses take the kinds of step they drive; ``n_envs`` is None for a level
    that drives one env, else how many envs each of its steps carries."""

    evaluate_only: bool = False
    #: the space of the actions it answers when not its runtime's (a hierarchy's: its skills'; None: the runtime's)
    action_space: Any = None
    #: whether a front end may answer its evaluate-mode steps from its runtime's snapshot
    snapshots: bool = True
    #: whether its steps may carry an action mask (when its runtime's algorithm takes them: `mask_space`)
    takes_masks: bool = True
    #: the store ids of other agents whose learners its steps consult (a selector's skills): their restart ends it
    consults: frozenset[int] = frozenset()
    #: its envs' episodes (every shape keeps them in one `Lifecycle`)
    lifecycle: Lifecycle

    @property
    def n_envs(self) -> int | None:
        return None

    def take_step(self, step: StepInput) -> Reply[Any] | None:
        """A single-env step: the reply with the action, or None when the episode ended."""
        raise self.wrong_shape(step.n_envs)

    def observed_by(self, step: Any) -> list[tuple[Any, list[Any]]]:
        """The learners that learn from ``step``'s observations, each with those it gets: the session asks each
        learner that can tell (an off-policy agent's: `unbounded`) whether its networks take them before the
        step changes anything here, since a learner refusing it later (400, nothing recorded) found its episodes
        counted and begun already. Empty: nothing asked (this base: no steps; a client-acting level's uploads are
        checked by the learner before they are recorded; an evaluate-mode session is not learned from)."""
        return []

    def take_vector_step(self, step: VectorStepInput) -> Reply[Any]:
        """A vector step: the reply with every env's action, in env order."""
        raise self.wrong_shape(step.n_envs)

    def record_greedy(self, step: GreedyStep) -> Reply[Any] | None:
        """A single-env step a front end answered from its snapshot: counted and recorded, not asked."""
        raise self.wrong_shape(step.n_envs)

    def record_greedy_vector(self, step: GreedyVectorStep) -> Reply[Any]:
        """A vector step a front end answered from its snapshot: counted and recorded, not asked."""
        raise self.wrong_shape(step.n_envs)

    def take_upload(self, step: Experience) -> Reply[Any]:
        """A client-acting session's upload of T steps of its N envs: the reply with what to do next."""
        raise self.acts_at_server("act with the policy file and upload experience")

    # -- the session's verbs: what a login, a step body, an upload or a policy fetch means to this level ------
    def parse_step(self, data: dict[str, Any], checks: ExperienceSpaces) -> StepInput | VectorStepInput | None:
        """A step body (`shepherd.wire.parse_object`'s) checked into this level's kind of step (one env's or
        ``n_envs``'); None for ``"obs": null`` (the session ends). Raises BadRequest, WrongShape."""
        for name in ("outcome", "envs"):  # fields of environments with roles only (`shepherd.level.roles`)
            if data.get(name) is not None:
                raise wire.BadRequest(f"'{name}' is sent by an environment's session with roles, not by an agent's")
        if self.n_envs is None:
            return wire.parse_step(data, checks.observation, checks.mask, _mask_check(checks), checks.max_reward)
        return wire.parse_vector_step(data, checks.observation, self.n_envs, checks.mask, _mask_check(checks),
                                      checks.max_reward)

    def parse_upload(self, data: dict[str, Any], checks: ExperienceSpaces) -> Experience:
        """An upload's body checked into its `Experience`: refused by a level whose policy acts at the server."""
        raise self.acts_at_server("upload experience")

    def opening(self) -> Reply[dict[str, Any]]:
        """What the login reply adds, once ready: the first episodes' configs (docs/lessons.md; {} without
        lessons), or a client-acting session's first block (which the learner may first have to plan)."""
        return _done(self.login_fields())

    async def policy_file(self, held: int | None, timeout: float, held_phase: Any = None) -> tuple[int, bytes | None]:
        """The behaviour policy file a client acts with now, and its version; None for the file when ``held``
        names that version still, in ``held_phase`` (HTTP 304). Refused by a level whose policy acts at the
        server."""
        raise self.acts_at_server("fetch the policy")

    def mask_space(self, runtime_space: Any, runtime_takes_masks: bool) -> Any:
        """What a step's ``action_mask`` is checked against: its runtime's action space when the runtime's
        algorithm and this level take masks (a selector's: its skills', when every skill takes them); None:
        none is taken."""
        return runtime_space if runtime_takes_masks and self.takes_masks else None

    def upload_steps(self) -> int:
        """The env steps one upload of this session carries: what the rate limit charges an upload, and a policy
        file fetched (issue 48, M5: a file can be megabytes; a client fetches once per new version or phase)."""
        return self.n_envs or 1

    def introduction(self) -> dict[str, Any] | None:
        """What the login reply says the session is, when not its agent (name and spaces): an environment's
        roles (`shepherd.level.roles`). None: the agent's."""
        return None

    def reply_body(self, action: Any) -> dict[str, Any] | None:
        """A step's reply body from its answer, when the level words it itself (an environment's, by role); None:
        the action (or actions) and policy version, as every agent's session answers."""
        return None

    def acts_at_server(self, what: str) -> WrongShape:
        return WrongShape("this session's policy acts at the server: send steps to /shepherd/env/ (log in with "
                          f"\"acting\": \"client\" to {what})")

    def login_fields(self) -> dict[str, Any]:
        """What the login reply adds about the first episodes' configs (docs/lessons.md; {} without lessons)."""
        return {}

    def reply_fields(self) -> dict[str, Any]:
        """What the reply to the last step taken adds about episodes' configs (docs/lessons.md; {} without
        lessons): read right after the step is handed over, and kept for its retries."""
        return {}

    def release_held(self) -> int:
        """The session went quiet: hand back what it holds that other sessions wait for (its evaluation
        episodes, `Lifecycle.release_evaluations`). Returns how many episodes it handed back."""
        return self.lifecycle.release_evaluations()

    def resend(self) -> Reply[Any]:
        """Hand the last step's learner call over again, without counting the step anew: its learner lost it
        (`LearnerUnavailable`: the learner's process died and was restarted from its checkpoint)."""
        raise NotImplementedError

    def close(self) -> None:
        """End the session: unfinished episodes are abandoned, the learner closes their partial data."""
        raise NotImplementedError

    def wrong_shape(self, envs: int | None) -> WrongShape:
        """The refusal of a step that carries ``envs`` envs (None: a single-env step) on this level."""
        if self.n_envs is None:
            return WrongShape("this session drives one env: send one obs and reward (log in with n_envs for "
                              "vector steps)")
        if envs is None:
            return WrongShape(f"this session drives {self.n_envs} envs: send a vector step (lists of obs, reward, "
                              "terminated, truncated)")
        return WrongShape(f"this session drives {self.n_envs} envs, the step has {envs}: "
                          "one item per env in every list")


def _mask_check(checks: ExperienceSpaces) -> Any:
    assert checks.check_mask is not None, "a session's checks without the mask rule"
    return checks.check_mask


class SessionEnded(Exception):
    """Raised inside a step's consulting task when its session ended while a learner answered."""


def consulting(work: Awaitable[tuple[Any, int]]) -> tuple[ActionFuture, asyncio.Task[None]]:
    """The reply of a step that consults more than one learner (a selector, then a skill; a host and a tried
    learner): ``work`` gives the action and the policy version that chose it. A learner that dropped a request
    (`asyncio.CancelledError`: the session ended while it waited) or a `SessionEnded` cancels the reply;
    another error (AgentFailed, say) is the reply's. Returns the reply and the task (keep it: a task no one
    holds may be collected)."""
    reply = ActionFuture()

    async def answer() -> None:
        try:
            action, version = await work
        except (asyncio.CancelledError, SessionEnded):
            reply.cancel()
            return
        except Exception as error:  # noqa: BLE001 - the step's waiter hears it
            reply.set_exception(error)
            return
        reply.policy_version = version
        reply.set_result(action)
    return reply, asyncio.ensure_future(answer())


def _done(value: Any) -> Reply[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
