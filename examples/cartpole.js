// CartPole written in JavaScript, shared by the examples (cartpole_client.js over HTTP, cartpole_onnx.js with an
// exported policy): the physics follow gymnasium's CartPole-v1, time limit 500 steps.
"use strict";

class CartPole {
  constructor() {
    this.gravity = 9.8; this.massCart = 1.0; this.massPole = 0.1; this.length = 0.5;
    this.forceMag = 10.0; this.tau = 0.02; this.maxSteps = 500;
    this.thetaLimit = (12 * 2 * Math.PI) / 360; this.xLimit = 2.4;
  }
  reset() {
    this.state = Array.from({ length: 4 }, () => Math.random() * 0.1 - 0.05);
    this.steps = 0;
    return [...this.state];
  }
  step(action) {
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? this.forceMag : -this.forceMag;
    const cos = Math.cos(theta), sin = Math.sin(theta);
    const totalMass = this.massCart + this.massPole, poleMassLength = this.massPole * this.length;
    const temp = (force + poleMassLength * thetaDot * thetaDot * sin) / totalMass;
    const thetaAcc = (this.gravity * sin - cos * temp) /
      (this.length * (4.0 / 3.0 - (this.massPole * cos * cos) / totalMass));
    const xAcc = temp - (poleMassLength * thetaAcc * cos) / totalMass;
    x += this.tau * xDot; xDot += this.tau * xAcc;
    theta += this.tau * thetaDot; thetaDot += this.tau * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.steps += 1;
    const terminated = Math.abs(x) > this.xLimit || Math.abs(theta) > this.thetaLimit;
    const truncated = !terminated && this.steps >= this.maxSteps;
    return { obs: [...this.state], reward: 1.0, terminated, truncated };
  }
}

module.exports = { CartPole };
