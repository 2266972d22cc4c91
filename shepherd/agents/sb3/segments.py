"""The rollout's segments: which stretch of which buffer column each session writes next.

An on-policy rollout is SB3's buffer of ``n_steps`` rows by ``n_envs`` columns, and Shepherd fills it from many
sessions at once. Each column starts as one *segment*: a stretch of rows that one actor owns while it writes
them, row by row (a server-acting session, `shepherd.agents.sb3.on_policy.OnPolicyAdapter`) or in blocks (a
client-acting session's uploads, `shepherd.agents.sb3.uploads.OnPolicyUploads`), and gives up when its episode
ends, it leaves or it stalls; another actor then goes on down the same rows. A vector session whose env finds no
free segment splits a group-mate's (`split`): the later half of its rows becomes a segment of its own. The
rollout is full when every row has its reward (`full`); each column's last value and done bootstrap GAE at its
end. The learner, the uploads and the resume state (`shepherd.agents.sb3.resume`) all read and change this one
table, through the operations below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Segments:
    """The segments of one rollout (by index; the first ``n_columns`` are the columns, a split appends one)."""

    n_columns: int
    n_steps: int
    position: list[int] = field(default_factory=list)  # a segment's next row
    end: list[int] = field(default_factory=list)  # ... the row after its last
    column: list[int] = field(default_factory=list)  # ... its buffer column
    owner: list[int | None] = field(default_factory=list)  # ... the actor writing it (None: free)
    rows_left: int = 0  # rows without a reward yet: 0 is a full rollout
    last_values: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))  # each column's, at its end
    last_dones: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))

    @classmethod
    def empty(cls, n_columns: int, n_steps: int) -> Segments:
        """An empty rollout: a segment per column, every row left."""
        return cls(n_columns, n_steps, [0] * n_columns, [n_steps] * n_columns, list(range(n_columns)),
                   [None] * n_columns, n_columns * n_steps, np.zeros(n_columns, dtype=np.float32),
                   np.zeros(n_columns, dtype=np.float32))

    @property
    def full(self) -> bool:
        return self.rows_left == 0

    @property
    def untouched(self) -> bool:
        """Whether no row has its reward yet."""
        return self.rows_left == self.n_columns * self.n_steps

    def free(self) -> list[int]:
        """The segments no one writes that have rows left, in order."""
        return [s for s, (o, p, e) in enumerate(zip(self.owner, self.position, self.end)) if o is None and p < e]

    def rows(self, segment: int) -> int:
        """The rows the segment has left."""
        return self.end[segment] - self.position[segment]

    def at(self, segment: int) -> tuple[int, int]:
        """The segment's next row and its column."""
        return self.position[segment], self.column[segment]

    def take(self, segment: int, owner: int) -> None:
        self.owner[segment] = owner

    def release(self, segment: int, owner: int | None = None) -> None:
        """The segment is free again (if ``owner`` is given: only if that actor holds it)."""
        if owner is None or self.owner[segment] == owner:
            self.owner[segment] = None

    def split(self, segment: int, owner: int) -> int:
        """A new segment of the later half of ``segment``'s rows, owned by ``owner``; ``segment`` ends where it
        starts. Returns the new segment."""
        middle = self.position[segment] + (self.rows(segment) + 1) // 2
        self.owner.append(owner)
        self.position.append(middle)
        self.end.append(self.end[segment])
        self.column.append(self.column[segment])
        self.end[segment] = middle
        return len(self.owner) - 1

    def filled(self, segment: int, rows: int = 1) -> bool:
        """``rows`` more rows of the segment have their rewards; returns whether it is now full."""
        self.position[segment] += rows
        self.rows_left -= rows
        return self.position[segment] == self.end[segment]

    def ends_column(self, segment: int) -> bool:
        """Whether the segment's last row is its column's last (its value bootstraps GAE there)."""
        return self.end[segment] == self.n_steps

    def cut_short(self, segment: int, row: int) -> bool:
        """Whether ``row`` is the segment's last though not its column's: a split cut it there, and the row after
        starts another actor's stretch (so its value bootstraps the row, as at a time limit)."""
        return row + 1 == self.end[segment] < self.n_steps

    def state(self) -> dict[str, Any]:
        """The table as a restart takes it back (`load`; every owner gone)."""
        return {"position": list(self.position), "end": list(self.end), "column": list(self.column),
                "rows_left": self.rows_left, "last_values": self.last_values.copy(),
                "last_dones": self.last_dones.copy()}

    @classmethod
    def load(cls, n_columns: int, n_steps: int, state: dict[str, Any]) -> Segments:
        position = list(state["position"])
        return cls(n_columns, n_steps, position, list(state["end"]), list(state["column"]), [None] * len(position),
                   int(state["rows_left"]), np.asarray(state["last_values"], dtype=np.float32).copy(),
                   np.asarray(state["last_dones"], dtype=np.float32).copy())
