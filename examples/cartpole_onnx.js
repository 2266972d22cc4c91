// An exported Shepherd policy (`run.py agents export AGENT --format onnx -o policy.onnx`) playing the same
// JavaScript CartPole as cartpole_client.js, in Node with onnxruntime-node: no server, no Python.
//
//   (cd examples && npm install)                        once: onnxruntime-node into examples/node_modules
//   node examples/cartpole_onnx.js policy.onnx [episodes]
//   node examples/cartpole_onnx.js policy.onnx --act '[[0.01, -0.02, 0.03, 0.04], ...]'
//
// The file holds the whole greedy policy (normalisation, argmax, clipping) as one ONNX graph: its input
// "observation" takes a batch of observations as the server's clients send them, its output "action" is
// the action the server would answer. Its "shepherd" metadata names the agent and its spaces; this script
// reads them and refuses a file that is not a Shepherd policy for CartPole (observations [4], 2 actions).
// Prints one line per episode with its return; with --act, the actions for the given observations as JSON.
"use strict";

const fs = require("fs");
const { CartPole } = require("./cartpole.js");
const { metadataProps } = require("./onnx_metadata.js");

let ort;
try {
  ort = require("onnxruntime-node");
} catch (error) {
  console.error("error: onnxruntime-node is not installed: run `npm install` in examples/ first");
  process.exit(2);
}

function fail(message) {
  console.error(`error: ${message}`);
  process.exit(2);
}

async function load(path) {
  let buffer;
  try {
    buffer = fs.readFileSync(path);
  } catch (error) {
    fail(`cannot read the policy file ${path}: ${error.message}`);
  }
  let meta;
  try {
    const props = metadataProps(buffer);
    if (!("shepherd" in props)) fail(`${path} is not a Shepherd policy (no 'shepherd' metadata)`);
    meta = JSON.parse(props.shepherd);
  } catch (error) {
    fail(`${path} is damaged: it is not a valid ONNX model (${error.message})`);
  }
  if (meta.format !== 1) fail(`${path} has format ${meta.format}; this script reads format 1`);
  const obs = meta.observation_space;
  if (!Array.isArray(obs) || obs.length !== 3 || JSON.stringify([].concat(obs[0])) !== "[4]" || meta.action_space !== 2) {
    fail(`${path} is agent ${meta.agent}'s policy for observations ${JSON.stringify(obs)} and actions ` +
         `${JSON.stringify(meta.action_space)}; CartPole needs observations [[4], ...] and 2 actions`);
  }
  const session = await ort.InferenceSession.create(buffer, { intraOpNumThreads: 1, interOpNumThreads: 1 });
  return { meta, session };
}

// The greedy actions for a batch of CartPole observations (one forward pass).
async function act({ meta, session }, observations) {
  const feeds = {
    observation: new ort.Tensor("float32", Float32Array.from(observations.flat()), [observations.length, 4]),
  };
  if (meta.takes_masks) {
    feeds.action_mask = new ort.Tensor("bool", new Uint8Array(observations.length * meta.mask_size).fill(1),
                                       [observations.length, meta.mask_size]);
  }
  const { action } = await session.run(feeds, ["action"]);
  return Array.from(action.data, Number);  // int64 arrives as BigInt
}

async function main() {
  const args = process.argv.slice(2);
  const actFlag = args.indexOf("--act");
  const observations = actFlag === -1 ? null : JSON.parse(args.splice(actFlag, 2)[1]);
  const [path, count] = args;
  if (!path) fail("usage: node examples/cartpole_onnx.js policy.onnx [episodes] | --act '[[x, v, theta, omega], ...]'");
  const policy = await load(path);
  if (observations !== null) {
    console.log(JSON.stringify(await act(policy, observations)));
    return;
  }
  const episodes = Number(count || 10);
  console.log(`policy of agent ${policy.meta.agent} (${policy.meta.algorithm}, policy version ` +
              `${policy.meta.policy_version}): observations ${JSON.stringify(policy.meta.observation_space)}, ` +
              `actions ${JSON.stringify(policy.meta.action_space)}`);
  const env = new CartPole();
  for (let episode = 1; episode <= episodes; episode++) {
    let obs = env.reset(), total = 0, done = false;
    while (!done) {
      const [action] = await act(policy, [obs]);
      const step = env.step(action);
      total += step.reward;
      obs = step.obs;
      done = step.terminated || step.truncated;
    }
    console.log(`episode ${episode}: return ${total}`);
  }
}

main().catch((error) => {
  console.error(`error: ${error.message}`);
  process.exit(1);
});
