"""``policy_kwargs`` as a preset writes them (JSON: names) and as SB3's policies take them (classes): the
activation functions and the features extractors a preset can name, checked when an agent is checked
(`shepherd.agents.registry.check_agent`) and converted when its learner is built (`shepherd.agents.factories`)."""

from __future__ import annotations

from typing import Any, Callable

import torch as th

from shepherd.agents import grid_cnn
from shepherd.agents.parameters import ParameterError

ACTIVATIONS: dict[str, Callable[..., th.nn.Module]] = {
    "tanh": th.nn.Tanh, "relu": th.nn.ReLU, "elu": th.nn.ELU, "leaky_relu": th.nn.LeakyReLU, "gelu": th.nn.GELU,
}


#: the features extractors a preset names in ``policy_kwargs.features_extractor_class``: each class, and the
#: function that checks its ``features_extractor_kwargs`` and completes them with its defaults
EXTRACTORS: dict[str, tuple[type[th.nn.Module], Callable[[Any], dict[str, Any]]]] = {
    "GridCNN": (grid_cnn.GridCNN, grid_cnn.check_kwargs),
}


def sb3_policy_kwargs(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """A preset's ``policy_kwargs`` (JSON) as SB3's policies take them: the activation and the features extractor
    named by a string become their classes, the extractor's settings checked.

    Raises:
        ParameterError: not an object, an unknown activation or extractor, or bad extractor settings.
    """
    if not value:
        return value
    if not isinstance(value, dict):
        raise ParameterError("policy_kwargs must be a JSON object, such as {\"net_arch\": [64, 64]}")
    kwargs = dict(value)
    activation = kwargs.get("activation_fn")
    if isinstance(activation, str):
        if activation.lower() not in ACTIVATIONS:
            raise ParameterError(f"activation_fn {activation!r} unknown; use one of {', '.join(ACTIVATIONS)}")
        kwargs["activation_fn"] = ACTIVATIONS[activation.lower()]
    extractor = kwargs.get("features_extractor_class")
    if extractor is not None:
        if not isinstance(extractor, str) or extractor not in EXTRACTORS:
            raise ParameterError(f"features_extractor_class {extractor!r} unknown; Shepherd offers "
                                 f"{', '.join(EXTRACTORS)} (SB3's own extractors are the defaults and need no name)")
        kwargs["features_extractor_class"], check = EXTRACTORS[extractor]
        try:
            kwargs["features_extractor_kwargs"] = check(kwargs.get("features_extractor_kwargs"))
        except ValueError as error:
            raise ParameterError(str(error)) from None
    elif "features_extractor_kwargs" in kwargs:
        raise ParameterError("features_extractor_kwargs needs a features_extractor_class")
    return kwargs
