"""A `RayLearner`'s calls for client-acting sessions (`shepherd.agents.core.ExperienceLearner`), sent to its actor
as the in-process learner's are queued: an opening or an upload is one `Upload` unit (plain data: the checked
`Experience`'s arrays), learned by the actor's `ThreadedLearner` exactly as in-process, its `ExperienceReply`
(or refusal) relayed back by ticket; the behaviour policy file is a control whose result is ``(version, the
file's bytes)``, exported by the actor from its learner's weights. Ray-free: `RayLearner` mixes it in.
"""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path
from typing import Any

from shepherd.agents.core import ActionFuture, NotClientActing, Request, Upload
from shepherd.agents.core import ServedLearner
from shepherd.wire.experience import Experience


class RemoteUploads:
    """`begin_uploads`, `learn_experience`, `behaviour`, `policy_version` and `sample_space` of a learner whose
    algorithm runs elsewhere (the attributes below are `RayLearner`'s)."""

    _local: ServedLearner
    algorithm: Any

    def _ask(self, requests: list[Request]) -> ActionFuture:
        raise NotImplementedError

    def _control(self, unit: tuple, path: Path | None) -> Future:
        raise NotImplementedError

    @property
    def policy_version(self) -> int:
        """The actor's version as of its last reply (every upload's reply brings it)."""
        return int(self.algorithm.version)

    @property
    def sample_space(self) -> Any:
        return self._local.sample_space  # the same algorithm and spaces as the actor's

    def begin_uploads(self, uploader: int, n_envs: int) -> Future:
        """As `ThreadedLearner.begin_uploads`, answered by the actor. Raises NotClientActing at once (the
        head's never-started learner of the same definition says why)."""
        reason = self._local.algorithm.client_acting_refused()
        if reason is not None:
            raise NotClientActing(reason)
        return self._ask([Upload(uploader, n_envs)])  # type: ignore[list-item]

    def learn_experience(self, uploader: int, experience: Experience) -> Future:
        """As `ThreadedLearner.learn_experience`: one remote unit per upload, never one per step."""
        return self._ask([Upload(uploader, experience.n_envs, experience)])  # type: ignore[list-item]

    def behaviour(self, phase: str, agent: str, algorithm: str) -> Future:
        """As `ThreadedLearner.behaviour`, built by the actor's learner between two of its batches; the file of
        the actor's current version is kept here, on the head, so that a fetch of it costs no actor call (the
        in-process learner keeps its own: `SB3Algorithm.published_behaviour`). A kept file is the actor's: one
        restored after a loss goes back to its checkpoint's version and reaches the lost actor's versions again
        with other weights, so a file is kept with the actor it came from (``restarts``)."""
        actor = getattr(self, "restarts", 0)
        kept = getattr(self, "_kept_behaviours", {}).get(phase)
        if kept is not None and kept[0] == actor and kept[1][0] == self.policy_version:
            future: Future = ActionFuture()
            future.set_result(kept[1])
            return future
        built = self._control(("behaviour", (phase, agent, algorithm)), None)
        built.add_done_callback(lambda done: self._keep_behaviour(phase, actor, done))
        return built

    def unbounded(self, observations: list[Any]) -> Future:
        """As `ThreadedLearner.unbounded`, answered by the actor's learner (its networks, its filters)."""
        return self._control(("unbounded", list(observations)), None)

    def _keep_behaviour(self, phase: str, actor: int, done: Future) -> None:
        if not done.cancelled() and done.exception() is None:
            kept: dict[str, tuple[int, tuple[int, bytes]]] = self.__dict__.setdefault("_kept_behaviours", {})
            kept[phase] = (actor, done.result())
