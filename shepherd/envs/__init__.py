"""Gymnasium environments of Shepherd's own, registered when this package is imported: CartPole without
velocities and in sensor units (`cartpoles`, ids ``shepherd/CartPoleNoVel-v1`` and ``shepherd/CartPoleSensors-v1``:
``gymnasium.make("shepherd.envs:shepherd/CartPoleNoVel-v1")``), a maze with action masks (`gridworld`,
``gymnasium.make("shepherd.envs.gridworld:MaskedGrid-v0")``), and a corridor with a cue whose skills a hierarchy
chooses between (`corridor`, ``shepherd/Corridor-v0``, docs/levels.md), and a dot walked across a small picture,
seen only as pixels (`pixels`, ``shepherd/PixelDot-v0``, docs/how-to/pixels.md)."""

from shepherd.envs import cartpoles as cartpoles
from shepherd.envs import corridor as corridor
from shepherd.envs import pixels as pixels
