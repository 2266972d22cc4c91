#!/usr/bin/env python
"""Crash loop: ``kill -9`` a real server at random moments while clients train its PPO and DQN agents, then
start it again, round after round, and check what the crashes cost.

    .venv/bin/python benchmarks/crashloop.py --rounds 10      # about 2 minutes on 2 cores

The server is ``run.py`` serving benchmarks/presets/crash2.py (a tiny PPO and a tiny DQN agent, checkpointed
every 200 steps or every second, whichever comes first), on 127.0.0.1, in a fresh data folder. In each round
one client per agent trains (episodes of 20 counted steps), the server is killed with SIGKILL after a random
time, and started again on the same data. After each round:

- the store (store.json) parses, each agent's checkpoint is a whole zip, and no temporary file of a crashed
  write is left once the server has started again;
- every agent resumes (it is served, not failed) at exactly the steps of its checkpoint, and the steps it
  lost, the steps the server had acknowledged less the steps it resumed at, are at most one checkpoint
  interval (200 steps; the 1-second trigger usually comes first). The figure can be -1: the step in
  flight when the server died may have been counted (and checkpointed) without its reply reaching the
  client, which then does not count it as acknowledged;
- no return is recorded twice. Each episode's return identifies it: its last reward is a number no other
  episode uses (its id / 2**20, exact in binary, every other reward 0), so each record of an agent's
  returns.jsonl names the one episode it comes from. "Recorded twice" means two whole records with one id,
  in the file as it is after all the restarts. A client's retry of its last ``done`` step to the restarted
  server, with its old session key and sequence number, is how a replay would record an episode again: the
  loop sends it and expects a 401 (the session died with the server). The figures also count acknowledged
  episodes missing from the file (a return appended after the checkpoint stays: the file is not rolled back
  with the model) and records of episodes never sent (there should be none of either).

Prints one line per agent and round, writes the figures as JSON, exits 1 if a check failed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shepherd.client import Client, ShepherdError  # noqa: E402

PRESET = ROOT / "benchmarks" / "presets" / "crash2.py"
CHECKPOINT_EVERY_STEPS = 200  # benchmarks/presets/crash2.py
EPISODE_STEPS = 20  # counted steps per episode (the first step of an episode is not a transition)
SCALE = 2 ** 20  # a return is an episode's id / SCALE: exact in binary floating point and in JSON


class ServerRun:
    """``run.py`` serving the crash preset; its startup lines read, the rest of its stdout drained."""

    def __init__(self, data: Path, log: Path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        started = time.monotonic()
        self._log = open(log, "a")
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "run.py"), "-p", str(PRESET), "--port", "0", "--data", str(data)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env)
        self.url = ""
        self.keys: dict[str, str] = {}
        self.steps: dict[str, int] = {}
        self.not_served: list[str] = []
        self.lines: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            if match := re.search(r"serving preset \S+ at (http://\S+)", line):
                self.url = match.group(1)
            if match := re.search(r"agent (\S+): \w+, (\d+) steps so far", line):
                self.steps[match.group(1)] = int(match.group(2))
            if match := re.search(r"API key for agent (\S+) \(.*\): (\S+)", line):
                self.keys[match.group(1)] = match.group(2)
            if "is not served" in line:
                self.not_served.append(line.strip())
            if line.startswith("Stop with Ctrl-C"):
                break
        else:
            self.process.wait()
            self.process.stdout.close()
            self._log.close()
            raise RuntimeError(f"the server exited with {self.process.returncode} before it was ready (log: {log})")
        self.start_seconds = time.monotonic() - started
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for _ in self.process.stdout:
                pass

    def _closed(self) -> None:
        self._drainer.join(10)  # the pipe's end: the drainer closes it
        self._log.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._closed()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(90)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()
        finally:
            self._closed()


class Driver(threading.Thread):
    """One client of one agent: episodes of 20 counted steps whose return is the episode's id / SCALE."""

    def __init__(self, url: str, key: str, first_id: int) -> None:
        super().__init__(daemon=True)
        self.client = Client(url, key, timeout=5, retry_seconds=0)
        self.next_id = first_id
        self.acked_steps = 0  # counted steps the server answered
        self.sent: list[int] = []  # ids of episodes whose done step was sent
        self.acked: list[int] = []  # ... and answered
        self.last_done: dict | None = None  # the last done step sent, as a retry would send it again
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.client.login()
            while not self.stopping.is_set():
                self.client.step([0.0, 0.0, 0.0, 0.0], 0.0, False)  # an episode's first step: not counted
                for t in range(EPISODE_STEPS):
                    last = t == EPISODE_STEPS - 1
                    obs = [0.01 * t, 0.0, 0.0, 0.0]
                    reward = self.next_id / SCALE if last else 0.0
                    if last:
                        self.sent.append(self.next_id)
                        self.last_done = {"session_key": self.client.session_key, "obs": obs, "reward": reward,
                                          "done": True, "info": {}, "seq": self.client.seq + 1}
                    self.client.step(obs, reward, last)
                    self.acked_steps += 1
                    if last:
                        self.acked.append(self.next_id)
                        self.next_id += 1
        except (OSError, ShepherdError, http.client.HTTPException):
            pass  # the server was killed under it
        finally:
            self.client.close()


def replay_status(url: str, key: str, body: dict) -> int:
    """Send a done step again, as a client retrying it would; returns the HTTP status."""
    client = Client(url, key, timeout=10, retry_seconds=0)
    try:
        client.post("/shepherd/env/", body)
        return 200
    except ShepherdError as error:
        return error.status
    finally:
        client.close()


def read_returns(path: Path) -> tuple[list[int], int]:
    """The episode ids of an agent's whole return records, and the number of lines that are not whole."""
    ids, torn = [], 0
    if not path.exists():
        return ids, torn
    for line in path.read_bytes().splitlines(keepends=True):
        if not (line.startswith(b"{") and line.endswith(b"}\n")):
            torn += bool(line.strip())
            continue
        ids.append(round(json.loads(line)["value"] * SCALE))
    return ids, torn


@dataclass
class AgentRound:
    agent: str
    acked_steps: int  # counted steps acknowledged to the client in this round
    counted: int  # steps the agent had acknowledged in all, when it was killed
    checkpoint: int  # steps in its checkpoint after the kill
    resumed: int  # steps it resumed at
    lost: int  # counted - resumed
    episodes_acked: int
    records: int  # whole return records in the file, all rounds
    duplicates: int  # ids recorded more than once, all rounds
    acked_missing: int  # acknowledged episodes without a record, all rounds
    never_sent: int  # records of ids never sent, all rounds
    in_flight_recorded: int  # this round's unacknowledged last done step: recorded (1) or not (0)
    torn_lines: int
    replay_status: int | None  # the status of the retried done step on the restarted server
    temporaries: list[str] = field(default_factory=list)


@dataclass
class Round:
    number: int
    kill_after_s: float
    restart_s: float
    agents: list[AgentRound]
    failures: list[str]


def crash_loop(data: Path, rounds: int, seed: int = 20261123, min_s: float = 1.0, max_s: float = 6.0,
               report=print, slack: int = 0) -> list[Round]:
    """Run the loop in ``data`` (a fresh folder); returns the rounds' figures (``failures`` lists broken promises).

    ``slack``: steps lost beyond a checkpoint interval that are not a failure (a kill while a checkpoint is
    being written leaves the one before, and the steps answered during the write are lost as well)."""
    rng = random.Random(seed)
    log = data.parent / f"{data.name}-server.log"
    server = ServerRun(data, log)
    keys = dict(server.keys)
    agents = sorted(keys)
    store = json.loads((data / "store.json").read_text())
    folders = {record["name"]: data / "agents" / str(record.get("id", doc_id))
               for doc_id, record in store["agents"].items() if record["name"] in keys}
    resumed = {name: server.steps.get(name, 0) for name in agents}
    sent: dict[str, set[int]] = {name: set() for name in agents}
    acked: dict[str, set[int]] = {name: set() for name in agents}
    next_id = {name: 1 + 500_000 * i for i, name in enumerate(agents)}
    results: list[Round] = []
    report(f"{'round':>5} {'agent':<10} {'kill s':>6} {'acked':>6} {'counted':>8} {'ckpt':>7} {'resumed':>8} "
           f"{'lost':>5} {'eps':>5} {'records':>8} {'dup':>4} {'missing':>7} {'phantom':>7} {'inflight':>8} "
           f"{'torn':>4} {'replay':>6} {'restart s':>9}")
    for number in range(1, rounds + 1):
        drivers = {name: Driver(server.url, keys[name], next_id[name]) for name in agents}
        for driver in drivers.values():
            driver.start()
        kill_after = rng.uniform(min_s, max_s)
        time.sleep(kill_after)
        server.kill()  # SIGKILL, at a moment nobody chose
        for driver in drivers.values():
            driver.stopping.set()
            driver.join(15)
        failures: list[str] = []
        try:
            json.loads((data / "store.json").read_text())
        except ValueError as error:
            failures.append(f"store.json does not parse: {error}")
        checkpoints = {}
        for name in agents:
            try:
                with zipfile.ZipFile(folders[name] / "model.zip") as archive:
                    if archive.testzip() is not None:
                        failures.append(f"{name}: model.zip is damaged")
                    checkpoints[name] = json.loads(archive.read("shepherd.json"))["schedule"]["steps"]
            except (OSError, zipfile.BadZipFile, KeyError, ValueError) as error:
                failures.append(f"{name}: checkpoint unreadable: {error}")
                checkpoints[name] = -1
        server = ServerRun(data, log)
        figures = []
        for name in agents:
            driver = drivers[name]
            counted = resumed[name] + driver.acked_steps
            now = server.steps.get(name, -1)
            sent[name].update(driver.sent)
            acked[name].update(driver.acked)
            next_id[name] = driver.next_id + 1
            status = None
            if driver.last_done is not None:
                status = replay_status(server.url, keys[name], driver.last_done)
            ids, torn = read_returns(folders[name] / "returns.jsonl")
            counts = Counter(ids)
            in_flight = [i for i in driver.sent if i not in driver.acked]
            temporaries = sorted(p.name for p in folders[name].glob(".*.tmp"))
            figure = AgentRound(
                name, driver.acked_steps, counted, checkpoints[name], now, counted - now, len(driver.acked),
                len(ids), sum(1 for c in counts.values() if c > 1), len(acked[name] - counts.keys()),
                len(counts.keys() - sent[name]), sum(counts[i] for i in in_flight), torn, status, temporaries)
            figures.append(figure)
            if now != checkpoints[name]:
                failures.append(f"{name}: resumed at {now} steps, its checkpoint has {checkpoints[name]}")
            if not -1 <= figure.lost <= CHECKPOINT_EVERY_STEPS + slack:  # -1: see the module's docstring
                failures.append(f"{name}: lost {figure.lost} steps (counted {counted}, resumed {now})")
            if figure.duplicates or figure.acked_missing or figure.never_sent:
                failures.append(f"{name}: {figure.duplicates} returns recorded twice, {figure.acked_missing} "
                                f"acknowledged ones missing, {figure.never_sent} never sent")
            if status is not None and status != 401:
                failures.append(f"{name}: the replayed done step got {status}, not 401")
            if temporaries:
                failures.append(f"{name}: temporaries left: {temporaries}")
            if driver.acked_steps == 0:
                failures.append(f"{name}: no step acknowledged in this round")
            resumed[name] = now
        failures += [f"not served: {line}" for line in server.not_served]
        results.append(Round(number, round(kill_after, 2), round(server.start_seconds, 2), figures, failures))
        for f in figures:
            report(f"{number:>5} {f.agent:<10} {kill_after:>6.2f} {f.acked_steps:>6} {f.counted:>8} "
                   f"{f.checkpoint:>7} {f.resumed:>8} {f.lost:>5} {f.episodes_acked:>5} {f.records:>8} "
                   f"{f.duplicates:>4} {f.acked_missing:>7} {f.never_sent:>7} {f.in_flight_recorded:>8} "
                   f"{f.torn_lines:>4} {str(f.replay_status):>6} {server.start_seconds:>9.2f}")
        for failure in failures:
            report(f"      FAILED: {failure}")
    code = server.stop()
    if code != 0:
        results[-1].failures.append(f"the last start stopped with status {code}")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="kills (default %(default)s)")
    parser.add_argument("--seed", type=int, default=20261123, help="of the kill moments (default %(default)s)")
    parser.add_argument("--min", type=float, default=1.0, help="earliest kill, s after the clients start")
    parser.add_argument("--max", type=float, default=6.0, help="latest kill, s after the clients start")
    parser.add_argument("--data", type=Path, help="a fresh data folder (default: a new temporary one)")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "crashloop.json",
                        help="where to write the figures (default %(default)s)")
    args = parser.parse_args()
    if args.data is None:
        import tempfile
        args.data = Path(tempfile.mkdtemp(prefix="shepherd-crashloop-")) / "data"
    if args.data.exists() and any(args.data.iterdir()):
        parser.error(f"{args.data} is not empty: the loop needs a fresh data folder")
    started = time.monotonic()
    results = crash_loop(args.data, args.rounds, args.seed, args.min, args.max)
    elapsed = time.monotonic() - started
    lost = [a.lost for r in results for a in r.agents]
    last = {a.agent: a for a in results[-1].agents}
    failures = [f"round {r.number}: {f}" for r in results for f in r.failures]
    print(f"\n{len(results)} rounds in {elapsed:.0f} s; steps lost per round and agent: min {min(lost)}, "
          f"max {max(lost)} (checkpoint interval {CHECKPOINT_EVERY_STEPS} steps or 1 s), mean "
          f"{sum(lost) / len(lost):.0f}")
    for name, a in last.items():
        print(f"{name}: {a.resumed} steps at the end, {a.records} return records, {a.duplicates} recorded twice, "
              f"{a.acked_missing} acknowledged but missing, {a.never_sent} never sent")
    print(f"{len(failures)} failed checks" + "".join(f"\n  {f}" for f in failures))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "seed": args.seed,
                                     "elapsed_s": round(elapsed, 1),
                                     "rounds": [asdict(r) for r in results]}, indent=2))
    print(f"figures written to {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
