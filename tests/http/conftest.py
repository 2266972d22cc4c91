"""The fixture the admin API's tests share (its helpers are in test_admin_api.py)."""

import pytest

from shepherd.http import CREATED_KEYS, ServerConfig, create_app
from shepherd.http.state import CREATED_ADMIN_TOKEN
from tests.http.test_admin_api import Api, graph_manager


@pytest.fixture
async def make_api(aiohttp_client, tmp_path):
    """``await make_api(**settings)``: the admin API of a server of one PPO agent ``pole`` with those
    `ServerConfig` settings (each in a data folder of its own): ``api.app``, ``api.pole_key``, the admin token
    by default."""
    count = 0

    async def make(**settings):
        nonlocal count
        count += 1
        app = create_app(ServerConfig(graph_manager(), tmp_path / f"data{count}", **settings))
        client = await aiohttp_client(app)
        api = Api(client, app[CREATED_ADMIN_TOKEN])
        api.app = app
        api.pole_key = app[CREATED_KEYS]["pole"]
        return api

    return make


@pytest.fixture
async def api(make_api):
    """The admin API of a server of one PPO agent ``pole`` (`make_api`'s, default settings)."""
    return await make_api()
