"""The dashboard in real headless Chromium for an advised agent: one curve per client, each in its own colour,
with a legend naming the clients; the model downloads give the chosen client's model, or the best one's."""

from __future__ import annotations

import http.client
import io
import json
import zipfile
from pathlib import Path

import pytest

from tests.conftest import TEST_PRESETS, ServerProcess
from tests.browser.test_dashboard import page, sign_in  # noqa: F401 - the page fixture

OBS4 = [0.0, 0.01, 0.0, -0.01]

#: pixels of the first two client colours (chart.js's CLIENT_COLORS: #2f6fdf blue, #d9480f orange-red)
COUNT_COLOR = """([r, g, b]) => {
  const canvas = document.querySelector('#curve');
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let count = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (Math.abs(pixels[i] - r) < 12 && Math.abs(pixels[i + 1] - g) < 12 && Math.abs(pixels[i + 2] - b) < 12) count++;
  }
  return count;
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("dashboard-advised") / "data"
    server = ServerProcess(["-p", str(TEST_PRESETS / "tiny_ppo_advised.py")], data)
    yield server
    server.stop()


def play(server, client: str, episodes: int, steps: int, reward: float) -> None:
    """Log in as ``client`` and play ``episodes`` episodes of ``steps`` steps of ``reward`` each."""
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def post(path, body):
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = json.loads(response.read())
        assert response.status == 200, data
        return data

    try:
        key = post("/shepherd/login_user/", {"apikey": server.api_key, "client": client})["session_key"]
        for _ in range(episodes):
            for step in range(steps + 1):
                post("/shepherd/env/", {"session_key": key, "obs": OBS4, "reward": reward, "done": step == steps})
        post("/shepherd/logout/", {"session_key": key})
    finally:
        connection.close()


def test_an_advised_agents_chart_draws_one_curve_per_client(page, server):  # noqa: F811 - the fixture
    play(server, "arm-1", episodes=25, steps=4, reward=1.0)  # returns 4
    play(server, "arm-2", episodes=25, steps=8, reward=2.0)  # returns 16
    sign_in(page, server, server.admin_token)
    page.wait_for_selector("#agents tbody tr")
    page.click("#agents tbody tr:has-text('tests/arms')")
    page.wait_for_function("() => document.querySelector('#curve').dataset.clients === 'arm-1,arm-2'")
    assert page.get_attribute("#curve", "data-episodes") == "50"
    legend = page.locator("#curve-clients .client-key")
    assert legend.count() == 2
    assert legend.nth(0).text_content() == "arm-1: 25 training episodes, moving average 4.0"
    assert legend.nth(1).text_content() == "arm-2: 25 training episodes, moving average 16.0"
    assert page.is_hidden("#curve-keys .key.average")  # the single-curve keys make way for the clients'
    assert "2 clients" in page.text_content("#curve-summary")
    assert page.evaluate(COUNT_COLOR, [0x2F, 0x6F, 0xDF]) > 100  # arm-1's line, in its colour
    assert page.evaluate(COUNT_COLOR, [0xD9, 0x48, 0x0F]) > 100  # arm-2's line, in its
    assert "arm-1: train" in page.text_content("#agent-facts")  # the clients' rows, as before


def test_an_advised_agents_downloads_give_the_chosen_clients_model(page, server):  # noqa: F811 - the fixture
    play(server, "arm-1", episodes=2, steps=4, reward=1.0)
    play(server, "arm-2", episodes=2, steps=4, reward=1.0)
    sign_in(page, server, server.admin_token)
    page.wait_for_selector("#agents tbody tr")
    page.click("#agents tbody tr:has-text('tests/arms')")
    page.wait_for_selector("#download-client-choice:not([hidden])")
    page.wait_for_function("() => document.querySelectorAll('#download-client option').length === 3")
    options = page.locator("#download-client option")
    assert [options.nth(i).text_content() for i in range(3)] == ["the best client", "arm-1", "arm-2"]
    downloads = {}
    for choice, button in (("", "#download-model"), ("arm-2", "#download-model"), ("arm-1", "#download-onnx")):
        page.select_option("#download-client", choice)
        with page.expect_download() as download_info:
            page.click(button)
        downloads[choice or "best"] = download_info.value
    assert downloads["best"].suggested_filename == "tests-arms-model.zip"
    assert downloads["arm-2"].suggested_filename == "tests-arms-arm-2-model.zip"
    assert downloads["arm-1"].suggested_filename == "tests-arms-arm-1-policy.onnx"
    with zipfile.ZipFile(io.BytesIO(Path(downloads["arm-2"].path()).read_bytes())) as archive:
        assert archive.testzip() is None
    page.wait_for_timeout(2500)  # a refresh of the agent's view keeps the choice
    assert page.input_value("#download-client") == "arm-1"
