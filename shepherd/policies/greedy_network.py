"""A policy's greedy path as plain data, and its numpy function: never imports torch.

A `GreedyNetwork` is the shape of a small policy's deterministic action (linear layers by their ``state_dict``
weight names, activations, the head that turns the last layer's output into actions), without weights.
`shepherd.agents.greedy_policy` builds one from an SB3 policy; here it is only data, so a process without torch
(a front end, a deploy server) can hold one, receive it as JSON (`GreedyNetwork.to_data`, `GreedyNetwork.from_data`), and
`bind` the weights a learner publishes into a numpy function from observations to actions.

    plan = GreedyNetwork.from_data(json.loads(text))
    greedy = plan.bind(arrays)          # arrays by state_dict name, as the learner publishes them
    actions = greedy(observations)      # rows in, rows out (before the action transform)
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Union

import numpy as np

#: from a batch of observations (rows), and their action masks (rows; None: unmasked), to actions (rows)
Greedy = Callable[..., Any]
#: one step of a plan: a linear layer's weight and bias names, or an activation's name
Step = Union[tuple[str, Union[str, None]], str]

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0),
    "identity": lambda x: x,
}


class GreedyNetworkError(ValueError):
    """GreedyNetwork data this module cannot run (an unknown activation or head, a malformed step)."""


def _heads(kind: str, spec: Mapping[str, Any]) -> Callable[[np.ndarray], Any]:
    """The function of a head, from its data (``{"kind": ..., more}``)."""
    if kind == "argmax":  # Categorical, DQN's Q-values
        return lambda out: out.argmax(axis=-1)
    if kind == "argmax_each":  # MultiCategorical (and masked MultiBinary): the argmax of each part
        bounds = np.asarray(spec["bounds"], dtype=np.int64)
        return lambda out: np.stack([part.argmax(axis=-1) for part in np.split(out, bounds, axis=-1)], axis=-1)
    if kind == "positive":  # Bernoulli: round(sigmoid(logit)), as torch
        return lambda out: (out > 0).astype(np.float32)
    if kind == "identity":  # a Gaussian's mean, TD3's and DDPG's actor
        return lambda out: out
    if kind == "tanh":  # a squashed Gaussian's mode (SAC, TQC)
        return np.tanh
    if kind == "quantile_mean_argmax":  # QR-DQN: the argmax of the quantiles' mean
        shape = tuple(int(n) for n in spec["shape"])
        return lambda out: out.reshape(-1, *shape).mean(axis=1).argmax(axis=-1)
    raise GreedyNetworkError(f"unknown head {kind!r}")


#: the noise that turns a head's argmax of logits into a draw from their distribution: Gumbel-max for the
#: categorical heads (argmax(logits + Gumbel) is distributed as softmax(logits), and a masked -inf stays -inf),
#: a logistic for a Bernoulli's sign (logit + logistic > 0 with probability sigmoid(logit))
_NOISE: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "argmax": lambda rng, shape: rng.gumbel(size=shape),
    "argmax_each": lambda rng, shape: rng.gumbel(size=shape),
    "positive": lambda rng, shape: rng.logistic(size=shape),
}


class GreedyNetwork:
    """The shape of a policy's greedy path (layers by weight name, activations, the head), without weights.

    `bind` makes the numpy function of a set of published weights. A plan that ``takes_masks``
    (MaskablePPO's, DQN's, QR-DQN's) sets masked-out logits (Q-values, every quantile of an action) to -inf
    before the head, as sb3-contrib's masked distributions do (-1e8 there), so their argmax never picks one.
    ``head`` is data (``{"kind": "argmax"}``, ...). A plan that ``samples`` ends in a distribution's logits
    (Categorical, MultiCategorical, Bernoulli: not DQN's Q-values), so its function, given a numpy ``Generator``, can draw its action from the policy's
    distribution instead of taking its mode (self-play's opponents, `shepherd.graph.selfplay`).
    """

    def __init__(self, steps: list[Step], head: Mapping[str, Any], takes_masks: bool = False,
                 samples: bool = False) -> None:
        for step in steps:
            if isinstance(step, str):
                if step not in ACTIVATIONS:
                    raise GreedyNetworkError(f"unknown activation {step!r}")
            elif not (isinstance(step, tuple) and len(step) == 2 and isinstance(step[0], str)
                      and (step[1] is None or isinstance(step[1], str))):
                raise GreedyNetworkError(f"a step is an activation's name or [weight, bias]: {step!r}")
        self.steps = steps
        self.head = dict(head)
        self._head = _heads(str(self.head.get("kind")), self.head)
        self.takes_masks = takes_masks
        if samples and self.head.get("kind") not in _NOISE:
            raise GreedyNetworkError(f"a {self.head.get('kind')!r} head has no distribution to sample")
        self.samples = samples

    def to_data(self) -> dict[str, Any]:
        """The plan as JSON-able data (`from_data` reads it back)."""
        return {"steps": [list(step) if isinstance(step, tuple) else step for step in self.steps],
                "head": self.head, "takes_masks": self.takes_masks,
                "samples": self.samples}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> GreedyNetwork:
        """Raises: GreedyNetworkError (data that is not a plan this module can run)."""
        try:
            steps = [step if isinstance(step, str) else tuple(step) for step in data["steps"]]
            return cls(steps, dict(data["head"]), bool(data.get("takes_masks", False)), bool(data.get("samples", False)))
        except (KeyError, TypeError, IndexError) as error:
            raise GreedyNetworkError(f"not a greedy plan: {type(error).__name__}: {error}") from None

    def weight_names(self) -> list[str]:
        """The ``state_dict`` names of the arrays `bind` needs."""
        return [name for step in self.steps if isinstance(step, tuple) for name in step if name is not None]

    def bind(self, arrays: Mapping[str, np.ndarray]) -> Greedy:
        """The greedy function with these weights (arrays by ``state_dict`` name): from a batch of
        observations (rows) to their actions (rows). Given a numpy ``Generator`` (``rng``), a plan that
        `samples` draws each row's action from the policy's distribution (under its mask) instead; any other
        plan ignores it and stays greedy."""
        layers: list[tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], np.ndarray]] = []
        for step in self.steps:
            if isinstance(step, tuple):
                weight = np.ascontiguousarray(arrays[step[0]].T)  # (in, out): x @ weight
                bias = arrays[step[1]] if step[1] is not None else np.zeros(weight.shape[1], dtype=np.float32)
                layers.append((weight, bias))
            else:
                layers.append(ACTIVATIONS[step])
        head, takes_masks = self._head, self.takes_masks
        quantiles = tuple(int(n) for n in self.head["shape"]) if self.head["kind"] == "quantile_mean_argmax" else None
        noise = _NOISE[str(self.head["kind"])] if self.samples else None

        def greedy(batch: Any, masks: np.ndarray | None = None, rng: np.random.Generator | None = None) -> np.ndarray:
            x = np.asarray(batch, dtype=np.float32)
            x = x.reshape(len(x), -1)  # rows of boards flattened, as SB3's flatten extractor does
            for layer in layers:
                if isinstance(layer, tuple):
                    x = x @ layer[0] + layer[1]
                else:
                    x = layer(x)
            if masks is not None:
                if not takes_masks:
                    raise ValueError("this policy takes no action masks")
                if quantiles:  # QR-DQN's: every quantile of a disallowed action
                    rows = x.reshape(len(x), *quantiles)
                    x = np.where(np.asarray(masks)[:, None, :], rows, -np.inf).reshape(len(x), -1)
                else:
                    x = np.where(masks, x, -np.inf)
            if rng is not None and noise is not None:
                x = x + noise(rng, x.shape)
            return head(x)

        return greedy
