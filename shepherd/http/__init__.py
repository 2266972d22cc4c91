"""HTTP: the aiohttp application serving the client protocol."""

from shepherd.http.app import CONFIG, CREATED_KEYS, GRAPH, STORE, ServerConfig, create_app

__all__ = ["CONFIG", "CREATED_KEYS", "GRAPH", "STORE", "ServerConfig", "create_app"]
