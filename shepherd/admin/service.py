"""The admin service: what every caller of the admin operations shares — the store, the GraphManager
when a server runs (None when a command works on a data folder no server holds), the admin token's hash
and the server's local credential — and authentication. `AdminService.acting_as(principal)` gives the
`Operations` that caller may perform (``operations.py``).
"""

from __future__ import annotations

import hmac

from shepherd.admin.operations import Operations
from shepherd.admin.records import ADMIN, Principal
from shepherd.agents.bounds import DEFAULT_BOUNDS, ParameterBounds
from shepherd.graph import GraphManager, Unauthorized
from shepherd.storage import Store, hash_key, new_secret


class AdminService:
    """The shared state of the admin operations over one data folder."""

    def __init__(self, store: Store, graph: GraphManager | None = None,
                 local_credential: str | None = None, bounds: ParameterBounds = DEFAULT_BOUNDS) -> None:
        """``bounds``: what parameter values are held to when no server serves the folder (a server holds
        its own, `GraphManager.bounds`)."""
        self.store = store
        #: whether a server serves the data folder (else the graph is an offline one over the store)
        self.serving = graph is not None
        self.graph = graph if graph is not None else GraphManager.offline(store, bounds)
        self._local_digest = hash_key(local_credential) if local_credential else None
        self._admin_digest = store.admin_token_hash()

    # -- authentication ------------------------------------------------------------------------
    def ensure_admin_token(self) -> str | None:
        """Create the admin token if the store has none; returns it, to be shown this once (the store keeps
        its hash), or None if one existed. Blocks (writes the store)."""
        if self._admin_digest is not None:
            return None
        return self.new_admin_token()

    def new_admin_token(self) -> str:
        """Replace the admin token (the old one stops working); returns the new one. Blocks (writes the store)."""
        token = new_secret()
        digest = hash_key(token)
        self.store.set_admin_token_hash(digest)
        self._admin_digest = digest
        return token

    def authenticate(self, token: str) -> Principal:
        """Who holds ``token``: the admin token, the server's local credential, or an agent's API key.

        Raises:
            Unauthorized: none of them.
        """
        return self.authenticate_digest(hash_key(token))

    def authenticate_digest(self, digest: str) -> Principal:
        """As `authenticate`, from the token's `hash_key`; compared in constant time."""
        for known in (self._admin_digest, self._local_digest):
            if known is not None and hmac.compare_digest(known, digest):
                return ADMIN
        record = self.store.agent_for_digest(digest)
        if record is not None:
            return Principal(admin=False, agent_id=record.id)
        raise Unauthorized("unknown or revoked token; sign in with the admin token or one of the agent's API keys")

    def acting_as(self, principal: Principal) -> Operations:
        return Operations(self, principal)
