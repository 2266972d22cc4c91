/* The Shepherd dashboard: sign in, list the agents you may see (and, for the admin, the users and the
   environments with roles: their ratings and each agent's rating over its steps), draw the selected agent's
   learning curve and its main training metrics (polled every two seconds), and send the
   special actions as POSTs carrying the sign-in's CSRF token.
   Server data is only ever put in the page as text, never as HTML. */
"use strict";

const POLL_MS = 2000;
const AVERAGE_WINDOW = 20;
const $ = (selector) => document.querySelector(selector);

const state = {
  csrf: null,     // the sign-in's CSRF token, kept in memory only
  me: null,       // {role, agent, agent_ref}
  agents: [],
  users: [],      // the admin's only: {id, name, created, agents}
  environments: [],  // the admin's only: the environments with roles, with "ratings" and "history"
  withAgents: new Set(),  // ids of users whose "also delete its N agents" is ticked
  selected: null, // agent id
  curve: { agent: null, records: [], next: 0 },
  timer: null,
  busy: false,
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  const init = { method, headers, credentials: "same-origin", cache: "no-store" };
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    if (state.csrf) headers["X-CSRF-Token"] = state.csrf;
    init.body = JSON.stringify(body || {});
  }
  const response = await fetch("api" + path, init);
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try { message = (await response.json()).error || message; } catch (e) { /* not JSON */ }
    throw new ApiError(response.status, message);
  }
  return response;
}

const getJson = async (path) => (await call("GET", path)).json();
const postJson = async (path, body) => (await call("POST", path, body)).json();

/* -- signing in and out ------------------------------------------------------------------------ */
function showSignIn(message) {
  clearInterval(state.timer);
  Object.assign(state, { csrf: null, me: null, agents: [], users: [], environments: [], withAgents: new Set(),
                         selected: null,
                         curve: { agent: null, records: [], next: 0 } });
  $("#signin-view").hidden = false;
  $("#agents-view").hidden = true;
  $("#users-view").hidden = true;
  $("#users tbody").replaceChildren();
  delete $("#users").dataset.drawn;
  $("#environments-view").hidden = true;
  $("#environments").replaceChildren();
  delete $("#environments").dataset.drawn;
  $("#agent-view").hidden = true;
  $("#signout").hidden = true;
  $("#who").textContent = "";
  $("#signin-error").textContent = message || "";
  $("#token").focus();
}

function signedIn(info) {
  state.csrf = info.csrf;
  state.me = info;
  $("#who").textContent = info.role === "admin" ? "signed in as admin" : `signed in with a key of agent ${info.agent_ref}`;
  $("#signin-view").hidden = true;
  $("#agents-view").hidden = false;
  $("#users-view").hidden = info.role !== "admin";
  $("#signout").hidden = false;
  $("#token").value = "";
  if (info.role !== "admin") state.selected = info.agent;
  refresh();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, POLL_MS);
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("#signin-error").textContent = "";
  try {
    signedIn(await postJson("/signin", { token: $("#token").value.trim() }));
  } catch (error) {
    $("#signin-error").textContent = error.message;
  }
});

$("#signout").addEventListener("click", async () => {
  try { await postJson("/signout"); } catch (error) { /* signed out either way */ }
  showSignIn("Signed out.");
});

/* -- the agents table -------------------------------------------------------------------------- */
function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function spaceText(spec) {
  return JSON.stringify(spec);
}

function ago(seconds) {
  if (!seconds) return "never";
  const age = Math.max(0, Date.now() / 1000 - seconds);
  if (age < 60) return `${Math.round(age)} s ago`;
  if (age < 3600) return `${Math.round(age / 60)} min ago`;
  if (age < 86400) return `${Math.round(age / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

function renderAgents() {
  const body = $("#agents tbody");
  body.replaceChildren();
  $("#no-agents").hidden = state.agents.length > 0;
  for (const agent of state.agents) {
    const row = body.insertRow();
    row.dataset.agent = agent.id;
    if (agent.id === state.selected) row.classList.add("selected");
    cell(row, `${agent.owner}/${agent.name}`);
    cell(row, agent.algorithm);
    cell(row, "").appendChild(document.createElement("code")).textContent = spaceText(agent.observation_space);
    cell(row, "").appendChild(document.createElement("code")).textContent = spaceText(agent.action_space);
    const phase = cell(row, "").appendChild(document.createElement("span"));
    phase.className = `phase ${agent.phase}`;
    phase.textContent = agent.phase;
    cell(row, agent.steps.toLocaleString(), "number");
    cell(row, agent.steps_per_second.toFixed(0), "number");
    cell(row, String(agent.sessions), "number");
    cell(row, ago(agent.last_active));
    row.tabIndex = 0;
    row.addEventListener("click", () => select(agent.id));
    row.addEventListener("keydown", (event) => { if (event.key === "Enter") select(agent.id); });
  }
}

function select(agentId) {
  state.selected = agentId;
  $("#action-status").textContent = "";
  refresh();
}

/* -- one agent --------------------------------------------------------------------------------- */
function fact(list, term, text) {
  list.appendChild(document.createElement("dt")).textContent = term;
  list.appendChild(document.createElement("dd")).textContent = text;
}

function renderAgent(agent) {
  $("#agent-view").hidden = false;
  $("#agent-title").textContent = `${agent.owner}/${agent.name}`;
  const facts = $("#agent-facts");
  facts.replaceChildren();
  fact(facts, "Algorithm", `${agent.algorithm} (knowledge sharing: ${agent.sharing})`);
  fact(facts, "Observation space", spaceText(agent.observation_space));
  fact(facts, "Action space", spaceText(agent.action_space));
  const parameters = Object.entries(agent.parameters).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
  fact(facts, "Parameters", parameters || "stable-baselines3's defaults");
  let phase = agent.phase;
  if (agent.failure) phase += ` (${agent.failure})`;
  fact(facts, "Phase", phase);
  fact(facts, "Steps", `${agent.steps.toLocaleString()} (${agent.steps_per_second.toFixed(1)} steps/s)`);
  fact(facts, "Sessions connected", String(agent.sessions));
  const evaluation = agent.last_evaluation;
  fact(facts, "Last evaluation", evaluation
    ? `mean return ${evaluation.mean_return.toFixed(1)} at ${evaluation.steps.toLocaleString()} steps` : "none yet");
  fact(facts, "Saved model", agent.model
    ? `${(agent.model.bytes / 1024).toFixed(0)} KiB, saved ${ago(agent.model.modified)}` : "none");
  fact(facts, "Last activity", ago(agent.last_active));
  if (agent.clients) {  // an advised agent: one learner per client (textContent only: names are the clients')
    fact(facts, "Clients", agent.clients.length ? agent.clients.map((c) =>
      `${c.client}: ${c.phase}${c.failure ? ` (${c.failure})` : ""}, ${c.steps.toLocaleString()} steps, ` +
      `recent evaluation ${c.recent_return === null ? "none" : c.recent_return.toFixed(1)}` +
      (c.advisor ? `, advised by ${c.advisor}` : "")).join("; ") : "none yet");
  }
  if (agent.level) {  // a selector (docs/levels.md): its skills and how often and how long each was chosen
    const level = agent.level, options = level.options || {};
    fact(facts, "Level", `skills ${level.skills.join(", ")}; at most ${level.option_steps} steps per option; ` +
      `skills ${level.skills_learn ? "learn" : "frozen"}`);
    fact(facts, "Options", level.skills.map((skill) => {
      const use = options[skill];
      return use ? `${skill}: chosen ${use.chosen.toLocaleString()} times, ${use.steps.toLocaleString()} steps` +
        (use.mean_steps === null ? "" : ` (${use.mean_steps.toFixed(1)} per option)`) : `${skill}: not served here`;
    }).join("; "));
  }
  renderClientChoice(agent);
}

// An advised agent's downloads give one client's model: the best client's, or the one chosen here. The
// options are rebuilt only when the agent or its clients change (not on every poll: an open list stays open).
function renderClientChoice(agent) {
  const select = $("#download-client");
  const names = (agent.clients || []).map((c) => c.client);
  $("#download-client-choice").hidden = !agent.clients;
  const key = `${agent.id}:${names.join(",")}`;
  if (select.dataset.key === key) return;
  const chosen = select.dataset.key?.startsWith(`${agent.id}:`) && names.includes(select.value) ? select.value : "";
  select.dataset.key = key;
  select.replaceChildren(new Option("the best client", ""), ...names.map((name) => new Option(name, name)));
  select.value = chosen;
}

// The export path of the selected agent's model in ``format`` (an advised agent's: the chosen client's).
function exportPath(agent, format) {
  const client = agent.clients ? $("#download-client").value : "";
  return `/agents/${agent.id}/export?format=${format}` + (client ? `&client=${encodeURIComponent(client)}` : "");
}

async function refreshCurve(agentId) {
  // Poll for what is new only: the server's "total" is where the next poll starts, and the time of our
  // first record tells it whether the curve was deleted meanwhile (then it sends everything, "reset").
  const fresh = state.curve.agent !== agentId;
  const curve = fresh ? { agent: agentId, records: [], next: 0 } : state.curve;
  let path = `/agents/${agentId}/returns?offset=${curve.next || 0}`;
  if (curve.next && curve.records.length) path += `&first=${curve.records[0].time}`;
  const reply = await getJson(path);
  if (reply.reset) curve.records = [];
  for (const record of reply.returns) curve.records.push(record);
  curve.next = reply.total;
  state.curve = curve;
  const canvas = $("#curve");
  const resized = canvas.width !== Math.round((canvas.clientWidth || 800) * (window.devicePixelRatio || 1));
  if (fresh || resized || reply.reset || reply.returns.length) drawCurve(curve.records);
}

/* The points of a list of episodes against its own training steps: training returns, their moving
   average, evaluation and deployment returns; and the lessons (docs/lessons.md): [steps, name] where the
   episodes' lesson changed, the first lesson at its first episode. */
function curveSeries(records) {
  const series = { train: [], evaluation: [], deploy: [], average: [], lessons: [] };
  let steps = 0;
  let lesson;
  for (const record of records) {
    if (record.lesson !== undefined && record.lesson !== lesson) {
      series.lessons.push([steps, record.lesson]);
      lesson = record.lesson;
    }
    if (record.phase === "train" || record.phase === "heatup") {
      steps += record.length;
      series.train.push([steps, record.value]);
    } else if (record.phase === "evaluate") {
      series.evaluation.push([steps, record.value]);
    } else {
      series.deploy.push([steps, record.value]);
    }
  }
  series.average = ShepherdChart.movingAverage(series.train, AVERAGE_WINDOW);
  return series;
}

const lastAverage = (series) =>
  series.average.length ? series.average[series.average.length - 1][1].toFixed(1) : "-";

function drawCurve(records) {
  // An advised agent's records name their client: one curve per client, each against its own steps.
  const byClient = new Map();
  for (const record of records) {
    if (record.client === undefined) continue;
    if (!byClient.has(record.client)) byClient.set(record.client, []);
    byClient.get(record.client).push(record);
  }
  const pooled = records.filter((record) => record.client === undefined);
  const series = curveSeries(pooled);
  const names = [...byClient.keys()].sort();
  series.clients = names.map((name) => ({ name, ...curveSeries(byClient.get(name)) }));
  const canvas = $("#curve");
  ShepherdChart.drawCurve(canvas, series);
  canvas.dataset.episodes = String(records.length);
  canvas.dataset.clients = names.join(",");
  canvas.dataset.lessons = JSON.stringify(series.lessons);  // the marks drawn, for tests and tools
  const legend = $("#curve-clients");
  legend.replaceChildren();
  legend.hidden = names.length === 0;
  for (const key of document.querySelectorAll("#curve-keys .key")) key.hidden = names.length > 0 && !pooled.length;
  series.clients.forEach((client, i) => {  // textContent only: the names are the clients'
    const item = legend.appendChild(document.createElement("span"));
    item.className = "client-key";
    item.style.setProperty("--client-color", ShepherdChart.clientColor(i));
    item.textContent = `${client.name}: ${client.train.length} training episodes, moving average ${lastAverage(client)}`;
  });
  const training = series.train.length + series.clients.reduce((n, c) => n + c.train.length, 0);
  const evaluations = series.evaluation.length + series.clients.reduce((n, c) => n + c.evaluation.length, 0);
  $("#curve-summary").textContent =
    `${records.length} episodes: ${training} training, ${evaluations} evaluation` +
    (names.length ? ` (${names.length} clients: one colour each, against each client's own steps)`
                  : `; moving average ${lastAverage(series)}`);
}

/* -- training metrics: small charts of what the learner's logger wrote --------------------------- */
const STEP_COLUMN = "time/total_timesteps";
// shown when the agent's algorithm records them: SB3's names, and Shepherd's own
const METRIC_PANELS = [
  ["train/loss", "Loss"],
  ["train/entropy_loss", "Entropy loss"],
  ["rollout/exploration_rate", "Exploration rate (epsilon)"],
  ["train/ent_coef", "Entropy coefficient"],
  ["train/explained_variance", "Explained variance"],
  ["train/approx_kl", "Approximate KL"],
  ["train/actor_loss", "Actor loss"],
  ["train/critic_loss", "Critic loss"],
  ["shepherd/steps_per_second", "Steps per second"],
];
const METRICS_PATH = `/metrics?rows=500&columns=${encodeURIComponent([STEP_COLUMN, ...METRIC_PANELS.map((p) => p[0])].join(","))}`;

async function refreshMetrics(agentId) {
  const reply = await getJson(`/agents/${agentId}${METRICS_PATH}`);
  const grid = $("#metric-charts");
  const last = reply.rows.length ? JSON.stringify(reply.rows[reply.rows.length - 1]) : "";
  const key = `${agentId}:${reply.rows.length}:${last}:${grid.clientWidth}`;
  if (grid.dataset.drawn === key) return;  // nothing new since the last poll
  grid.dataset.drawn = key;
  const step = reply.columns.indexOf(STEP_COLUMN);
  const panels = [];
  for (const [column, title] of METRIC_PANELS) {
    const index = reply.columns.indexOf(column);
    const points = reply.rows.filter((row) => row[index] !== null && row[step] !== null)
      .map((row) => [row[step], row[index]]);
    if (points.length) panels.push({ column, title, points });
  }
  $("#metrics-empty").hidden = panels.length > 0;
  grid.replaceChildren();
  for (const panel of panels) {
    const figure = grid.appendChild(document.createElement("figure"));
    figure.className = "metric";
    const caption = figure.appendChild(document.createElement("figcaption"));
    const latest = panel.points[panel.points.length - 1][1];
    caption.textContent = `${panel.title}: ${Number.isInteger(latest) ? latest : latest.toPrecision(4)}`;
    const canvas = figure.appendChild(document.createElement("canvas"));
    canvas.dataset.column = panel.column;
    canvas.dataset.points = String(panel.points.length);
    canvas.setAttribute("aria-label", `${panel.title} against training steps`);
    ShepherdChart.drawMetric(canvas, panel.points);
  }
}

/* -- polling ----------------------------------------------------------------------------------- */
async function refresh() {
  if (state.busy || !state.csrf) return;
  state.busy = true;
  try {
    state.agents = await getJson("/agents");
    renderAgents();
    if (state.me.role === "admin") {
      state.users = await getJson("/users");
      renderUsers();
      state.environments = await getJson("/environments");
      renderEnvironments();
    }
    const agent = state.agents.find((a) => a.id === state.selected);
    if (agent) {
      renderAgent(agent);
      await refreshCurve(agent.id);
      await refreshMetrics(agent.id);
    } else {
      $("#agent-view").hidden = true;
    }
  } catch (error) {
    if (error.status === 401) showSignIn("Your sign-in has ended (the key was revoked, or the server restarted).");
    else $("#action-status").textContent = `Refresh failed: ${error.message}`;
  } finally {
    state.busy = false;
  }
}

/* -- special actions --------------------------------------------------------------------------- */
function selectedAgent() {
  return state.agents.find((a) => a.id === state.selected);
}

async function download(path) {
  const response = await call("GET", path);
  const disposition = response.headers.get("Content-Disposition") || "";
  const match = /filename="([^"]+)"/.exec(disposition);
  const url = URL.createObjectURL(await response.blob());
  const link = document.createElement("a");
  link.href = url;
  link.download = match ? match[1] : "download";
  document.body.appendChild(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

async function act(button, work, status = $("#action-status")) {
  button.disabled = true;
  status.textContent = "Working...";
  try {
    status.textContent = (await work()) || "";
  } catch (error) {
    status.textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

$("#download-model").addEventListener("click", (event) => {
  const agent = selectedAgent();
  if (agent) act(event.currentTarget, async () => { await download(exportPath(agent, "sb3")); return "Model downloaded."; });
});

$("#download-onnx").addEventListener("click", (event) => {
  const agent = selectedAgent();
  if (agent) act(event.currentTarget, async () => { await download(exportPath(agent, "onnx")); return "Policy (ONNX) downloaded."; });
});

$("#download-returns").addEventListener("click", (event) => {
  const agent = selectedAgent();
  if (agent) act(event.currentTarget, async () => { await download(`/agents/${agent.id}/returns.csv`); return "Returns downloaded."; });
});

/* A destructive action: ask `question` in the browser's confirmation dialog, and only if confirmed run
   `work` as `button`'s action, its outcome (or the server's error line) shown in `status`. */
function confirmThen(button, question, work, status) {
  if (!window.confirm(question)) return;
  act(button, work, status);
}

for (const button of document.querySelectorAll("button[data-action]")) {
  button.addEventListener("click", () => {
    const agent = selectedAgent();
    if (!agent) return;
    const question = button.dataset.confirm.replace("AGENT", `${agent.owner}/${agent.name}`);
    confirmThen(button, question, async () => {
      const result = await postJson(`/agents/${agent.id}/${button.dataset.action}`);
      if (button.dataset.action !== "delete-model") state.curve = { agent: null, records: [], next: 0 };
      if (button.dataset.action === "delete") {  // the agent is gone: say so where the list is
        state.selected = null;
        $("#agent-view").hidden = true;  // now: a refresh already under way returns without redrawing
        await refresh();
        $("#agents-status").textContent = result.message;
        return "";
      }
      await refresh();
      return result.message;
    });
  });
}

/* -- users (the admin's only): each with its agents and a Delete button ----------------------------- */
function ownedAgents(user) {
  return state.agents.filter((a) => a.owner === user.name).map((a) => `${a.owner}/${a.name}`);
}

function renderUsers() {
  const table = $("#users");
  const drawn = JSON.stringify([state.users, state.users.map(ownedAgents)]);
  if (table.dataset.drawn === drawn) return;  // redrawn only when something changed: a tick survives polls
  table.dataset.drawn = drawn;
  const body = $("#users tbody");
  body.replaceChildren();
  for (const user of state.users) {
    const row = body.insertRow();
    row.dataset.user = user.name;
    cell(row, user.name);
    cell(row, String(user.agents), "number");
    cell(row, ownedAgents(user).join(", ") || "none");
    cell(row, new Date(user.created * 1000).toLocaleDateString());
    const actions = cell(row, "", "delete");
    if (user.agents > 0) {
      const label = actions.appendChild(document.createElement("label"));
      const box = label.appendChild(document.createElement("input"));
      box.type = "checkbox";
      box.name = "with-agents";
      box.checked = state.withAgents.has(user.id);
      box.addEventListener("change", () => {
        if (box.checked) state.withAgents.add(user.id); else state.withAgents.delete(user.id);
      });
      label.append(` also delete its ${user.agents} agent${user.agents === 1 ? "" : "s"}`);
    }
    const button = actions.appendChild(document.createElement("button"));
    button.type = "button";
    button.className = "danger";
    button.textContent = "Delete";
    button.addEventListener("click", () => deleteUser(user, button));
  }
}

function deleteUser(user, button) {
  const agents = ownedAgents(user);
  const withAgents = user.agents > 0 && state.withAgents.has(user.id);
  const count = `${user.agents} agent${user.agents === 1 ? "" : "s"}`;
  let question = `Delete user ${user.name}? It owns no agents.`;
  if (withAgents) {
    question = `Delete user ${user.name} and its ${count} (${agents.join(", ")}) for good? Every client ` +
      "session of them ends (clients get 410 Gone), their API keys stop working, and their models and returns " +
      "move to the data folder's trash/.";
  } else if (user.agents > 0) {
    question = `Delete user ${user.name}? It owns ${count} (${agents.join(", ")}), which are kept: the server ` +
      `refuses to delete a user who owns agents unless "also delete its ${count}" is ticked.`;
  }
  confirmThen(button, question, async () => {
    const result = await postJson(`/users/${user.id}/delete`, { with_agents: withAgents });
    state.withAgents.delete(user.id);
    const selected = selectedAgent();
    if (selected && selected.owner === user.name) {  // its agents are gone with it
      state.selected = null;
      state.curve = { agent: null, records: [], next: 0 };
    }
    await refresh();
    return result.message;
  }, $("#users-status"));
}

/* -- environments with roles (the admin's only): each one's ratings and its agents' ratings over steps ---- */
function renderEnvironments() {
  const list = $("#environments");
  $("#environments-view").hidden = state.environments.length === 0;
  const drawn = JSON.stringify([state.environments, list.clientWidth]);
  if (list.dataset.drawn === drawn) return;  // redrawn only when a rating changed (or the page's width)
  list.dataset.drawn = drawn;
  list.replaceChildren();
  for (const environment of state.environments) {  // textContent only: the names are the owners'
    const item = list.appendChild(document.createElement("article"));
    item.className = "environment";
    item.dataset.environment = environment.environment;
    const roles = Object.entries(environment.roles).map(([role, player]) => `${role}: ${player}`).join(", ");
    item.appendChild(document.createElement("h3")).textContent =
      `${environment.environment} (${environment.turns} turns; roles ${roles})`;
    const ratings = environment.ratings;
    if (!ratings || !Object.keys(ratings).length) {
      item.appendChild(document.createElement("p")).textContent = ratings ? "No rated episode yet." :
        "No ratings here: its first role's agent is not served and has no checkpoint.";
      continue;
    }
    const table = item.appendChild(document.createElement("table"));
    table.className = "ratings";
    const head = table.createTHead().insertRow();
    for (const [title, className] of [["Player"], ["Mu", "number"], ["Sigma", "number"],
                                      ["Ordinal (mu - 3 sigma)", "number"], ["Games", "number"]]) {
      const th = head.appendChild(document.createElement("th"));
      th.textContent = title;
      if (className) th.className = className;
    }
    const body = table.createTBody();
    // best first, as the server sends them: sorted again here, since an object lists integer-like keys ("42") first
    const ranked = Object.entries(ratings).sort((a, b) => b[1].ordinal - a[1].ordinal);
    for (const [player, rating] of ranked) {
      const row = body.insertRow();
      row.dataset.player = player;
      cell(row, player);
      cell(row, rating.mu.toFixed(2), "number");
      cell(row, rating.sigma.toFixed(2), "number");
      cell(row, rating.ordinal.toFixed(2), "number");
      cell(row, String(rating.games), "number");
    }
    const charts = item.appendChild(document.createElement("div"));
    charts.className = "rating-charts";
    for (const [agent, points] of Object.entries(environment.history || {})) {
      const figure = charts.appendChild(document.createElement("figure"));
      figure.className = "metric";
      const latest = points.length ? points[points.length - 1].ordinal.toFixed(2) : "-";
      figure.appendChild(document.createElement("figcaption")).textContent =
        `${agent}'s rating (ordinal) over its steps: ${latest}`;
      const canvas = figure.appendChild(document.createElement("canvas"));
      canvas.dataset.player = agent;
      canvas.dataset.points = String(points.length);
      canvas.setAttribute("aria-label", `${agent}'s rating against its training steps`);
      ShepherdChart.drawMetric(canvas, points.map((point) => [point.steps, point.ordinal]));
    }
  }
}

/* -- start: resume a sign-in kept by the cookie, or ask for a token ----------------------------- */
(async () => {
  try {
    signedIn(await getJson("/signin"));
  } catch (error) {
    showSignIn("");
  }
})();
