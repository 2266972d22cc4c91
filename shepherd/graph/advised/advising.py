"""Who advises whom among an advised agent's clients: advisors chosen by recent evaluation return, advice
judged by the training returns it brought, trials of an advisor's policy on a client's own system, and
adoption of a clear win (`Advising`, the part of `AdvisedAgent` that rates its clients)."""

from __future__ import annotations

import logging
import time

from shepherd.agents.advice import Adoption, Advice, Advisor
from shepherd.agents.core import Advised
from shepherd.agents.filters import observation_moments
from shepherd.agents.greedy_policy import GreedyPolicy
from shepherd.graph.runtime import AgentRuntime
from shepherd.level import Phase, Trial
from shepherd.storage import AgentRecord

logger = logging.getLogger(__name__)


#: training episodes under one advisor after which a client judges its advice (`AdvisedAgent.choose_advisors`)
JUDGE_EPISODES = 5

#: a client adopts its advisor's weights when the advisor's policy, tried on the client's own system,
#: returned more than the client's own recent evaluation by this share of the advisor's (absolute) one
ADOPT_GAIN = 0.25

#: the episodes a trial plays (their mean rates the tried policy): 1, because over 10 seeds of
#: benchmarks/advice.py 3 cost more steps than their surer rating gained (docs/advice.md, sixth pass)
TRIAL_EPISODES = 1


def clearly_better(value: float | None, own: float | None, reference: float | None) -> bool:
    """Whether ``value`` beats the client's own recent evaluation ``own`` by `ADOPT_GAIN` of the (absolute)
    ``reference`` evaluation (False when either evaluation is unknown)."""
    if value is None or own is None or reference is None:
        return False
    return value - own >= ADOPT_GAIN * max(abs(reference), 1e-8)



class Advising:
    """The advice among an advised agent's clients (``clients``, by name). Runs on the graph's thread."""

    record: AgentRecord
    clients: dict[str, AgentRuntime]

    def __init__(self, advice_on: bool) -> None:
        self.advice_on = advice_on  # False: independent learners (``advice_strength`` 0)
        #: per client, the advisors it refused, with the advisor's recent return when refused
        self.refused: dict[str, dict[str, float]] = {}
        #: per advised client, its advisor and its training episodes when that advisor was given
        #: and the mean of its training returns just before (None: too few to judge the advice by)
        self._advised_since: dict[str, tuple[str, int, float | None]] = {}
        #: per client, the other clients whose policy it tried on its own system: (the other's recent
        #: evaluation when tried, the trial's return)
        self.tried: dict[str, dict[str, tuple[float, float]]] = {}
        # adopt requests are numbered on from the microseconds of the server's start: a number is never used by
        # two runs, so that a learner's checkpoint may keep the last it carried out (`AdvisedOnPolicyAdapter`)
        self._adopt_requests = time.time_ns() // 1000
        self._trying: set[tuple[str, str]] = set()  # (client, other client) trials queued or running
        #: per new client, its plug-in trials (of every rated client, `install`) until all have ended
        self.plugging: dict[str, dict[str, Trial]] = {}
        #: per client plugged in, the client whose tried policy it adopted (`_best_for`)
        self._plugged_from: dict[str, str] = {}


    def _plug_in(self, runtime: AgentRuntime) -> None:
        """A new client's first episodes try every rated client's policy on its own system, best evaluation
        first (one episode each, `Trial`): it started from the best one's weights, rated on *their* system.
        A trial that returns at least the best evaluation of those tried ends the trials (`_as_good_as_any`);
        once every trial has ended it adopts its advisor's tried policy before it learns a step, and clients
        whose policy did clearly worse there than the best trial are not its advisor (`_failed_trial`)."""
        rated = sorted((r for r in self.serving() if r is not runtime and r.recent_return is not None),
                       key=lambda r: r.recent_return or 0.0, reverse=True)
        if not self.advice_on or not rated:
            return
        name = str(runtime.client)
        trials = {str(other.client): Trial(str(other.client), other.learner) for other in rated}
        self.plugging[name] = trials
        for other, trial in trials.items():
            self._trying.add((name, other))
            runtime.trials.append(trial)
        logger.info("client %s is new: it tries the policies of %s on its system first", runtime.label,
                    ", ".join(trials))

    # -- advice --------------------------------------------------------------------------------------
    def serving(self) -> list[AgentRuntime]:
        return [runtime for runtime in self.clients.values() if runtime.learner.failure is None]

    def best(self, exclude: AgentRuntime | None = None) -> AgentRuntime | None:
        """The serving client with the best recent evaluation return (None: none has one)."""
        rated = [r for r in self.serving() if r is not exclude and r.recent_return is not None]
        return max(rated, key=lambda r: r.recent_return or 0.0, default=None)

    def most_trained(self) -> AgentRuntime | None:
        return max(self.serving(), key=lambda r: r.tracker.steps, default=None)

    def choose_advisors(self) -> None:
        """Give each client the other client with the best recent evaluation return as advisor (a client
        without one of its own yet that has tried others on its system: the best of those, `_best_for`),
        if it is better than its own (or it has none yet) and the client has neither refused it nor seen it
        fail on its own system; else no advisor. Then queue a trial of that advisor on the client's system.

        A client refuses an advisor whose advice lowered its returns: once it has trained `JUDGE_EPISODES`
        episodes under that advisor, if their mean return is below the mean of its last `JUDGE_EPISODES`
        training episodes before that advisor (training returns both: sampled acts, not greedy ones), it
        refuses that advisor until the advisor's evaluation rises above what it was when refused.

        A *trial* plays the advisor's greedy policy, frozen as it was when the trial started, for
        `TRIAL_EPISODES` of the client's training episodes (one), on the client's own system
        (`AgentRuntime.begin_trial`, `Trial`): the advisor is rated where it matters. A trial whose mean
        return was no more than the client's own recent evaluation rules that advisor out for the client
        until its evaluation rises; one that returned clearly more makes the client adopt the very policy
        tried (`_tried`). Each client's `Advice` is also told its own recent return, so that its advice fades
        as it catches up. An agent without advice (``advice_strength`` 0) runs no trials.
        """
        for runtime in self.clients.values():
            algorithm = runtime.learner.algorithm
            if not isinstance(algorithm, Advised):
                continue
            advice = algorithm.advice
            self._judge_advisor(runtime, advice)
            advice.own_return = runtime.recent_return
            name = str(runtime.client)
            refused = self.refused.setdefault(name, {})
            tried = self.tried.setdefault(name, {})
            candidates = [r for r in self.serving() if r is not runtime and r.recent_return is not None
                          and not (r.client in refused and r.recent_return <= refused[str(r.client)])
                          and not self._failed_trial(runtime, r)]
            best = self._best_for(runtime, candidates, tried)
            better = best is not None and (runtime.recent_return is None or
                                           (best.recent_return or 0.0) > runtime.recent_return)
            current = advice.advisor
            if not better or best is None:
                if current is not None:
                    logger.info("client %s: no better client to advise it now", runtime.label)
                advice.advisor = None
                self._advised_since.pop(name, None)
                self._drop_trials(runtime)
                continue
            if current is None or current.name != best.client:
                logger.info("client %s is advised by client %s (recent evaluation %.1f)", runtime.label,
                            best.client, best.recent_return or 0.0)
                self._advised_since[name] = (str(best.client), self._train_episodes(runtime),
                                             self._recent_train_mean(runtime))
            advice.advisor = Advisor(str(best.client), best.learner.algorithm, best.model_path,
                                     best.recent_return)
            self._drop_trials(runtime, keep=str(best.client))
            last = tried.get(str(best.client))
            # a trial costs an unlearned episode: only of an advisor whose lead a matching trial would adopt
            worth_trying = clearly_better(best.recent_return, runtime.recent_return, best.recent_return)
            if (self.advice_on and worth_trying and (name, str(best.client)) not in self._trying
                    and (last is None or (best.recent_return or 0.0) > last[0])):
                self._trying.add((name, str(best.client)))
                runtime.trials.append(Trial(str(best.client), best.learner, TRIAL_EPISODES))

    def _best_for(self, runtime: AgentRuntime, candidates: list[AgentRuntime],
                  tried: dict[str, tuple[float, float]]) -> AgentRuntime | None:
        """The candidate with the best recent evaluation; for a client without an evaluation of its own, the
        client whose policy it adopted when its plug-in trials ended, else the best of those it tried on its
        system. The evaluations move while its trials run (and a trial played beside the one that ended them
        ends later): it is advised by the client whose policy it runs, not by one rated higher since."""
        if runtime.recent_return is None:
            adopted = self._plugged_from.get(str(runtime.client))
            here = ([r for r in candidates if str(r.client) == adopted]
                    or [r for r in candidates if str(r.client) in tried])
            if here:
                return max(here, key=lambda r: r.recent_return or 0.0)
        return max(candidates, key=lambda r: r.recent_return or 0.0, default=None)

    def _drop_trials(self, runtime: AgentRuntime, keep: str | None = None) -> None:
        """Forget the client's queued trials of any other client than ``keep`` (no longer its advisor),
        except a new client's plug-in trials."""
        plugging = self.plugging.get(str(runtime.client), {}).values()
        for trial in [t for t in runtime.trials if t.tried != keep and t not in plugging]:
            runtime.trials.remove(trial)
            self._trying.discard((str(runtime.client), trial.tried))

    def _failed_trial(self, runtime: AgentRuntime, other: AgentRuntime) -> bool:
        """Whether ``other``'s policy, tried on the client's system since its evaluation last rose, returned
        no more than the client's own recent evaluation (a client without one yet: clearly less, by
        `ADOPT_GAIN` of the other's evaluation, than the best policy it tried)."""
        tried = self.tried.get(str(runtime.client), {})
        last = tried.get(str(other.client))
        if last is None or (other.recent_return or 0.0) > last[0]:
            return False
        if runtime.recent_return is None:
            return clearly_better(max(value for _, value in tried.values()), last[1], other.recent_return)
        return last[1] <= runtime.recent_return

    def _tried(self, runtime: AgentRuntime, trial: Trial) -> None:
        """A trial of another client's policy on ``runtime``'s system ended: rate it by its mean return,
        choose advisors again, and have the client adopt that very policy (`Trial.frozen`) if it did
        clearly better there than the client's own (by `ADOPT_GAIN` of the other's evaluation) and the
        other is its advisor now."""
        other = trial.tried
        value = sum(trial.returns) / len(trial.returns)
        self._trying.discard((str(runtime.client), other))
        tried = self.clients.get(other)
        own = runtime.recent_return
        if tried is not None and tried.recent_return is not None:
            self.tried.setdefault(str(runtime.client), {})[other] = (tried.recent_return, value)
            logger.info("client %s tried client %s's policy on its own system: mean return %.1f of %d "
                        "episodes (its own recent evaluation %s)", runtime.label, other, value,
                        len(trial.returns), "none" if own is None else f"{own:.1f}")
        plugging = self.plugging.get(str(runtime.client))
        if plugging is not None and other in plugging and self._as_good_as_any(plugging, value):
            self._stop_plugging(runtime, plugging)
        if plugging is not None and any(not t.done and self._serves(t.tried) for t in plugging.values()):
            return  # a new client's plug-in trials: advisors are chosen once all have ended (a failed client's
            # trial never will: its queued episodes are dropped)
        self.plugging.pop(str(runtime.client), None)
        if plugging is None and (tried is None or tried.recent_return is None):
            return
        self.choose_advisors()
        algorithm = runtime.learner.algorithm
        advice = algorithm.advice if isinstance(algorithm, Advised) else None
        if advice is None or advice.advisor is None:
            return
        if plugging is not None and advice.advisor.name in plugging:  # the advisor's policy worked here
            self._plugged_from[str(runtime.client)] = advice.advisor.name
            self._adopt(runtime, advice, plugging[advice.advisor.name], "before it learns")
        elif (tried is not None and advice.advisor.name == other
              and clearly_better(value, own, tried.recent_return)):
            self._adopt(runtime, advice, trial, "after its next update")

    def _serves(self, name: str) -> bool:
        client = self.clients.get(name)
        return client is not None and client.learner.failure is None

    def _as_good_as_any(self, plugging: dict[str, Trial], value: float) -> bool:
        """Whether a plug-in trial returned at least the best recent evaluation of any client it tries: no
        other trial can be expected to do better, and each costs the new client an unlearned episode."""
        ratings = [r.recent_return for r in (self.clients.get(o) for o in plugging)
                   if r is not None and r.recent_return is not None]
        return bool(ratings) and value >= max(ratings)

    def _stop_plugging(self, runtime: AgentRuntime, plugging: dict[str, Trial]) -> None:
        """End a new client's plug-in trials early: forget those not ended (their policies are not adopted;
        one already being played ends as an ordinary trial)."""
        for other, trial in [(o, t) for o, t in plugging.items() if not t.done]:
            del plugging[other]
            if trial in runtime.trials:
                runtime.trials.remove(trial)
                self._trying.discard((str(runtime.client), other))
        logger.info("client %s: a plug-in trial did as well as any client's evaluation; the others are not "
                    "played", runtime.label)

    def _adopt(self, runtime: AgentRuntime, advice: Advice, trial: Trial, when: str) -> None:
        """Have the client adopt the very policy ``trial`` played (`Adoption`)."""
        self._adopt_requests += 1
        frozen = trial.frozen if isinstance(trial.frozen, GreedyPolicy) else None  # an advised trial's always is
        weights = None if frozen is None else frozen.source.latest_weights()
        moments = None if frozen is None or frozen.filtering is None else observation_moments(frozen.filtering)
        advice.adopt = Adoption(trial.tried, self._adopt_requests, weights, moments)
        logger.info("client %s adopts client %s's policy %s", runtime.label, trial.tried, when)

    @staticmethod
    def _train_episodes(runtime: AgentRuntime) -> int:
        return runtime.phase_episodes[Phase.TRAIN]

    @staticmethod
    def _recent_train_mean(runtime: AgentRuntime) -> float | None:
        """The mean of the client's last `JUDGE_EPISODES` training returns (None: fewer yet)."""
        recent = list(runtime.train_returns)[-JUDGE_EPISODES:]
        return sum(recent) / len(recent) if len(recent) == JUDGE_EPISODES else None

    def _judge_advisor(self, runtime: AgentRuntime, advice: Advice) -> None:
        """Refuse the client's advisor if the training episodes it advised returned less, on average, than
        the client's training episodes just before it (no judgement without those)."""
        since = self._advised_since.get(str(runtime.client))
        advisor = advice.advisor
        if since is None or advisor is None or since[0] != advisor.name or since[2] is None:
            return
        count = self._train_episodes(runtime) - since[1]
        if count < JUDGE_EPISODES:
            return
        advised = list(runtime.train_returns)[-min(count, len(runtime.train_returns)):]
        if advised and sum(advised) / len(advised) < since[2]:
            logger.info("client %s refuses the advice of client %s: %d episodes under it returned %.1f on "
                        "average, below the %.1f of its training episodes before it", runtime.label,
                        advisor.name, len(advised), sum(advised) / len(advised), since[2])
            self.refused.setdefault(str(runtime.client), {})[advisor.name] = advisor.recent_return or 0.0
            self._advised_since.pop(str(runtime.client), None)

    def note_evaluations(self, returns: dict[str, float]) -> None:
        """Evaluations made outside the schedule (a benchmark's, of the clients' greedy sessions): each is
        its client's recent return, and advisors are chosen again, once, with all of them."""
        for client, mean_return in returns.items():
            self.clients[client].recent_return = float(mean_return)
        self.choose_advisors()
