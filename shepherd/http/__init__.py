"""HTTP: the aiohttp application serving the client protocol, the admin API and the dashboard."""

from shepherd.http.app import create_app
from shepherd.http.state import CONFIG, CREATED_KEYS, GRAPH, STORE, ServerConfig

__all__ = ["CONFIG", "CREATED_KEYS", "GRAPH", "STORE", "ServerConfig", "create_app"]
