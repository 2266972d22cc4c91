"""The served hierarchy (docs/levels.md): a selector agent with a ``level`` over skills, the agents it chooses
between. ``problems.py`` checks a preset's levels; ``agent.py`` serves a selector (its kind, registered when
``shepherd.graph`` is imported)."""
