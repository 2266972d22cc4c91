"""Client-acting sessions' uploads learned by the off-policy families (DQN, SAC, TD3, DDPG, ...), as SB3 stores
transitions (issue 35; the on-policy side is ``uploads.py``).

T = ``train_freq`` rows of ``n_envs`` (per N envs); each transition is stored as SB3's ``_store_transition``
stores it (raw observations, ``final_obs`` as the next observation of an ended episode,
``TimeLimit.truncated`` for time limits, ``sample`` as the buffer action), rows make ``_on_step``, then the
gradient steps that are due. ``max_policy_lag`` (default 0) lets an agent accept samples of versions that many
behind; then the reply goes out before the training. No upload fails the agent (issue 48): observations its
networks give a NaN, infinite or overflowing output for are refused before they enter the replay buffer
(`_check_outputs`, ``outputs.py``), and an update that still goes NaN is undone with the upload's transitions taken out of
the buffer again (`_ReplayMark`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from shepherd.agents.core import StalePolicy, Upload
from shepherd.agents.sb3.outputs import unbounded_rows
from shepherd.agents.sb3.uploads import flat_batch
from shepherd.wire.experience import BadExperience, Experience

if TYPE_CHECKING:
    from shepherd.agents.sb3.off_policy import OffPolicyAdapter


def upload_steps(adapter: OffPolicyAdapter, n_envs: int) -> int:
    """The steps a client-acting session of ``n_envs`` envs collects per upload: ``train_freq`` rows."""
    rows = adapter._train_freq.frequency * adapter._n_envs
    return max(1, -(-rows // n_envs))


def learn_off_policy(adapter: OffPolicyAdapter, upload: Upload) -> Callable[[], None] | None:
    """Store an upload's transitions as SB3 would and train as due; the reply waits for the training only
    at lag 0 (else the training is returned, to run after the reply)."""
    experience = upload.experience
    if experience is None:
        adapter.answer_upload(upload, upload_steps(adapter, upload.n_envs), 0)
        return None
    behind = adapter.version - experience.policy_version
    if not 0 <= behind <= adapter.max_policy_lag:
        adapter.refuse_with(upload, StalePolicy(adapter.version, (
            f"the samples were drawn with policy version {experience.policy_version}; this agent learns from "
            f"versions {adapter.version - adapter.max_policy_lag} to {adapter.version} (max_policy_lag "
            f"{adapter.max_policy_lag}): fetch the policy and collect anew")))
        return None
    steps = upload_steps(adapter, experience.n_envs)
    if experience.steps != steps:
        adapter.refuse_with(upload, BadExperience(
            f"'sample' has {experience.steps} rows; {steps} steps of every env were asked of this session"))
        return None
    try:
        _check_outputs(adapter, experience)
    except BadExperience as error:
        adapter.refuse_with(upload, error)
        return None
    if adapter.filtering is not None:
        adapter.filtering.count_upload(upload.uploader, experience)
    adapter.uploaded = True
    mark = _ReplayMark.of(adapter, experience.steps * experience.n_envs)
    ended, limits, masks = experience.ended, experience.time_limits, experience.action_mask
    obs = adapter.to_policy(experience.obs)  # images channels first, as SB3's VecTransposeImage gives them
    for t in range(experience.steps):
        for i in range(experience.n_envs):
            last = experience.final_obs[t][i]
            adapter.add_transition(_obs_at(obs, t, i), _obs_at(obs, t + 1, i) if last is None
                                   else adapter.to_policy(last), experience.sample[t, i],
                                   float(experience.reward[t, i]), bool(ended[t, i]), bool(limits[t, i]),
                                   None if masks is None or last is not None else masks[t + 1, i])
    accepted = experience.steps * experience.n_envs
    if adapter.max_policy_lag:
        adapter.answer_upload(upload, steps, accepted)
        return lambda: None if adapter._train_if_due() is None else mark.rewind(adapter)
    refused = adapter._train_if_due()
    if refused is not None:  # undone: the block's transitions leave the replay buffer, the block is refused
        mark.rewind(adapter)
        adapter.refuse_with(upload, StalePolicy(adapter.version, (
            f"{refused}; this upload's transitions were taken out of the replay buffer, nothing of it learned: "
            "fetch the policy and collect anew")))
        return None
    adapter.answer_upload(upload, steps, accepted)
    return None


def _check_outputs(adapter: OffPolicyAdapter, experience: Experience) -> None:
    """Refuse observations the agent's networks cannot take (`outputs.unbounded_rows`), before they enter the
    replay buffer, where every later batch could sample them; each as a training batch normalises it.

    Raises:
        BadExperience: naming the first such ``obs[t][i]`` or ``final_obs[t][i]``.
    """
    finals = experience.finals()
    bad = unbounded_rows(adapter, flat_batch(adapter.as_trained(experience.obs),
                                             [adapter.as_trained(last) for _, _, last in finals]))
    if not len(bad):
        return
    row, n = int(bad[0]), experience.n_envs
    where = f"obs[{row // n}][{row % n}]" if row < (experience.steps + 1) * n else "final_obs[{}][{}]".format(
        *finals[row - (experience.steps + 1) * n][:2])
    raise BadExperience(f"{where} makes the agent's networks give a NaN, infinite or overflowing output; nothing "
                        "was recorded")


#: the replay buffer's arrays of transitions (a Dict space's observations: dicts of arrays; ``next_masks``: a masked
#: DQN's next-observation masks, `value_masks.py`)
_REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts", "next_masks")


@dataclass(frozen=True)
class _ReplayMark:
    """Where an upload's transitions begin in the replay buffer, and the rows they will overwrite, to take
    them out again (`rewind`) when the update they feed is refused: the buffer then holds what it held."""

    pos: int
    full: bool
    rows: np.ndarray
    saved: dict[str, Any]
    pending: tuple[Any, ...]
    #: the model's step counts (``num_timesteps``; DQN's ``_n_calls``: its exploration schedule and target updates)
    counts: dict[str, int]

    @classmethod
    def of(cls, adapter: OffPolicyAdapter, transitions: int) -> _ReplayMark:
        replay = adapter._replay
        rows = (replay.pos + np.arange((len(adapter._row) + transitions) // adapter._n_envs)) % replay.buffer_size
        saved = {name: _take(getattr(replay, name), rows) for name in _REPLAY_FIELDS
                 if getattr(replay, name, None) is not None}
        counts = {name: getattr(adapter.model, name) for name in ("num_timesteps", "_n_calls")
                  if hasattr(adapter.model, name)}
        return cls(replay.pos, replay.full, rows, saved, tuple(adapter._row), counts)

    def rewind(self, adapter: OffPolicyAdapter) -> None:
        replay = adapter._replay
        for name, values in self.saved.items():
            _put(getattr(replay, name), self.rows, values)
        replay.pos, replay.full = self.pos, self.full
        adapter._row = list(self.pending)
        for name, value in self.counts.items():
            setattr(adapter.model, name, value)


def _take(array: Any, rows: np.ndarray) -> Any:
    return {key: value[rows].copy() for key, value in array.items()} if isinstance(array, dict) else array[rows].copy()


def _put(array: Any, rows: np.ndarray, values: Any) -> None:
    for key, value in (array.items() if isinstance(array, dict) else [(None, array)]):
        value[rows] = values if key is None else values[key]


def _obs_at(obs: Any, t: int, i: int) -> Any:
    if isinstance(obs, dict):
        return {key: value[t, i] for key, value in obs.items()}
    return obs[t, i]
