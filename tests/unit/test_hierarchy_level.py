"""The HierarchyLevel routes each env step to the active skill and gives the selector one transition per option,
with fake learners and host (docs/levels.md)."""

import asyncio

import pytest

from shepherd.agents import ActionFuture, ActMode, LearnerUnavailable
from tests.fake_learners import RequestsAsCalls
from shepherd.level import Episode, HierarchyLevel, Phase, Skill


def _answered(value):
    future = ActionFuture()
    future.set_result(value)
    return future


class FakeLearner(RequestsAsCalls):
    """Answers each act with the next of ``actions`` (the last one again once they run out)."""

    def __init__(self, name, actions=("a",)):
        self.name, self.actions, self.calls = name, list(actions), []

    def _next(self):
        return _answered(self.actions.pop(0) if len(self.actions) > 1 else self.actions[0])

    def begin_episode(self, actor, obs, mode, mask=None):
        self.calls.append(("begin", obs, mode))
        return self._next()

    def step(self, actor, reward, obs, mode, mask=None):
        self.calls.append(("step", reward, obs, mode))
        return self._next()

    def end_episode(self, actor, reward, obs, truncated, mode):
        self.calls.append(("end", reward, obs, truncated, mode))

    def end_actor(self, actor):
        self.calls.append(("drop",))


class FakeHost:
    def __init__(self, choices, phases=(Phase.TRAIN,)):
        self.learner = FakeLearner("selector", choices)
        self.phases = list(phases)
        self.counted, self.ended, self.options = [], [], []

    def begin_episode(self):
        return self.phases.pop(0)

    def next_config(self):
        return None  # no lessons

    def count_step(self, phase):
        self.counted.append(phase)

    def end_episode(self, episode: Episode, completed: bool):
        self.ended.append((episode.phase, episode.total, episode.length, completed))

    def record_option(self, skill, steps, reward):
        self.options.append((skill, steps, reward))


def _level(choices, option_steps=3, ends=None, skills_learn=False, phases=(Phase.TRAIN,), evaluate_only=False):
    host = FakeHost(choices, phases)
    skills = [Skill("left", FakeLearner("left", ["L"])), Skill("right", FakeLearner("right", ["R"]), ends)]
    return host, skills, HierarchyLevel(5, host, skills, option_steps, skills_learn, "space", evaluate_only)


async def _send(level, obs, reward, done=False, truncated=False):
    reply = level.step(obs, reward, done, truncated)
    action = None if reply is None else await reply
    return action, dict(level.reply_fields())


async def test_an_option_ends_after_option_steps_and_the_selector_gets_the_reward_sum():
    host, (left, right), level = _level([0, 1], option_steps=3)
    assert await _send(level, "o0", 9.0) == ("L", {"option": "left"})  # the reset's reward is nobody's
    assert await _send(level, "o1", 1.0) == ("L", {"option": "left"})
    assert await _send(level, "o2", 2.0) == ("L", {"option": "left"})
    assert await _send(level, "o3", 4.0) == ("R", {"option": "right"})  # 3 steps: the selector chooses again
    assert host.learner.calls == [("begin", "o0", ActMode.EXPLORE), ("step", 7.0, "o3", ActMode.EXPLORE)]
    assert left.learner.calls == [("begin", "o0", ActMode.GREEDY), ("step", 1.0, "o1", ActMode.GREEDY),
                                  ("step", 2.0, "o2", ActMode.GREEDY), ("end", 4.0, "o3", True, ActMode.GREEDY)]
    assert right.learner.calls == [("begin", "o3", ActMode.GREEDY)]
    assert host.options == [("left", 3, 7.0)]
    assert host.counted == [Phase.TRAIN] * 3  # one schedule, counted in env steps


async def test_the_selectors_reward_is_the_options_rewards_discounted_per_env_step():
    """SMDP (issue 45): gamma^k r_k over the option's k-th step, for the selector's transition; the options'
    record keeps the plain sum."""
    host = FakeHost([0, 1])
    skills = [Skill("left", FakeLearner("left", ["L"])), Skill("right", FakeLearner("right", ["R"]))]
    level = HierarchyLevel(5, host, skills, 3, False, "space", gamma=0.5)
    await _send(level, "o0", 9.0)
    for obs, reward in (("o1", 1.0), ("o2", 2.0), ("o3", 4.0)):
        await _send(level, obs, reward)
    assert host.learner.calls[-1] == ("step", 1.0 + 0.5 * 2.0 + 0.25 * 4.0, "o3", ActMode.EXPLORE)
    assert host.options == [("left", 3, 7.0)]


async def test_the_env_episode_end_ends_the_option_and_the_selector_episode():
    host, (left, _), level = _level([0], option_steps=10)
    await _send(level, "o0", 0.0)
    await _send(level, "o1", 1.0)
    assert await _send(level, "o2", 2.0, done=True) == (None, {"option": None})
    assert host.learner.calls[-1] == ("end", 3.0, "o2", False, ActMode.EXPLORE)
    assert left.learner.calls[-1] == ("end", 2.0, "o2", False, ActMode.GREEDY)  # terminated: not bootstrapped
    assert host.ended == [(Phase.TRAIN, 3.0, 2, True)]  # the selector's return is the env episode's
    assert host.options == [("left", 2, 3.0)]


async def test_the_skill_episode_end_ends_the_option_as_terminated():
    host, (_, right), level = _level([1, 0], option_steps=10, ends=lambda obs: obs == "fallen")
    await _send(level, "o0", 0.0)
    await _send(level, "o1", 1.0)
    assert await _send(level, "fallen", 5.0) == ("L", {"option": "left"})
    assert right.learner.calls[-1] == ("end", 5.0, "fallen", False, ActMode.GREEDY)
    assert host.learner.calls[-1] == ("step", 6.0, "fallen", ActMode.EXPLORE)
    assert host.options == [("right", 2, 6.0)]


async def test_heatup_chooses_at_random_and_evaluation_is_greedy_at_every_level():
    host, (left, _), level = _level([0], phases=(Phase.HEATUP, Phase.EVALUATE), skills_learn=True)
    await _send(level, "o0", 0.0)
    await _send(level, "o1", 0.0, done=True)
    await _send(level, "p0", 0.0)
    assert [call[-1] for call in host.learner.calls] == [ActMode.RANDOM, ActMode.RANDOM, ActMode.GREEDY]
    assert [call[-1] for call in left.learner.calls] == [ActMode.EXPLORE, ActMode.EXPLORE, ActMode.GREEDY]


async def test_close_abandons_the_episode_and_every_learner_used_forgets_the_actor():
    host, (left, right), level = _level([0])
    await _send(level, "o0", 0.0)
    await _send(level, "o1", 1.0)
    level.close()
    assert host.ended == [(Phase.TRAIN, 1.0, 1, False)]
    assert host.learner.calls[-1] == ("drop",) and left.learner.calls[-1] == ("drop",)
    assert right.learner.calls == []


async def test_a_session_closed_while_the_selector_chooses_gets_no_skill():
    host, (left, _), level = _level([0])
    waiting = ActionFuture()
    host.learner.begin_episode = lambda actor, obs, mode, mask=None: waiting
    reply = level.step("o0", 0.0, False)
    level.close()
    waiting.set_result(0)
    await asyncio.sleep(0.01)
    assert reply.cancelled() and left.learner.calls == []


class FakeVectorLearner(FakeLearner):
    """Answers a submitted step's acts with ``choose(request)``, in order; records every request."""

    def __init__(self, name, choose):
        super().__init__(name)
        self.choose, self.submitted = choose, []

    def submit(self, requests):
        self.submitted.append([(r.kind.name, r.actor, r.obs, r.reward, r.truncated, r.mode) for r in requests])
        return _answered([self.choose(r) for r in requests if r.kind.name in ("BEGIN", "STEP")])


def _vector(option_steps=2):
    from shepherd.level import HierarchyVectorLevel
    from shepherd.wire import EnvSteps

    host = FakeHost([], phases=(Phase.TRAIN,) * 4)
    host.learner = FakeVectorLearner("selector", lambda r: 0 if r.obs == "cue-left" else 1)
    skills = [Skill("left", FakeVectorLearner("left", lambda r: "L")),
              Skill("right", FakeVectorLearner("right", lambda r: "R"))]
    level = HierarchyVectorLevel(10, 2, host, skills, option_steps, False, "space")

    def envs(obs, reward=(0.0, 0.0), ended=(False, False), final=(None, None)):
        return EnvSteps(list(obs), list(reward), list(ended), [False, False], list(final))
    return host, skills, level, envs


async def test_a_vector_session_chooses_an_option_per_env_and_lists_them():
    host, (left, right), level, envs = _vector(option_steps=2)
    reply = level.step(envs(["cue-left", "cue-right"]))
    assert await reply == ["L", "R"] and level.reply_fields() == {"options": ["left", "right"]}
    assert [kind for kind, *_ in host.learner.submitted[0]] == ["BEGIN", "BEGIN"]
    assert await level.step(envs(["cue-left", "cue-right"], (1.0, 2.0))) == ["L", "R"]  # options go on
    assert len(host.learner.submitted) == 1
    # env 1's episode ends (auto reset to a left cue); env 0's option ends by option_steps and it chooses again
    reply = level.step(envs(["cue-right", "cue-left"], (3.0, 4.0), (False, True), (None, "final")))
    assert await reply == ["R", "L"] and level.reply_fields() == {"options": ["right", "left"]}
    assert host.learner.submitted[1] == [
        ("STEP", 10, "cue-right", 4.0, False, ActMode.EXPLORE), ("END", 11, "final", 6.0, False, ActMode.EXPLORE),
        ("BEGIN", 11, "cue-left", 0.0, False, ActMode.EXPLORE)]
    assert left.learner.submitted[-1] == [("END", 10, "cue-right", 3.0, True, ActMode.GREEDY),
                                          ("BEGIN", 11, "cue-left", 0.0, False, ActMode.GREEDY)]
    assert right.learner.submitted[-1] == [("END", 11, "final", 4.0, False, ActMode.GREEDY),
                                           ("BEGIN", 10, "cue-right", 0.0, False, ActMode.GREEDY)]
    assert host.ended == [(Phase.TRAIN, 6.0, 2, True)] and sorted(host.options) == [("left", 2, 4.0),
                                                                                     ("right", 2, 6.0)]


def _unavailable():
    future = ActionFuture()
    future.set_exception(LearnerUnavailable("restarting"))
    return future


async def test_a_retry_asks_again_only_what_a_learner_lost_the_selectors_choice_or_the_skills_act():
    """`LearnerUnavailable` (a Ray learner's process died): `resend` asks the selector again only when its choice
    was lost, else only the chosen skill's first act; a lost act in an option goes to its skill again."""
    host, (left, right), level = _level(["0"], option_steps=2)
    answer = host.learner._next
    host.learner._next = _unavailable  # the selector's process died
    with pytest.raises(LearnerUnavailable):
        await level.step("o0", 0.0, False)
    host.learner._next = answer
    assert await level.resend() == "L" and left.learner.calls == [("begin", "o0", ActMode.GREEDY)]
    assert [call[0] for call in host.learner.calls] == ["begin", "begin"]  # the lost choice, asked again
    left.learner._next = _unavailable  # the skill's process died: its act of the option's second step is lost
    with pytest.raises(LearnerUnavailable):
        await level.step("o1", 1.0, False)
    del left.learner._next
    assert await level.resend() == "L" and [call[0] for call in left.learner.calls] == ["begin", "step", "step"]
    right_next = right.learner._next
    right.learner._next = _unavailable  # the option ends: the selector chooses (answered), the skill's begin lost
    host.learner.actions = ["1"]
    with pytest.raises(LearnerUnavailable):
        await level.step("o2", 2.0, False)
    right.learner._next = right_next
    assert await level.resend() == "R" and level.reply_fields()["option"] == "right"
    assert [call[0] for call in host.learner.calls] == ["begin", "begin", "step"]  # the choice asked once
    assert [call[0] for call in right.learner.calls] == ["begin", "begin"]


async def test_a_vector_retry_asks_again_only_the_learners_that_lost_the_step():
    host, (left, right), level, envs = _vector(option_steps=2)
    submit = host.learner.submit
    host.learner.submit = lambda requests: _unavailable()
    reply = level.step(envs(["cue-left", "cue-right"]))
    with pytest.raises(LearnerUnavailable):
        await reply
    host.learner.submit = submit
    assert await level.resend() == ["L", "R"] and len(host.learner.submitted) == 1
    right_submit = right.learner.submit
    right.learner.submit = lambda requests: _unavailable()
    with pytest.raises(LearnerUnavailable):
        await level.step(envs(["cue-left", "cue-right"], (1.0, 2.0)))
    right.learner.submit = right_submit
    assert await level.resend() == ["L", "R"]
    assert len(left.learner.submitted) == 2 and len(right.learner.submitted) == 2  # left's act not sent twice
    assert len(host.learner.submitted) == 1


def _raising_ends(obs):
    if obs == "bad":
        raise ValueError("the preset's skill_ends function failed on this observation")
    return False


async def test_a_skill_end_function_that_raises_refuses_the_step_with_nothing_taken():
    """It raised after the step was counted and the option's reward added: the step answered 500 and each retry
    counted its reward again (a return of 11 for 1)."""
    from shepherd.wire import BadRequest

    host, (left, right), level = _level([1], option_steps=10, ends=_raising_ends)
    await _send(level, "o0", 0.0)
    for _ in range(2):  # the client's step, then its retry
        with pytest.raises(BadRequest, match="skill right's end function raised ValueError"):
            level.step("bad", 5.0, False)
    await _send(level, "o2", 1.0, done=True)
    assert host.ended == [(Phase.TRAIN, 1.0, 1, True)]
    assert host.learner.calls[-1] == ("end", 1.0, "o2", False, ActMode.EXPLORE)


async def test_a_vector_skill_end_function_that_raises_refuses_the_step_and_loses_no_episode_end():
    """Earlier envs were counted, ended and begun before a later env's end function raised: the env whose
    episode ended in the refused step was recorded as ended while its learners never got its END."""
    from shepherd.wire import BadRequest

    host, (left, right), level, envs = _vector(option_steps=10)
    level.skills[1] = type(level.skills[1])("right", right.learner, _raising_ends)
    await level.step(envs(["cue-left", "cue-right"]))
    with pytest.raises(BadRequest, match=r"obs\[1\]: skill right's end function"):
        level.step(envs(["cue-left", "bad"], (1.0, 2.0), (True, False), ("final", None)))
    assert host.ended == []
    await level.step(envs(["cue-left", "cue-right"], (1.0, 2.0), (True, False), ("final", None)))
    selector = [(kind, actor) for step in host.learner.submitted for kind, actor, *_ in step]
    assert ("END", 10) in selector and [e[1:3] for e in host.ended] == [(1.0, 1)]


async def test_an_option_cut_by_option_steps_hands_its_skill_the_steps_mask():
    """A masked skill's (DQN's) option cut short bootstraps over the actions its observation allows, as a flat
    session's truncated end does: the END carries the step's mask (it carried none)."""
    from shepherd.agents.core import Kind
    from shepherd.level import HierarchyLevel

    class Recording:
        def __init__(self, answer):
            self.answer, self.requests = answer, []

        def ask(self, request):
            self.requests.append(request)
            future = ActionFuture()
            future.set_result(self.answer)
            return future

        def tell(self, request):
            self.requests.append(request)

        def end_actor(self, actor):
            pass

    mask = [True, False, True]
    host, skill = FakeHost([0]), Recording(2)
    host.learner = Recording(0)
    level = HierarchyLevel(5, host, [Skill("only", skill, takes_masks=True)], 2, True, "space")
    for obs in ("o0", "o1", "o2"):
        await level.step(obs, 1.0, False, mask=mask)
    [end] = [request for request in skill.requests if request.kind is Kind.END]
    assert end.obs == "o2" and end.truncated and end.mask == mask
