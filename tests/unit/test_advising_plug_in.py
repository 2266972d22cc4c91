"""`Advising`'s plug-in trials on plain stand-ins of a client's runtime (no learner, no server): a new client is
advised by the client whose tried policy it adopted, even when another trial, played beside the one that ended
the trials (a vector client's envs), ends later."""

from collections import deque
from pathlib import Path

from shepherd.agents.advice import Advice
from shepherd.graph.advised.advising import Advising
from shepherd.level import Phase


class Algorithm:
    def __init__(self):
        self.advice = Advice()


class Learner:
    failure = None
    greedy = None

    def __init__(self):
        self.algorithm = Algorithm()


class Tracker:
    steps = 0


class Runtime:
    """What `Advising` reads of a client's `AgentRuntime`."""

    def __init__(self, name, recent):
        self.client = self.label = name
        self.recent_return = recent
        self.learner = Learner()
        self.trials = deque()
        self.tracker = Tracker()
        self.model_path = Path("/nonexistent")
        self.phase_episodes = {Phase.TRAIN: 0}
        self.train_returns = []


def test_a_stopped_plug_in_trial_that_ends_later_does_not_change_the_advisor_of_the_policy_adopted():
    advising = Advising(True)
    a, b, new = Runtime("a", 10.0), Runtime("b", 9.0), Runtime("new", None)
    advising.clients = {"a": a, "b": b}
    advising._plug_in(new)
    advising.clients["new"] = new
    trial_a, trial_b = list(new.trials)
    new.trials.clear()  # a vector client: env 0 plays a's trial, env 1 b's, at once
    trial_b.returns.append(10.0)  # b's ends first, as good as any evaluation: the others are not played
    advising._tried(new, trial_b)
    advice = new.learner.algorithm.advice
    assert advice.advisor.name == "b" and advice.adopt.advisor == "b"
    trial_a.returns.append(9.5)  # a's, under way, ends later (a fine return too)
    advising._tried(new, trial_a)
    assert advice.advisor.name == "b" and advice.adopt.advisor == "b"
    new.recent_return = 5.0  # its own evaluation: the best-rated client advises it again
    advising.choose_advisors()
    assert advice.advisor.name == "a"


def test_a_plug_in_ends_when_a_client_it_would_try_has_failed():
    """A failed client's queued trial is dropped (`AgentRuntime.begin_trial`): the plug-in waited for it for good,
    and the new client never adopted the policy that worked on its system."""
    advising = Advising(True)
    a, b, new = Runtime("a", 10.0), Runtime("b", 9.0), Runtime("new", None)
    advising.clients = {"a": a, "b": b}
    advising._plug_in(new)
    advising.clients["new"] = new
    _, trial_b = list(new.trials)
    a.learner.failure = "an update made the policy NaN"
    new.trials.popleft()  # what begin_trial does with a failed learner's trial
    assert new.trials.popleft() is trial_b
    trial_b.returns.append(8.0)
    advising._tried(new, trial_b)
    advice = new.learner.algorithm.advice
    assert advice.adopt is not None and advice.adopt.advisor == "b" and "new" not in advising.plugging
