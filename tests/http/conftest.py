"""The fixture the admin API's tests share (its helpers are in test_admin_api.py)."""

import pytest

from shepherd.http import CREATED_KEYS, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN
from tests.http.test_admin_api import Api, graph_manager


@pytest.fixture
async def api(aiohttp_client, tmp_path):
    """The admin API of a server of one PPO agent ``pole``: ``api.app``, ``api.pole_key``, the admin token by
    default."""
    app = create_app(ServerConfig(graph_manager(), tmp_path / "data"))
    client = await aiohttp_client(app)
    api = Api(client, app[CREATED_ADMIN_TOKEN])
    api.app = app
    api.pole_key = app[CREATED_KEYS]["pole"]
    return api
