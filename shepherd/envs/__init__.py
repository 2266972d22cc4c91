"""Gymnasium environments of Shepherd's own, registered when this package is imported: CartPole without
velocities and in sensor units (`cartpoles`, ids ``shepherd/CartPoleNoVel-v1`` and ``shepherd/CartPoleSensors-v1``:
``gymnasium.make("shepherd.envs:shepherd/CartPoleNoVel-v1")``), a maze with action masks (`gridworld`,
``gymnasium.make("shepherd.envs.gridworld:MaskedGrid-v0")``), and a corridor with a cue whose skills a hierarchy
chooses between (`corridor`, ``shepherd/Corridor-v0``, docs/levels.md)."""

from shepherd.envs import cartpoles as cartpoles
from shepherd.envs import corridor as corridor
