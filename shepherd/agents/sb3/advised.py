"""The advised on-policy learner (PPO, A2C) of each client of an ``advised`` agent: policy shaping as in the
Actor-Advisor (Plisnier et al., arXiv:1902.02556). The advice's plain data (`Advice`, `Advisor`, `Adoption`)
is `shepherd.agents.advice`.

Each client of an advised agent has its own learner; another client (its *advisor*, chosen by the graph
from recent evaluation returns) lends it its policy. The learner acts with the normalised product of its
own policy and the advisor's raised to the advice strength ``k``, and learns through that mixed policy (the
arithmetic of the product: `shepherd.agents.sb3.mixing`).

Each rollout row stores the advisor's part (*advice rows*: ``k * log pi_adv`` for discrete actions, the
natural parameters ``k/s_adv^2`` and ``k*mu_adv/s_adv^2`` for Gaussian ones; zeros: no advice), so PPO's
and A2C's ``train()`` evaluate the stored actions under the very mixed policy that drew them: the
log-probabilities, PPO's ratio, the entropy. A uniform advisor shifts every logit by the same amount, so
it changes nothing. The advisor's probabilities are computed on the advisee's learner thread, from a copy
of the advisor's published weights (`WeightSource.latest_weights`, or its checkpoint before it publishes).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch as th
from stable_baselines3.common.save_util import load_from_zip_file

from shepherd.agents.advice import Advice, Advisor, keep_weight
from shepherd.agents.core import Request, Upload
from shepherd.agents.filters import Filtering, observation_moments
from shepherd.agents.sb3.on_policy import OnPolicyAdapter
from shepherd.agents.sb3.base import stack_observations
from shepherd.agents.sb3.greedy import draws, modes
from shepherd.agents.sb3.uploads import flat_batch, rows_of
from shepherd.agents.sb3.mixing import AdviceRows, Mixer, advice_rows, mix, policy_divergence
from shepherd.policies.transforms import normalized
from shepherd.wire.experience import Experience

logger = logging.getLogger(__name__)

#: why each family gets advice or not, as the registry's refusal quotes it
NOT_ADVISED = {
    "deterministic": "its policy is deterministic (no action distribution to multiply with an advisor's); "
                     "use SAC or PPO for an advised agent with continuous actions",
    "other": "advice is implemented for PPO and A2C (Discrete and Box actions); use one of them, or `pooled`",
}


class AdvisorPolicy:
    """A copy of the advisee's policy network holding the advisor's weights, reloaded when they change."""

    def __init__(self, policy: Any) -> None:
        self.policy = copy.deepcopy(policy)  # before the Mixer is installed: the advisor's own policy
        self.policy.set_training_mode(False)
        self._advisor: Advisor | None = None
        #: the published weights its network holds (`_FROM_FILE`: the advisor's saved model; None: none): by the
        #: object, not its version, since an advisor's Ray actor replaced may number other weights as a version an
        #: advisee had read from the lost one
        self._held: Any = None
        self._lock = threading.Lock()

    def of(self, advisor: Advisor | None) -> Any:
        """The advisor's policy now, or None (no advisor, or none of its weights to read yet)."""
        if advisor is None:
            return None
        if advisor is not self._advisor:
            self._advisor, self._held = advisor, None
        published = advisor.weights.latest_weights()  # asking makes it publish from now on
        if published is not None:
            if published is not self._held:
                self.policy.load_state_dict({k: th.as_tensor(v) for k, v in published.arrays.items()})
                self._held = published
            return self.policy
        if self._held is not None:
            return self.policy
        if advisor.model_path is None:
            return None
        try:
            _, params, _ = load_from_zip_file(advisor.model_path, device="cpu")
        except (OSError, ValueError, KeyError) as error:
            logger.debug("advisor %s has no weights to read yet: %s", advisor.name, error)
            return None
        self.policy.load_state_dict((params or {})["policy"])
        self._held = _FROM_FILE  # the first weights published replace it
        return self.policy


#: what an `AdvisorPolicy` holds when it read its advisor's saved model (no weights published yet)
_FROM_FILE = object()


def advisor_observations(obs: Any, own: Filtering | None, advisor: Filtering | None) -> Any:
    """A batch of observations normalised by the advisee's filter statistics, normalised by the advisor's
    instead: what the advisor's network was trained on. Each client's learner has its own statistics (its
    own system), so the advisee's normalised observations mean something else to the advisor. Stacked
    frames are converted frame by frame; values the advisee's filter clipped stay approximate. Without
    observation normalisation the observations are the same for both and are returned as they are."""
    if own is None or advisor is None or not own.keys or not advisor.keys:
        return obs
    epsilon, clip, frames = own.filters.epsilon, own.filters.clip_observations, max(1, own.filters.frame_stack)

    def convert(values: np.ndarray, key: str | None) -> np.ndarray:
        own_mean, own_var = own.observations[key].moments
        mean, var = advisor.observations[key].moments
        if frames > 1:
            own_mean, own_var, mean, var = (np.tile(a, frames) for a in (own_mean, own_var, mean, var))
        raw = np.asarray(values, np.float64) * np.sqrt(own_var + epsilon) + own_mean
        return normalized(raw, mean, var, epsilon, clip)

    if isinstance(obs, dict):
        return {key: convert(value, key) if key in own.keys else value for key, value in obs.items()}
    return convert(obs, None)


@dataclass(frozen=True, eq=False)
class AdviceFrame:
    """The advice a client-acting advised client mixes in at one policy version, fixed when first asked at that
    version (by its behaviour file or an upload, whichever comes first): the advisor's policy network with the
    weights it had then, its observation statistics then, and the strength. The file draws from the product
    with this advice, and the server evaluates the version's uploads under the same product: the rows it
    stores (`advice_rows`) are this frame's, whatever the advisor publishes meanwhile."""

    version: int
    advisor: str
    policy: Any  # a copy of the advisee's policy network holding the advisor's weights (no Mixer)
    filtering: Filtering | None  # the statistics the advisor's network normalises with (frozen); None: none
    strength: float

    @th.inference_mode()
    def rows(self, obs: Any, to_policy: Callable[[Any], Any]) -> np.ndarray:
        """The advice rows of a batch of observations as the client sent them (raw): normalised with the
        advisor's statistics, in the policy's layout (``to_policy``), through the advisor's network."""
        seen = obs if self.filtering is None else self.filtering.normalize_obs(obs)
        tensor, _ = self.policy.obs_to_tensor(to_policy(seen))
        return advice_rows(self.policy.get_distribution(tensor), self.strength).numpy()


class AdvisedOnPolicyAdapter(OnPolicyAdapter):
    """PPO or A2C acting and learning through the mixed policy of its own and its advisor's."""

    def __init__(self, model: Any, name: str, total_steps: int | None, advice: Advice | None = None) -> None:
        super().__init__(model, name, total_steps)
        self.advice = advice or Advice()
        self.advisor_policy = AdvisorPolicy(model.policy)
        self.mixer = Mixer()
        self.mixer.install(model.policy)
        if isinstance(self.buffer, AdviceRows):
            self.buffer.mixer = self.mixer
        self._row_advice: dict[int, np.ndarray] = {}
        self._adopted = 0  # the number of the last adopt request carried out
        self.adoptions = 0
        self.adopted_at: int | None = None  # the steps learned when it last adopted (0: before it learned)
        self._kept: Any = None  # a frozen copy of the adopted policy while it is kept
        self._kept_at = 0  # the steps learned when it was adopted
        self._frame: tuple[int, AdviceFrame | None] | None = None  # (version, its frame) of client-acting sessions

    # -- acting at the client: the advice is fixed per policy version ---------------------------------
    def advice_frame(self) -> AdviceFrame | None:
        """The advice of the current policy version's client-acting sessions (None: none, the own policy alone),
        fixed when first asked at this version; on the learner's thread. A new advisor, or new weights of the
        same one, reach client-acting sessions at the next version (the next update), as their file does."""
        if self._frame is None or self._frame[0] != self.version:
            self._frame = (self.version, self._new_frame())
        return self._frame[1]

    def _new_frame(self) -> AdviceFrame | None:
        strength, advisor = self.advice.strength_at(self.steps), self.advice.advisor
        policy = self.advisor_policy.of(advisor) if strength > 0.0 else None
        if advisor is None or policy is None:
            return None
        theirs = getattr(advisor.weights, "filtering", None)  # an advisor on Ray: as `advisor_observations`, ours
        filtering = theirs.frozen() if theirs is not None else self.version_filtering
        return AdviceFrame(self.version, advisor.name, copy.deepcopy(policy), filtering, strength)

    def upload_advice(self, experience: Experience) -> np.ndarray | None:
        """The advice rows of an upload's T x N acts (their observations as the client sent them) under the
        current version's frame, one row per act, env by env within a step; None without advice."""
        frame = self.advice_frame()
        if frame is None:
            return None
        return frame.rows(flat_batch(rows_of(experience.obs, 0, experience.steps)), self.to_policy)

    @contextlib.contextmanager
    def mixed(self, advice: np.ndarray | None) -> Iterator[None]:
        """Every distribution the policy makes meanwhile is the product with these advice rows (one per row of
        the batch it is asked for)."""
        self.mixer.rows = None if advice is None else th.as_tensor(advice)
        try:
            yield
        finally:
            self.mixer.rows = None

    def process(self, messages: list[Request]) -> None:
        if self.steps == 0 and self._adopt():  # a new client adopts what its plug-in trials chose before it learns
            self.new_version()  # a step: another policy answers from now on (a greedy snapshot must see it)
        super().process(messages)

    def learn_upload(self, upload: Upload) -> None:
        if upload.experience is None and self.steps == 0 and self._adopt():  # a client-acting session opens: as
            self.new_version()  # `process` does, a new client adopts before it learns; its file is the new version's
        super().learn_upload(upload)

    def after_update(self, started: float | None = None) -> None:
        self._keep()  # on the rollout just learned from, before a new adoption replaces the kept policy
        self._adopt()  # between two rollouts: the next one is collected wholly by the adopted policy
        super().after_update(started)

    def _keep(self) -> None:
        """Pull the own policy back towards the adopted one (kickstarting, Schmitt et al.,
        arXiv:1803.03835): after an update of the first ``keep_steps`` steps since adopting, minimise
        ``w * KL(pi_adopted || pi_own)`` on the rollout's observations, ``n_epochs`` passes in
        minibatches with the policy's optimizer, ``w`` falling from 1 to 0 (`keep_weight`). Without it the
        client's own updates move an adopted policy that balances its system away within a few updates, as
        they move every policy here; with it the client keeps what it adopted while it learns on."""
        if self._kept is None or not self.buffer.generator_ready:
            return
        weight = keep_weight(self.steps - self._kept_at, self.advice.keep_steps)
        if weight <= 0.0:
            self._kept = None
            return
        model, buffer = self.model, self.buffer
        policy = model.policy
        size = buffer.buffer_size * buffer.n_envs
        observations = buffer.observations  # flattened by train()'s pass over the buffer: (size, ...)
        batch_size = getattr(model, "batch_size", None) or size
        policy.set_training_mode(True)
        for _ in range(getattr(model, "n_epochs", 1)):
            order = np.random.permutation(size)
            for start in range(0, size, batch_size):
                rows = order[start:start + batch_size]
                obs: th.Tensor | dict[str, th.Tensor] = (
                    {key: buffer.to_torch(value[rows]) for key, value in observations.items()}
                    if isinstance(observations, dict) else buffer.to_torch(observations[rows]))
                with th.no_grad():
                    kept = self._kept.get_distribution(obs)
                loss = weight * policy_divergence(kept, policy.get_distribution(obs))
                policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(policy.parameters(), model.max_grad_norm)
                policy.optimizer.step()
        policy.set_training_mode(False)

    def _counters(self) -> dict[str, Any]:
        """SB3's counters and the adoptions: the number of the last adopt request carried out goes into the
        checkpoint, so that a learner restored from it (a Ray actor replaced) does not carry out again a request its
        head sends it anew (the head's `Advice` keeps its last request), over the weights learned since."""
        return {**super()._counters(), "adopted": self._adopted, "adoptions": self.adoptions,
                "adopted_at": self.adopted_at}

    def _restore_counters(self, counters: dict[str, Any]) -> None:
        super()._restore_counters(counters)
        self._adopted = int(counters.get("adopted", 0))
        self.adoptions = int(counters.get("adoptions", 0))
        at = counters.get("adopted_at")
        self.adopted_at = None if at is None else int(at)

    def _adopt(self) -> bool:
        """Carry out the graph's request to adopt the advisor's policy (`Advice.adopt`): the own policy
        (actor and critic) becomes a copy of the one tried on the client's system (or, for a trial played
        live, of the advisor's latest weights), and the own observation statistics the ones it was tried
        with (or the advisor's now): what its network was trained on. Waits, to a later update, for the
        advisor's latest weights when those are wanted; a request for another advisor than the current one
        is dropped. Returns whether it adopted."""
        request, advisor = self.advice.adopt, self.advice.advisor
        if request is None or request.number == self._adopted:
            return False
        if advisor is None or advisor.name != request.advisor:
            self._adopted = request.number
            logger.info("learner %s: no adoption of %s, no longer its advisor", self.name, request.advisor)
            return False
        if request.weights is not None:
            policy = copy.deepcopy(self.advisor_policy.policy)  # a copy without the Mixer, as the advisor's
            policy.load_state_dict({k: th.as_tensor(np.array(v)) for k, v in request.weights.arrays.items()})
        else:
            latest = self.advisor_policy.of(advisor)
            if latest is None:
                return False
            policy = copy.deepcopy(latest)  # the advisor's copy is reloaded when it publishes again
        self.model.policy.load_state_dict(policy.state_dict())  # Adam's moments stay: gradients of a like scale
        if self.advice.keep_steps > 0:
            self._kept = policy  # a copy of its own, frozen
            self._kept_at = self.steps
        moments = request.observations
        if moments is None:
            theirs = getattr(advisor.weights, "filtering", None)
            moments = None if theirs is None else observation_moments(theirs)
        if self.filtering is not None and moments is not None:
            for key in self.filtering.keys:
                if key in moments:
                    self.filtering.observations[key].moments = tuple(  # type: ignore[assignment]
                        np.array(m, np.float64) for m in moments[key])
        self._adopted = request.number
        self.adoptions += 1
        self.adopted_at = self.steps
        logger.info("learner %s adopts the policy of its advisor %s%s", self.name, advisor.name,
                    "" if request.weights is None else f" tried on its system (version {request.weights.version})")
        return True

    @th.inference_mode()
    def advice_for(self, messages: list[Request]) -> th.Tensor | None:
        """The advice rows for a batch of requests now (None: no advice)."""
        strength = self.advice.strength_at(self.steps)
        if strength <= 0.0:
            return None
        advisor = self.advice.advisor
        policy = self.advisor_policy.of(advisor)
        if advisor is None or policy is None:
            return None
        observations = advisor_observations(stack_observations([m.obs for m in messages]), self.filtering,
                                            getattr(advisor.weights, "filtering", None))
        obs_tensor, _ = policy.obs_to_tensor(observations)
        return advice_rows(policy.get_distribution(obs_tensor), strength)

    def _distribution(self, latent_pi: th.Tensor, acting: list[Request]) -> Any:
        rows = self.advice_for(acting)
        distribution = super()._distribution(latent_pi, acting)  # the own policy (the Mixer is unset)
        self._row_advice = {} if rows is None else {id(m): rows[i].numpy() for i, m in enumerate(acting)}
        return distribution if rows is None else mix(distribution, rows)

    @th.inference_mode()
    def _sample(self, latent_pi: th.Tensor, acting: list[Request],
                greedy_too: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sampled actions and log-probabilities of the mixed policy; greedy actions of the own policy."""
        sampled, _, log_probs = super()._sample(latent_pi, acting, False)
        if not greedy_too:
            return sampled, sampled, log_probs
        own = self.model.policy._get_action_dist_from_latent(latent_pi)  # the Mixer is unset while acting
        return sampled, modes(own, draws(acting)), log_probs

    # Greedy acts (evaluation, deployment) are the own policy's: the base class's `_greedy`. An evaluation
    # then measures what the client lends when it advises, and what its export holds.

    def _write_row(self, row: int, segment: int, message: Request, action: Any, value: float, log_prob: float,
                   start: bool) -> None:
        super()._write_row(row, segment, message, action, value, log_prob, start)
        buffer = self.buffer
        if isinstance(buffer, AdviceRows):
            advice = self._row_advice.get(id(message))
            buffer.advice[row, segment] = 0.0 if advice is None else advice

    def start_from(self, path: Path) -> None:
        """Start from another client's saved weights (policy and optimizer; the counters stay at zero).
        Call it before the learner starts.

        Raises:
            OSError, ValueError, KeyError: the file is missing or not a model of the same shape.
        """
        _, params, _ = load_from_zip_file(path, device="cpu")
        self.model.set_parameters(params, exact_match=True, device="cpu")
