"""A programmed selector (docs/levels.md): ``selector: "module:function"`` in a preset, a function of the
observation returning a skill's name, served as an agent whose learner learns nothing (Bonsai's programmed
concepts). Registered as the algorithm ``Programmed`` when imported, unlisted (`run.py algorithms` and the admin
API list the algorithms to choose from); heatup picks options at random."""

import json
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
from gymnasium import spaces

from shepherd.agents.core import ActMode, Answer, Kind, Outcome, Request
from shepherd.agents.algorithm import PlainAlgorithm
from shepherd.hierarchy import load_function


class ProgrammedSelector(PlainAlgorithm):
    """The worker's `Algorithm` of a programmed selector: each act is ``function(obs)``'s skill, as its index
    among ``skills`` (a comma-separated list of names, the level's order); a random one in heatup."""

    on_policy = False  # its metrics rows follow its steps

    def __init__(self, function: str = "", skills: str = "", seed: int = 0, learning_starts: int = 0) -> None:
        """``learning_starts`` is the schedule's heatup, as for every learner that is not on-policy: its options
        are random then."""
        super().__init__()
        self.function_name = function
        self.skills = [name.strip() for name in skills.split(",") if name.strip()]
        self.rng = np.random.default_rng(seed)
        self._function: Callable[[Any], Any] | None = None
        self._steps = 0

    @classmethod
    def build(cls, name: str, observation_space: spaces.Space, action_space: spaces.Space,
              values: dict[str, Any], total_steps: int | None) -> "ProgrammedSelector":
        """Raises ValueError when the function cannot be imported or the skills do not match the actions."""
        selector = cls(**values)
        selector.name = name
        selector._function = load_function(selector.function_name)
        if not isinstance(action_space, spaces.Discrete) or int(action_space.n) != len(selector.skills):
            raise ValueError(f"a programmed selector over {len(selector.skills)} skills acts in "
                             f"Discrete({len(selector.skills)}), not {action_space}")
        return selector

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def version(self) -> int:
        return 0  # it never changes

    def process(self, requests: list[Request]) -> None:
        for request in requests:
            if request.kind in (Kind.STEP, Kind.END):
                self._steps += 1
            if request.kind in (Kind.BEGIN, Kind.STEP):
                self._answers.append(Answer(request.ticket, Outcome.ACTION, self.choose(request), 0))

    def choose(self, request: Request) -> int:
        """The skill's index for an act (a random one in heatup).

        Raises:
            ValueError: the function returned a name that is not one of the skills (the learner fails with it).
        """
        if request.mode is ActMode.RANDOM:
            return int(self.rng.integers(len(self.skills)))
        assert self._function is not None
        chosen = self._function(request.obs)
        if chosen not in self.skills:
            raise ValueError(f"selector {self.function_name} returned {chosen!r}, not one of the skills "
                             f"{', '.join(self.skills)}")
        return self.skills.index(chosen)

    def client_acting_refused(self) -> str | None:
        return "a programmed selector is a function on the server, not a policy file"

    def write_checkpoint(self, path: Path, state: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        with zipfile.ZipFile(temporary, "w") as archive:
            archive.writestr("shepherd.json", json.dumps({**state, "steps": self._steps, "function": self.function_name,
                                                          "generator": self.rng.bit_generator.state}))
        temporary.replace(path)

    def restore(self, path: Path) -> dict[str, Any]:
        with zipfile.ZipFile(path) as archive:
            state: dict[str, Any] = json.loads(archive.read("shepherd.json"))
        self._steps = int(state.get("steps", 0))
        if isinstance(state.get("generator"), dict):  # heatup's random options go on as they would have
            self.rng.bit_generator.state = state["generator"]
        return state
