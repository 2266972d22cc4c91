// An environment with roles in JavaScript (Node 18+, nothing to install): matching pennies, two roles stepping
// together (turns "simultaneous"; docs/protocol.md, "Environments with roles"; docs/how-to/multi-agent.md).
// Each step both roles show a coin (action 0 or 1); "matcher" wins a point when the coins match, "mismatcher"
// when they differ. Each role observes [the step / 10, the other's last coin]. An episode is 10 steps; its
// last step sends both roles' last observations with "terminated" and an "outcome" (1 to the round's winner,
// 0 to the loser, 0.5 each on a tie), which rates the two agents (openskill).
//
//   SHEPHERD_API_KEY=ENVIRONMENT_KEY node examples/roles_client.js [episodes]
//
// The key is the environment's (`run.py keys add OWNER/ENVIRONMENT`), whose roles are named matcher and
// mismatcher, each played by an agent with observation_space [[2], 0, 1] and action_space 2. Every step
// carries a "seq", and a step answered 429 or 503 or whose connection was lost is sent again as it was.
// SHEPHERD_URL defaults to http://127.0.0.1:8000. Prints one line per episode with each role's points.

const url = process.env.SHEPHERD_URL || "http://127.0.0.1:8000";
const apikey = process.env.SHEPHERD_API_KEY;
const episodes = Number(process.argv[2] || 5);
if (!Number.isInteger(episodes) || episodes < 1) {  // (also --help): the usage is this file's header
  console.error("usage: SHEPHERD_API_KEY=ENVIRONMENT_KEY node examples/roles_client.js [episodes, a whole number]");
  process.exit(2);
}
const ROLES = ["matcher", "mismatcher"];
const LENGTH = 10;

async function post(path, body) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    let response;
    try {
      response = await fetch(url + path, {method: "POST", headers: {"Content-Type": "application/json"},
                                          body: JSON.stringify(body)});
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200));
      continue;
    }
    const reply = await response.json();
    if (response.ok) return reply;
    if ((response.status === 429 || response.status === 503) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 1000 * Number(response.headers.get("Retry-After") || 1)));
      continue;
    }
    throw new Error(`${path}: HTTP ${response.status}: ${reply.error}`);
  }
}

async function main() {
  if (!apikey) throw new Error("set SHEPHERD_API_KEY to the environment's key");
  const login = await post("/shepherd/login_user/", {apikey});
  for (const role of ROLES) {
    if (!(role in login.roles)) throw new Error(`environment ${login.environment} has no role ${role}`);
  }
  const session_key = login.session_key;
  let seq = 0;
  const step = (fields) => post("/shepherd/env/", {session_key, seq: ++seq, ...fields});
  for (let episode = 1; episode <= episodes; episode++) {
    const points = {matcher: 0, mismatcher: 0};
    let last = {matcher: 0, mismatcher: 0};
    let reward = {};
    for (let t = 0; t <= LENGTH; t++) {
      const obs = {matcher: [t / LENGTH, last.mismatcher], mismatcher: [t / LENGTH, last.matcher]};
      if (t === LENGTH) {  // the end: both roles' last observations once, and who won the round
        const outcome = points.matcher === points.mismatcher ? {matcher: 0.5, mismatcher: 0.5}
          : {matcher: points.matcher > points.mismatcher ? 1 : 0, mismatcher: points.mismatcher > points.matcher ? 1 : 0};
        await step({obs, reward, terminated: {matcher: true, mismatcher: true}, outcome});
        break;
      }
      const {actions} = await step({obs, reward});
      const same = actions.matcher === actions.mismatcher;
      reward = {matcher: same ? 1 : 0, mismatcher: same ? 0 : 1};
      points.matcher += reward.matcher;
      points.mismatcher += reward.mismatcher;
      last = actions;
    }
    console.log(`episode ${episode}: matcher ${points.matcher}, mismatcher ${points.mismatcher}`);
  }
  await post("/shepherd/logout/", {session_key});
}

main().catch((error) => {
  console.error(`error: ${error.message}`);
  process.exit(1);
});
