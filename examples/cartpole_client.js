// A Shepherd client in JavaScript (Node 18+, nothing to install): a CartPole written in JS (cartpole.js),
// learns through a Shepherd agent. The physics follow gymnasium's CartPole-v1, time limit 500 steps.
//
//   SHEPHERD_API_KEY=... node examples/cartpole_client.js [episodes]
//   SHEPHERD_API_KEY=... node examples/cartpole_client.js [episodes] --envs 8
//
// With --envs N it runs N CartPoles and steps all of them in one request (a vector session, logged in
// with "n_envs": N): the body holds lists with one item per CartPole, and a CartPole whose episode ended
// is reset in the same step, SB3 VecEnv's way. Then obs[i] is the next episode's first observation,
// final_obs[i] the ended one's last, reward[i] its last reward; actions[i] answers obs[i]. The episodes
// are counted over all CartPoles; the step that reaches the count may end a few more, all printed.
//
// Every step carries a sequence number ("seq": 1, 2, 3, ... per session), so a step whose reply did not come
// (the server answered 429 or 503 with Retry-After, or the connection was lost) is sent again as it was, for
// up to SHEPHERD_RETRY_SECONDS (default 60): the server answers a repeated seq with the same action and
// counts the step once (docs/protocol.md, "Retrying a step safely"). Each retry is printed to stderr.
//
// SHEPHERD_URL defaults to http://127.0.0.1:8000. SHEPHERD_CLIENT names the client, as a login to an advised
// agent must ("client": "arm-3": its own learner, kept across sessions); a pooled agent refuses a name.
// Prints one line per episode with its return.
"use strict";

const url = (process.env.SHEPHERD_URL || "http://127.0.0.1:8000").replace(/\/+$/, "");
const apikey = process.env.SHEPHERD_API_KEY;
const client = process.env.SHEPHERD_CLIENT; // undefined: no "client" in the login (JSON.stringify drops it)
const args = process.argv.slice(2);
const envsFlag = args.indexOf("--envs");
const nEnvs = envsFlag === -1 ? null : Number(args.splice(envsFlag, 2)[1]);
const episodes = Number(args[0] || Infinity);
const retrySeconds = Number(process.env.SHEPHERD_RETRY_SECONDS || 60);

const { CartPole } = require("./cartpole.js");

class HttpError extends Error {
  constructor(status, path, message, retryAfter) {
    super(`HTTP ${status} on ${path}: ${message}`);
    this.status = status;
    this.retryAfter = retryAfter; // seconds, from the Retry-After header (null: none)
  }
}

async function post(path, body) {
  const response = await fetch(url + path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const reply = await response.json();
  if (!response.ok) {
    const retryAfter = response.headers.get("Retry-After");
    throw new HttpError(response.status, path, reply.error, retryAfter === null ? null : Number(retryAfter));
  }
  return reply;
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

// One session's steps, each with the next seq, sent again as it was after 429, 503 or a lost connection.
class Stepper {
  constructor(session_key) { this.session_key = session_key; this.seq = 0; }
  async step(body) {
    const sent = { session_key: this.session_key, ...body, seq: ++this.seq };
    const deadline = Date.now() + retrySeconds * 1000;
    while (true) {
      try {
        return await post("/shepherd/env/", sent);
      } catch (error) {
        const lost = !(error instanceof HttpError); // fetch failed: no reply came (connection refused or dropped)
        if (!(lost || error.status === 429 || error.status === 503) || Date.now() > deadline) throw error;
        const wait = lost ? 0.2 : Math.min(error.retryAfter || 1, 5);
        console.error(`retrying step seq ${sent.seq} in ${wait} s: ${error.message}`);
        await sleep(wait);
      }
    }
  }
}

async function main() {
  if (!apikey) throw new Error("set SHEPHERD_API_KEY to the agent's API key");
  if (nEnvs !== null) {
    if (!Number.isInteger(nEnvs) || nEnvs < 1) throw new Error("--envs takes a whole number of CartPoles, 1 or more");
    return vectorMain(nEnvs);
  }
  const login = await post("/shepherd/login_user/", { apikey, client });
  const session_key = login.session_key;
  console.log(`logged in to agent ${login.agent}: observations ${JSON.stringify(login.observation_space)}, ` +
              `actions ${JSON.stringify(login.action_space)}`);
  const env = new CartPole(), stepper = new Stepper(session_key);
  for (let episode = 1; episode <= episodes; episode++) {
    let obs = env.reset(), total = 0;
    let { action } = await stepper.step({ obs, reward: 0.0, done: false, info: {} });
    while (action !== null) {
      const step = env.step(action);
      total += step.reward;
      ({ action } = await stepper.step({
        obs: step.obs, reward: step.reward, done: step.terminated || step.truncated, truncated: step.truncated,
        info: {},
      }));
    }
    console.log(`episode ${episode} return ${total}`);
  }
  await post("/shepherd/logout/", { session_key });
}

// N CartPoles in one vector session: every request carries all of them, every reply all their actions.
async function vectorMain(n) {
  const login = await post("/shepherd/login_user/", { apikey, client, n_envs: n });
  const session_key = login.session_key;
  console.log(`logged in to agent ${login.agent} with ${login.n_envs} CartPoles: observations ` +
              `${JSON.stringify(login.observation_space)}, actions ${JSON.stringify(login.action_space)}`);
  const envs = Array.from({ length: n }, () => new CartPole()), stepper = new Stepper(session_key);
  // the first step: every CartPole's reset observation, rewards 0, no ends
  let obs = envs.map((env) => env.reset());
  let reward = new Array(n).fill(0.0), terminated = new Array(n).fill(false), truncated = new Array(n).fill(false);
  let finalObs = null; // null where a CartPole did not end; left out of the body when none did
  const totals = new Array(n).fill(0.0);
  let ended = 0;
  while (true) {
    const body = { obs, reward, terminated, truncated };
    if (finalObs !== null) body.final_obs = finalObs;
    const { actions } = await stepper.step(body);
    for (let i = 0; i < n; i++) {  // the server has recorded this step: its ended episodes count now
      if (terminated[i] || truncated[i]) console.log(`episode ${++ended} (CartPole ${i}) return ${totals[i]}`);
    }
    if (ended >= episodes) break;
    const next = { obs: [], reward: [], terminated: [], truncated: [] };
    finalObs = null;
    envs.forEach((env, i) => {
      if (terminated[i] || truncated[i]) totals[i] = 0.0;
      const step = env.step(actions[i]);
      totals[i] += step.reward;
      next.reward.push(step.reward);
      next.terminated.push(step.terminated);
      next.truncated.push(step.truncated);
      if (step.terminated || step.truncated) {
        if (finalObs === null) finalObs = new Array(n).fill(null);
        finalObs[i] = step.obs;        // the ended episode's last observation ...
        next.obs.push(env.reset());    // ... and already the next episode's first
      } else {
        next.obs.push(step.obs);
      }
    });
    ({ obs, reward, terminated, truncated } = next);
  }
  await post("/shepherd/logout/", { session_key });
}

main().catch((error) => { console.error(`error: ${error.message}`); process.exit(1); });
