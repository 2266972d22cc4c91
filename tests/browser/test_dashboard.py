"""The dashboard in real headless Chromium: sign in, watch the curve grow while a local client trains,
download the model and the returns, restart the agent and see its sessions refused, sign in as another
owner and see nothing of the first, and delete users (with or without their agents) from the users panel.

``SHEPHERD_DASHBOARD_SCREENSHOT=docs/dashboard.png`` also saves the screenshot there, after a longer run.
"""

from __future__ import annotations

import http.client
import io
import json
import os
import shutil
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from stable_baselines3 import PPO

from shepherd.client import Client, ShepherdError, run_env

SCREENSHOT = os.environ.get("SHEPHERD_DASHBOARD_SCREENSHOT")
OBS4 = [0.0, 0.01, 0.0, -0.01]


class Trainer:
    """A local gymnasium client training an agent over HTTP, on a thread, until stopped."""

    def __init__(self, url: str, key: str) -> None:
        self.client = Client(url, key, timeout=30)
        self.episodes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seed = 0
        while not self._stop.is_set():
            run_env(self.client, "CartPole-v1", seed=seed, episodes=1, retry_seconds=5)
            self.episodes += 1
            seed += 1

    def wait(self, episodes: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.episodes < episodes and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.1)
        assert self.episodes >= episodes

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive()
        self.client.logout()
        self.client.close()


def admin_api(server, path, body=None):
    host, port = server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET" if body is None else "POST", "/shepherd/admin/api" + path,
                           None if body is None else json.dumps(body),
                           {"Authorization": f"Bearer {server.admin_token}", "Content-Type": "application/json"})
        response = connection.getresponse()
        data = json.loads(response.read())
        assert response.status < 300, data
        return data
    finally:
        connection.close()


def sign_in(page, server, token):
    page.goto(server.url + "/shepherd/admin/")
    page.wait_for_selector("#signin-form")
    page.fill("#token", token)
    page.click("#signin-form button[type=submit]")


def episodes_drawn(page) -> int:
    return int(page.get_attribute("#curve", "data-episodes") or 0)


def wait_for_episodes(page, at_least: int, timeout_ms: int = 90_000) -> None:
    page.wait_for_function(
        f"() => Number(document.querySelector('#curve').dataset.episodes || 0) >= {at_least}", timeout=timeout_ms)


COUNT_ORANGE = """() => {
  const canvas = document.querySelector('#curve');
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let count = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i] > 200 && pixels[i + 1] > 90 && pixels[i + 1] < 150 && pixels[i + 2] < 60) count++;
  }
  return count;
}"""


INKED = """(column) => {
  const canvas = document.querySelector(`#metric-charts canvas[data-column='${column}']`);
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let count = 0;
  for (let i = 0; i < pixels.length; i += 4) {
    if (pixels[i + 3] > 0 && pixels[i + 2] > pixels[i] + 60) count++;  // the line's dark blue
  }
  return count;
}"""


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, errors


def test_sign_in_and_watch_the_curve_grow_while_a_client_trains(page, server, tmp_path):
    sign_in(page, server, "not-a-token")
    page.wait_for_function("() => document.querySelector('#signin-error').textContent.length > 0")
    assert "unknown or revoked token" in page.text_content("#signin-error")
    assert page.is_hidden("#agents-view")

    sign_in(page, server, server.admin_token)
    page.wait_for_selector("#agents tbody tr")
    assert page.text_content("#who") == "signed in as admin"
    page.click("#agents tbody tr:has-text('tests/cartpole')")
    page.wait_for_selector("#agent-view:not([hidden])")
    assert page.text_content("#agent-title") == "tests/cartpole"
    assert "n_steps=64" in page.text_content("#agent-facts")
    start = episodes_drawn(page)

    trainer = Trainer(server.url, server.api_key)
    try:
        wait_for_episodes(page, start + 5)
        first_count = episodes_drawn(page)
        first_image = page.evaluate("() => document.querySelector('#curve').toDataURL()")
        row = page.locator("#agents tbody tr:has-text('tests/cartpole') td")
        assert row.nth(7).text_content() == "1"  # one session connected
        wait_for_episodes(page, first_count + 10)  # the page polls: the curve grows by itself
        assert page.evaluate("() => document.querySelector('#curve').toDataURL()") != first_image
        assert int(row.nth(5).text_content().replace(",", "")) > 0
        assert float(row.nth(6).text_content()) > 0  # steps/s
        page.wait_for_function(
            "() => /[1-9][0-9]* evaluation/.test(document.querySelector('#curve-summary').textContent)",
            timeout=120_000)
        page.wait_for_timeout(2500)  # one more poll draws the evaluation points
        assert page.evaluate(COUNT_ORANGE) > 20  # evaluation returns are drawn, in their colour
        # beside the curve, the learner's main training metrics, each a small chart that grows
        for column in ("train/loss", "train/entropy_loss", "train/explained_variance", "shepherd/steps_per_second"):
            page.wait_for_function(f"() => Number(document.querySelector(\"#metric-charts canvas[data-column='{column}']\")"
                                   "?.dataset.points || 0) >= 2", timeout=30_000)
        assert page.is_hidden("#metrics-empty") and "Loss: " in page.text_content("#metric-charts")
        assert page.evaluate(INKED, "train/loss") > 50  # a line is drawn
        if SCREENSHOT:  # a longer run, for the picture in the README
            wait_for_episodes(page, 160, timeout_ms=240_000)
            page.wait_for_timeout(2500)
    finally:
        trainer.stop()
    summary = page.text_content("#curve-summary")
    assert "training" in summary and "moving average" in summary
    page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
    if SCREENSHOT:
        shutil.copy(tmp_path / "dashboard.png", SCREENSHOT)


def test_download_the_model_zip_and_the_returns_csv(page, server, tmp_path):
    if not admin_api(server, "/agents/1")["model"]:  # when run alone: learn a little first
        trainer = Trainer(server.url, server.api_key)
        try:
            trainer.wait(episodes=10)
        finally:
            trainer.stop()
    sign_in(page, server, server.api_key)  # the agent's own key sees its own page
    page.wait_for_selector("#agent-view:not([hidden])")
    assert page.is_hidden("#download-client-choice")  # a pooled agent has one model
    with page.expect_download() as download_info:
        page.click("#download-model")
    download = download_info.value
    assert download.suggested_filename == "tests-cartpole-model.zip"
    data = Path(download.path()).read_bytes()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None and "shepherd.json" in archive.namelist()
    model = PPO.load(io.BytesIO(data), device="cpu")
    assert int(model.predict(OBS4, deterministic=True)[0]) in (0, 1)

    with page.expect_download() as download_info:
        page.click("#download-onnx")
    download = download_info.value
    assert download.suggested_filename == "tests-cartpole-policy.onnx"
    session = onnxruntime.InferenceSession(Path(download.path()).read_bytes())
    action = session.run(["action"], {"observation": np.array([OBS4], dtype=np.float32)})[0]
    assert action.shape == (1,) and int(action[0]) in (0, 1)
    assert page.text_content("#action-status") == "Policy (ONNX) downloaded."

    with page.expect_download() as download_info:
        page.click("#download-returns")
    download = download_info.value
    assert download.suggested_filename == "tests-cartpole-returns.csv"
    lines = Path(download.path()).read_text().splitlines()
    assert lines[0] == "episode,time_unix,time_utc,return,length,phase" and len(lines) > 1
    assert page.text_content("#action-status") == "Returns downloaded."


def test_restart_the_agent_and_see_its_sessions_refused(page, server):
    client = Client(server.url, server.api_key, timeout=30)
    client.login()
    assert client.step(OBS4, 0.0, False) in (0, 1)
    sign_in(page, server, server.admin_token)
    page.click("#agents tbody tr:has-text('tests/cartpole')")
    page.wait_for_selector("#agent-view:not([hidden])")

    page.once("dialog", lambda dialog: dialog.dismiss())  # a change of mind: nothing happens
    page.click("button[data-action=restart]")
    assert client.step(OBS4, 1.0, False) in (0, 1)

    questions = []

    def accept(dialog):
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("button[data-action=restart]")
    page.wait_for_function("() => document.querySelector('#action-status').textContent.includes('restarted')")
    assert "Restart tests/cartpole?" in questions[0]
    assert "1 session(s) ended" in page.text_content("#action-status")
    with pytest.raises(ShepherdError) as refused:
        client.step(OBS4, 1.0, False)
    assert refused.value.status == 401
    client.close()
    page.wait_for_function("() => document.querySelector('#agent-facts').textContent.includes('Saved model')")
    facts = page.text_content("#agent-facts")
    assert "Steps0 (" in facts and "Saved modelnone" in facts

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action=delete-returns]")
    page.wait_for_function("() => document.querySelector('#curve-summary').textContent.startsWith('0 episodes')")


def test_another_owner_sees_nothing_of_the_first(page, server):
    admin_api(server, "/users", {"name": "bob"})
    rover = admin_api(server, "/agents", {"owner": "bob", "name": "rover", "algorithm": "DQN",
                                          "observation_space": [[3], -1, 1], "action_space": 4})
    bob_key = admin_api(server, f"/agents/{rover['id']}/keys", {"label": "browser test"})["key"]
    sign_in(page, server, bob_key)
    page.wait_for_selector("#agent-view:not([hidden])")
    assert page.text_content("#who") == "signed in with a key of agent bob/rover"
    assert page.locator("#agents tbody tr").count() == 1
    assert page.text_content("#agent-title") == "bob/rover"
    body = page.text_content("body")
    assert "cartpole" not in body and "tests/" not in body
    # the page's own credentials cannot reach the first owner's agent either
    statuses = page.evaluate("""async () => {
      const get = async (path) => (await fetch(path, {credentials: 'same-origin'})).status;
      const post = async (path, headers) => (await fetch(path, {method: 'POST', credentials: 'same-origin',
                                                               headers, body: '{}'})).status;
      return [await get('api/agents/1'), await get('api/agents/1/model.zip'), await get('api/users'),
              await post('api/agents/1/restart', {}), await post('api/agents/%d/delete-returns', {})];
    }""" % rover["id"])
    assert statuses == [404, 404, 403, 403, 403]  # the last two: no CSRF token, refused before anything
    with_token = page.evaluate("""async () => {
      const csrf = (await (await fetch('api/signin')).json()).csrf;
      const response = await fetch('api/agents/1/restart', {method: 'POST', credentials: 'same-origin',
                                   headers: {'X-CSRF-Token': csrf}, body: '{}'});
      return [response.status, await response.text()];
    }""")
    assert with_token[0] == 404 and "cartpole" not in with_token[1]
    assert admin_api(server, "/agents/1")["phase"] != "restarting"


def test_delete_the_agent_after_confirming_and_see_its_sessions_gone(page, server):
    client = Client(server.url, server.api_key, timeout=30)
    client.login()
    assert client.step(OBS4, 0.0, False) in (0, 1)
    sign_in(page, server, server.admin_token)
    page.click("#agents tbody tr:has-text('tests/cartpole')")
    page.wait_for_selector("#agent-view:not([hidden])")
    page.once("dialog", lambda dialog: dialog.dismiss())  # a change of mind: nothing happens
    page.click("button[data-action=delete]")
    assert client.step(OBS4, 1.0, False) in (0, 1)
    questions = []

    def accept(dialog):
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    page.click("button[data-action=delete]")
    page.wait_for_function("() => document.querySelector('#agents-status').textContent.includes('deleted')")
    assert questions[0].startswith("Delete tests/cartpole for good?")
    assert "agent tests/cartpole deleted: 1 session(s) ended" in page.text_content("#agents-status")
    assert page.is_hidden("#agent-view") and "tests/cartpole" not in page.text_content("#agents")
    with pytest.raises(ShepherdError) as refused:
        client.step(OBS4, 1.0, False)
    assert refused.value.status == 410
    client.close()


def test_delete_users_after_confirming_with_or_without_their_agents(page, server):
    admin_api(server, "/users", {"name": "carol"})
    admin_api(server, "/users", {"name": "dave"})
    for name in ("lander", "walker"):
        admin_api(server, "/agents", {"owner": "dave", "name": name, "algorithm": "DQN",
                                      "observation_space": [[3], -1, 1], "action_space": 2})
    sign_in(page, server, server.admin_token)
    page.wait_for_selector("#users tbody tr[data-user=dave]:has-text('dave/lander, dave/walker')")
    carol, dave = page.locator("#users tbody tr[data-user=carol]"), page.locator("#users tbody tr[data-user=dave]")
    assert carol.locator("td").nth(1).text_content() == "0" and dave.locator("td").nth(1).text_content() == "2"
    assert carol.locator("input[name=with-agents]").count() == 0
    assert dave.locator("label").text_content().strip() == "also delete its 2 agents"

    def users():
        return {user["name"]: user["agents"] for user in admin_api(server, "/users")}

    questions: list[str] = []

    def answer(accept: bool):
        def handle(dialog):
            questions.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()
        page.once("dialog", handle)

    # a change of mind, even with the agents ticked: nothing happens
    dave.locator("input[name=with-agents]").check()
    page.wait_for_timeout(2500)  # a poll in between keeps the tick
    assert dave.locator("input[name=with-agents]").is_checked()
    answer(False)
    dave.locator("button", has_text="Delete").click()
    assert questions[-1].startswith("Delete user dave and its 2 agents (dave/lander, dave/walker) for good?")
    answer(False)
    carol.locator("button", has_text="Delete").click()
    assert questions[-1] == "Delete user carol? It owns no agents."
    assert users()["carol"] == 0 and users()["dave"] == 2
    assert page.text_content("#users-status") == ""

    # a user without agents goes after confirming
    answer(True)
    carol.locator("button", has_text="Delete").click()
    page.wait_for_function("() => document.querySelector('#users-status').textContent === 'user carol deleted'")
    page.wait_for_selector("#users tbody tr[data-user=carol]", state="detached")
    assert "carol" not in users()

    # a user with agents, without the choice: refused with the server's line, nothing changes
    dave.locator("input[name=with-agents]").uncheck()
    answer(True)
    dave.locator("button", has_text="Delete").click()
    page.wait_for_function("() => document.querySelector('#users-status').textContent.includes('owns 2 agent(s)')")
    assert questions[-1].startswith("Delete user dave? It owns 2 agents (dave/lander, dave/walker), which are kept")
    assert "dave/lander, dave/walker" in page.text_content("#users-status")
    assert users()["dave"] == 2 and page.locator("#agents tbody tr:has-text('dave/')").count() == 2

    # with it: the user and its agents go, from both lists
    dave.locator("input[name=with-agents]").check()
    answer(True)
    dave.locator("button", has_text="Delete").click()
    page.wait_for_function(
        "() => document.querySelector('#users-status').textContent === 'user dave deleted and its 2 agent(s)'")
    page.wait_for_selector("#users tbody tr[data-user=dave]", state="detached")
    page.wait_for_function("() => !document.querySelector('#agents').textContent.includes('dave/')")
    assert "dave" not in users()
    assert not [agent for agent in admin_api(server, "/agents") if agent["owner"] == "dave"]


def test_an_api_key_sees_no_users_panel(page, server):
    admin_api(server, "/users", {"name": "erin"})
    probe = admin_api(server, "/agents", {"owner": "erin", "name": "probe", "algorithm": "DQN",
                                          "observation_space": [[3], -1, 1], "action_space": 2})
    sign_in(page, server, admin_api(server, f"/agents/{probe['id']}/keys", {"label": "browser test"})["key"])
    page.wait_for_selector("#agents-view:not([hidden])")
    page.wait_for_timeout(2500)  # a poll: it must not ask for the users (403) nor show them
    assert page.is_hidden("#users-view") and page.text_content("#action-status") == ""


def test_the_curve_marks_where_the_lessons_changed(page, server):
    admin_api(server, "/users", {"name": "frank"})
    pole = admin_api(server, "/agents", {
        "owner": "frank", "name": "pole", "algorithm": "PPO", "observation_space": [[4], "-inf", "inf"],
        "action_space": 2, "parameters": {"n_steps": 64},
        "lessons": [{"name": "short pole", "config": {"length": 0.25}, "until": {"evaluation_return": 10 ** 6}},
                    {"name": "long pole", "config": {"length": 1.0}}]})
    key = admin_api(server, f"/agents/{pole['id']}/keys", {"label": "browser test"})["key"]
    client = Client(server.url, key, timeout=30)
    run_env(client, "CartPole-v1", seed=0, episodes=3)  # sets CartPole's length before each reset
    admin_api(server, f"/agents/{pole['id']}/lesson", {"lesson": "long pole"})
    run_env(client, "CartPole-v1", seed=1, episodes=3)  # the first was announced before the move: short pole
    client.logout()
    client.close()
    records = admin_api(server, f"/agents/{pole['id']}/returns")["returns"]
    lessons = [record["lesson"] for record in records]
    assert lessons[0] == "short pole" and lessons[-1] == "long pole" and len(records) == 6
    changed = lessons.index("long pole")
    steps = sum(record["length"] for record in records[:changed] if record["phase"] in ("train", "heatup"))

    sign_in(page, server, key)
    page.wait_for_selector("#agent-view:not([hidden])")
    wait_for_episodes(page, 6)
    assert json.loads(page.get_attribute("#curve", "data-lessons")) == [[0, "short pole"], [steps, "long pole"]]
