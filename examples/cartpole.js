// CartPole written in JavaScript, shared by the examples (cartpole_client.js over HTTP, cartpole_onnx.js with an
// exported policy): the physics follow gymnasium's CartPole-v1, time limit 500 steps. Its properties have
// gymnasium's names (length, force_mag, masspole, masscart, gravity, tau, ...), so that a lesson's config
// (docs/lessons.md) names the same ones for this CartPole as for gymnasium's: `applyConfig` sets them.
"use strict";

class CartPole {
  constructor() {
    this.gravity = 9.8; this.masscart = 1.0; this.masspole = 0.1; this.length = 0.5;  // half the pole's length
    this.force_mag = 10.0; this.tau = 0.02; this.maxSteps = 500;
    this.theta_threshold_radians = (12 * 2 * Math.PI) / 360; this.x_threshold = 2.4;
  }
  reset() {
    this.state = Array.from({ length: 4 }, () => Math.random() * 0.1 - 0.05);
    this.steps = 0;
    return [...this.state];
  }
  step(action) {
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? this.force_mag : -this.force_mag;
    const cos = Math.cos(theta), sin = Math.sin(theta);
    // computed every step from masspole and length: a config that sets either one is taken whole
    const totalMass = this.masscart + this.masspole, poleMassLength = this.masspole * this.length;
    const temp = (force + poleMassLength * thetaDot * thetaDot * sin) / totalMass;
    const thetaAcc = (this.gravity * sin - cos * temp) /
      (this.length * (4.0 / 3.0 - (this.masspole * cos * cos) / totalMass));
    const xAcc = temp - (poleMassLength * thetaAcc * cos) / totalMass;
    x += this.tau * xDot; xDot += this.tau * xAcc;
    theta += this.tau * thetaDot; thetaDot += this.tau * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.steps += 1;
    const terminated = Math.abs(x) > this.x_threshold || Math.abs(theta) > this.theta_threshold_radians;
    const truncated = !terminated && this.steps >= this.maxSteps;
    return { obs: [...this.state], reward: 1.0, terminated, truncated };
  }
}

// Set a CartPole up with an episode's config (docs/lessons.md) before its reset, as shepherd.client does: every
// name is set as a property the CartPole has; a name it does not have is refused (nothing is set then).
function applyConfig(env, config) {
  for (const name of Object.keys(config)) {
    if (!Object.prototype.hasOwnProperty.call(env, name)) {
      throw new Error(`the lesson's config sets ${JSON.stringify(name)}, but the CartPole has no property ` +
                      `${JSON.stringify(name)}; its properties: ${Object.keys(env).join(", ")}`);
    }
  }
  Object.assign(env, config);
}

module.exports = { CartPole, applyConfig };
