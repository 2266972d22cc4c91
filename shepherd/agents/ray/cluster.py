"""What ``run.py --ray`` calls: `connect` to a Ray (a local one, or a cluster), `RayLearners` to build each
served learner in a Ray actor (`GraphManager.remote_learners`), `disconnect`."""

from __future__ import annotations

import logging
import os
import secrets
from typing import Any

import ray
from ray import exceptions as ray_errors

from shepherd.agents.ray.actor import NAMESPACE
from shepherd.agents.ray.learner import RayLearner
from shepherd.agents.core import LearnerUnavailable, ServedLearner
from shepherd.agents.ray.link import JOINED, RayDown, RayLink
from shepherd.agents.ray.revival import LOST, NameTaken

logger = logging.getLogger(__name__)


def connect(address: str | None, num_cpus: int | None = None) -> None:
    """Start a local Ray (``address`` None) bound to loopback, with Ray's token authentication, or connect
    to a running one (``auto`` or ``HOST:PORT``); the driver's namespace is ``shepherd``.

    A local Ray's token is a fresh secret in this process's environment (``RAY_AUTH_TOKEN``), inherited by
    the processes Ray starts and by nothing else (Ray 2.60 turns token authentication on for a local
    ``ray.init`` unless ``RAY_AUTH_MODE=disabled``; a token already given by ``RAY_AUTH_TOKEN`` or
    ``RAY_AUTH_TOKEN_PATH`` is kept). Connecting to a cluster started with token authentication needs its
    token the same way.
    """
    if ray.is_initialized():
        return
    if address is None:
        if not os.environ.get("RAY_AUTH_TOKEN_PATH"):
            os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
        # Ray binds its services to the address it finds reachable from other machines unless it is told the
        # cluster is this one machine (read at import: set for this process and for the processes it starts)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
        ray.init(address="local",  # a new instance, never another Ray of this machine found by ray.init
                 _node_ip_address="127.0.0.1", include_dashboard=False, namespace=NAMESPACE,
                 num_cpus=num_cpus if num_cpus is not None else 1, log_to_driver=False,
                 configure_logging=False)
    else:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, configure_logging=False)
    logger.info("Ray: %s", ray.get_runtime_context().gcs_address)


def disconnect() -> None:
    """Leave Ray (a local Ray started by `connect` stops)."""
    ray.shutdown()


def link(address: str | None) -> RayLink:
    """Connect (as `connect`) and return the `RayLink` that watches a local Ray's node and starts a new local
    Ray when it dies (``address`` None), or that only joined a cluster. Raises: Ray's errors."""
    joined = RayLink(address, connect)
    joined.start()
    return joined


class RayLearners:
    """Builds served learners as `RayLearner`s (`GraphManager.remote_learners`): actor
    ``shepherd-learner/<agent id>`` (an advised agent's client: ``shepherd-learner/<agent id>/<client>``),
    each using ``num_cpus`` of Ray's logical CPUs (0: any number fit), with more of Ray's actor options if
    given (``scheduling_strategy``, ``resources``, ...), on the Ray of ``link`` (by default one the caller
    connected to itself)."""

    def __init__(self, num_cpus: float = 0.0, actor_options: dict[str, Any] | None = None,
                 link: RayLink = JOINED) -> None:
        self.num_cpus = num_cpus
        self.actor_options = dict(actor_options or {})
        self.link = link

    def __call__(self, record: Any, values: dict[str, Any], total_steps: int | None,
                 local: ServedLearner, client: str | None = None) -> ServedLearner:
        name = f"shepherd-learner/{record.id}" if client is None else f"shepherd-learner/{record.id}/{client}"
        learner = RayLearner(record.definition, values, total_steps, name, local, self.num_cpus, self.actor_options,
                             self.link)
        try:
            learner.spawn()
        except LOST + (ray_errors.GetTimeoutError, NameTaken, RayDown) as error:  # the cluster, not the agent:
            raise LearnerUnavailable(  # a 503 with Retry-After to a login that builds it (an advised client's)
                f"agent {record.name}'s learner could not be started on the Ray cluster yet ({type(error).__name__}: "
                f"{error}); retry in {LearnerUnavailable.retry_after} s") from error
        # a ServedLearner as the graph holds one, checked by mypy (see the class)
        return learner
