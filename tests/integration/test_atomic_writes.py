"""A file written with atomic_write_bytes is, after any kill -9, either the old or the new version."""

import os
import random
import signal
import subprocess
import sys
import time

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
