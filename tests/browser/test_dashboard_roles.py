"""The dashboard's environments with roles in real headless Chromium: after rated episodes played over HTTP, the
admin sees each environment's ratings table, best first, and a chart of its agent's rating over its steps; an
agent's key sees no environments."""

from __future__ import annotations

import http.client
import json

import pytest

from tests.browser.test_dashboard import admin_api, page, sign_in  # noqa: F401 - page is a fixture
from tests.conftest import TEST_PRESETS, ServerProcess

OBS = [0.0, 0.5]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("dashboard-roles") / "data"
    server = ServerProcess(["-p", str(TEST_PRESETS / "roles_duel.py")], data)
    yield server
    server.stop()


def post(server, path, body):
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = json.loads(response.read())
        assert response.status == 200, data
        return data
    finally:
        connection.close()


def play(server, episodes: int) -> None:
    """Rated episodes of the duel: the agent's hero wins each."""
    key = admin_api(server, "/environments/keys", {"environment": "tests/duel"})["key"]
    session = post(server, "/shepherd/login_user/", {"apikey": key})["session_key"]
    for _ in range(episodes):
        post(server, "/shepherd/env/", {"session_key": session, "obs": {"hero": OBS, "rival": OBS}})
        post(server, "/shepherd/env/", {"session_key": session, "obs": {"hero": OBS, "rival": OBS},
                                        "reward": {"hero": 1.0, "rival": 0.0},
                                        "terminated": {"hero": True, "rival": True},
                                        "outcome": {"hero": 1, "rival": 0}})
    post(server, "/shepherd/logout/", {"session_key": session})


def test_the_admin_sees_each_environments_ratings_and_its_agents_rating_over_steps(page, server):  # noqa: F811
    play(server, 6)
    sign_in(page, server, server.admin_token)
    page.wait_for_selector("#environments-view:not([hidden]) article.environment[data-environment='tests/duel']")
    article = "article.environment[data-environment='tests/duel']"
    assert "simultaneous turns; roles hero: player, rival: tests.presets.roles_duel:still" in \
        page.inner_text(f"{article} h3")
    headers = page.eval_on_selector_all(f"{article} table.ratings th", "cells => cells.map(c => c.textContent)")
    assert headers == ["Player", "Mu", "Sigma", "Ordinal (mu - 3 sigma)", "Games"]
    rows = page.eval_on_selector_all(f"{article} table.ratings tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    [shown] = admin_api(server, "/environments")
    assert [row[0] for row in rows] == list(shown["ratings"]) == ["player", "tests.presets.roles_duel:still"]
    assert rows[0][1:] == [f"{shown['ratings']['player'][k]:.2f}" for k in ("mu", "sigma", "ordinal")] + ["6"]
    canvas = f"{article} .rating-charts canvas[data-player='player']"
    assert page.get_attribute(canvas, "data-points") == "6"  # a point per rated episode
    inked = page.eval_on_selector(canvas, """canvas => {
      const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      let count = 0;
      for (let i = 0; i < pixels.length; i += 4) if (pixels[i + 3] > 0 && pixels[i + 2] > pixels[i] + 60) count++;
      return count;
    }""")
    assert inked > 50  # the line is drawn
    assert "rating (ordinal) over its steps: " + f"{shown['history']['player'][-1]['ordinal']:.2f}" in \
        page.inner_text(f"{article} .rating-charts figcaption")
    play(server, 2)  # the next poll shows the new episodes
    page.wait_for_function(f"() => document.querySelector(\"{canvas}\").dataset.points === '8'", timeout=30_000)


def test_an_agents_key_sees_no_environments(page, server):  # noqa: F811 - the fixture
    sign_in(page, server, server.api_key)
    page.wait_for_selector("#agent-view:not([hidden])")
    assert page.is_hidden("#environments-view")


def test_a_player_named_like_a_number_is_ranked_by_its_rating(page, server):  # noqa: F811
    """A JavaScript object lists integer-like keys ("42") first, whatever order the server sent: the table sorts
    by the ordinal itself (best first)."""
    play(server, 1)

    def with_a_numeric_player(route):
        environments = route.fetch().json()
        for environment in environments:
            environment["ratings"]["42"] = {"mu": -900.0, "sigma": 1.0, "ordinal": -903.0, "games": 1}  # the worst
        route.fulfill(json=environments)

    page.route("**/api/environments", with_a_numeric_player)
    sign_in(page, server, server.admin_token)
    article = "article.environment[data-environment='tests/duel']"
    page.wait_for_selector(f"#environments-view:not([hidden]) {article} table.ratings tbody tr[data-player='42']")
    players = page.eval_on_selector_all(f"{article} table.ratings tbody tr", "rows => rows.map(r => r.dataset.player)")
    assert players == ["player", "tests.presets.roles_duel:still", "42"]
