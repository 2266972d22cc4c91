"""The scripted players benchmarks/selfplay.py evaluates against (benchmarks/boards.py), on boards of their own
(PettingZoo's observation layout, no PettingZoo): tic-tac-toe's minimax never loses, Connect Four's lookahead
wins when it can and blocks when it must, and every player keeps to the legal moves."""

from __future__ import annotations

import random

import numpy as np

from benchmarks import boards


def tictactoe_observation(cells: list[int], mover: int) -> np.ndarray:
    """PettingZoo's tictactoe_v3 observation for ``mover`` (1 or 2): channel 0 its marks, 1 the other's."""
    board = np.array(cells).reshape(3, 3)
    return np.stack([board == mover, board == 3 - mover], axis=2).astype(np.int8)


def winner(cells: list[int]) -> int:
    return next((cells[a] for a, b, c in boards.LINES if cells[a] and cells[a] == cells[b] == cells[c]), 0)


def play_tictactoe(players: dict[int, object], rng: random.Random) -> int:
    """One game, player 1 first; the winner (0: a draw)."""
    cells = [0] * 9
    for turn in range(9):
        mover = 1 + turn % 2
        mask = [int(cell == 0) for cell in cells]
        obs = tictactoe_observation(cells, mover).tolist()
        move = players[mover](obs, mask) if players[mover] is not None else rng.choice(
            [i for i, free in enumerate(mask) if free])
        assert mask[move], "an illegal move"
        cells[move] = mover
        if winner(cells):
            return winner(cells)
    return 0


def test_minimax_never_loses_to_a_random_player_on_either_side_and_draws_itself():
    rng = random.Random(0)
    for game in range(150):
        side = 1 + game % 2
        players = {side: boards.minimax, 3 - side: None}
        assert play_tictactoe(players, rng) in (0, side)
    assert all(play_tictactoe({1: boards.minimax, 2: boards.minimax}, rng) == 0 for _ in range(20))


def test_minimax_takes_a_win_and_blocks_one():
    # X (the mover) has 0 and 1: 2 wins; with O's 3 and 4 and X to move without a win of its own, 5 blocks
    assert boards.best_moves(boards.cells_of(tictactoe_observation([1, 1, 0, 2, 2, 0, 0, 0, 0], 1))) == [2]
    assert boards.best_moves(boards.cells_of(tictactoe_observation([1, 0, 0, 2, 2, 0, 1, 0, 0], 1))) == [5]


def test_the_tictactoe_lookahead_wins_when_it_can_blocks_when_it_must_and_is_no_minimax():
    free = lambda cells: [int(cell == 0) for cell in cells]  # noqa: E731
    wins = [1, 1, 0, 2, 2, 0, 0, 0, 0]  # the mover (1) wins at 2; the other would at 5
    assert all(boards.lookahead(tictactoe_observation(wins, 1).tolist(), free(wins)) == 2 for _ in range(10))
    blocks = [1, 0, 0, 2, 2, 0, 1, 0, 0]  # no win of its own: 5 blocks
    assert all(boards.lookahead(tictactoe_observation(blocks, 1).tolist(), free(blocks)) == 5 for _ in range(10))
    rng = random.Random(1)  # against minimax it loses some games (forks): not the perfect player
    results = [play_tictactoe({1: boards.lookahead, 2: boards.minimax}, rng) for _ in range(100)]
    assert 2 in results and 1 not in results


def connect_four(columns: dict[int, list[int]]) -> np.ndarray:
    """A 6 x 7 x 2 board (row 5 the bottom) from each column's pieces bottom up: 0 the mover's, 1 the other's."""
    board = np.zeros((6, 7, 2), dtype=np.int8)
    for column, pieces in columns.items():
        for height, channel in enumerate(pieces):
            board[5 - height, column, channel] = 1
    return board


def test_the_lookahead_wins_when_it_can_and_blocks_the_opponents_win():
    everything = [1] * 7
    three_in_a_row = connect_four({0: [0], 1: [0], 2: [0], 6: [1, 1, 1]})  # it wins at 3 (or the other at 6)
    assert all(boards.lookahead(three_in_a_row.tolist(), everything) == 3 for _ in range(10))
    threat = connect_four({2: [1], 3: [1], 4: [1], 0: [0], 6: [0]})  # the other wins at 1 or 5
    assert all(boards.lookahead(threat.tolist(), everything) in (1, 5) for _ in range(10))
    vertical = connect_four({4: [1, 1, 1], 0: [0, 0]})
    assert boards.lookahead(vertical.tolist(), everything) == 4
    diagonal = connect_four({0: [0], 1: [1, 0], 2: [1, 1, 0], 3: [1, 1, 1]})  # 3's fourth piece wins
    assert boards.lookahead(diagonal.tolist(), everything) == 3
    assert boards.lookahead(diagonal.tolist(), [1, 1, 1, 0, 1, 1, 1]) != 3  # not when the mask forbids it


def test_players_keep_to_the_legal_moves_with_or_without_a_mask():
    full = connect_four({column: [column % 2] * 6 for column in range(6)})  # only column 6 has room
    assert boards.legal(full, None) == [6]
    assert all(boards.uniform(full.tolist(), None) == 6 for _ in range(10))
    assert all(boards.uniform(None, [0, 0, 1, 0, 1]) in (2, 4) for _ in range(20))
    assert boards.connects_four(connect_four({c: [0] for c in range(1, 5)})[:, :, 0])
    assert not boards.connects_four(connect_four({c: [0] for c in (0, 1, 2, 4)})[:, :, 0])



def test_the_tactics_count_tells_wins_taken_and_blocks_made_from_those_missed():
    """benchmarks/board_tactics.py's tally of a mover's action: a win in one move first, else a block."""
    from benchmarks import board_tactics

    tally = dict.fromkeys(("wins available", "wins taken", "blocks needed", "blocks made"), 0)
    mask = [1] * boards.COLUMNS
    win_or_block = connect_four({0: [0], 1: [0], 2: [0], 6: [1, 1, 1]})  # the mover wins at 3 (the other at 6)
    threat = connect_four({2: [1], 3: [1], 4: [1], 0: [0], 6: [0]})  # the other wins at 1 or 5
    for board, action in ((win_or_block, 3), (win_or_block, 6), (threat, 5), (threat, 3),
                          (connect_four({0: [0]}), 2)):  # nothing to take or block: not counted
        board_tactics.count(tally, np.asarray(board, dtype=np.int8), np.asarray(mask), action)
    assert tally == {"wins available": 2, "wins taken": 1, "blocks needed": 2, "blocks made": 1}


def test_the_careful_player_wins_blocks_and_never_plays_under_the_opponents_threat():
    everything = [1] * 7
    three_in_a_row = connect_four({0: [0], 1: [0], 2: [0], 6: [1, 1, 1]})
    assert all(boards.careful(three_in_a_row.tolist(), everything) == 3 for _ in range(10))
    threat = connect_four({2: [1], 3: [1], 4: [1], 0: [0], 6: [0]})
    assert all(boards.careful(threat.tolist(), everything) in (1, 5) for _ in range(10))
    # the other's three on row 2 (second from the bottom) from column 1 to 3: its win is column 4's second piece,
    # so the mover must not put column 4's first; the lookahead (no win, no block) sometimes does, careful never
    under = connect_four({1: [0, 1], 2: [1, 1], 3: [0, 1], 0: [1, 0], 5: [1], 6: [0]})
    assert not boards._win_or_block(under, list(range(7)))
    assert all(boards.careful(under.tolist(), everything) != 4 for _ in range(50))
    assert any(boards.lookahead(under.tolist(), everything) == 4 for _ in range(100))


def test_the_bitboard_search_agrees_with_the_board_on_random_positions():
    """`careful` and the lookahead search on bitboards (`boards.Bits`); on random positions the squares, wins and
    "hands a win" they find are those `drop` and `connects_four` find on the 6 x 7 x 2 array."""
    rng = np.random.default_rng(0)
    threats = 0
    for _ in range(400):
        board = np.zeros((boards.ROWS, boards.COLUMNS, 2), np.int8)
        for move in range(int(rng.integers(0, 40))):
            columns = [column for column in range(boards.COLUMNS) if board[0, column].sum() == 0]
            board = boards.drop(board, int(rng.choice(columns)), move % 2)
        position = boards.Bits(board)
        for column in range(boards.COLUMNS):
            for channel, pieces in ((0, position.mine), (1, position.theirs)):
                after = boards.drop(board, column, channel)
                square = position.square(column)
                assert (after is None) == (square == 0)
                if after is not None:
                    assert boards.Bits.wins(pieces | square) == boards.connects_four(after[:, :, channel])
            mine = boards.drop(board, column, 0)
            hands = mine is not None and any(
                (reply := boards.drop(mine, other, 1)) is not None and boards.connects_four(reply[:, :, 1])
                for other in range(boards.COLUMNS))
            assert position.hands_a_win(column) == hands
            threats += hands
    assert threats > 100  # the positions hold threats to find
