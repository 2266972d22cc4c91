"""A file written with atomic_write_bytes is, after any kill -9, either the old or the new version."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

WRITER = """
import sys
from pathlib import Path
from shepherd.storage import atomic_write_bytes
path = Path(sys.argv[1])
i = 0
while True:
    i += 1
    atomic_write_bytes(path, bytes([i % 251]) * 3_000_000)  # 3 MB of one byte value: whole or not
"""


@pytest.mark.e2e  # starts another process
def test_killing_a_writer_at_random_moments_never_leaves_a_half_written_file(tmp_path):
    target = tmp_path / "model.zip"
    target.write_bytes(b"\x00" * 3_000_000)
    rng = random.Random(7)
    for _ in range(15):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)])
        time.sleep(rng.uniform(0.3, 0.8))
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait()
        content = target.read_bytes()
        assert len(content) == 3_000_000 and content.count(content[:1]) == len(content)


def test_opening_the_store_removes_temporaries_that_crashed_checkpoint_writes_left(tmp_path):
    from shepherd.storage import Store

    store = Store(tmp_path)
    user = store.add_user("u")
    agent = store.add_agent(user.id, "a", "PPO", [[2], -1, 1], 2, {})
    folder = store.agent_folder(agent.id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.zip").write_bytes(b"whole")
    (folder / ".model.zip.k9x2.tmp").write_bytes(b"half")
    store.close()
    Store(tmp_path).close()
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp")) == []
    assert (folder / "model.zip").read_bytes() == b"whole"


def test_a_folder_created_for_a_file_is_made_durable_in_its_parent(tmp_path, monkeypatch):
    """A file's own fsync and its folder's do not make a folder created for it durable: the folder's name lives
    in its parent. Every folder created (here two, for an agent's self-play file) has its parent fsynced."""
    from shepherd.storage import atomic_write_bytes, files

    synced: list = []
    monkeypatch.setattr(files, "_fsync_dir", synced.append)
    atomic_write_bytes(tmp_path / "agents" / "7" / "model.zip", b"weights")
    assert synced[:2] == [tmp_path, tmp_path / "agents"]  # the two folders' parents, outermost first
    assert synced[-1] == tmp_path / "agents" / "7"  # then the file's own folder, after the rename
