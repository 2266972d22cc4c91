"""Level: one LevelManager per client session, the remote client seen as an environment."""

from shepherd.level.manager import MODES, EnvSteps, Episode, EpisodeHost, LevelManager, Phase, Trial, VectorLevel

__all__ = ["MODES", "EnvSteps", "Episode", "EpisodeHost", "LevelManager", "Phase", "Trial", "VectorLevel"]
