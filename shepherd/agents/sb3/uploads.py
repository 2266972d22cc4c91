"""Client-acting sessions' uploads learned by the SB3 families, exactly as SB3's collection would store them.

A client-acting session (issue 35) acts with the served policy itself and uploads T steps of its N envs at
once (`shepherd.wire.experience.Experience`), as one learner message. The learner never trusts the
client's arithmetic: it keeps the observations, samples, rewards and flags, and computes everything else.

**On-policy** (PPO, A2C, TRPO, MaskablePPO), lag 0: an upload is learned only if its samples were drawn with
the current version. A session *reserves* free rollout segments (up to N of them, in order) before it
collects, so no update can happen while it collects; T is the reserved rows divided by N, rounded up.
Its upload is written column by column (env 0's T rows, then env 1's, ...) down the reserved segments:
with N free segments of ``n_steps`` rows, env i fills segment i, exactly as SB3's env i fills column i.
A column continued in the next segment starts there with ``episode_start`` set; a column that stops
mid-segment has its last reward bootstrapped with the value of its next observation, unless its episode
ended (the cut of `OnPolicyAdapter._leave_segment`), as does one that fills a segment ending mid-column (a
vector session's split, `OnPolicyAdapter._split`); rows past the reserved ones (at most N-1) are not
learned (``unlearned_steps``). Values and log-probabilities are SB3's ``evaluate_actions`` of the uploaded
observations and samples with the current policy (what ``train()`` evaluates; an advised client's: mixed with
the advice rows its version's frame gives the raw observations, stored with the rows, `AdviceFrame`), the
time-limit bootstrap is ``collect_rollouts``'s (``reward += gamma * V(final_obs)``), and a segment filled to its
end takes the value of the next observation as its last value for GAE. Server-acting actors claim the other
segments as before. An upload's reply waits until the session can reserve rows again: at once if free ones are
left, else after the update (sessions that waited reserve before those that did not). A reservation not written
within ``reservation_timeout`` seconds while others wait for rows is handed over (`OnPolicyUploads.lapse`):
a vanished session does not stall the rollout until it expires; its late upload is learned if still of the
current version and rows are free, else refused as stale (409). So is the upload of a session a restarted
learner (a lost Ray actor, restored from its checkpoint) never saw open. Observation filters: the
policy's input is normalised with `SB3Algorithm.version_filtering` (the statistics of the version the
client acted with), and the upload is counted by `Filtering.count_upload` (docs/filters.md).

A Gaussian policy's sample further than `GAUSSIAN_DRAW_LIMIT` standard deviations from its mean, or an
observation the policy cannot evaluate finitely, is refused (400) before anything is recorded; an update
the uploads fed that goes NaN is undone (`SB3Algorithm.guarded_update`, issue 48).

**Off-policy** (DQN, SAC, TD3, DDPG, ...): ``replay_uploads.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.distributions import DiagGaussianDistribution

from shepherd.agents.core import Outcome, StalePolicy, Upload
from shepherd.wire.experience import BadExperience, Experience

if TYPE_CHECKING:
    from shepherd.agents.sb3.on_policy import OnPolicyAdapter


@dataclass(frozen=True)
class _Reservation:
    """The segments a client-acting session may write its next upload into, the steps it was asked, when
    (`time.monotonic`) it was made, and whether it is for the session's first block (its opening's)."""

    segments: tuple[int, ...]
    steps: int
    n_envs: int
    made: float = 0.0
    first: bool = False


class OnPolicyUploads:
    """An on-policy adapter's client-acting sessions: their reserved segments and their held replies."""

    def __init__(self, adapter: OnPolicyAdapter) -> None:
        self.adapter = adapter
        self.reservations: dict[int, _Reservation] = {}
        self.uploaded: set[int] = set()  # the sessions that uploaded a block (their reservations lapse later)
        self.held: list[tuple[Upload, int]] = []  # replies waiting for free rows, with the steps accepted
        self.lapsed: set[int] = set()  # sessions whose reservation was handed over (`lapse`)

    def learn(self, upload: Upload) -> None:
        """Write an upload into its reserved segments and train if the rollout is full; then reply."""
        adapter, experience = self.adapter, upload.experience
        if experience is None:
            self._release(upload.uploader)
            self.reply(upload, 0)
            return
        if experience.policy_version != adapter.version:
            adapter.refuse_with(upload, StalePolicy(adapter.version, (
                f"the samples were drawn with policy version {experience.policy_version}; this on-policy agent "
                f"learns only from version {adapter.version}: fetch the policy and collect anew")))
            return
        reservation = self.reservations.get(upload.uploader)
        if reservation is None and not adapter.draining:  # lapsed, or its learner restarted (--ray): reserve now
            reservation = self._reserve_late(upload)
            if reservation is None:
                return
        if reservation is None or (experience.steps, experience.n_envs) != (reservation.steps, reservation.n_envs):
            if adapter.draining:  # the server is stopping: taken, not learned from
                adapter.answer_upload(upload, adapter.n_steps, experience.steps * experience.n_envs)
                return
            asked = "no steps" if reservation is None else f"{reservation.steps} steps of {reservation.n_envs} envs"
            adapter.refuse_with(upload, BadExperience(
                f"'sample' has {experience.steps} rows of {experience.n_envs}; {asked} were asked of this session"))
            return
        try:  # before anything is recorded: what the policy could not have drawn, or cannot evaluate
            evaluated = self._evaluate(experience)
        except BadExperience as error:
            adapter.refuse_with(upload, error)  # the reservation stays: the client may upload again
            return
        del self.reservations[upload.uploader]
        self.uploaded.add(upload.uploader)
        self._write(upload.uploader, experience, reservation, evaluated)
        if adapter._rollout_full():
            refused = adapter._train()
            if refused is not None:  # undone, the rollout discarded: as a stale block, collect anew
                adapter.refuse_with(upload, StalePolicy(adapter.version, (
                    f"{refused}; the rollout this upload completed was discarded, nothing of it learned: fetch the "
                    "policy and collect anew")))
                return
        self.reply(upload, experience.steps * experience.n_envs)

    def reply(self, upload: Upload, accepted: int) -> None:
        """Reserve rows for the session's next upload and answer with them; hold the answer while no row is
        free (until the update, or until a segment is left)."""
        adapter = self.adapter
        steps = self._reserve(upload.uploader, upload.n_envs)
        if steps is None and not adapter.draining:
            self.held.append((upload, accepted))
            return
        adapter.answer_upload(upload, steps or adapter.n_steps, accepted)

    def serve_held(self) -> None:
        """Answer the held replies that can reserve rows now, in the order they were held."""
        held, self.held = self.held, []
        for upload, accepted in held:
            self.reply(upload, accepted)

    def lapse(self, before: float, first_before: float | None = None) -> bool:
        """Hand over the segments of reservations made before ``before`` and not written yet (their sessions
        stalled or vanished while others wait for rows), and of a session's first block before ``first_before``
        (a session that crashed right after its login must not hold the rollout for long: issue 48, L10);
        whether there were any. Such a session's next upload is learned if its samples are still of the current
        version and rows are free (`_reserve_late`), and refused as stale otherwise, nothing recorded, as any
        stale upload is."""
        first_before = before if first_before is None else first_before
        stalled = [uploader for uploader, reservation in self.reservations.items()
                   if reservation.made < (first_before if reservation.first else before)]
        for uploader in stalled:
            self._release(uploader)
            self.lapsed.add(uploader)
        return bool(stalled)

    def _reserve_late(self, upload: Upload) -> _Reservation | None:
        """Rows for the upload of a session that holds none (its reservation lapsed, or a restarted learner
        never saw it open), reserved now (its samples are of the current version: lag 0 still holds); None,
        the upload refused as stale, when none is free."""
        experience = upload.experience
        assert experience is not None
        if self._reserve(upload.uploader, upload.n_envs) is None:
            why = ("this session's reserved rows were handed to other sessions while it did not upload"
                   if upload.uploader in self.lapsed else "this session has no rows reserved (its learner was "
                   "restarted from a checkpoint)")
            self.adapter.refuse_with(upload, StalePolicy(self.adapter.version, (
                f"{why}, and none is free now: fetch the policy and collect anew")))
            return None
        self.lapsed.discard(upload.uploader)
        reservation = self.reservations[upload.uploader]
        late = _Reservation(reservation.segments, experience.steps, reservation.n_envs, reservation.made)
        self.reservations[upload.uploader] = late  # written down the segments reserved now, as many rows as fit
        return late

    def drop(self, uploader: int) -> None:
        """The session is gone: its reserved segments are free again, a held reply is dropped."""
        self.lapsed.discard(uploader)
        self.uploaded.discard(uploader)
        self._release(uploader)
        for upload, _ in [item for item in self.held if item[0].uploader == uploader]:
            self.held.remove((upload, _))
            self.adapter.refuse(upload, Outcome.DROPPED)

    def stop_waiting(self, outcome: Outcome, detail: str) -> None:
        held, self.held = self.held, []
        for upload, _ in held:
            self.adapter.refuse(upload, outcome, detail)

    def _release(self, uploader: int) -> None:
        adapter = self.adapter
        reservation = self.reservations.pop(uploader, None)
        for segment in reservation.segments if reservation is not None else ():
            adapter.segments.release(segment, uploader)

    def _reserve(self, uploader: int, n_envs: int) -> int | None:
        """Reserve up to ``n_envs`` free segments (in order); the steps to ask for, or None if none is free."""
        adapter = self.adapter
        self._release(uploader)
        segments = adapter.segments
        free = segments.free()  # a segment may be part of a column (a vector session split it)
        if not free:
            return None
        chosen = tuple(free[:n_envs])
        capacity = sum(segments.rows(s) for s in chosen)
        for segment in chosen:
            segments.take(segment, uploader)
        steps = -(-capacity // n_envs)
        self.reservations[uploader] = _Reservation(chosen, steps, n_envs, time.monotonic(),
                                                   first=uploader not in self.uploaded)
        return steps

    # -- writing an upload -------------------------------------------------------------------------
    def _write(self, uploader: int, experience: Experience, reservation: _Reservation,
               evaluated: tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]) -> None:
        adapter = self.adapter
        rewards = experience.reward
        if adapter.filtering is not None:
            rewards = adapter.filtering.count_upload(uploader, experience)
        seen, values, log_probs, final_values, advice = evaluated
        rewards = rewards.astype(np.float32)
        gamma = np.float32(adapter.model.gamma)
        for (t, i, _), value in zip(experience.finals(), final_values):
            if experience.time_limits[t, i]:  # collect_rollouts' time-limit bootstrap
                rewards[t, i] += gamma * value
        segments = adapter.segments
        k, steps = 0, experience.steps
        for i in range(experience.n_envs):
            t = 0
            while t < steps and k < len(reservation.segments):
                segment = reservation.segments[k]
                row, column = segments.at(segment)
                length = min(steps - t, segments.rows(segment))
                self._piece(segment, row, i, t, t + length, seen, values, log_probs, rewards, experience, advice)
                t, row = t + length, row + length
                if segments.filled(segment, length):
                    segments.release(segment)
                    k += 1
                    if segments.ends_column(segment):  # at its column's end: its last value bootstraps GAE
                        segments.last_values[column] = values[t, i]
                        segments.last_dones[column] = float(experience.ended[t - 1, i])
                        continue
                if not experience.ended[t - 1, i]:  # cut mid-column: bootstrapped, as at a time limit
                    adapter.buffer.rewards[row - 1, column] += gamma * values[t, i]
            adapter.unlearned_steps += steps - t
        for segment in reservation.segments:
            segments.release(segment, uploader)

    def _piece(self, segment: int, row: int, i: int, start: int, stop: int, seen: Any, values: np.ndarray,
               log_probs: np.ndarray, rewards: np.ndarray, experience: Experience, advice: np.ndarray | None) -> None:
        """Rows ``start:stop`` of env ``i``'s column written down ``segment`` from ``row``."""
        adapter = self.adapter
        buffer, end, column = adapter.buffer, row + stop - start, adapter.segments.column[segment]
        if isinstance(buffer.observations, dict):
            for key, part in buffer.observations.items():
                part[row:end, column] = seen[key][start:stop, i].reshape(part[row:end, column].shape)
        else:
            target = buffer.observations[row:end, column]
            buffer.observations[row:end, column] = seen[start:stop, i].reshape(target.shape)
        buffer.actions[row:end, column] = experience.sample[start:stop, i].reshape(end - row, buffer.action_dim)
        buffer.values[row:end, column] = values[start:stop, i]
        buffer.log_probs[row:end, column] = log_probs[start:stop, i]
        buffer.rewards[row:end, column] = rewards[start:stop, i]
        buffer.episode_starts[row:end, column] = np.concatenate([[1.0], experience.ended[start:stop - 1, i]])
        masks = getattr(buffer, "action_masks", None)
        if masks is not None:
            masks[row:end, column] = 1.0 if experience.action_mask is None else experience.action_mask[start:stop, i]
        rows = getattr(buffer, "advice", None)  # an advised client's rollout (`AdvisedRolloutBuffer`)
        if rows is not None:
            rows[row:end, column] = 0.0 if advice is None else advice[start:stop, i]
        adapter.model.num_timesteps += end - row

    @th.no_grad()
    def _evaluate(self, experience: Experience) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """What the policy saw (normalised with the version's statistics), the values of every observation
        row (T+1 x N), the log-probabilities of the samples (T x N), the values of the ended episodes'
        last observations (in `Experience.finals`' order), from SB3's ``evaluate_actions``, and an advised
        client's advice rows (T x N x width; None: no advice), under which the log-probabilities are the
        mixed policy's, as its behaviour file drew.

        Raises:
            BadExperience: a Gaussian policy's sample its file could not have drawn (`outside_draws`), or an
                observation whose value or sample's probability is not finite, naming the field and [t][i].
        """
        adapter = self.adapter
        policy, steps, n = adapter.model.policy, experience.steps, experience.n_envs
        normalized = adapter.version_filtering.normalize_obs if adapter.version_filtering is not None else as_is

        def normalise(obs: Any) -> Any:
            return adapter.to_policy(normalized(obs))

        seen = normalise(experience.obs)
        finals = [last for _, _, last in experience.finals()]
        obs_tensor, _ = policy.obs_to_tensor(flat_batch(rows_of(seen, 0, steps)))
        actions = th.as_tensor(experience.sample.reshape(steps * n, adapter.buffer.action_dim), dtype=th.float32)
        if isinstance(adapter.action_space, spaces.Discrete):
            actions = actions.long().flatten()  # as train() hands the buffer's actions over
        masks = None if experience.action_mask is None else experience.action_mask[:steps].reshape(steps * n, -1)
        advice = adapter.upload_advice(experience)  # an advised client's
        with adapter.mixed(advice):  # the policy the file drew from: an advised client's, mixed with its advice
            values, log_probs = adapter._evaluate_uploaded(obs_tensor, actions, masks)
            gaussian: Any = (policy.get_distribution(obs_tensor).distribution  # a torch Normal
                             if isinstance(policy.action_dist, DiagGaussianDistribution) else None)
        extra, _ = policy.obs_to_tensor(flat_batch(rows_of(seen, steps, steps + 1),
                                                   [normalise(last) for last in finals]))
        more = policy.predict_values(extra).flatten().numpy()
        all_values = np.concatenate([values.numpy(), more[:n]]).reshape(steps + 1, n)
        drawn = log_probs.numpy().reshape(steps, n)
        if gaussian is not None:
            shape = experience.sample.shape
            outside = outside_draws(experience.sample, gaussian.mean.numpy().reshape(shape),
                                    gaussian.stddev.numpy().reshape(shape))
            if outside is not None:
                t, i = outside
                raise BadExperience(f"sample[{t}][{i}] is not a draw of the policy version {adapter.version}: "
                                    f"{experience.sample[t, i].tolist()} lies more than {GAUSSIAN_DRAW_LIMIT:g} "
                                    "standard deviations from its mean (the policy file's Gaussian draws lie "
                                    "within 5.77)")
        _check_finite(all_values, "obs")
        _check_finite(drawn, "sample")
        bad = np.flatnonzero(~np.isfinite(more[n:]))
        if len(bad):
            t, i, _ = experience.finals()[int(bad[0])]
            raise BadExperience(f"final_obs[{t}][{i}] makes the policy's value not finite")
        return seen, all_values, drawn, more[n:], None if advice is None else advice.reshape(steps, n, -1)


#: how far (in standard deviations, per dimension) from its mean a Gaussian policy's uploaded sample may lie:
#: the behaviour file draws by Box-Muller from float32 uniforms in [0, 1), at most sqrt(-2 ln 2^-24) = 5.77
#: (docs/acting.md); the rest is room for onnxruntime's and torch's rounding of the mean
GAUSSIAN_DRAW_LIMIT = 6.0


def outside_draws(sample: np.ndarray, mean: np.ndarray, std: np.ndarray) -> tuple[int, int] | None:
    """The first ``(t, i)`` of samples (T, N, *shape) that the policy file's Gaussian of this ``mean`` and
    ``std`` could not have drawn: a dimension more than `GAUSSIAN_DRAW_LIMIT` standard deviations (and a
    millionth of its mean, for rounding) from its mean, or a mean or deviation not finite. None: all could."""
    with np.errstate(invalid="ignore", over="ignore"):
        reach = GAUSSIAN_DRAW_LIMIT * std.astype(np.float64) + 1e-6 * np.abs(mean.astype(np.float64))
        within = np.abs(sample.astype(np.float64) - mean) <= reach  # NaN compares False
    ok = within.reshape(*within.shape[:2], -1).all(axis=2)
    bad = np.argwhere(~ok)
    return None if not len(bad) else (int(bad[0][0]), int(bad[0][1]))


def _check_finite(rows: np.ndarray, field: str) -> None:
    bad = np.argwhere(~np.isfinite(rows))
    if len(bad):
        t, i = bad[0]
        what = "value" if field == "obs" else "probability"
        raise BadExperience(f"{field}[{t}][{i}] makes the policy's {what} not finite")


def as_is(obs: Any) -> Any:
    """The observation unchanged (no filters)."""
    return obs


def rows_of(obs: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of a batch of observations (a Dict space's: of each key)."""
    if isinstance(obs, dict):
        return {key: value[start:stop] for key, value in obs.items()}
    return obs[start:stop]


def flat_batch(rows: Any, more: list[Any] | None = None) -> Any:
    """Rows of N observations as one batch, with single observations ``more`` after them."""
    more = more or []
    if isinstance(rows, dict):
        return {key: np.concatenate([value.reshape(-1, *value.shape[2:]), *(np.asarray(m[key])[None] for m in more)])
                for key, value in rows.items()}
    flat = np.asarray(rows).reshape(-1, *np.asarray(rows).shape[2:])
    return np.concatenate([flat, *(np.asarray(m, dtype=flat.dtype)[None] for m in more)]) if more else flat
