"""A checkpoint write that kill -9 interrupts leaves a temporary: opening the store removes those of an agent's
folder and of the folders in it (an advised client's checkpoint, the self-play's snapshot files; it removed only
the agent folder's own)."""
from shepherd.storage import Store


def test_opening_the_store_removes_every_crashed_checkpoint_temporary(tmp_path):
    store = Store(tmp_path)
    user = store.add_user("u")
    agent = store.add_agent(user.id, "a", "PPO", [[2], -1, 1], 2, {})
    folder = store.agent_folder(agent.id)
    left = [folder / ".model.zip.k9x2.tmp", folder / "clients" / "bob" / ".model.zip.k9x2.tmp",
            folder / "selfplay" / "duel" / ".ab12.weights.k9x2.tmp"]
    for path in left:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half" * 1000)
    store.close()
    Store(tmp_path).close()
    assert [str(p.relative_to(folder)) for p in left if p.exists()] == []
