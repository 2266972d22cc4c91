"""Filters between the clients and a learner: observation normalisation, reward scaling, frame stacking.

They follow SB3's ``VecNormalize`` and ``VecFrameStack`` (in RL Zoo's order: normalise, then stack), with
every client of an agent taken as one env of a ``VecEnv``:

- **Observation normalisation**: one running mean and variance per agent (per ``Box`` key of a ``Dict``),
  pooled over every client. A training step's observations update them before they are normalised,
  ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``; an episode's last observation (``END``) is
  normalised but does not count, as ``VecNormalize`` counts the reset observation instead (here the next
  ``BEGIN``). Evaluation and deployment steps use the statistics without changing them.
- **Reward scaling**: a discounted return per client (``return = return * gamma + reward``, zero at a new
  episode); the running variance of those returns is pooled; each reward is divided by its deviation and
  clipped.
- **Frame stacking**: each actor's last ``frame_stack`` observations, concatenated along the last axis
  (an image's channel axis: its first for a ``channels_first`` image), zeros before its episode's first
  (``VecFrameStack``'s ``channels_order``).
- **Images** (`ImageLayout`): never normalised (the policy scales them to [0, 1]; ``VecNormalize``'s
  ``norm_obs_keys`` left out of a ``Dict``), and a channels-last image, stacked or not, is turned channels
  first after every filter, as SB3 wraps a ``VecEnv`` of such images in ``VecTransposeImage``.

Statistics are merged exactly (Chan et al.'s parallel formula, in float64 from the first batch moment on),
so what four clients feed equals what one stream of their observations would give, to float64 rounding;
``VecNormalize`` takes float32 batch moments, which round at about 1e-7. The running statistics are saved
with the learner's checkpoint; per-client returns and stacks live as long as their sessions.

On-policy learners store the filtered observations and rewards in their rollouts, as SB3 does under
``VecNormalize``. Off-policy learners store what the client sent (`Request.raw_obs`, `Request.raw_reward`) and
normalise each sampled batch with the current statistics: this object is the ``_vec_normalize_env`` SB3's
replay buffers call (`normalize_obs`, `normalize_reward`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from shepherd.agents.core import Kind, Request
from shepherd.definition import Filters
from shepherd.policies.transforms import normalized
from shepherd.wire.experience import Experience
from shepherd.wire.images import ImageBox, is_image


class RunningMeanStd:
    """A running mean and variance (SB3's, with its prior: count 1e-4 at mean 0, variance 1), merged exactly.

    ``moments`` is the current ``(mean, var)``, replaced whole by each update, so another thread reading it
    gets one consistent pair.
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.count = epsilon
        self.moments = (np.zeros(shape, np.float64), np.ones(shape, np.float64))

    @property
    def mean(self) -> np.ndarray:
        return self.moments[0]

    @property
    def var(self) -> np.ndarray:
        return self.moments[1]

    def update(self, batch: np.ndarray) -> None:
        """Count a batch of rows."""
        rows = np.asarray(batch, dtype=np.float64)
        self.merge(rows.mean(axis=0), rows.var(axis=0), rows.shape[0])

    def merge(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Count the statistics of another stream (its mean, variance and count)."""
        old_mean, old_var = self.moments
        total = self.count + count
        delta = mean - old_mean
        new_mean = old_mean + delta * count / total
        m2 = old_var * self.count + var * count + np.square(delta) * self.count * count / total
        self.moments = (new_mean, m2 / total)
        self.count = total

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    def load(self, state: dict[str, Any]) -> None:
        shape = self.mean.shape
        self.moments = (np.asarray(state["mean"], np.float64).reshape(shape),
                        np.asarray(state["var"], np.float64).reshape(shape))
        self.count = float(state["count"])


def check_filters(filters: Filters, observation_space: spaces.Space, on_policy: bool) -> None:
    """Raises ValueError (one line) for filters these spaces or this algorithm family cannot take."""
    if filters.normalize_observations and not _normalised_keys(observation_space):
        if is_image(observation_space):
            raise ValueError("normalize_observations does not apply to images: the policy scales their 0-255 "
                             "values to [0, 1] itself (a Dict's Box entries are normalised, its images not)")
        raise ValueError(f"normalize_observations needs Box observations (or a Dict with Box entries), not "
                         f"{type(observation_space).__name__}")
    if filters.frame_stack > 1:
        if not isinstance(observation_space, spaces.Box) or not observation_space.shape:
            raise ValueError(f"frame_stack needs Box observations, not {type(observation_space).__name__}")
        if filters.normalize_observations and not on_policy:
            raise ValueError("frame_stack with normalize_observations is refused for off-policy algorithms: their "
                             "replay buffer keeps observations before normalisation, and stacks of them would be "
                             "normalised with the wrong zero padding; use one of the two")
    ImageLayout(stacked_space(filters, observation_space))  # images SB3 would read in another order: refused


def _normalised_keys(space: spaces.Space) -> list[str | None]:
    """What observation normalisation applies to: [None] for a Box, the Box keys of a Dict, else []; never an
    image (as RL Zoo leaves images out of ``VecNormalize``'s ``norm_obs_keys``)."""
    if isinstance(space, spaces.Box) and not is_image(space):
        return [None]
    if isinstance(space, spaces.Dict):
        return [key for key, sub in space.spaces.items() if isinstance(sub, spaces.Box) and not is_image(sub)]
    return []


def _stack_axis(space: spaces.Space) -> int:
    """The axis frames are stacked along: an image's channels, else the last."""
    return -3 if isinstance(space, ImageBox) and space.channels_first else -1


def stacked_space(filters: Filters, observation_space: spaces.Space) -> spaces.Space:
    """The observation space after frame stacking, in the client's layout (an image stays an `ImageBox`)."""
    if filters.frame_stack <= 1:
        return observation_space
    assert isinstance(observation_space, spaces.Box)
    n = filters.frame_stack
    if isinstance(observation_space, ImageBox):
        space = observation_space
        return ImageBox(space.height, space.width, space.channels * n, space.channels_first)
    return spaces.Box(np.repeat(observation_space.low, n, axis=-1), np.repeat(observation_space.high, n, axis=-1),
                      dtype=observation_space.dtype)


def policy_space(filters: Filters, observation_space: spaces.Space) -> spaces.Space:
    """The observation space the policy sees: stacked ``frame_stack`` times along the channel (or last) axis,
    images channels first (`ImageLayout`)."""
    return ImageLayout(stacked_space(filters, observation_space)).space


class ImageLayout:
    """The images of an observation space as SB3's image policies take them: channels first, as SB3's
    ``VecTransposeImage`` turns a channels-last image (a plain ``Box(0, 255, (C, H, W), uint8)``, which SB3's
    ``is_image_space_channels_first`` reads as channels first: hence at most as many channels as rows or
    columns)."""

    def __init__(self, space: spaces.Space) -> None:
        self.client = space  # the clients' space (frames stacked)
        subs: dict[str | None, spaces.Space] = ({key: sub for key, sub in space.spaces.items()}
                                                if isinstance(space, spaces.Dict) else {None: space})
        self.keys = [key for key, sub in subs.items() if isinstance(sub, ImageBox) and not sub.channels_first]
        for key, sub in subs.items():
            if isinstance(sub, ImageBox) and sub.channels > min(sub.height, sub.width):
                where = "the image" if key is None else f"image {key!r}"
                raise ValueError(f"{where} has {sub.channels} channels (stacked frames included), more than its "
                                 f"{min(sub.height, sub.width)} rows or columns: SB3 takes an image's smallest "
                                 f"dimension for its channels")
        self.space: spaces.Space = (spaces.Dict({key: self._plain(sub) for key, sub in space.spaces.items()})
                                    if isinstance(space, spaces.Dict) else self._plain(space))

    @staticmethod
    def _plain(sub: spaces.Space) -> spaces.Space:
        if not isinstance(sub, ImageBox):
            return sub
        return spaces.Box(0, 255, (sub.channels, sub.height, sub.width), np.uint8)

    @property
    def transposes(self) -> bool:
        return bool(self.keys)

    def __call__(self, obs: Any) -> Any:
        """An observation, or a batch of them (any leading dimensions), in the policy's layout."""
        if not self.keys or obs is None:
            return obs
        if isinstance(obs, dict):
            turned = dict(obs)
            for key in self.keys:
                turned[key] = np.moveaxis(np.asarray(obs[key]), -1, -3)
            return turned
        return np.moveaxis(np.asarray(obs), -1, -3)


class Filtering:
    """One learner's filters, applied on its thread to each batch before the algorithm sees it."""

    def __init__(self, filters: Filters, observation_space: spaces.Space, gamma: float) -> None:
        self.filters = filters
        self.stack_axis = _stack_axis(observation_space)
        self.gamma = gamma if filters.gamma is None else filters.gamma
        self.keys = _normalised_keys(observation_space) if filters.normalize_observations else []
        self.observations = {key: RunningMeanStd(_shape(observation_space, key)) for key in self.keys}
        self.returns = RunningMeanStd(()) if filters.normalize_rewards else None
        self._returns: dict[int, float] = {}  # each actor's discounted return
        self._stacks: dict[int, np.ndarray] = {}  # each actor's stacked frames
        self._upload_returns: dict[int, np.ndarray] = {}  # each client-acting session's returns, one per env

    @property
    def active(self) -> bool:
        return self.filters.active

    # -- the learner's side --------------------------------------------------------------------
    def apply(self, requests: list[Request]) -> None:
        """Filter a batch in place, in ``VecNormalize.step_wait``'s order: count the training observations,
        normalise every observation, scale the rewards, stack frames."""
        for request in requests:
            if request.kind is Kind.DROP:
                self._upload_returns.pop(request.actor, None)
        if self.keys:
            counted = [r.obs for r in requests if r.mode.learns and r.kind in (Kind.BEGIN, Kind.STEP)]
            if counted:
                for key, stats in self.observations.items():
                    stats.update(np.stack([np.asarray(obs if key is None else obs[key]) for obs in counted]))
            for request in requests:
                if request.kind is not Kind.DROP and request.obs is not None:
                    request.raw_obs = request.obs
                    request.obs = self.normalize_obs(request.obs)
        if self.returns is not None:
            self._scale_rewards(requests)
        if self.filters.frame_stack > 1:
            for request in requests:
                self._stack(request)

    def _scale_rewards(self, requests: list[Request]) -> None:
        assert self.returns is not None
        rewarded = []
        for request in requests:
            if request.kind is Kind.DROP:
                self._returns.pop(request.actor, None)
            elif request.kind is Kind.BEGIN:
                self._returns[request.actor] = 0.0
            elif request.mode.learns:  # STEP, END
                ret = self._returns.get(request.actor, 0.0) * self.gamma + request.reward
                self._returns[request.actor] = 0.0 if request.kind is Kind.END else ret
                rewarded.append((request, ret))
        if rewarded:
            self.returns.update(np.array([ret for _, ret in rewarded], np.float64))
            for request, _ in rewarded:
                request.raw_reward = request.reward
                request.reward = float(self.normalize_reward(np.asarray(request.reward, np.float64)))

    def count_upload(self, uploader: int, experience: Experience) -> np.ndarray:
        """Count a client-acting session's upload, in ``VecNormalize.step_wait``'s order, and return its
        rewards scaled step by step (T x N, float64; unchanged without reward scaling).

        Observations: rows 1..T (row 0 too in the session's first upload, as ``VecNormalize.reset`` counts
        the first observations), merged exactly, so one batch equals T per-step updates to float64 rounding;
        the ended episodes' last observations are not counted. Rewards: each step's discounted returns of
        the N envs update the running variance before that step's rewards are scaled, and an ended env's
        return restarts from zero. Observations are not normalised here (`version_filtering` does that).
        """
        first = uploader not in self._upload_returns
        if self.keys:
            for key, stats in self.observations.items():
                rows = experience.obs_rows(0 if first else 1, experience.steps + 1)
                rows = np.asarray(rows if key is None else rows[key])
                stats.update(rows.reshape(-1, *rows.shape[2:]))
        returns = self._upload_returns.get(uploader, np.zeros(experience.n_envs))
        rewards = experience.reward
        if self.returns is not None:
            scaled = np.empty_like(rewards)
            for t in range(experience.steps):
                returns = returns * self.gamma + rewards[t]
                self.returns.update(returns)
                scaled[t] = self.normalize_reward(rewards[t])
                returns = np.where(experience.ended[t], 0.0, returns)
            rewards = scaled
        self._upload_returns[uploader] = returns
        return rewards

    def _stack(self, request: Request) -> None:
        if request.kind is Kind.DROP:
            self._stacks.pop(request.actor, None)
            return
        obs = np.moveaxis(np.asarray(request.obs), self.stack_axis, -1)  # the stacked axis last, a view
        stack = self._stacks.get(request.actor)
        if request.kind is Kind.BEGIN or stack is None:
            stack = np.zeros((*obs.shape[:-1], obs.shape[-1] * self.filters.frame_stack), obs.dtype)
        width = obs.shape[-1]
        stack = np.concatenate([stack[..., width:], obs], axis=-1)
        if request.kind is Kind.END:
            self._stacks.pop(request.actor, None)
        else:
            self._stacks[request.actor] = stack
        request.obs = np.moveaxis(stack, -1, self.stack_axis)

    def frozen(self) -> Filtering:
        """A copy that normalises observations with the statistics as they are now, whatever later batches
        count (a frozen greedy policy's, `GreedyPolicy.frozen`); it keeps no actor's rewards or frames."""
        clone = Filtering.__new__(Filtering)
        clone.filters, clone.gamma, clone.keys = self.filters, self.gamma, list(self.keys)
        clone.stack_axis = self.stack_axis
        clone.observations = {}
        for key, stats in self.observations.items():
            copied = RunningMeanStd(stats.mean.shape)
            copied.moments, copied.count = stats.moments, stats.count  # one pair, replaced whole by updates
            clone.observations[key] = copied
        clone.returns, clone._returns, clone._stacks, clone._upload_returns = None, {}, {}, {}
        return clone

    # -- VecNormalize's interface, for SB3's replay buffers and the greedy snapshot -----------------
    def normalize_obs(self, obs: Any) -> Any:
        """Observations (one or a batch) normalised with the current statistics, as float32."""
        if not self.keys:
            return obs
        if isinstance(obs, dict):
            normalised = dict(obs)
            for key in self.keys:
                normalised[key] = self._normalise(np.asarray(obs[key]), self.observations[key])
            return normalised
        return self._normalise(np.asarray(obs), self.observations[None])

    def _normalise(self, obs: np.ndarray, stats: RunningMeanStd) -> np.ndarray:
        mean, var = stats.moments
        return normalized(obs, mean, var, self.filters.epsilon, self.filters.clip_observations)

    def normalize_reward(self, reward: np.ndarray) -> np.ndarray:
        """Rewards divided by the deviation of the discounted return, clipped."""
        if self.returns is None:
            return reward
        clip = self.filters.clip_rewards
        return np.clip(reward / np.sqrt(self.returns.var + self.filters.epsilon), -clip, clip)

    # -- checkpoints and export ----------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """The running statistics, as the checkpoint keeps them (JSON)."""
        found: dict[str, Any] = {"observations": {("" if key is None else key): stats.state()
                                                  for key, stats in self.observations.items()}}
        if self.returns is not None:
            found["returns"] = self.returns.state()
        return found

    def load(self, state: dict[str, Any]) -> None:
        """Statistics saved by `state`; those of filters turned on since start from the prior."""
        for key, stats in self.observations.items():
            saved = (state.get("observations") or {}).get("" if key is None else key)
            if saved is not None:
                stats.load(saved)
        if self.returns is not None and state.get("returns") is not None:
            self.returns.load(state["returns"])


def observation_moments(filtering: Any) -> dict[str | None, tuple[np.ndarray, np.ndarray]]:
    """Each observation key's ``(mean, var)`` now, of a `Filtering` (or of anything with its
    ``observations``: an advisor's statistics in a Ray actor): what an adopted policy normalised with."""
    return {key: stats.moments for key, stats in filtering.observations.items()}


def _shape(space: spaces.Space, key: str | None) -> tuple[int, ...]:
    sub = space if key is None else space[key]  # type: ignore[index]
    return tuple(sub.shape or ())
