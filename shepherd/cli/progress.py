"""What ``run.py -p PRESET`` prints and runs beside the server: the start-up lines (`announce`), the local clients
(gymnasium envs driven over HTTP by ``python -m shepherd.client`` processes) and the progress display that follows
the agents' learning."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from shepherd.cli.common import EXIT_NOT_REACHED
from shepherd.graph import AgentStats, GraphManager, PresetValidation, Schedule
from shepherd.storage import AgentRecord, NotFound
from shepherd.graph.validation import Outcome

ROOT = Path(__file__).resolve().parents[2]
#: a server without --clients prints a progress line per agent at most this often, if its counters changed
PROGRESS_SECONDS = 10.0
#: how long the local clients (--clients) send a step answered 503 again: a learner restored on a new local Ray
#: (its node died) can take a minute or more on a busy machine
CLIENT_RETRY_SECONDS = 300.0


def local_client_names(count: int) -> list[str]:
    """The client names of ``--clients`` local clients of an advised agent: ``local-0`` ... ``local-N-1``, the
    same at every start, so that a restarted run resumes each local client's learner."""
    return [f"local-{index}" for index in range(count)]


async def start_clients(url: str, apikey: str, validation: PresetValidation, count: int,
                        envs_per_client: int = 1, seed: int = 0,
                        names: list[str] | None = None, acting: str = "server") -> list[asyncio.subprocess.Process]:
    """Start ``count`` client processes, each of ``envs_per_client`` envs (more than one: a vector session,
    ``--n-envs``); the key goes through the environment, never the command line. Client k seeds its envs
    from ``seed + k * envs_per_client`` (env i of it with that plus i), so no two envs share a seed, and
    logs in as ``names[k]`` if names are given (an advised agent's clients). ``acting`` ``"client"``: the
    clients act with the policy file themselves and upload their experience (``--acting client``)."""
    env = {**os.environ, "SHEPHERD_API_KEY": apikey,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    vector = ["--n-envs", str(envs_per_client)] if envs_per_client > 1 else []
    if acting != "server":
        vector += ["--acting", acting]
    processes = []
    for index in range(count):
        name = ["--client", names[index]] if names else []
        processes.append(await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shepherd.client", "--url", url, "--env", validation.env_id,
            "--seed", str(seed + index * envs_per_client), "--env-kwargs", json.dumps(validation.env_kwargs), *vector,
            *name, "--retry-seconds", str(CLIENT_RETRY_SECONDS),
            env=env, stdout=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL))
    return processes


async def stop_clients(clients: list[asyncio.subprocess.Process]) -> None:
    for process in clients:
        if process.returncode is None:
            process.terminate()
    for process in clients:
        try:
            await asyncio.wait_for(process.wait(), 10)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()


def progress_line(stats: AgentStats) -> str:
    """One line of an agent's counters: steps, steps/s, phase, sessions, mean train return, last evaluation."""
    evaluation = stats.last_evaluation
    train = "-" if stats.mean_train_return is None else f"{stats.mean_train_return:.1f}"
    evaluated = "-" if evaluation is None else f"{evaluation.mean_return:.1f} @ {evaluation.steps:,}"
    return (f"steps {stats.steps:>8,} | {stats.steps_per_second:6.0f} steps/s | phase {stats.phase:<8} | "
            f"sessions {stats.sessions} | train return {train} | eval {evaluated}")


class ProgressLines:
    """Decides which agents get a progress line: those whose counters (steps, episodes, sessions, phase)
    changed since their last line, at most one line per agent every ``interval`` seconds. The counters an
    agent has when first seen (a resumed agent's steps, say) print nothing: an idle server stays quiet."""

    def __init__(self, interval: float = PROGRESS_SECONDS) -> None:
        self.interval = interval
        self._shown: dict[int | tuple[int, str], tuple[tuple, float]] = {}  # learner -> its last line's counters, when

    def lines(self, stats: Mapping[int | tuple[int, str], AgentStats], now: float) -> list[str]:
        """The lines to print now, given each served learner's stats by store id (an advised agent's clients'
        by store id and client name, their stats named ``agent/client``) and a monotonic time."""
        lines = []
        for agent_id, agent in stats.items():
            counters = (agent.steps, agent.episodes, agent.sessions, agent.phase)
            shown = self._shown.get(agent_id)
            if shown is None:
                self._shown[agent_id] = (counters, -float("inf"))
            elif counters != shown[0] and now - shown[1] >= self.interval:
                self._shown[agent_id] = (counters, now)
                number = agent_id if isinstance(agent_id, int) else agent_id[0]
                lines.append(f"agent {agent.agent} (id {number}): {progress_line(agent)}")
        for agent_id in self._shown.keys() - stats.keys():  # no longer served
            del self._shown[agent_id]
        return lines


def learner_stats(graph: GraphManager) -> dict[int | tuple[int, str], AgentStats]:
    """Each served learner's stats: a pooled agent's by store id, an advised agent's clients' by store id and
    client name (named ``agent/client``)."""
    stats: dict[int | tuple[int, str], AgentStats] = {}
    for runtime in graph.every_runtime():
        if runtime.client is None:
            stats[runtime.record.id] = runtime.stats()
        else:
            stats[(runtime.record.id, runtime.client)] = replace(runtime.stats(), agent=runtime.label)
    return stats


def agent_stats(graph: GraphManager, agent_id: int) -> AgentStats | None:
    """A served agent's stats (None: not served now, or nothing to show yet: `ServedAgent.stats`); an advised
    agent's are its clients' sums, its phase ``failed`` only when every client failed, its evaluation the best
    client's."""
    agent = graph.served.agents.get(agent_id)  # looked up each time: a restart replaces it
    return None if agent is None else agent.stats()


async def report_progress(graph: GraphManager, lines: ProgressLines | None = None) -> None:
    """Print the progress lines of a server without local clients, until cancelled."""
    lines = lines or ProgressLines()
    while True:  # the first pass, at once, notes the counters the agents start with
        for line in lines.lines(learner_stats(graph), time.monotonic()):
            print(line, flush=True)
        await asyncio.sleep(1.0)  # stats() samples steps/s; once a second, as the --clients display does


async def progress(graph: GraphManager, agent_id: int, clients: list, outcome: Outcome,
                   stop: asyncio.Event, quiet: bool = False) -> None:
    """Print a live progress line (unless ``quiet``); stop on timeout or when every client has died."""
    validation = graph.validation
    assert validation is not None  # --clients needs it; checked at start
    interactive = sys.stdout.isatty()
    started = last_line = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(1.0)
        if stop.is_set():  # decided meanwhile (target reached, signal): keep that outcome
            return
        stats = agent_stats(graph, agent_id)
        if stats is None:
            continue
        line = f"{progress_line(stats)} (target {validation.target_return:g})"
        if quiet:
            pass
        elif interactive:
            print("\r" + line, end="", flush=True)
        elif time.monotonic() - last_line >= 10:
            last_line = time.monotonic()
            print(line, flush=True)
        if stats.failure:
            outcome.code, outcome.reason = EXIT_NOT_REACHED, f"the agent failed: {stats.failure}"
            stop.set()
        elif time.monotonic() - started > validation.timeout_seconds:
            outcome.code = EXIT_NOT_REACHED
            outcome.reason = f"gave up after {validation.timeout_seconds:g} s without reaching the target"
            stop.set()
        elif clients and all(process.returncode is not None for process in clients):
            codes = ", ".join(str(process.returncode) for process in clients)
            outcome.code, outcome.reason = EXIT_NOT_REACHED, f"every local client exited (status {codes})"
            stop.set()


def announce(graph: GraphManager, url: str, data: Path, keys: dict[str, str], admin_token: str = "",
             coach_lines: tuple[str, ...] = ()) -> None:
    """The start-up lines; ``coach_lines`` (`shepherd.cli.coach.start_lines`) go before the last, which says how to
    stop."""
    print(f"Shepherd serving preset {graph.name} at {url}  (data: {data.resolve()})")
    preset = graph.preset_runtimes()
    for agent in graph.preset_agents():
        print(f"  agent {agent.record.name}: {agent.summary()}")
    others = [runtime for runtime in graph.runtimes.values() if runtime not in preset]
    if others:
        print(f"The data folder holds {len(others)} served agent(s) that the preset does not declare "
              "(--only-preset leaves them out):")
    for runtime in others:
        print(f"  agent {agent_ref(graph, runtime.record)}: {runtime.record.algorithm}, {runtime.tracker.steps} "
              f"steps so far; schedule: {describe_schedule(runtime.schedule)}")
    if graph.not_started:
        print(f"Not served (--only-preset): {len(graph.not_started)} agent(s) of the data folder that the preset "
              "does not declare; their keys log in to nothing here:")
    for record in graph.not_started:
        print(f"  agent {agent_ref(graph, record)}: {record.algorithm}, not started; served without --only-preset, "
              f"its schedule would be: {describe_schedule(graph.schedule_for(record))}")
    for agent_id, reason in graph.served.failures.items():
        print(f"  agent id {agent_id} is not served: it {reason} (restart it from the admin commands)")
    print(f"Clients POST to {url}/shepherd/login_user/ with {{\"apikey\": ...}}, then to {url}/shepherd/env/")
    if any(agent.takes_client_names for agent in graph.preset_agents()):
        print("  (a login to an advised agent also names its client: {\"apikey\": ..., \"client\": \"arm-3\"})")
    for name, key in keys.items():
        if name.startswith("environment "):  # an environment with roles' (docs/how-to/multi-agent.md)
            print(f"API key for {name} (its roles at once; shown once, the store keeps only its hash): {key}")
        else:
            print(f"API key for agent {name} (shown once, the store keeps only its hash): {key}")
    for environment in graph.preset.environments:
        if f"environment {environment.name}" not in keys:
            print(f"API key for environment {environment.name}: shown when it was created; create another with "
                  f"`python run.py keys add {graph.owner}/{environment.name}`")
    for record in preset_records(graph):
        if record.name not in keys:
            print(f"API key for agent {record.name}: shown when it was created; create another with "
                  f"`python run.py keys add {graph.owner}/{record.name}` (or start with --new-key)")
    print(f"Dashboard: {url}/shepherd/admin/  (sign in with the admin token or an agent's API key)")
    if admin_token:
        print(f"Admin token (shown once, the store keeps only its hash): {admin_token}")
    else:
        print("Admin token: shown at the first start; `python run.py admin-token` replaces it (and prints "
              "the new one).")
    for line in coach_lines:
        print(line)
    if graph.evaluates_only:
        print("Stop with Ctrl-C (--evaluate: nothing is learned and no checkpoint is written).", flush=True)
    else:
        print("Stop with Ctrl-C: the agents are checkpointed and resume at the next start.", flush=True)


def agent_ref(graph: GraphManager, record: AgentRecord) -> str:
    """``owner/name (id N)``, as the admin commands name an agent; an owner missing from the store (a damaged
    or hand-edited store) is named ``userN`` as the admin commands name it, and said to be missing."""
    try:
        owner = graph.store.user(record.owner_id).name
    except NotFound:
        return (f"user{record.owner_id}/{record.name} (id {record.id}; its owner, user id {record.owner_id}, is "
                "missing from the store)")
    return f"{owner}/{record.name} (id {record.id})"


def describe_schedule(schedule: Schedule) -> str:
    """A schedule in words: heatup, training budget, evaluations."""
    parts = []
    if schedule.heatup_steps:
        parts.append(f"heatup {schedule.heatup_steps:,} steps (random actions)")
    parts.append("train forever" if schedule.improve_steps is None
                 else f"train until {schedule.improve_steps:,} steps (then act greedily, unlearned)")
    if schedule.steps_between_evaluation_periods and schedule.evaluation_episodes:
        parts.append(f"evaluate {schedule.evaluation_episodes} episodes every "
                     f"{schedule.steps_between_evaluation_periods:,} steps")
    else:
        parts.append("no periodic evaluation")
    return ", ".join(parts)


def preset_records(graph: GraphManager) -> list[AgentRecord]:
    """The records of the preset's served agents, pooled and advised."""
    return [agent.record for agent in graph.preset_agents()]
