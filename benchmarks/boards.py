"""Scripted players of Connect Four and tic-tac-toe for benchmarks/selfplay.py, on PettingZoo's observations of
those games (``connect_four_v3``: 6 x 7 x 2, ``tictactoe_v3``: 3 x 3 x 2; channel 0 the mover's pieces, channel 1
the opponent's; action: Connect Four's column, tic-tac-toe's cell ``row * 3 + column``), so that they need no
PettingZoo: a uniform random player, the one-move lookahead (win if it can, else block the opponent's winning
move, else random; either game), Connect Four's two-ply ``careful`` player (the lookahead that also never plays
under the opponent's threat; a training opponent) and tic-tac-toe's perfect player (minimax, a random one of the
best moves).

Each is a scripted role's ``function(obs, mask) -> action`` (docs/how-to/multi-agent.md), called by the server
with the observation and mask as the client sent them (nested lists)."""

from __future__ import annotations

import functools
import random
from typing import Any

import numpy as np

ROWS, COLUMNS = 6, 7
#: the generator of the random choices (seeded: a server's evaluation is repeatable from its start)
RANDOM = random.Random(0)


def legal(obs: Any, mask: Any) -> list[int]:
    """The legal actions: the mask's ones (without a mask, the empty cells or the columns not full)."""
    if mask is not None:
        return [index for index, allowed in enumerate(np.asarray(mask).ravel()) if allowed]
    board = np.asarray(obs)
    filled = board.sum(axis=2)
    if board.shape[:2] == (ROWS, COLUMNS):
        return [column for column in range(COLUMNS) if filled[0, column] == 0]
    return [cell for cell in range(9) if filled.ravel()[cell] == 0]


def uniform(obs: Any, mask: Any) -> int:
    """A uniform random legal action (either game)."""
    return RANDOM.choice(legal(obs, mask))


# -- Connect Four ---------------------------------------------------------------------------------------------
def drop(board: np.ndarray, column: int, channel: int) -> np.ndarray | None:
    """``board`` with a piece of ``channel`` dropped in ``column`` (row 5 is the bottom); None: the column is full."""
    empty = np.flatnonzero(board[:, column].sum(axis=1) == 0)
    if not len(empty):
        return None
    after = board.copy()
    after[empty[-1], column, channel] = 1
    return after


def connects_four(pieces: np.ndarray) -> bool:
    """Whether a 6 x 7 board of one player's pieces (0/1) holds four in a line (the four directions, each as the
    AND of four shifted views: the scripted players call this ~60 times a move, on the server's event loop)."""
    p = np.asarray(pieces) != 0
    return bool((p[:, :-3] & p[:, 1:-2] & p[:, 2:-1] & p[:, 3:]).any()  # across
                or (p[:-3] & p[1:-2] & p[2:-1] & p[3:]).any()  # down
                or (p[:-3, :-3] & p[1:-2, 1:-2] & p[2:-1, 2:-1] & p[3:, 3:]).any()  # down-right
                or (p[:-3, 3:] & p[1:-2, 2:-1] & p[2:-1, 1:-2] & p[3:, :-3]).any())  # down-left


def lookahead(obs: Any, mask: Any) -> int:
    """The one-move lookahead (either game): a winning move if there is one, else a move onto the opponent's
    winning square (the first found), else a uniform random legal move. In tic-tac-toe it is no minimax: it
    neither makes nor sees forks."""
    board = np.asarray(obs, dtype=np.int8)
    moves = legal(board, mask)
    if board.shape[:2] != (ROWS, COLUMNS):  # tic-tac-toe
        cells = cells_of(board)
        for player in (1, 2):  # win first, then block
            for cell in moves:
                if _won(cells[:cell] + (player,) + cells[cell + 1:], player):
                    return cell
        return RANDOM.choice(moves)
    tactic = _win_or_block(board, moves)
    return RANDOM.choice(moves) if tactic is None else tactic


def _win_or_block(board: np.ndarray, moves: list[int]) -> int | None:
    """Connect Four's winning move if there is one, else a move onto the opponent's winning square (the first
    found), else None."""
    position = Bits(board)
    for pieces in (position.mine, position.theirs):  # win first, then block
        for column in moves:
            square = position.square(column)
            if square and Bits.wins(pieces | square):
                return column
    return None


def careful(obs: Any, mask: Any) -> int:
    """Connect Four's two-ply player, a training opponent stronger than the lookahead: the lookahead's win or
    block first, else a uniform random one of the moves that leave the opponent no win in one (that do not play
    under its threat), else a uniform random legal move."""
    board = np.asarray(obs, dtype=np.int8)
    moves = legal(board, mask)
    tactic = _win_or_block(board, moves)
    if tactic is not None:
        return tactic
    position = Bits(board)
    safe = [column for column in moves if not position.hands_a_win(column)]
    return RANDOM.choice(safe or moves)


class Bits:
    """A Connect Four position as two bitboards (the mover's and the opponent's pieces), for the scripted players'
    searches (about 60 wins checked a move, on the server's event loop): column ``c``, row ``r`` (row 5 the
    bottom) is bit ``7 * c + 5 - r``; each column's seventh bit stays empty, so no line wraps."""

    SHIFTS = (1, 7, 6, 8)  # up a column, across, and the two diagonals

    def __init__(self, board: np.ndarray) -> None:
        self.mine, self.theirs = (self._bits(board[:, :, channel]) for channel in (0, 1))
        self.filled = self.mine | self.theirs

    @staticmethod
    def _bits(plane: np.ndarray) -> int:
        bits = 0
        for row, column in zip(*np.nonzero(plane)):
            bits |= 1 << (7 * int(column) + ROWS - 1 - int(row))
        return bits

    def square(self, column: int, filled: int | None = None) -> int:
        """The bit a piece dropped in ``column`` lands on (0: the column is full)."""
        height = ((self.filled if filled is None else filled) >> (7 * column) & 0x3F).bit_length()
        return 0 if height == ROWS else 1 << (7 * column + height)

    @classmethod
    def wins(cls, pieces: int) -> bool:
        """Whether ``pieces`` hold four in a line."""
        for shift in cls.SHIFTS:
            pairs = pieces & (pieces >> shift)
            if pairs & (pairs >> 2 * shift):
                return True
        return False

    def hands_a_win(self, column: int) -> bool:
        """Whether the mover's piece dropped in ``column`` leaves the opponent a win in one (False: it is full)."""
        square = self.square(column)
        if not square:
            return False
        filled = self.filled | square
        for reply in range(COLUMNS):
            landing = self.square(reply, filled)
            if landing and self.wins(self.theirs | landing):
                return True
        return False


# -- tic-tac-toe ----------------------------------------------------------------------------------------------
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _won(cells: tuple[int, ...], player: int) -> bool:
    return any(all(cells[i] == player for i in line) for line in LINES)


@functools.lru_cache(maxsize=None)
def _value(cells: tuple[int, ...]) -> int:
    """The value of ``cells`` (1: the mover's, 2: the opponent's, 0: empty) for the player to move, both playing
    perfectly: 1 a win, 0 a draw, -1 a loss."""
    if _won(cells, 2):
        return -1
    empty = [i for i, cell in enumerate(cells) if cell == 0]
    if not empty:
        return 0
    return max(-_value(_swapped(_played(cells, i))) for i in empty)


def _played(cells: tuple[int, ...], cell: int) -> tuple[int, ...]:
    return cells[:cell] + (1,) + cells[cell + 1:]


def _swapped(cells: tuple[int, ...]) -> tuple[int, ...]:
    return tuple((0, 2, 1)[cell] for cell in cells)


def cells_of(obs: Any) -> tuple[int, ...]:
    """A tic-tac-toe observation as 9 cells, row by row: 1 the mover's, 2 the opponent's, 0 empty."""
    board = np.asarray(obs).reshape(9, 2)
    return tuple(1 if mine else 2 if theirs else 0 for mine, theirs in board)


def best_moves(cells: tuple[int, ...]) -> list[int]:
    """The mover's moves of the best value (minimax)."""
    empty = [i for i, cell in enumerate(cells) if cell == 0]
    values = {i: -_value(_swapped(_played(cells, i))) for i in empty}
    best = max(values.values())
    return [i for i in empty if values[i] == best]


def minimax(obs: Any, mask: Any) -> int:
    """Tic-tac-toe's perfect player: a uniform random one of the best moves (never loses)."""
    return RANDOM.choice(best_moves(cells_of(obs)))


def five(obs: Any, mask: Any) -> int:
    """A uniform random one of 5 actions (mpe2's discrete moves: none, left, right, down, up)."""
    return RANDOM.randrange(5)
