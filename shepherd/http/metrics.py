"""The numbers behind ``GET /metrics``: a Prometheus registry of the application's own (never the global
default), a collector that reads the graph's counters when the page is scraped, and the count of
requests by route and status.

The core keeps plain numbers and plain histograms (`shepherd.agents.timing`) and knows nothing of
Prometheus; only this module does. Everything per agent is read at scrape time, so the step path pays
for no metric of its own but one timestamp per act request and a few histogram observations per batch
on the learner's thread. The families and what they mean are listed in docs/how-to/long-running.md ("Monitoring").
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                            Metric)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from shepherd.agents.timing import Histogram
from shepherd.graph import AgentRuntime, GraphManager
from shepherd.level import Phase
from shepherd.storage import NotFound

#: who may read ``/metrics`` (``ServerConfig.metrics``, ``run.py --metrics``)
METRICS_SETTINGS = ("off", "local", "open")
#: methods counted by name; any other is counted as "other" (label values stay few)
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: the least time between two samples of the steps/s gauges (seconds)
_RATE_INTERVAL = 1.0


class AgentLabels:
    """``owner/name`` of a stored agent, the value of the ``agent`` label (owners looked up once each)."""

    def __init__(self) -> None:
        self._owners: dict[int, str] = {}

    def __call__(self, graph: GraphManager, owner_id: int, name: str) -> str:
        owner = self._owners.get(owner_id)
        if owner is None:
            try:
                owner = self._owners[owner_id] = graph.store.user(owner_id).name
            except NotFound:
                owner = "?"
        return f"{owner}/{name}"


class GraphCollector(Collector):
    """The served agents' counters and histograms, read when the registry is collected (on the event
    loop, which owns the graph)."""

    def __init__(self, graph: Callable[[], GraphManager | None], labels: AgentLabels) -> None:
        self._graph = graph
        self._labels = labels
        self._rates: dict[tuple[int, str | None], tuple[float, dict[Phase, int], dict[Phase, float]]] = {}

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on what is served; none is checked at registration

    def collect(self) -> Iterator[Metric]:
        graph = self._graph()
        runtimes = [] if graph is None else graph.every_runtime()
        failed = {} if graph is None else dict(graph.served.failures)
        agent = ["agent", "client"]  # client: an advised agent's client name, empty for a pooled agent
        up = GaugeMetricFamily("shepherd_agent_up", "1 while the agent's learner serves, 0 when it failed",
                               labels=agent)
        learned = GaugeMetricFamily("shepherd_agent_learned_steps",
                                    "Steps learned from (heatup and train) since the agent was created or restarted; "
                                    "kept in its checkpoints", labels=agent)
        steps = CounterMetricFamily("shepherd_agent_steps", "Steps taken since the server started, by phase",
                                    labels=["agent", "client", "phase"])
        rates = GaugeMetricFamily("shepherd_agent_steps_per_second",
                                  "Steps per second by phase, between the last two scrapes (at least 1 s apart)",
                                  labels=["agent", "client", "phase"])
        episodes = CounterMetricFamily("shepherd_agent_episodes",
                                       "Episodes completed since the server started, by phase", labels=["agent", "client", "phase"])
        sessions = GaugeMetricFamily("shepherd_agent_sessions", "Client sessions open", labels=agent)
        timeouts = CounterMetricFamily("shepherd_act_timeouts",
                                       "Steps answered 503 because the action did not come within --act-timeout",
                                       labels=agent)
        depth = GaugeMetricFamily("shepherd_learner_queue_depth",
                                  "Messages waiting in the learner's queue for its next batch", labels=agent)
        version = GaugeMetricFamily("shepherd_policy_version", "The learner's policy version (one per update)",
                                    labels=agent)
        refused = CounterMetricFamily("shepherd_refused_updates", "Training updates undone because they made a weight "
                                      "NaN or infinite, since the learner started (an upload's or a rollout's; the "
                                      "agent serves on with its parameters of before)", labels=agent)
        unlearned = CounterMetricFamily(
            "shepherd_unlearned_steps", "Training steps acted but not learned from because the rollout had no free "
            "row for their env (a vector session of more envs than the agent's n_envs; an env at a rollout's end), "
            "since the learner started (on-policy agents)", labels=agent)
        latency = HistogramMetricFamily(
            "shepherd_act_latency_seconds",
            "An act request's time in the learner: part=queue_wait from submission to its batch's start, "
            "part=forward the batch's processing (without training updates and checkpoints)",
            labels=["agent", "client", "part"])
        batches = HistogramMetricFamily("shepherd_batch_size", "Act requests answered by one batch", labels=agent)
        updates = HistogramMetricFamily("shepherd_training_update_duration_seconds",
                                        "Each training update (SB3's train()); its count is the number of updates",
                                        labels=agent)
        checkpoints = HistogramMetricFamily("shepherd_checkpoint_duration_seconds",
                                            "Each checkpoint written; its count is the number of checkpoints",
                                            labels=agent)
        checkpoint_failures = CounterMetricFamily(
            "shepherd_checkpoint_failures", "Checkpoint writes that failed since the server started (each is "
            "retried, less and less often, while learning goes on)", labels=agent)
        unrecorded = CounterMetricFamily(
            "shepherd_unrecorded_returns", "Episode returns that could not be appended to the agent's curve (a full "
            "disk) since the server started: the curve misses them, learning went on", labels=agent)
        checkpoint_age = GaugeMetricFamily(
            "shepherd_checkpoint_age_seconds", "Seconds since the agent's last checkpoint was written (absent "
            "before its first)", labels=agent)
        chosen = CounterMetricFamily("shepherd_option_chosen", "Options a selector chose, by skill, since the selector "
                                     "began (docs/levels.md); kept in its checkpoints", labels=["agent", "client", "skill"])
        option_steps = CounterMetricFamily("shepherd_option_steps", "Env steps its skill answered, by skill, since the "
                                           "selector began", labels=["agent", "client", "skill"])
        lesson = GaugeMetricFamily("shepherd_agent_lesson", "1 for the lesson the agent is in now, by its name, with its "
                                   "index (docs/lessons.md); absent for an agent without lessons",
                                   labels=["agent", "client", "lesson", "index"])
        rated = ["agent", "client", "environment", "player"]
        rating_mu = GaugeMetricFamily("shepherd_rating_mu", "A player's openskill rating (mean) in an environment with "
                                      "roles, kept by its first role's agent (docs/how-to/multi-agent.md)", labels=rated)
        rating_sigma = GaugeMetricFamily("shepherd_rating_sigma", "The uncertainty of a player's rating in an "
                                         "environment with roles", labels=rated)
        now = time.monotonic()
        for runtime in runtimes:
            name = [self._labels(graph, runtime.record.owner_id, runtime.record.name),  # type: ignore[arg-type]
                    runtime.client or ""]
            learner = runtime.learner
            up.add_metric(name, 0 if learner.failure is not None or not learner.alive else 1)
            learned.add_metric(name, runtime.tracker.steps)
            counts = dict(runtime.phase_steps)
            for phase, per_second in self._rate(runtime, now, counts).items():
                rates.add_metric([*name, phase.value], per_second)
            for phase in Phase:
                steps.add_metric([*name, phase.value], counts.get(phase, 0))
                episodes.add_metric([*name, phase.value], runtime.phase_episodes.get(phase, 0))
            sessions.add_metric(name, runtime.sessions)
            timeouts.add_metric(name, runtime.act_timeouts)
            depth.add_metric(name, learner.queue_depth)
            version.add_metric(name, getattr(learner.algorithm, "version", 0))
            refused.add_metric(name, getattr(learner.algorithm, "refused_updates", 0))
            unlearned.add_metric(name, getattr(learner.algorithm, "unlearned_steps", 0))
            stats = learner.stats
            _add_histogram(latency, [*name, "queue_wait"], stats.queue_wait)
            _add_histogram(latency, [*name, "forward"], stats.forward)
            _add_histogram(batches, name, stats.batch_size)
            _add_histogram(updates, name, stats.updates)
            _add_histogram(checkpoints, name, stats.checkpoints)
            checkpoint_failures.add_metric(name, runtime.checkpoints.failures_total)
            unrecorded.add_metric(name, runtime.records.unrecorded)
            age = runtime.checkpoints.age()
            if age is not None:
                checkpoint_age.add_metric(name, age)
            if runtime.lessons.active:
                lesson.add_metric([*name, runtime.lessons.name or "", str(runtime.lessons.index)], 1)
            for environment in runtime.ratings.environments():  # the tables only (not the self-play's weights)
                for player, rating in runtime.ratings.table(environment).items():
                    rating_mu.add_metric([*name, environment, player], rating.mu)
                    rating_sigma.add_metric([*name, environment, player], rating.sigma)
            for skill, use in runtime.options_used().items():
                chosen.add_metric([*name, skill], use["chosen"])
                option_steps.add_metric([*name, skill], use["steps"])
        if graph is not None:
            for agent_id in failed:  # stored agents whose learner could not be built
                try:
                    record = graph.store.agent(agent_id)
                except NotFound:
                    continue
                up.add_metric([self._labels(graph, record.owner_id, record.name), ""], 0)
            for record, client, _ in graph.served.client_failures():  # advised clients that could not be built
                up.add_metric([self._labels(graph, record.owner_id, record.name), client], 0)
        self._rates = {k: v for k, v in self._rates.items() if k in {(r.record.id, r.client) for r in runtimes}}
        yield from (up, learned, steps, rates, episodes, sessions, timeouts, depth, version, refused, unlearned,
                    latency, batches, updates, checkpoints, checkpoint_failures, unrecorded, checkpoint_age, chosen,
                    option_steps, lesson, rating_mu, rating_sigma)

    def _rate(self, runtime: AgentRuntime, now: float, counts: dict[Phase, int]) -> dict[Phase, float]:
        key = (runtime.record.id, runtime.client)
        last = self._rates.get(key)
        if last is None:
            self._rates[key] = (now, counts, {phase: 0.0 for phase in Phase})
            return self._rates[key][2]
        then, before, rates = last
        if now - then < _RATE_INTERVAL:
            return rates
        rates = {phase: max(0, counts.get(phase, 0) - before.get(phase, 0)) / (now - then) for phase in Phase}
        self._rates[key] = (now, counts, rates)
        return rates


def _add_histogram(family: HistogramMetricFamily, labels: list[str], histogram: Histogram) -> None:
    buckets, total = histogram.snapshot()
    family.add_metric(labels, [(floatToGoString(bound), count) for bound, count in buckets], total)


class Metrics:
    """One application's registry: the graph's collector, the process' (memory, CPU, open files) and
    the requests by route."""

    def __init__(self, graph: Callable[[], GraphManager | None]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.labels = AgentLabels()
        self.registry.register(GraphCollector(graph, self.labels))
        ProcessCollector(registry=self.registry)
        self._requests = Counter("shepherd_http_requests", "HTTP requests answered, by route pattern and status",
                                 ["method", "route", "status"], registry=self.registry)
        self._children: dict[tuple[str, str, int], Callable[[], None]] = {}
        self.snapshot_steps = Counter("shepherd_snapshot_steps", "Steps a front end answered from its snapshot of "
                                      "a greedy policy, recorded here (run.py --front-ends); also counted as "
                                      "requests of their public route", registry=self.registry)

    def count_request(self, method: str, route: str, status: int) -> None:
        """Count one answered request; ``route`` is the route's pattern, never the raw path."""
        key = (method if method in _METHODS else "other", route, status)
        increment = self._children.get(key)
        if increment is None:
            increment = self._children[key] = self._requests.labels(key[0], route, str(status)).inc
        increment()

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The registry in the text format the ``Accept`` header asks for (Prometheus' or OpenMetrics),
        and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


__all__ = ["METRICS_SETTINGS", "Metrics"]
