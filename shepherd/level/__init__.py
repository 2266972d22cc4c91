"""Level: one LevelManager per client session, the remote client seen as an environment."""

from shepherd.level.manager import MODES, Episode, EpisodeHost, LevelManager, Phase

__all__ = ["MODES", "Episode", "EpisodeHost", "LevelManager", "Phase"]
