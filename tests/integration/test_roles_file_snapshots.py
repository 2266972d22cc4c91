"""Self-play snapshots of an agent without a numpy greedy copy (issue 46): its behaviour file of the version, played by
onnxruntime on the head (`shepherd.agents.frozen_file.FrozenFile`): the opponent plays it, its steps are not
learned, it is rated, and the checkpoint keeps it byte for byte; a policy no file can hold (RecurrentPPO) gets no
snapshots and says so once."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from shepherd.agents.frozen_file import FrozenFile
from shepherd.environments import EnvironmentSpec, SelfPlay
from shepherd.graph import AgentSpec, GraphManager, Schedule
from shepherd.graph.local import serving_here
from shepherd.graph.selfplay import Ghost
from shepherd.storage import Store

OBS = [[2], -1.0, 1.0]
#: 2 x 400 + 400 x 400 + ... weights: over the numpy greedy copy's 100,000, so the agent has none
WIDE = {"n_steps": 8, "batch_size": 8, "n_epochs": 1, "seed": 0, "policy_kwargs": {"net_arch": [400, 400]}}
A = [0.0, 0.5]


def served(tmp_path, algorithm: str, parameters: dict, play: SelfPlay, obs=OBS):
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", algorithm, obs, 2, parameters)],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                       self_play=play),))
    store = Store(tmp_path / "data")
    return graph, store, graph.create_graph(store, serving_here())


async def play_episodes(graph, key, count: int, A=A) -> list[tuple[str, str, dict]]:
    """``count`` episodes of 3 turns a role (observing ``A``); each episode's (opponent role, label, the opponent's
    first reply)."""
    session = graph.login(key)

    async def send(body):
        acted = await graph.step(session, session.parse_step(body))
        return session.level.reply_body(acted.action)

    played = []
    for _ in range(count):
        replies = [await send({"obs": {"p0": A}})]
        [(role, label)] = replies[0]["opponents"].items()
        for turn in range(5):
            replies.append(await send({"obs": {("p1", "p0")[turn % 2]: A}, "reward": {"p0": 1.0, "p1": 1.0}}))
        played.append((role, label, replies[0] if role == "p0" else replies[1]))
        await send({"obs": {"p0": A, "p1": A}, "terminated": {"p0": True, "p1": True}, "outcome": {"p0": 1, "p1": 0}})
    graph.logout(session.key)
    return played


#: a board through `GridCNN`: no numpy copy either
BOARD = {**WIDE, "policy_kwargs": {"features_extractor_class": "GridCNN",
                                   "features_extractor_kwargs": {"filters": 4, "features_dim": 16}}}


@pytest.mark.parametrize("parameters, obs, A", [(WIDE, OBS, A), (BOARD, [[2, 3], -1.0, 1.0], [[0, 0.5, 1], [1, 0, -1]])],
                         ids=["wide-mlp", "grid-cnn"])
async def test_an_agent_without_a_numpy_copy_plays_snapshots_of_its_behaviour_file(tmp_path, parameters, obs, A):
    play = SelfPlay(snapshot_every=8, window=3, against_latest=0.0, swap_every=10 ** 6, opponent_actions="greedy")
    graph, store, keys = served(tmp_path, "PPO", parameters, play, obs)
    try:
        runtime = graph.runtime("c4")
        assert runtime.learner.greedy is None  # the path under test: no numpy copy
        played = await play_episodes(graph, keys["environment duel"], 12, A)
        ghost = runtime.ratings.kept["duel"]
        assert isinstance(ghost, Ghost)
        pool = list(ghost.pools["c4"])
        assert pool and all(isinstance(frozen, FrozenFile) and frozen.phase == "evaluate" for _, frozen in pool)
        labels = [label for _, label, _ in played]
        assert any(label.startswith("snapshot:") for label in labels), labels
        files = dict(pool)
        compared = 0
        for role, label, first in played:  # the snapshot's first step, answered by its file
            frozen = files.get(int(label.split(":")[1])) if label.startswith("snapshot:") else None
            if frozen is not None:
                assert first["actions"][role] == int(frozen.act(np.array(A, np.float32))[0])
                compared += 1
        assert compared, played
        assert runtime.tracker.steps == 3 * 12  # the learning role's steps only
        table = runtime.ratings.table("duel")
        assert any(player.startswith("c4@snapshot:") for player in table)

        state = json.loads(json.dumps(ghost.state()))  # as the checkpoint writes it: the files beside it
        names = [snapshot["file"] for snapshot in state["pools"]["c4"]]
        assert names and all((ghost.folder / name).read_bytes() == frozen.data for name, (_, frozen) in zip(names, pool))
        again = Ghost(ghost.spec, ghost.runtimes, seed=1)
        again.load(state)
        assert json.dumps(again.state(), sort_keys=True) == json.dumps(state, sort_keys=True)  # byte for byte
        restored = [frozen for _, frozen in again.pools["c4"]]
        for (_, frozen), copy in zip(pool, restored):
            assert frozen.act(np.array(A, np.float32)) == copy.act(np.array(A, np.float32))
        assert len(json.dumps(state["pools"])) < 1_000  # names, not files: each file is ~0.65 MB (the MLP's)
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


def test_file_snapshots_are_written_once_and_removed_when_no_checkpoint_can_name_them(tmp_path):
    """Kept beside the checkpoint by content: a checkpoint writes the files its pools hold that are not there, and a
    file leaves the folder only once a checkpoint that does not name it is written (until then the last one
    written is the one a restart reads); a failed write removes nothing."""
    import threading
    from concurrent.futures import Future

    class Pool:
        def __init__(self, data: bytes) -> None:
            self.data, self.version = data, 0

        file_name = property(lambda self: FrozenFile.file_name.func(self))  # type: ignore[attr-defined]
        keep = FrozenFile.keep
        state = FrozenFile.state

    where = tmp_path / "selfplay"

    class Kept(Ghost):
        folder = where  # type: ignore[assignment]

    ghost = Kept.__new__(Kept)
    ghost.pools, ghost._weight_files, ghost._files_lock = {}, {}, threading.Lock()
    ghost._files_on_disk, ghost._files_pending, ghost._prepared = set(), {}, 0

    def checkpoint() -> Future:
        """A checkpoint of the state taken now: its write queued, then done (``ok``) or failed."""
        ghost._keep_files()
        write: Future = Future()
        ghost.written_by(write)
        return write

    def finish(write: Future, ok: bool = True) -> None:
        write.set_result(None) if ok else write.set_exception(OSError("disk full"))

    def files() -> list[str]:
        return sorted(p.name for p in where.iterdir())

    a, b, c, d = Pool(b"a"), Pool(b"b"), Pool(b"c"), Pool(b"d")
    ghost.pools = {"c4": [(0, a), (1, b)]}
    finish(checkpoint())
    assert files() == sorted([a.file_name, b.file_name])
    written = (where / a.file_name).stat().st_mtime_ns
    ghost.pools = {"c4": [(1, b), (2, c)]}  # a leaves the pool: the last checkpoint written names it
    pending = checkpoint()
    assert (where / a.file_name).exists() and (where / c.file_name).exists()
    assert (where / b.file_name).stat().st_mtime_ns >= written and (where / a.file_name).stat().st_mtime_ns == written
    finish(pending)  # written: nothing names a any more
    assert files() == sorted([b.file_name, c.file_name])

    ghost.pools = {"c4": [(2, c), (3, d)]}  # b leaves the pool, but this checkpoint's write fails
    finish(checkpoint(), ok=False)
    assert files() == sorted([b.file_name, c.file_name, d.file_name])  # b: the last checkpoint written names it
    ghost.pools = {"c4": [(3, d)]}
    first, second = checkpoint(), checkpoint()  # two queued: the first written, the second still being written
    finish(first)
    assert files() == sorted([d.file_name])
    finish(second)
    assert files() == sorted([d.file_name])


async def test_sampled_opponents_play_the_training_file(tmp_path):
    play = SelfPlay(snapshot_every=8, window=3, against_latest=0.0, swap_every=10 ** 6)  # opponent_actions: sample
    graph, store, keys = served(tmp_path, "PPO", WIDE, play)
    try:
        await play_episodes(graph, keys["environment duel"], 6)
        pool = list(graph.runtime("c4").ratings.kept["duel"].pools["c4"])
        assert pool and all(frozen.phase == "train" and frozen.noise_size == 1 for _, frozen in pool)
        frozen = pool[-1][1]
        rng = np.random.default_rng(0)
        drawn = {int(frozen.act(np.array(A, np.float32), None, rng)[0]) for _ in range(200)}
        assert drawn == {0, 1}  # a fresh policy near uniform: both actions drawn
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


async def test_a_recurrent_agent_gets_no_snapshots_and_says_so_once(tmp_path, caplog):
    play = SelfPlay(snapshot_every=4, window=3, against_latest=0.0, swap_every=10 ** 6)
    graph, store, keys = served(tmp_path, "RecurrentPPO", {**WIDE, "policy_kwargs": {"net_arch": [8]}}, play)
    try:
        with caplog.at_level(logging.WARNING, logger="shepherd.graph.selfplay"):
            played = await play_episodes(graph, keys["environment duel"], 6)
        assert {label for _, label, _ in played} == {"latest"}
        warned = [r for r in caplog.records if "gets no snapshots" in r.getMessage()]
        assert len(warned) == 1 and "LSTM" in warned[0].getMessage()
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


@pytest.mark.parametrize("mask", [None, [True, False]])
def test_a_frozen_file_feeds_a_mask_only_to_a_file_that_takes_one(mask):
    from shepherd.agents import build_learner
    from shepherd.agents.export.behaviour import behaviour_adapter
    from shepherd.wire.spaces import parse_space

    learner = build_learner("MaskablePPO", "c4", parse_space(OBS), parse_space(2), {"seed": 0}, None)
    frozen = FrozenFile(0, behaviour_adapter(learner.algorithm, "c4", "MaskablePPO", "evaluate"), "c4")
    action, version = frozen.act(np.array(A, np.float32), mask)
    assert version == 0 and (mask is None or action == 0)


async def test_an_image_agent_plays_its_file_snapshots_on_pixels(tmp_path):
    """A CNN agent (images: no numpy copy) in self-play: its snapshots are files that take the clients' uint8
    pixels as they come."""
    eyes = ["Image", [36, 36, 1]]
    play = SelfPlay(snapshot_every=8, window=3, against_latest=0.0, swap_every=10 ** 6)
    graph = GraphManager(owner="tests", agents=[AgentSpec("c4", "PPO", eyes, 2, {**WIDE, "policy_kwargs": {}})],
                         schedule=Schedule(steps_between_evaluation_periods=10 ** 6, evaluation_episodes=1),
                         environments=(EnvironmentSpec("duel", {"p0": "c4", "p1": "c4"}, "alternate",
                                                       self_play=play),))
    store = Store(tmp_path / "data")
    keys = graph.create_graph(store, serving_here())
    pixels = np.random.default_rng(0).integers(0, 256, (36, 36, 1)).tolist()
    try:
        session = graph.login(keys["environment duel"])
        labels = []
        for _ in range(6):
            acted = await graph.step(session, session.parse_step({"obs": {"p0": pixels}}))
            reply = session.level.reply_body(acted.action)
            labels.append(reply["opponents"]["p1"])
            for turn in range(3):
                body = {"obs": {("p1", "p0")[turn % 2]: pixels}, "reward": {"p0": 0.0, "p1": 0.0}}
                reply = session.level.reply_body((await graph.step(session, session.parse_step(body))).action)
                assert set(reply["actions"]) == {("p1", "p0")[turn % 2]}
            await graph.step(session, session.parse_step({"obs": {"p0": pixels, "p1": pixels},
                                                          "terminated": {"p0": True, "p1": True}}))
        pool = list(graph.runtime("c4").ratings.kept["duel"].pools["c4"])
        assert pool and isinstance(pool[0][1], FrozenFile) and any(label.startswith("snapshot:") for label in labels)
        assert pool[0][1].act(np.asarray(pixels, np.uint8), None, np.random.default_rng(0)) is not None
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


def test_a_passing_failure_to_build_a_snapshot_is_asked_again_and_a_policy_no_file_holds_is_not():
    from types import SimpleNamespace

    from shepherd.agents import AgentClosed
    from shepherd.agents.export.behaviour import NotActableAtClient

    ghost = Ghost.__new__(Ghost)
    ghost.spec, ghost._no_files = SimpleNamespace(name="duel"), set()
    ghost._not_built("c4", AgentClosed("agent c4 is restarting"))
    assert ghost._no_files == set()  # asked again at the next snapshot's turn
    ghost._not_built("c4", NotActableAtClient("RecurrentPPO's action depends on each actor's LSTM state"))
    assert ghost._no_files == {"c4"}


@pytest.mark.parametrize("algorithm, parameters, obs, A", [
    ("PPO", WIDE, OBS, A), ("PPO", BOARD, [[2, 3], -1.0, 1.0], [[0, 0.5, 1], [1, 0, -1]]),
    ("RecurrentPPO", {**WIDE, "policy_kwargs": {"net_arch": [8]}}, OBS, A)], ids=["wide-mlp", "grid-cnn", "recurrent"])
@pytest.mark.parametrize("actions", ["sample", "greedy"])
async def test_the_latest_opponent_of_an_agent_without_a_numpy_copy_samples_as_a_snapshot_does(
        tmp_path, algorithm, parameters, obs, A, actions):
    """The learner itself plays a ``latest`` opponent it has no numpy copy of (`Trial` live): with
    ``opponent_actions: sample`` it draws the action from its (fresh, near uniform) policy, with a seed of the
    self-play's generator (`Request.draw`), so both actions come; ``greedy``: its mode, one action (no update
    comes within the episodes: one policy throughout)."""
    play = SelfPlay(snapshot_every=10 ** 6, window=1, against_latest=1.0, swap_every=10 ** 6, opponent_actions=actions)
    graph, store, keys = served(tmp_path, algorithm, {**parameters, "n_steps": 256, "batch_size": 64}, play, obs)
    try:
        assert graph.runtime("c4").learner.greedy is None  # the path under test: the learner answers
        played = await play_episodes(graph, keys["environment duel"], 30, A)
        assert {label for _, label, _ in played} == {"latest"}
        first = {reply["actions"][role] for role, _, reply in played}
        assert first == {0, 1} if actions == "sample" else len(first) == 1
    finally:
        graph.end_sessions()
        graph.close()
        store.close()


def test_drawn_acts_follow_the_distribution_under_its_mask_and_leave_torchs_random_numbers_alone():
    """`modes`: a row with a seed draws from the distribution (Gumbel-max over its logits), the same action for
    the same seed, never a masked one, and without touching torch's generator, whose numbers SB3's own
    sampling draws (a learner's trained weights must not depend on how often its opponents were asked)."""
    import torch as th
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution

    from shepherd.agents.sb3.greedy import modes

    distribution = MaskableCategoricalDistribution(3).proba_distribution(th.tensor([[0.0, 0.7, 5.0]] * 4))
    distribution.apply_masking(np.array([[True, True, False]] * 4))
    state = th.random.get_rng_state()
    drawn = [int(modes(distribution, [None, seed, seed, None])[1]) for seed in range(400)]
    assert th.equal(th.random.get_rng_state(), state)
    assert all(int(a) == 1 for a in modes(distribution, [None] * 4))  # the mode of the allowed two
    assert list(modes(distribution, [None, 7, 7, None])[1:3]) == [drawn[7]] * 2
    share = drawn.count(1) / len(drawn)  # softmax([0, 0.7]): 0.668
    assert 2 not in drawn and 0.58 < share < 0.76


def test_drawn_acts_of_multi_categorical_and_bernoulli_policies_draw_each_part():
    import torch as th
    from stable_baselines3.common.distributions import BernoulliDistribution, MultiCategoricalDistribution

    from shepherd.agents.sb3.greedy import modes

    parts = MultiCategoricalDistribution([2, 3]).proba_distribution(th.tensor([[0.0, 0.0, 0.0, 0.0, -30.0]] * 2))
    bits = BernoulliDistribution(2).proba_distribution(th.tensor([[0.0, 30.0]] * 2))
    for distribution, values in ((parts, {(0, 0), (0, 1), (1, 0), (1, 1)}), (bits, {(0.0, 1.0), (1.0, 1.0)})):
        drawn = {tuple(modes(distribution, [None, seed])[1].tolist()) for seed in range(200)}
        assert drawn == values  # every part drawn, and a near-impossible choice (a logit of -30; a bit of +30) never
        assert modes(distribution, [None, 3])[1].tolist() == modes(distribution, [None, 3])[1].tolist()
