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
//
// An agent with lessons (docs/lessons.md) announces each episode's config before it starts: the login reply's
// "next_episode_config" (a vector or client-acting session's "next_episode_configs", one per CartPole) and
// then each reply's. The client sets the CartPole up with it before the reset, as shepherd.client does:
// every name is a property of the CartPole, with gymnasium's names (length, force_mag, masspole, ...), and a
// name it does not have ends the client with one line. A line "lesson NAME" is printed when the lesson changes.
//
// With --acting client the policy runs here, not at the server (docs/acting.md; docs/protocol.md, "Acting at
// the client"): the client logs in with "acting": "client" (and "n_envs": N with --envs N, else 1), fetches
// the agent's behaviour policy as an ONNX file from /shepherd/policy/, runs it with onnxruntime-node
// (`npm install` in examples/ once; only this mode needs it) on uniform noise it draws, steps its CartPoles
// with the file's "action" for the "steps" (T) the server asked for, and uploads the block as columns to
// /shepherd/experience/: T+1 rows of observations, T rows of the file's "sample", rewards, ends and
// final_obs. Each upload carries the next seq and the policy version it was drawn with, and is sent again
// as it was after 429, 503 (an on-policy update outlasting the act timeout) or a lost connection. The reply
// says the version, phase and T of the next block: a new version or phase fetches the file again. An upload
// refused as stale (409 with the current "policy_version") is dropped: the CartPoles go on from where they
// are with the current file, and the episodes that ran through the dropped rows are not recorded by the
// server, nor printed here. An episode is printed once the upload it ended in was accepted.
//
//   SHEPHERD_API_KEY=... node examples/cartpole_client.js [episodes] --acting client --envs 8
//
// With --pixels the client observes its CartPoles as frames: each observation is a picture of the cart and
// the pole, 0 or 255, of the shape the agent's observation space says: an image ["Image", [H, W, C]] (channels
// last; a CNN learns from it) or ["Image", [H, W, C], "channels_first"] (sent [C][H][W]), or a box
// [[H, W, C], 0, 255] (numbers, which an MLP learns from). A frame is a binary UINT8 tensor after the step's JSON
// (docs/protocol.md, "Binary tensors": the header Inference-Header-Content-Length says where the JSON ends; a
// vector step's N frames are one [N, ...] tensor, each final_obs its own); --pixels fp32 sends FP32 tensors, for
// a box agent only (an image's pixels are integers). Steps only (not --acting client).
//
//   SHEPHERD_API_KEY=... node examples/cartpole_client.js [episodes] --pixels [uint8|fp32] [--envs 8]
"use strict";

const url = (process.env.SHEPHERD_URL || "http://127.0.0.1:8000").replace(/\/+$/, "");
const apikey = process.env.SHEPHERD_API_KEY;
const client = process.env.SHEPHERD_CLIENT; // undefined: no "client" in the login (JSON.stringify drops it)
const args = process.argv.slice(2);
const envsFlag = args.indexOf("--envs");
const nEnvs = envsFlag === -1 ? null : Number(args.splice(envsFlag, 2)[1]);
const actingFlag = args.indexOf("--acting");
const acting = actingFlag === -1 ? "server" : args.splice(actingFlag, 2)[1];
const pixelsFlag = args.indexOf("--pixels");
const pixels = pixelsFlag === -1 ? null
  : ["uint8", "fp32"].includes(args[pixelsFlag + 1]) ? args.splice(pixelsFlag, 2)[1] : (args.splice(pixelsFlag, 1), "uint8");
const episodes = Number(args[0] || Infinity);
const retrySeconds = Number(process.env.SHEPHERD_RETRY_SECONDS || 60);

const { CartPole, applyConfig } = require("./cartpole.js");
const { metadataProps } = require("./onnx_metadata.js");

class HttpError extends Error {
  constructor(status, path, reply, retryAfter) {
    super(`HTTP ${status} on ${path}: ${reply.error}`);
    this.status = status;
    this.reply = reply;           // the error's JSON body ({"error", and "policy_version" for a stale upload})
    this.retryAfter = retryAfter; // seconds, from the Retry-After header (null: none)
  }
}

// A frame (or N frames) to send as a binary tensor: `data` a Uint8Array or Float32Array, row-major.
const tensor = (data, shape) => ({ tensor: data, shape });

// The body of `body` in the binary tensor layout (docs/protocol.md, "Binary tensors"): its JSON with every
// `tensor(...)` replaced by {"datatype", "shape", "binary_data_size"}, the tensors' bytes after it in the order
// they appear in the JSON (JSON.stringify visits values in that order), and the JSON's length in bytes. Typed
// arrays are little-endian on every platform Node runs on.
function binaryBody(body) {
  const chunks = [];
  const json = Buffer.from(JSON.stringify(body, (key, value) => {
    if (value === null || typeof value !== "object" || !("tensor" in value)) return value;
    const data = value.tensor;
    chunks.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    return { datatype: data instanceof Float32Array ? "FP32" : "UINT8", shape: value.shape,
             binary_data_size: data.byteLength };
  }));
  return { bytes: Buffer.concat([json, ...chunks]), jsonLength: json.length };
}

// A POST of a JSON body (with --pixels, in the binary tensor layout); the raw response (200, or 304 from
// /shepherd/policy/), or HttpError.
async function send(path, body) {
  let init = { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  if (pixels !== null && path === "/shepherd/env/") {
    const { bytes, jsonLength } = binaryBody(body);
    init = { method: "POST", body: bytes, headers: { "Content-Type": "application/octet-stream",
                                                     "Inference-Header-Content-Length": String(jsonLength) } };
  }
  const response = await fetch(url + path, init);
  if (!response.ok && response.status !== 304) {
    const reply = await response.json();
    const retryAfter = response.headers.get("Retry-After");
    throw new HttpError(response.status, path, reply, retryAfter === null ? null : Number(retryAfter));
  }
  return response;
}

async function post(path, body) {
  return (await send(path, body)).json();
}

const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

// `attempt()` again after 429, 503 or a lost connection, waiting Retry-After (at most 5 s), for up to
// SHEPHERD_RETRY_SECONDS; `what` names it in the line printed to stderr for each retry. The time the server held
// a request before it answered 503 does not count: that is its act timeout, the step still in flight there (a
// long update), and the retry gets its action; a server that refuses at once uses up the budget.
async function retried(what, attempt) {
  let deadline = Date.now() + retrySeconds * 1000;
  while (true) {
    const sent = Date.now();
    try {
      return await attempt();
    } catch (error) {
      const lost = !(error instanceof HttpError); // fetch failed: no reply came (connection refused or dropped)
      if (!lost && error.status === 503) deadline += Date.now() - sent;
      if (!(lost || error.status === 429 || error.status === 503) || Date.now() > deadline) throw error;
      const wait = lost ? 0.2 : Math.min(error.retryAfter || 1, 5);
      console.error(`retrying ${what} in ${wait} s: ${error.message}`);
      await sleep(wait);
    }
  }
}

// Prints "lesson NAME" when the lesson of the episodes changes (the replies' "lesson"; none without lessons).
let lessonShown;
function noteLesson(lesson) {
  if (lesson !== undefined && lesson !== lessonShown) console.log(`lesson ${lesson}`);
  if (lesson !== undefined) lessonShown = lesson;
}

// One session's steps, each with the next seq, sent again as it was after 429, 503 or a lost connection.
class Stepper {
  constructor(session_key) { this.session_key = session_key; this.seq = 0; }
  async step(body) {
    const sent = { session_key: this.session_key, ...body, seq: ++this.seq };
    return retried(`step seq ${sent.seq}`, () => post("/shepherd/env/", sent));
  }
}

async function main() {
  if (!apikey) throw new Error("set SHEPHERD_API_KEY to the agent's API key");
  if (nEnvs !== null && (!Number.isInteger(nEnvs) || nEnvs < 1)) {
    throw new Error("--envs takes a whole number of CartPoles, 1 or more");
  }
  if (acting === "client" && pixels !== null) throw new Error("--pixels sends steps: leave out --acting client");
  if (acting === "client") return actingMain(nEnvs);
  if (acting !== "server") throw new Error(`--acting takes "client" or "server", not ${JSON.stringify(acting)}`);
  if (nEnvs !== null) return vectorMain(nEnvs);
  const login = await post("/shepherd/login_user/", { apikey, client });
  const session_key = login.session_key;
  console.log(`logged in to agent ${login.agent}: observations ${JSON.stringify(login.observation_space)}, ` +
              `actions ${JSON.stringify(login.action_space)}`);
  const see = observer(login.observation_space);
  const env = new CartPole(), stepper = new Stepper(session_key);
  let config = login.next_episode_config;  // the first episode's, if the agent has lessons
  for (let episode = 1; episode <= episodes; episode++) {
    if (config) applyConfig(env, config);
    let obs = env.reset(), total = 0;
    let reply = await stepper.step({ obs: see([env]), reward: 0.0, done: false, info: {} });
    noteLesson(reply.lesson);
    while (reply.action !== null) {
      const step = env.step(reply.action);
      total += step.reward;
      reply = await stepper.step({
        obs: see([env]), reward: step.reward, done: step.terminated || step.truncated, truncated: step.truncated,
        info: {},
      });
    }
    if (reply.next_episode_config) config = reply.next_episode_config;  // the ending reply: the next one's
    console.log(`episode ${episode} return ${total}`);
  }
  await post("/shepherd/logout/", { session_key });
}

// lessons: a reply's per-env list holds indices into its "configs", which has each distinct config once
// (null: nothing for that env); null when the reply has no such list
const configsOf = (reply, name) => Array.isArray(reply[name])
  ? reply[name].map((ref) => (ref === null ? null : reply.configs[ref])) : null;

// N CartPoles in one vector session: every request carries all of them, every reply all their actions.
async function vectorMain(n) {
  const login = await post("/shepherd/login_user/", { apikey, client, n_envs: n });
  const session_key = login.session_key;
  console.log(`logged in to agent ${login.agent} with ${login.n_envs} CartPoles: observations ` +
              `${JSON.stringify(login.observation_space)}, actions ${JSON.stringify(login.action_space)}`);
  const envs = Array.from({ length: n }, () => new CartPole()), stepper = new Stepper(session_key);
  const see = observer(login.observation_space);
  // lessons: the config each CartPole uses at its next reset (the login's first; a reply's null: unchanged)
  const configs = configsOf(login, "next_episode_configs") || new Array(n).fill(null);
  const reset = (env, i) => {
    if (configs[i]) applyConfig(env, configs[i]);
    return env.reset();
  };
  // the first step: every CartPole's reset observation, rewards 0, no ends
  let obs = envs.map(reset);
  let reward = new Array(n).fill(0.0), terminated = new Array(n).fill(false), truncated = new Array(n).fill(false);
  let finalObs = null; // null where a CartPole did not end; left out of the body when none did
  const totals = new Array(n).fill(0.0);
  let ended = 0;
  while (true) {
    const body = { obs: pixels === null ? obs : see(envs), reward, terminated, truncated };
    if (finalObs !== null) body.final_obs = finalObs;
    const reply = await stepper.step(body), actions = reply.actions;
    (configsOf(reply, "next_episode_configs") || []).forEach((config, i) => { if (config !== null) configs[i] = config; });
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
        finalObs[i] = pixels === null ? step.obs : see([env], false);  // the ended episode's last observation ...
        next.obs.push(reset(env, i));  // ... and already the next episode's first
      } else {
        next.obs.push(step.obs);
      }
    });
    ({ obs, reward, terminated, truncated } = next);
  }
  await post("/shepherd/logout/", { session_key });
}

// -- pixels ----------------------------------------------------------------------------------------------

// How the client observes its CartPoles: their 4 numbers, or with --pixels a frame each ([H, W, C] of the agent's
// observation space). `see(envs, batch)` gives one observation of envs[0] (batch false, or one env and no
// vector session) or the batch of every env's, as the body carries it.
function observer(space) {
  if (pixels === null) return (envs) => [...envs[0].state];
  const image = Array.isArray(space) && space[0] === "Image";
  const first = image && space[2] === "channels_first";
  const given = image ? [].concat(space[1]) : Array.isArray(space) && space.length === 3 ? [].concat(space[0]) : [];
  if (given.length !== 3) {
    throw new Error(`--pixels draws frames: the agent's observations are ${JSON.stringify(space)}; give it an ` +
                    'image observation space ["Image", [H, W, C]] (or a box [[H, W, C], 0, 255])');
  }
  if (image && pixels === "fp32") {
    throw new Error("an image agent takes integer pixels: --pixels uint8 (fp32 is for a box [[H, W, C], 0, 255])");
  }
  const [h, w, c] = given, size = h * w * c, shape = first ? [c, h, w] : [h, w, c];  // (an image's spec: H, W, C)
  return (envs, batch = nEnvs !== null) => {
    const data = pixels === "fp32" ? new Float32Array(size * envs.length) : new Uint8Array(size * envs.length);
    envs.forEach((env, i) => draw(env, data.subarray(i * size, (i + 1) * size), h, w, c, first));
    return tensor(data, batch ? [envs.length, ...shape] : shape);
  };
}

// The CartPole as a picture: the rail's middle row, the cart (a box on it) and the pole (a line from the cart's
// top at its angle), 255 on 0, in every channel; the view spans the rail's 2 x 2.4 m. Laid out [H][W][C], or
// [C][H][W] (``first``: channels first).
function draw(env, into, h, w, c, first = false) {
  const [x, , theta] = env.state;
  const scale = w / (2 * env.x_threshold * 1.2), rail = Math.floor(h * 0.75);
  const cartX = w / 2 + x * scale, cartW = Math.max(2, w / 10), cartH = Math.max(1, h / 12);
  const poleLength = 2 * env.length * scale;
  const tipX = cartX + Math.sin(theta) * poleLength, tipY = rail - cartH - Math.cos(theta) * poleLength;
  for (let row = 0; row < h; row++) {
    for (let col = 0; col < w; col++) {
      const inCart = Math.abs(col + 0.5 - cartX) <= cartW / 2 && row <= rail && row >= rail - cartH;
      // the pole: within a pixel of the segment from the cart's top to its tip
      const ax = cartX, ay = rail - cartH, dx = tipX - ax, dy = tipY - ay;
      const t = Math.max(0, Math.min(1, ((col + 0.5 - ax) * dx + (row + 0.5 - ay) * dy) / (dx * dx + dy * dy)));
      const onPole = Math.hypot(col + 0.5 - ax - t * dx, row + 0.5 - ay - t * dy) <= 0.75;
      const value = inCart || onPole || row === rail ? 255 : 0;
      for (let k = 0; k < c; k++) into[first ? (k * h + row) * w + col : (row * w + col) * c + k] = value;
    }
  }
}

// -- acting at the client --------------------------------------------------------------------------------

// onnxruntime-node, loaded only by --acting client (the server-acting client needs nothing installed).
function onnxruntime() {
  try {
    return require("onnxruntime-node");
  } catch (error) {
    throw new Error("--acting client runs the policy with onnxruntime-node: run `npm install` in examples/ first");
  }
}

// The behaviour policy this session acts with now: the ONNX file from /shepherd/policy/, or `held` again when
// the server answers 304 (held's version is current and its phase is the session's). After a stale upload the
// client asks without a version, for the current file whatever it holds.
async function fetchPolicy(ort, session_key, held) {
  const body = held === null ? { session_key }  // the version and phase held: a lost reply's file never came
    : { session_key, policy_version: held.version, ...(held.phase ? { phase: held.phase } : {}) };
  const response = await retried("the policy fetch", () => send("/shepherd/policy/", body));
  if (response.status === 304) return held;
  const buffer = Buffer.from(await response.arrayBuffer());
  const props = metadataProps(buffer);
  if (!("shepherd" in props)) throw new Error("/shepherd/policy/ answered a file without 'shepherd' metadata");
  const meta = JSON.parse(props.shepherd);
  if (JSON.stringify([].concat(meta.observation_space[0])) !== "[4]" || meta.action_space !== 2) {
    throw new Error(`agent ${meta.agent} acts on observations ${JSON.stringify(meta.observation_space)} with ` +
                    `actions ${JSON.stringify(meta.action_space)}; this CartPole has observations [4] and 2 actions`);
  }
  const session = await ort.InferenceSession.create(buffer, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  const version = Number(response.headers.get("Shepherd-Policy-Version"));
  console.log(`acting with policy version ${version}, phase ${meta.phase} (noise_size ${meta.noise_size})`);
  return { version, phase: meta.phase, noiseSize: meta.noise_size, meta, session };
}

// A uniform float32 in [0, 1): 24 random bits. (Math.random() rounded to float32 may give 1.0 itself, which the
// file's Box-Muller would turn into an infinity.)
const uniform = () => Math.floor(Math.random() * 16777216) / 16777216;

// One forward pass for all CartPoles: the action each steps with and the sample uploaded for it.
async function actWith(ort, policy, obs) {
  const n = obs.length, k = policy.noiseSize;
  const feeds = { obs: new ort.Tensor("float32", Float32Array.from(obs.flat()), [n, 4]) };
  if (policy.session.inputNames.includes("noise")) {
    feeds.noise = new ort.Tensor("float32", Float32Array.from({ length: n * k }, uniform), [n, k]);
  }
  if (policy.meta.takes_masks) {  // every action allowed
    const size = policy.meta.mask_size;
    feeds.action_mask = new ort.Tensor("bool", new Uint8Array(n * size).fill(1), [n, size]);
  }
  const { action, sample } = await policy.session.run(feeds, ["action", "sample"]);
  return { actions: Array.from(action.data, Number), samples: Array.from(sample.data, Number) };  // int64: BigInt
}

// N CartPoles acting with the fetched policy, T steps a block, each block uploaded as one request.
async function actingMain(n) {
  const ort = onnxruntime();
  n = n === null ? 1 : n;
  const login = await post("/shepherd/login_user/", { apikey, client, acting: "client", n_envs: n });
  const session_key = login.session_key;
  console.log(`logged in to agent ${login.agent} acting at the client with ${n} CartPole(s): observations ` +
              `${JSON.stringify(login.observation_space)}, actions ${JSON.stringify(login.action_space)}; ` +
              `phase ${login.phase}, policy version ${login.policy_version}, ${login.steps} steps a block`);
  let steps = login.steps, seq = 0;
  let policy = await fetchPolicy(ort, session_key, null);
  const envs = Array.from({ length: n }, () => new CartPole());
  // lessons: each CartPole's config for the episodes that start in it during the next block (none without)
  let configs = configsOf(login, "next_episode_configs");
  noteLesson(login.lesson);
  const reset = (env, i) => {
    if (configs && configs[i]) applyConfig(env, configs[i]);
    return env.reset();
  };
  let obs = envs.map(reset);
  const totals = new Array(n).fill(0.0);
  const unseen = new Array(n).fill(false);  // the episode ran through a refused upload: the server does not record it
  let ended = 0;
  while (ended < episodes) {
    const block = { obs: [obs], sample: [], reward: [], terminated: [], truncated: [], final_obs: [] };
    const finished = [];  // [CartPole, return] of the episodes that end in this block, printed once it is accepted
    for (let t = 0; t < steps; t++) {
      const { actions, samples } = await actWith(ort, policy, obs);
      const next = [], reward = [], terminated = [], truncated = [], finalObs = [];
      envs.forEach((env, i) => {
        const step = env.step(actions[i]);
        totals[i] += step.reward;
        reward.push(step.reward);
        terminated.push(step.terminated);
        truncated.push(step.truncated);
        if (step.terminated || step.truncated) {
          finalObs.push(step.obs);      // the ended episode's last observation ...
          next.push(reset(env, i));     // ... and obs row t+1 already the next episode's first
          if (!unseen[i]) finished.push([i, totals[i]]);
          totals[i] = 0.0;
          unseen[i] = false;
        } else {
          finalObs.push(null);
          next.push(step.obs);
        }
      });
      obs = next;
      block.obs.push(obs);
      block.sample.push(samples);
      block.reward.push(reward);
      block.terminated.push(terminated);
      block.truncated.push(truncated);
      block.final_obs.push(finalObs);
    }
    if (block.final_obs.every((row) => row.every((last) => last === null))) delete block.final_obs;
    const sent = { session_key, seq: ++seq, policy_version: policy.version, ...block };
    let reply;
    try {
      reply = await retried(`upload seq ${seq}`, () => post("/shepherd/experience/", sent));
    } catch (error) {
      if (!(error instanceof HttpError && error.status === 409 && error.reply.policy_version !== undefined)) throw error;
      console.error(`upload seq ${seq} refused as stale (drawn with version ${policy.version}, the agent wants ` +
                    `${error.reply.policy_version}): nothing of it recorded; going on from where the CartPoles are`);
      unseen.fill(true);
      policy = await fetchPolicy(ort, session_key, null);
      continue;
    }
    for (const [i, total] of finished) console.log(`episode ${++ended} (CartPole ${i}) return ${total}`);
    steps = reply.steps;
    configs = configsOf(reply, "next_episode_configs");
    noteLesson(reply.lesson);
    if (reply.policy_version !== policy.version || reply.phase !== policy.phase) {
      policy = await fetchPolicy(ort, session_key, policy);
    }
  }
  await post("/shepherd/logout/", { session_key });
}

main().catch((error) => { console.error(`error: ${error.message}`); process.exit(1); });
