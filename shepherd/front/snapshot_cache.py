"""Evaluate-mode steps answered by a front end from its snapshot of the session's greedy policy.

The head notes on a login's or step's answer that the session's steps may be answered from a snapshot
(``"snapshot": NAME, "version": V`` in the answer frame, and ``"n_envs": N`` for a vector session: an
evaluate-mode session of a learner whose greedy policy numpy can run, or of an image agent). The front end then
keeps that session's key with the snapshot's name, fetches the snapshot (``GET /internal/snapshot``: an MLP's
`shepherd.policies.greedy_snapshot`, run with numpy; an image agent's greedy ONNX file,
`shepherd.policies.onnx_snapshot`, run with onnxruntime) once per published version, and answers the session's
next steps itself: it parses and checks the step as the head would (`shepherd.wire`), chooses the action (a
vector step's: every env's, in one pass) with the snapshot, and sends
the head only a ``greedy`` item (`shepherd.wire.GreedyStep` or `GreedyVectorStep`: the step's digest, rewards,
flags, ``seq`` and the actions). The head records it as the session's step (seq and retries, episodes,
returns, counters: everything stays the head's) and answers it with the public reply, which goes to the
client. Anything the front end does not answer this way (an unknown session, a body that does not parse or
fit, ``"obs": null``, a session the head stopped noting) goes to the head as an ordinary step, which words any
error exactly as the public route does.

A snapshot is refreshed when an answer notes a newer version (at most one fetch at a time per snapshot, and
one every `REFRESH_SECONDS`): a greedy step may be answered by a policy up to one refresh older than the
learner's, and its reply's ``policy_version`` says which.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections import OrderedDict
from typing import Any, Awaitable, Callable

import aiohttp

from shepherd.front.frames import NOT_HERE, SNAPSHOT_PATH, TOKEN_HEADER, Item, SnapshotNote
from shepherd.policies.greedy_snapshot import SnapshotError
from shepherd.policies.onnx_snapshot import Snapshot, snapshot_from_bytes
from shepherd.wire.spaces import SpaceError, action_to_json
from shepherd.wire.steps import DEFAULT_MAX_REWARD
from shepherd.wire import (STEP_FIELDS, BadRequest, greedy_step, greedy_vector_step, parse_object, parse_step,
                           parse_vector_step, session_key)

logger = logging.getLogger(__name__)

#: the least time between two fetches of one snapshot (seconds)
REFRESH_SECONDS = 0.2
#: the most sessions a front end remembers (the oldest noted are forgotten first; their steps go to the head)
MAX_SESSIONS = 100_000
#: a response header on the replies a front end answered from its snapshot: the policy version that chose it
SNAPSHOT_HEADER = "X-Shepherd-Snapshot"


class SnapshotCache:
    """A front end's snapshots, by name, and the sessions it may answer with them, by session key."""

    def __init__(self, session: aiohttp.ClientSession, head_url: str, token: str,
                 submit: Callable[[Item], Awaitable[Any]], max_reward: float = DEFAULT_MAX_REWARD) -> None:
        self.session = session
        self.max_reward = max_reward  # the head's bound on rewards, checked as the head checks it
        self.url = head_url + SNAPSHOT_PATH
        self.headers = {TOKEN_HEADER: token}
        self.submit = submit
        self.sessions: OrderedDict[str, SnapshotNote] = OrderedDict()  # session key -> its snapshot, as noted
        self.snapshots: dict[str, Snapshot] = {}
        self._users: collections.Counter[str] = collections.Counter()  # the sessions noted with each snapshot
        self._wanted: dict[str, int] = {}  # the newest version noted, by snapshot name
        self._fetching: dict[str, asyncio.Task[None]] = {}
        self._fetched_at: dict[str, float] = {}
        self.answered = 0  # steps answered from a snapshot (and recorded by the head)

    def note(self, key: str | None, note: SnapshotNote | None) -> None:
        """An answer about session ``key``: with a note, its steps may be answered from that snapshot (fetched
        now if this front end has none, or an older one); without one, they may not (any more)."""
        if key is None:
            return
        if note is None:
            self._drop_session(key)
            return
        before = self.sessions.pop(key, None)
        self.sessions[key] = note  # noted last: the oldest noted are forgotten first
        self._users[note.name] += 1
        if before is not None:  # (after counting the new note: a session noted again keeps its snapshot)
            self._release(before.name)
        if len(self.sessions) > MAX_SESSIONS:
            self._drop_session(next(iter(self.sessions)))
        held = self.snapshots.get(note.name)
        if held is None or held.version < note.version:
            self._wanted[note.name] = max(note.version, self._wanted.get(note.name, -1))
            self._refresh(note.name)

    async def answer(self, body: bytes, address: str, json_length: int | None = None) -> tuple[Any, int] | None:
        """The head's answer to a step this front end answered from its snapshot, and the snapshot's version;
        None: send the step to the head as it came (``json_length``: the body's Inference-Header-Content-Length,
        binary tensors after its JSON)."""
        if not self.sessions:
            return None
        try:
            data = parse_object(body, STEP_FIELDS, json_length)
            key = session_key(data)
        except BadRequest:
            return None
        noted = self.sessions.get(key)
        snapshot = None if noted is None else self.snapshots.get(noted.name)
        if snapshot is None or noted is None:
            return None
        try:
            record = _greedy_item(key, data, snapshot, noted.n_envs, self.max_reward)
        except (BadRequest, SpaceError, ValueError):
            return None
        if record is None:  # "obs": null ends the session: the head does it
            return None
        answer = await self.submit(Item("greedy", address, record))
        if answer.status == NOT_HERE:  # the head no longer lets this session be answered here
            self._drop_session(key)
            return None
        self.note(key, answer.note)
        if answer.status == 200:
            self.answered += 1
        return answer, snapshot.version

    def _refresh(self, name: str) -> None:
        if name in self._fetching:
            return
        task = asyncio.create_task(self._fetch(name))
        self._fetching[name] = task
        task.add_done_callback(lambda _: self._fetching.pop(name, None))

    async def _fetch(self, name: str) -> None:
        """Fetch the snapshot until this front end holds the newest version noted (each try at least
        `REFRESH_SECONDS` after the last; a few tries at most: the next note starts again)."""
        for _ in range(5):
            wait = self._fetched_at.get(name, 0.0) + REFRESH_SECONDS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if name not in self._users:  # its last session left meanwhile: nothing would ever release it
                return
            held = self.snapshots.get(name)
            if held is not None and held.version >= self._wanted.get(name, -1):
                return
            self._fetched_at[name] = time.monotonic()
            try:
                async with self.session.get(self.url, params={"name": name, "newer": str(-1 if held is None else
                                                                                          held.version)},
                                            headers=self.headers) as reply:
                    if reply.status == 404:  # its learner is gone: its sessions' steps go to the head
                        self._forget(name)
                        return
                    if reply.status != 200:  # 204: nothing newer published yet (asking made it publish)
                        continue
                    data = await reply.read()
                # off the event loop: an image agent's ONNX file takes onnxruntime ~40 ms to load (84x84x4 NatureCNN)
                snapshot = await asyncio.to_thread(snapshot_from_bytes, data)
            except (aiohttp.ClientError, OSError, SnapshotError) as error:
                logger.warning("snapshot %s could not be fetched: %s", name, error)
                return
            if name not in self._users:  # (while it was fetched or read)
                return
            if held is None or snapshot.version > held.version:
                self.snapshots[name] = snapshot

    def _drop_session(self, key: str) -> None:
        """Forget session ``key``; a snapshot no session is noted with any more goes too (a restarted or deleted
        agent's learner is never noted again: its snapshot, up to megabytes, would stay for good)."""
        noted = self.sessions.pop(key, None)
        if noted is not None:
            self._release(noted.name)

    def _release(self, name: str) -> None:
        self._users[name] -= 1
        if self._users[name] <= 0:
            del self._users[name]
            self.snapshots.pop(name, None)
            self._wanted.pop(name, None)
            self._fetched_at.pop(name, None)

    def _forget(self, name: str) -> None:
        for key in [key for key, noted in self.sessions.items() if noted.name == name]:
            self._drop_session(key)
        self.snapshots.pop(name, None)
        self._wanted.pop(name, None)
        self._fetched_at.pop(name, None)

    async def close(self) -> None:
        for task in list(self._fetching.values()):
            task.cancel()
        await asyncio.gather(*self._fetching.values(), return_exceptions=True)


def _greedy_item(key: str, data: dict[str, Any], snapshot: Snapshot, n_envs: int | None,
                 max_reward: float) -> bytes | None:
    """The ``greedy`` item of a step (``data``, of a session of ``n_envs`` envs: None for one) answered with
    ``snapshot``; None for ``"obs": null``.

    Raises: BadRequest, SpaceError, ValueError (the head words them).
    """
    space = snapshot.action_space
    if n_envs is None:
        step = parse_step(data, snapshot.observation_space, snapshot.mask_space, snapshot.check_mask, max_reward)
        if step is None:
            return None
        action = None if step.done else action_to_json(space, snapshot.act(step.obs, step.mask))
        return greedy_step(key, step, action, snapshot.version).to_json()
    steps = parse_vector_step(data, snapshot.observation_space, n_envs, snapshot.mask_space, snapshot.check_mask,
                              max_reward)
    if steps is None:
        return None
    actions = [action_to_json(space, action) for action in snapshot.act_batch(steps.envs.obs, steps.envs.masks)]
    return greedy_vector_step(key, steps, actions, snapshot.version).to_json()
