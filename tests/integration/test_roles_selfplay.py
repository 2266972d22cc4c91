"""Self-play (ML-Agents' ghost) in an environment whose two roles one agent plays: one team learns, the other
plays a snapshot of the agent or a scripted opponent, named once per episode in the reply (``"opponents"``);
the opponent's steps are not learned from or counted; the learning team changes every ``swap_every`` steps;
the snapshots and scripted opponents are rated."""

from __future__ import annotations

import pytest

from shepherd.environments import EnvironmentSpec, SelfPlay
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
TINY = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [8]}}
A = [0.0, 0.5]
SCRIPT = "tests.integration.test_roles_selfplay:always_one"


def always_one(obs, mask):
    return 1


async def play_episodes(graph: GraphManager, session, episodes: int) -> None:
    """``episodes`` episodes of ``duel``: p0 and p1 act in turn, p0 gets a reward, then both end."""
    for _ in range(episodes):
        for body in ({"obs": {"p0": A}}, {"obs": {"p1": A}}, {"obs": {"p0": A}, "reward": {"p0": 1.0}},
                     {"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True}}):
            await graph.step(session, session.parse_step(body))


def duel(tmp_path, parameters: dict, play: SelfPlay) -> tuple[GraphManager, Store, dict]:
    """A graph of one PPO agent ``c4`` playing both roles of the alternate environment ``duel`` under ``play``."""
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "PPO", OBS, 2, parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                       self_play=play),))
    store = Store(tmp_path / "data")
    return graph, store, graph.create_graph(store, serving_here())


async def test_one_team_learns_against_snapshots_and_scripts_and_the_teams_swap(tmp_path):
    play = SelfPlay(snapshot_every=8, window=3, against_latest=0.0, swap_every=12, opponents=(SCRIPT,))
    graph, store, keys = duel(tmp_path, TINY, play)
    try:
        session = graph.login(keys["environment duel"])
        runtime = graph.runtime("c4")

        async def send(body):
            acted = await graph.step(session, session.parse_step(body))
            return session.level.reply_body(acted.action)

        seen, learners = set(), []
        for episode in range(8):  # 3 turns each (p0, p1, p0, p1, p0, p1), then both end
            before = runtime.tracker.steps
            first = await send({"obs": {"p0": A}})
            opponents = first["opponents"]
            assert len(opponents) == 1  # the one role of the team that does not learn
            [(role, label)] = opponents.items()
            learners.append("p1" if role == "p0" else "p0")
            seen.add(label.split(":")[0] if label.startswith("snapshot:") else label)
            if label == SCRIPT and role == "p0":
                assert first["actions"] == {"p0": 1}
            for turn in range(5):
                reply = await send({"obs": {("p1", "p0")[turn % 2]: A}, "reward": {"p0": 1.0, "p1": 1.0}})
                assert "opponents" not in reply  # once per episode
            await send({"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True},
                        "outcome": {"p0": 1, "p1": 0}})
            assert runtime.tracker.steps - before == 3  # the learning role's 3 steps only: the opponent's are not
        assert learners[0] == "p0" and "p1" in learners  # the learning team changed after swap_every steps
        assert seen == {"snapshot", SCRIPT}
        table = runtime.ratings.table("duel")
        assert SCRIPT in table and any(player.startswith("c4@snapshot:") for player in table) and "c4" in table
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


#: an MLP over the numpy greedy copy's 100,000 weights: its snapshots are behaviour files (agents/frozen_file.py)
WIDE = {**TINY, "policy_kwargs": {"net_arch": [400, 400]}}


@pytest.mark.parametrize("parameters", [TINY, WIDE], ids=["numpy-snapshots", "file-snapshots"])
async def test_after_a_stop_without_a_checkpoint_the_pool_and_ratings_are_the_last_checkpoints(tmp_path, parameters):
    """What ``kill -9`` leaves: the snapshot pool (each snapshot's weights, or its file beside the checkpoint), the
    learning team, the next swap, the generator and the ratings of the last checkpoint, byte for byte once the pool
    is rebuilt from them; the snapshot files written for a checkpoint the crash left unwritten are removed."""
    import asyncio
    import json

    play = SelfPlay(snapshot_every=4, window=3, against_latest=0.25, swap_every=9, opponents=(SCRIPT,))
    data = tmp_path / "data"

    def served() -> tuple[GraphManager, Store, dict]:
        graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "PPO", OBS, 2, parameters)],
                             schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1,
                                               checkpoint_every_steps=10 ** 9, checkpoint_every_seconds=10 ** 9),
                             environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                           self_play=play),))
        store = Store(data)
        return graph, store, graph.create_graph(store, serving_here())

    async def episodes(graph, session, count):
        for _ in range(count):
            for body in ({"obs": {"p0": A}}, {"obs": {"p1": A}}, {"obs": {"p0": A}, "reward": {"p0": 1.0}},
                         {"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True},
                          "outcome": {"p0": 1, "p1": 0}}):
                await graph.step(session, session.parse_step(body))

    graph, store, keys = served()
    key = keys["environment duel"]
    session = graph.login(key)
    await episodes(graph, session, 10)
    runtime = graph.runtime("c4")
    await asyncio.to_thread(lambda: runtime.checkpoint().result(30))
    saved = json.dumps(runtime.ratings.state(), sort_keys=True)
    assert len(json.loads(saved)["selfplay"]["duel"]["pools"]["c4"]) == 3  # a full window of snapshots
    await episodes(graph, session, 6)  # after the checkpoint: more snapshots, ratings, draws
    assert json.dumps(runtime.ratings.state(), sort_keys=True) != saved
    graph.end_sessions()
    await asyncio.to_thread(graph.abort)  # no checkpoint written
    store.close()
    graph, store, _ = served()
    try:
        graph.login(key)  # the environment's self-play is rebuilt from the checkpoint
        assert "duel" in graph.runtime("c4").ratings.kept
        assert json.dumps(graph.runtime("c4").ratings.state(), sort_keys=True) == saved
        # the files written for the state taken after the checkpoint (never written) are gone; the checkpoint's stay
        named = {snapshot.get("weights", snapshot.get("file"))
                 for snapshot in json.loads(saved)["selfplay"]["duel"]["pools"]["c4"]}
        ghost = graph.runtime("c4").ratings.kept["duel"]
        assert {path.name for path in ghost.folder.iterdir()} == named
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


async def test_one_on_policy_agent_in_two_alternating_roles_never_waits_for_itself(tmp_path):
    """Its two roles are one group of its learner (`Request.group`): a role that finds no free row in the rollout
    does not wait for the other's progress, which waits for its action (alternate turns): before they were, the
    first step of the second role waited forever for a segment the first role held."""
    tiny = {**TINY, "n_envs": 2}
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "PPO", OBS, 2, tiny)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate"),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here(act_timeout_seconds=10))
    try:
        session = graph.login(keys["environment duel"])
        for step in range(64):
            role = ("p0", "p1")[step % 2]
            await graph.step(session, session.parse_step({"obs": {role: A}, "reward": {role: 1.0}}))
        learner = graph.runtime("c4").learner
        assert learner.failure is None and learner.policy_version >= 3  # it updated (a rollout is 2 x 8 rows)
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def _opponent_actions(tmp_path, actions: str) -> list[int]:
    """The actions a snapshot opponent of a MaskablePPO agent (3 actions, the last masked) plays on one
    observation over 40 episodes of 3 turns each (against_latest 0: always a snapshot)."""
    play = SelfPlay(snapshot_every=10 ** 6, window=1, against_latest=0.0, swap_every=10 ** 6,
                    opponent_actions=actions)
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "MaskablePPO", OBS, 3, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                       self_play=play),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    mask = {"p0": [True, True, False], "p1": [True, True, False]}
    played = []
    try:
        session = graph.login(keys["environment duel"])

        async def send(body):
            acted = await graph.step(session, session.parse_step({**body, "action_mask": {
                role: mask[role] for role in body["obs"]}}))
            return session.level.reply_body(acted.action)

        for _ in range(40):
            opponent, label = None, ""
            for turn in range(6):
                role = ("p0", "p1")[turn % 2]
                reply = await send({"obs": {role: A}, "reward": {role: 0.0}})
                if "opponents" in reply:
                    [(opponent, label)] = reply["opponents"].items()
                if role == opponent and label.startswith("snapshot:"):  # (the first episode's: no snapshot yet)
                    played.append(reply["actions"][role])
            await send({"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True},
                        "outcome": {"p0": 1, "p1": 0}})
    finally:
        graph.end_sessions()
        graph.close()
        store.close()
    return played


async def test_snapshot_opponents_sample_their_policys_actions_under_the_mask_or_play_greedy(tmp_path):
    """`opponent_actions: sample` (the default, ML-Agents' ghost): a frozen snapshot's actions on one observation
    are drawn from its (near uniform, untrained) policy, so both allowed actions come, the masked one never;
    `greedy`: the snapshot repeats one action, as every opponent did before the setting."""
    sampled = await _opponent_actions(tmp_path / "sample", "sample")
    greedy = await _opponent_actions(tmp_path / "greedy", "greedy")
    assert len(sampled) >= 40 and len(greedy) >= 40
    assert set(sampled) == {0, 1}
    assert len(set(greedy)) == 1 and 2 not in greedy


async def test_a_checkpoint_names_the_numpy_snapshots_weight_files(tmp_path, caplog):
    """A numpy snapshot's weights are a file beside the checkpoint (`WeightsFile`), written once and named by
    the checkpoint: the checkpoint's size does not grow with the window's weights. The files hold the snapshots'
    weights; a file that lost its bytes loses its snapshot (said), not the restart; a checkpoint of before, with
    the weights inline, still restores."""
    import json
    import logging

    import numpy as np

    from shepherd.graph.snapshot_files import WeightsFile, weights_of

    wide = {**TINY, "policy_kwargs": {"net_arch": [64, 64]}}
    play = SelfPlay(snapshot_every=4, window=3, against_latest=0.0, swap_every=10 ** 6)
    graph, store, keys = duel(tmp_path, wide, play)
    try:
        session = graph.login(keys["environment duel"])
        await play_episodes(graph, session, 12)
        ghost = graph.runtime("c4").ratings.kept["duel"]
        pool = list(ghost.pools["c4"])
        state = ghost.state()
        names = [snapshot["weights"] for snapshot in state["pools"]["c4"]]
        assert len(names) == 3 and all("arrays" not in snapshot for snapshot in state["pools"]["c4"])
        assert len(json.dumps(state["pools"])) < 1_000  # names: each snapshot's weights are ~20 kB
        for name, (version, policy) in zip(names, pool):
            file = WeightsFile.read(version, ghost.folder / name)
            expected = weights_of(policy)
            assert file.arrays().keys() == expected.keys()
            assert all(np.array_equal(file.arrays()[key], expected[key]) for key in expected)
        assert ghost.state() == state  # the same names: nothing written again

        # a restart: from the files; a file whose bytes changed loses its snapshot only
        (ghost.folder / names[0]).write_bytes(b"[]\n")
        fresh = type(ghost)(ghost.spec, ghost.runtimes, 0)
        with caplog.at_level(logging.WARNING):
            fresh.load(state)
        assert [version for version, _ in fresh.pools["c4"]] == [version for version, _ in pool][1:]
        assert "is lost" in caplog.text
        # a checkpoint written before the weights had files of their own: inline, base64
        import base64

        inline = {"pools": {"c4": [{"version": pool[0][0], "arrays": {
            key: {"dtype": array.dtype.str, "shape": list(array.shape),
                  "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}
            for key, array in weights_of(pool[0][1]).items()}}]}, "taken": {}, "learning": 0}
        old = type(ghost)(ghost.spec, ghost.runtimes, 0)
        old.load(inline)
        [(version, restored)] = old.pools["c4"]
        assert version == pool[0][0]
        assert all(np.array_equal(weights_of(restored)[key], weights_of(pool[0][1])[key]) for key in weights_of(restored))
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_an_agent_restarted_from_scratch_leaves_no_snapshot_files(tmp_path):
    import asyncio

    graph, store, keys = duel(tmp_path, TINY, SelfPlay(snapshot_every=4, window=3, against_latest=0.0, swap_every=10 ** 6))
    try:
        await play_episodes(graph, graph.login(keys["environment duel"]), 6)
        await asyncio.to_thread(lambda: graph.runtime("c4").checkpoint().result(30))
        folder = graph.runtime("c4").ratings.kept["duel"].folder
        assert any(folder.iterdir())
        await graph.served.restart(graph.preset_agent_id("c4"))
        assert not folder.exists()
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_after_the_other_teams_agent_restarts_its_new_learner_plays_and_learns(tmp_path):
    """Two agents, one per team: the self-play kept by the first role's agent plays with the runtime a restart
    of the second one made, not the stopped one (whose steps never move: its team would never swap in again)."""
    play = SelfPlay(snapshot_every=8, window=3, against_latest=1.0, swap_every=4)
    graph = GraphManager(owner="tests", agents=[AgentSpec("red", "PPO", OBS, 2, TINY), AgentSpec("blue", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "red", "p1": "blue"}, "alternate",
                                                       {"r": ("p0",), "b": ("p1",)}, self_play=play),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    try:
        async def send(session, body):
            acted = await graph.step(session, session.parse_step(body))
            return session.level.reply_body(acted.action)

        await send(graph.login(keys["environment duel"]), {"obs": {"p0": A}})
        await graph.served.restart(graph.preset_agent_id("blue"))
        blue = graph.runtime("blue")
        session, resting = graph.login(keys["environment duel"]), []
        for _ in range(10):  # 2 turns each, then both end
            resting.append(next(iter((await send(session, {"obs": {"p0": A}}))["opponents"])))
            for turn in range(3):
                await send(session, {"obs": {("p1", "p0")[turn % 2]: A}, "reward": {"p0": 1.0, "p1": 1.0}})
            await send(session, {"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True}})
        swapped = resting.index("p0")  # blue learns: red rests
        assert "p1" in resting[swapped:], resting  # and after blue's swap_every steps (the new learner's) red again
        assert blue.tracker.steps > 0
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def until_drawn(send, opponent: str) -> None:
    """Play short games (p0's first move, p1's, both end) until a game's first reply names ``opponent`` for p1;
    the game it begins is left at p1's turn."""
    for _ in range(40):
        if (await send({"obs": {"p0": A}}))["opponents"] == {"p1": opponent}:
            return
        await send({"obs": {"p1": A}})
        await send({"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True}})
    raise AssertionError(f"the scripted opponent {opponent} was never drawn")


def raises_on_nine(obs, mask):
    if obs[0] == 0.9:
        raise ValueError("nine")
    return 1


async def test_a_scripted_opponent_that_raises_fails_the_reply_of_a_step_taken_whole(tmp_path):
    """The self-play's scripted opponent is the preset's code (its role's observation checked against the agent's
    space): what it raises fails the step's reply, a retry with the seq gets the same, and the step was taken
    whole (the turn moved on)."""
    raising = "tests.integration.test_roles_selfplay:raises_on_nine"
    play = SelfPlay(snapshot_every=10 ** 6, window=1, against_latest=0.0, swap_every=10 ** 6, opponents=(raising,))
    graph, store, keys = duel(tmp_path, TINY, play)
    try:
        session = graph.login(keys["environment duel"])
        seqs = iter(range(10 ** 6))

        async def send(body, seq=None):
            step = session.parse_step({**body, "seq": next(seqs) if seq is None else seq})
            acted = await graph.step(session, step)
            return session.level.reply_body(acted.action)

        await until_drawn(send, raising)
        poisoned = {"obs": {"p1": [0.9, 0.0]}}
        with pytest.raises(ValueError, match="nine"):
            await send(poisoned)
        with pytest.raises(ValueError, match="nine"):  # the retry: the same reply, the step not taken again
            await send(poisoned, seq=session.last_seq)
        reply = await send({"obs": {"p0": A}})  # the failed step moved the turn to p0
        assert set(reply["actions"]) == {"p0"}
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_a_snapshot_file_that_cannot_be_written_fails_the_checkpoint_not_the_steps(tmp_path, monkeypatch):
    """A full disk when a checkpoint writes the self-play's snapshot files: the checkpoint fails, is reported and
    retried as a failed write is, and the clients' steps go on (the OSError failed every step from then on, and no
    checkpoint trouble showed)."""
    import errno

    from shepherd.graph import snapshot_files

    play = SelfPlay(snapshot_every=4, window=3, against_latest=0.0, swap_every=10 ** 6)
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1,
                                           checkpoint_every_steps=6, checkpoint_every_seconds=10 ** 9),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                       self_play=play),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(snapshot_files, "atomic_write_bytes", full)
    try:
        session = graph.login(keys["environment duel"])
        await play_episodes(graph, session, 6)
        runtime = graph.runtime("c4")
        assert runtime.checkpoints.failures >= 1 and "No space left" in runtime.checkpoints.error
        monkeypatch.undo()  # the disk has room again: the retry writes it
        runtime.checkpoints._retry_at = 0.0
        failed = runtime.checkpoints.pending
        for body in ({"obs": {"p0": A}}, {"obs": {"p1": A}}, {"obs": {"p0": A}, "reward": {"p0": 1.0}}):
            await graph.step(session, session.parse_step(body))
        assert runtime.checkpoints.pending is not failed
        runtime.checkpoints.pending.result(30)
        assert runtime.checkpoints.failures == 0
    finally:
        monkeypatch.undo()
        graph.end_sessions()
        graph.close()
        store.close()


async def test_a_snapshot_is_checkpointed_with_its_own_weights_when_an_older_one_had_its_version(tmp_path):
    """A new snapshot whose version an older one in the pool had (its agent restarted from scratch takes its
    versions again) is checkpointed with its own weights: it was kept with the older snapshot's file, found by
    agent and version alone, and a restart then played weights never snapshotted there."""
    import numpy as np

    from shepherd.agents.core import VersionedWeights
    from shepherd.agents.greedy_policy import FixedWeights, GreedyPolicy
    from shepherd.graph.snapshot_files import WeightsFile, weights_of

    play = SelfPlay(snapshot_every=4, window=10, against_latest=0.0, swap_every=10 ** 6)
    graph, store, keys = duel(tmp_path, TINY, play)
    try:
        session = graph.login(keys["environment duel"])
        await play_episodes(graph, session, 6)
        ghost = graph.runtime("c4").ratings.kept["duel"]
        assert ghost.pools["c4"]
        ghost.state()  # a checkpoint: the snapshots get their files
        version, old = ghost.pools["c4"][-1]
        weights = VersionedWeights(version, {key: array + 1.0 for key, array in weights_of(old).items()})
        ghost.pools["c4"].append((version, GreedyPolicy(old.network, FixedWeights(weights), old.actions, old.name,
                                                        old.filtering)))  # as after a restart from scratch
        state = ghost.state()
        for (version, policy), saved in zip(ghost.pools["c4"], state["pools"]["c4"]):
            arrays = WeightsFile.read(version, ghost.folder / saved["weights"]).arrays()
            assert all(np.array_equal(arrays[key], value) for key, value in weights_of(policy).items()), version
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_a_self_play_whose_agent_went_back_counts_its_snapshots_and_swaps_from_now(tmp_path):
    """The self-play is checkpointed with its environment's first role's agent; another agent (one agent per team)
    may resume from an older checkpoint after a kill -9, or restart from scratch: its steps are then below those the
    self-play noted. Its next snapshot and the next swap count from its steps now (it took no snapshot, and the
    teams did not swap, until it had caught up with the steps noted)."""
    play = SelfPlay(snapshot_every=4, window=10, against_latest=0.0, swap_every=12)
    graph, store, keys = duel(tmp_path, TINY, play)
    try:
        session = graph.login(keys["environment duel"])
        await play_episodes(graph, session, 3)
        runtime = graph.runtime("c4")
        ghost = runtime.ratings.kept["duel"]
        steps, snapshots = runtime.tracker.steps, len(ghost.pools["c4"])
        ghost._taken["c4"], ghost._swap_at = steps + 1000, steps + 1000 + play.swap_every  # noted ahead of it
        await play_episodes(graph, session, 4)
        assert runtime.tracker.steps - steps >= play.snapshot_every
        assert len(ghost.pools["c4"]) > snapshots and ghost._taken["c4"] <= runtime.tracker.steps
        assert ghost._swap_at <= runtime.tracker.steps + play.swap_every
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_ratings_rated_while_the_other_teams_agent_learns_are_checkpointed_by_time(tmp_path):
    """One agent per team: the environment's ratings and self-play live in the first role's agent's checkpoint,
    which counted no step while the other team learned (a whole ``swap_every`` of ratings, snapshots and the swap
    itself lost to a ``kill -9``); rated episodes make it due by ``checkpoint_every_seconds`` as steps do."""
    import asyncio

    from shepherd.agents import checkpoint

    play = SelfPlay(snapshot_every=4, window=3, against_latest=0.0, swap_every=6)
    graph = GraphManager(owner="tests", agents=[AgentSpec("red", "PPO", OBS, 2, TINY),
                                                AgentSpec("blue", "PPO", OBS, 2, TINY)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1,
                                           checkpoint_every_steps=10 ** 6, checkpoint_every_seconds=1e-6),
                         environments=(EnvironmentSpec("duel", {"p0": "red", "p1": "blue"}, "alternate",
                                                       {"r": ("p0",), "b": ("p1",)}, self_play=play),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    try:
        session = graph.login(keys["environment duel"])
        red = graph.runtime("red")
        learning = []
        for episode in range(9):
            for body in ({"obs": {"p0": A}}, {"obs": {"p1": A}}, {"obs": {"p0": A}, "reward": {"p0": 1.0}},
                         {"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True},
                          "outcome": {"p0": episode % 2, "p1": 1 - episode % 2}}):
                await graph.step(session, session.parse_step(body))
            learning.append(red.ratings.kept["duel"].learning)
        assert learning[2:] == [0] + [1] * 6  # the last six episodes: blue learned, red took no step
        await asyncio.to_thread(red.checkpoints.pending.result, 30)
        saved = checkpoint.read_state(red.model_path)["ratings"]
        assert saved == red.ratings.state()
        assert sum(rating["games"] for rating in saved["tables"]["duel"].values()) == 2 * 9
    finally:
        graph.end_sessions()
        await asyncio.to_thread(graph.close)
        store.close()


def plays_column_nine(obs, mask):
    return 9


async def test_a_scripted_opponents_action_outside_the_space_fails_the_reply_not_the_clients_env(tmp_path):
    """The self-play's scripted opponent's action is checked against the agent's action space (it went to the
    client as it was: PettingZoo's Connect Four ends the game on an illegal move, and the ratings took that for a
    game played). Masks: tests/http/test_roles_refusals.py."""
    from shepherd.level.roles import IllegalScriptedAction

    scripted = "tests.integration.test_roles_selfplay:plays_column_nine"
    play = SelfPlay(snapshot_every=10 ** 6, window=1, against_latest=0.0, swap_every=10 ** 6, opponents=(scripted,))
    graph, store, keys = duel(tmp_path, TINY, play)
    try:
        session = graph.login(keys["environment duel"])
        seqs = iter(range(10 ** 6))

        async def send(body):
            step = session.parse_step({**body, "seq": next(seqs)})
            acted = await graph.step(session, step)
            return session.level.reply_body(acted.action)

        await until_drawn(send, scripted)
        with pytest.raises(IllegalScriptedAction, match="plays_column_nine returned 9, not in its role's action"):
            await send({"obs": {"p1": A}})
    finally:
        graph.end_sessions()
        graph.close()
        store.close()
