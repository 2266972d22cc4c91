"""The LevelManager turns protocol messages into learner calls, with a fake learner and host."""

from concurrent.futures import Future

import pytest

from shepherd.agents import ActionFuture, ActMode, LearnerUnavailable
from tests.fake_learners import RequestsAsCalls
from shepherd.level import Episode, LevelManager, Phase, Trial


class FakeLearner(RequestsAsCalls):
    def __init__(self):
        self.calls = []

    def _future(self, value):
        future = ActionFuture()
        future.set_result(value)
        return future

    def begin_episode(self, actor, obs, mode, mask=None):
        self.calls.append(("begin", actor, obs, mode))
        return self._future("a0")

    def step(self, actor, reward, obs, mode, mask=None):
        self.calls.append(("step", actor, reward, obs, mode))
        return self._future("a1")

    def end_episode(self, actor, reward, obs, truncated, mode):
        self.calls.append(("end", actor, reward, obs, truncated, mode))

    def end_actor(self, actor):
        self.calls.append(("drop", actor))


class FakeHost:
    def __init__(self, phases):
        self.learner = FakeLearner()
        self.phases = list(phases)
        self.counted = []
        self.ended = []
        self.trials = []

    def begin_episode(self):
        return self.phases.pop(0)

    def begin_trial(self):
        return self.trials.pop(0) if self.trials else None

    def next_config(self):
        return None

    def count_step(self, phase):
        self.counted.append(phase)

    def end_episode(self, episode: Episode, completed: bool):
        self.ended.append((episode.phase, episode.total, episode.length, completed))
        self.tried = episode.trial.tried if episode.trial else None


def test_an_episode_maps_to_begin_step_end():
    host = FakeHost([Phase.TRAIN])
    level = LevelManager(7, host)
    assert level.step("o0", 99.0, False).result() == "a0"  # the reward of a reset observation is ignored
    assert level.step("o1", 1.0, False).result() == "a1"
    assert level.step("o2", 2.0, True, truncated=True) is None
    assert host.learner.calls == [
        ("begin", 7, "o0", ActMode.EXPLORE), ("step", 7, 1.0, "o1", ActMode.EXPLORE),
        ("end", 7, 2.0, "o2", True, ActMode.EXPLORE)]
    assert host.ended == [(Phase.TRAIN, 3.0, 2, True)]
    assert host.counted == [Phase.TRAIN, Phase.TRAIN]


def test_phases_map_to_act_modes_and_evaluate_sessions_never_ask_the_schedule():
    host = FakeHost([Phase.HEATUP, Phase.EVALUATE])
    level = LevelManager(1, host)
    level.step("o", 0.0, False)
    level.step("o", 0.0, True)
    level.step("o", 0.0, False)
    assert [(c[0], c[-1]) for c in host.learner.calls] == [
        ("begin", ActMode.RANDOM), ("end", ActMode.RANDOM), ("begin", ActMode.GREEDY)]
    deploy_host = FakeHost([])
    LevelManager(2, deploy_host, evaluate_only=True).step("o", 0.0, False)
    assert deploy_host.learner.calls[0][3] is ActMode.GREEDY


def test_closing_mid_episode_abandons_it_and_drops_the_actor_once():
    host = FakeHost([Phase.TRAIN])
    level = LevelManager(3, host)
    level.step("o", 0.0, False)
    level.step("o", 1.0, False)
    level.close()
    level.close()
    assert host.ended == [(Phase.TRAIN, 1.0, 1, False)]
    assert host.learner.calls[-1] == ("drop", 3) and host.learner.calls.count(("drop", 3)) == 1


def test_done_on_a_reset_observation_is_an_empty_episode():
    host = FakeHost([])
    assert LevelManager(4, host).step("o", 0.0, True) is None
    assert host.learner.calls == [] and host.ended == []


class Losing(FakeLearner):
    """A learner whose calls are lost (`LearnerUnavailable`: its process died) while ``lose``."""

    lose = True

    def _future(self, value):
        if not self.lose:
            return super()._future(value)
        future = ActionFuture()
        future.set_exception(LearnerUnavailable("restarting"))
        return future


def test_resend_repeats_the_last_learner_call_without_counting_the_step_again_only_if_it_was_lost():
    host = FakeHost([Phase.TRAIN])
    host.learner = Losing()
    level = LevelManager(5, host)
    with pytest.raises(LearnerUnavailable):
        level.step("o0", 0.0, False).result()
    host.learner.lose = False
    assert level.resend().result() == "a0"  # the episode's begin, again
    level.step("o1", 1.0, False)
    assert level.resend().result() == "a1"  # answered: not asked twice (the learner would take it twice)
    assert host.learner.calls == [("begin", 5, "o0", ActMode.EXPLORE)] * 2 + [("step", 5, 1.0, "o1", ActMode.EXPLORE)]
    assert host.counted == [Phase.TRAIN] and level.steps == 1


def test_a_step_refused_before_it_asks_keeps_the_last_steps_call_for_its_retry(monkeypatch):
    host = FakeHost([Phase.TRAIN])
    host.learner = Losing()
    level = LevelManager(5, host)
    with pytest.raises(LearnerUnavailable):
        level.step("o0", 0.0, False).result()

    def refused(step):
        raise ValueError("refused")

    monkeypatch.setattr(level, "_ask", refused)
    with pytest.raises(ValueError):
        level.step("o1", 1.0, False)
    monkeypatch.undo()
    host.learner.lose = False
    assert level.resend().result() == "a0"  # the first step's call, asked again (it was forgotten: KeyError)



async def test_a_step_its_learner_lost_goes_to_the_learner_again_on_its_retry_and_counts_once():
    """`LearnerUnavailable` (a learner's process died): the retry of the same seq is handed over again,
    while a retry of an answered step gets the stored answer, never a second learner call."""
    from shepherd.agents import LearnerUnavailable
    from shepherd.graph.sessions import Session
    from shepherd.wire import StepInput

    class LosingLearner(FakeLearner):
        lose = True

        def step(self, actor, reward, obs, mode, mask=None):
            self.calls.append(("step", actor, reward, obs, mode))
            future = Future()
            if self.lose:
                future.set_exception(LearnerUnavailable("restarting"))
            else:
                future.set_result("a1")
            return future

    host = FakeHost([Phase.TRAIN])
    host.learner = LosingLearner()
    session = Session("key", LevelManager(6, host), runtime=None)
    assert (await session.step(StepInput.of([0.0], 0.0, seq=1), 5)).action == "a0"
    step = StepInput.of([1.0], 1.0, seq=2)
    try:
        await session.step(step, 5)
        raise AssertionError("the lost step was answered")
    except LearnerUnavailable:
        pass
    host.learner.lose = False
    assert (await session.step(step, 5)).action == "a1"  # handed to the learner again
    assert (await session.step(step, 5)).action == "a1"  # answered: the stored answer
    assert [c[0] for c in host.learner.calls] == ["begin", "step", "step"]
    assert host.counted == [Phase.TRAIN]


def test_a_trial_episode_is_played_greedy_by_the_tried_learner_then_the_hosts_goes_on():
    host = FakeHost([Phase.TRAIN])
    tried = FakeLearner()
    host.trials.append(Trial("c0", tried))
    level = LevelManager(7, host)
    level.step("o0", 0.0, False)
    level.step("o1", 1.0, False)
    assert level.step("o2", 1.0, True) is None
    assert tried.calls == [("begin", 7, "o0", ActMode.GREEDY), ("step", 7, 1.0, "o1", ActMode.GREEDY),
                           ("end", 7, 1.0, "o2", False, ActMode.GREEDY), ("drop", 7)]
    assert host.learner.calls == []  # the session's own learner saw nothing of the trial
    assert host.ended == [(Phase.TRIAL, 2.0, 2, True)] and host.tried == "c0"
    assert host.counted == [Phase.TRIAL, Phase.TRIAL]
    level.step("o3", 0.0, False)  # the next episode is the host's own again
    assert host.learner.calls == [("begin", 7, "o3", ActMode.EXPLORE)]
    assert len(tried.calls) == 4


def test_closing_mid_trial_drops_the_actor_from_both_learners():
    host = FakeHost([])
    tried = FakeLearner()
    host.trials.append(Trial("c0", tried))
    level = LevelManager(3, host)
    level.step("o0", 0.0, False)
    level.close()
    assert tried.calls[-1] == ("drop", 3) and host.learner.calls == [("drop", 3)]
    assert host.ended == [(Phase.TRIAL, 0.0, 0, False)]


class FrozenPolicy:
    """A frozen greedy actor: answers every observation as ``f-<obs>`` at version 5 (None: it cannot)."""

    def __init__(self, refuse=()):
        self.refuse = set(refuse)

    def act(self, obs, mask=None, rng=None):
        return None if obs in self.refuse else (f"f-{obs}", 5)


class SnapshotOf:
    """A tried learner's `GreedyPolicy`: ``frozen()`` gives a `FrozenPolicy` once weights are published."""

    def __init__(self, published=True, refuse=()):
        self.published, self.refuse, self.frozen_calls, self.prepared = published, refuse, 0, 0

    def prepare(self):
        self.prepared += 1

    def frozen(self):
        self.frozen_calls += 1
        return FrozenPolicy(self.refuse) if self.published else None


def test_a_trial_plays_the_tried_policy_frozen_when_it_began():
    host = FakeHost([Phase.TRAIN])
    tried = FakeLearner()
    tried.greedy = SnapshotOf()
    trial = Trial("c0", tried, episodes=2)
    assert tried.greedy.prepared == 1  # making the trial asked the learner to publish its weights
    host.trials.append(trial)
    level = LevelManager(7, host)
    first = level.step("o0", 0.0, False)
    assert first.result() == "f-o0" and first.policy_version == 5
    assert level.step("o1", 1.0, False).result() == "f-o1"
    assert level.step("o2", 1.0, True) is None
    host.trials.append(trial)  # its second episode (the runtime queues it again)
    assert level.step("o3", 0.0, False).result() == "f-o3"
    assert tried.calls == [] and host.learner.calls == []  # no learner answered any of it
    assert tried.greedy.frozen_calls == 1  # one frozen policy for the whole trial


def test_the_tried_learner_answers_what_its_frozen_policy_cannot():
    host = FakeHost([])
    tried = FakeLearner()
    tried.greedy = SnapshotOf(published=False)  # nothing published yet: the learner answers the first step
    host.trials.append(Trial("c0", tried))
    level = LevelManager(7, host)
    assert level.step("o0", 0.0, False).result() == "a0"
    tried.greedy.published, tried.greedy.refuse = True, {"o2"}  # published now; one step it cannot answer
    assert level.step("o1", 1.0, False).result() == "f-o1"
    assert level.step("o2", 1.0, False).result() == "a1"
    assert level.step("o3", 1.0, True) is None
    assert tried.calls == [("begin", 7, "o0", ActMode.GREEDY), ("step", 7, 1.0, "o2", ActMode.GREEDY),
                           ("end", 7, 1.0, "o3", False, ActMode.GREEDY), ("drop", 7)]


def test_evaluate_sessions_never_run_trials():
    host = FakeHost([])
    host.trials.append(Trial("c0", FakeLearner()))
    level = LevelManager(3, host, evaluate_only=True)
    level.step("o0", 0.0, False)
    assert host.learner.calls == [("begin", 3, "o0", ActMode.GREEDY)] and len(host.trials) == 1


class FakeVectorLearner(FakeLearner):
    def submit(self, requests):
        self.calls.append(("submit", [(r.kind.name, r.actor) for r in requests]))
        return self._future([f"own{r.actor}" for r in requests if r.kind.name in ("BEGIN", "STEP")])


async def test_a_vector_sessions_env_plays_a_trial_while_the_others_play_the_hosts_policy():
    """Issue 45: advised trials in vector sessions (they were served in single-env sessions only). The env whose
    episode is a trial is answered by the tried learner, the others by the host's, in one reply."""
    from shepherd.level import VectorLevel
    from shepherd.wire import EnvSteps

    host = FakeHost([Phase.TRAIN] * 4)
    host.learner = FakeVectorLearner()
    tried = FakeLearner()
    host.trials.append(Trial("c0", tried))
    level = VectorLevel(10, 2, host)

    def step(obs, reward, ended=(False, False)):
        return level.step(EnvSteps(list(obs), [reward] * 2, list(ended), [False, False],
                                   [o if e else None for o, e in zip(obs, ended)], None))

    assert await step(("a", "b"), 0.0) == ["a0", "own11"]  # env 0 took the queued trial
    assert tried.calls == [("begin", 10, "a", ActMode.GREEDY)]
    assert host.learner.calls == [("submit", [("BEGIN", 11)])]
    assert await step(("c", "d"), 1.0) == ["a1", "own11"]
    assert await step(("e", "f"), 1.0, ended=(True, False)) == ["own10", "own11"]
    assert tried.calls[-2:] == [("end", 10, 1.0, "e", False, ActMode.GREEDY), ("drop", 10)]
    assert host.ended == [(Phase.TRIAL, 2.0, 2, True)] and host.tried == "c0"


async def test_a_vector_steps_retry_asks_again_only_the_learner_that_lost_it():
    """`LearnerUnavailable` from the session's own learner or from an env's tried learner (a trial episode): the
    retry's reply has every env's action in env order, and the learner that answered is not asked twice."""
    import pytest

    from shepherd.agents import LearnerUnavailable
    from shepherd.level import VectorLevel
    from shepherd.wire import EnvSteps

    def unavailable():
        future = ActionFuture()
        future.set_exception(LearnerUnavailable("restarting"))
        return future

    class LosingOwn(FakeVectorLearner):
        lose = False

        def submit(self, requests):
            answered = super().submit(requests)
            return unavailable() if self.lose else answered

    class LosingTried(FakeLearner):
        lose = False

        def step(self, actor, reward, obs, mode, mask=None):
            self.calls.append(("step", actor, reward, obs, mode))
            return unavailable() if self.lose else self._future("a1")

    host = FakeHost([Phase.TRAIN] * 4)
    host.learner, tried = LosingOwn(), LosingTried()
    host.trials.append(Trial("c0", tried))
    level = VectorLevel(10, 3, host)

    def step(obs):
        return level.step(EnvSteps(list(obs), [1.0] * 3, [False] * 3, [False] * 3, [None] * 3, None))

    assert await step("abc") == ["a0", "own11", "own12"]  # env 0 plays a trial
    host.learner.lose = True
    with pytest.raises(LearnerUnavailable):
        await step("def")
    host.learner.lose = False
    assert await level.resend() == ["a1", "own11", "own12"]  # not only the own learner's, shifted
    assert [call[:2] for call in tried.calls] == [("begin", 10), ("step", 10)]  # the trial's step asked once
    tried.lose = True
    with pytest.raises(LearnerUnavailable):
        await step("ghi")
    tried.lose = False
    submitted = len(host.learner.calls)
    assert await level.resend() == ["a1", "own11", "own12"]
    assert len(host.learner.calls) == submitted and [call[0] for call in tried.calls][-2:] == ["step", "step"]


async def test_a_front_ends_retry_of_a_step_its_learner_lost_waits_for_the_learner_again():
    """The step went to the head and its learner lost it (503); its retry, with the same seq, comes from a front end
    that now holds a snapshot (a greedy step): it is handed to the learner again and waited for, not recorded at
    once (the learner answers it later, off the event loop)."""
    import asyncio

    from shepherd.agents import LearnerUnavailable
    from shepherd.graph.sessions import Session
    from shepherd.level import VectorLevel
    from shepherd.wire import VectorStepInput
    from shepherd.wire.steps import GreedyVectorStep

    class Later(FakeVectorLearner):
        def __init__(self):
            super().__init__()
            self.answers = [self._future([0, 0]), ActionFuture(), ActionFuture()]
            self.answers[1].set_exception(LearnerUnavailable("restarting"))

        def submit(self, requests):
            self.calls.append(("submit", [(r.kind.name, r.actor) for r in requests]))
            return self.answers[len(self.calls) - 1]

    host = FakeHost([])
    host.learner = Later()
    session = Session("key", VectorLevel(1, 2, host, evaluate_only=True), runtime=type("R", (), {"act_timeouts": 0}))
    await session.step(VectorStepInput.of([[0.0]] * 2, [0.0] * 2, [False] * 2, [False] * 2, seq=1), 5)
    step = VectorStepInput.of([[1.0]] * 2, [1.0] * 2, [False] * 2, [False] * 2, seq=2)
    try:
        await session.step(step, 5)
        raise AssertionError("the lost step was answered")
    except LearnerUnavailable:
        pass
    greedy = GreedyVectorStep("key", step.digest(), [1.0, 1.0], [False, False], seq=2, actions=[1, 1], version=3)
    assert session.repeats_waiting_step(greedy) and session.record(greedy) is None  # nothing done yet
    waiting = asyncio.ensure_future(session.step(greedy, 5))  # as the front ends' route then waits for it
    await asyncio.sleep(0.05)
    host.learner.answers[2].set_result([1, 0])
    assert (await waiting).action == [1, 0] and len(host.learner.calls) == 3  # handed to the learner again, once
