"""Level: a session's levels, the remote client seen as an environment: `LevelManager` (one env), `VectorLevel`
(N envs), `HierarchyLevel` and `HierarchyVectorLevel` (a selector's sessions, docs/levels.md), behind `Level`, which takes each kind of step by a method of its own."""

from shepherd.level.base import Level, Reply, WrongShape
from shepherd.level.client import ClientActingLevel
from shepherd.level.episodes import MODES, Episode, EpisodeHost, Phase, Trial
from shepherd.level.hierarchy import HierarchyLevel, OptionHost, Skill
from shepherd.level.hierarchy_vector import HierarchyVectorLevel
from shepherd.level.single import LevelManager
from shepherd.level.vector import VectorLevel
from shepherd.wire import EnvSteps

__all__ = ["ClientActingLevel", "MODES", "EnvSteps", "Episode", "EpisodeHost", "HierarchyLevel", "HierarchyVectorLevel", "Level", "OptionHost", "Skill", "LevelManager", "Phase", "Reply", "Trial",
           "VectorLevel", "WrongShape"]
