"""An advised preset as a user runs it: ``run.py check``, ``run.py -p PRESET --clients 2`` (local clients named
``local-0`` and ``local-1``, the target reached by both), then, with the server stopped, ``agents show`` listing
the clients from their checkpoints and ``agents export --client`` writing one client's model (SB3 and ONNX),
an unknown client refused naming the known ones."""

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx

from shepherd.agents.export.export import metadata
from shepherd.storage import Store

ROOT = Path(__file__).resolve().parents[2]
PRESET = str(ROOT / "tests" / "presets" / "tiny_ppo_advised.py")


def run_py(*argv, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_an_advised_preset_checked_served_with_named_local_clients_shown_and_exported(tmp_path):
    checked = run_py("check", PRESET)
    assert checked.returncode == 0, checked.stderr
    assert "sharing advised" in checked.stdout and "local-0 ... local-N-1" in checked.stdout

    data = tmp_path / "data"
    served = run_py("-p", PRESET, "--clients", "2", "--port", "0", "--data", str(data), "--quiet")
    assert served.returncode == 0, (served.stdout, served.stderr)
    assert "local clients of advised agent arms: local-0, local-1" in served.stdout
    assert "target reached by every client (local-0, local-1)" in served.stdout

    store = Store(data)
    try:
        agent = store.agents()[0]
        assert store.return_clients(agent.id) == ["local-0", "local-1"]
        union = store.returns(agent.id)
        per_client = {name: store.returns(agent.id, name) for name in ("local-0", "local-1")}
        assert len(union) == sum(len(records) for records in per_client.values())
        assert all(r.client == name for name, records in per_client.items() for r in records)
        assert any(r.phase == "evaluate" for r in per_client["local-1"])
    finally:
        store.close()

    shown = run_py("agents", "show", "tests/arms", "--data", str(data))
    assert shown.returncode == 0, shown.stderr
    rows = {line.split()[0]: line.split() for line in shown.stdout.splitlines() if line.startswith("local-")}
    assert sorted(rows) == ["local-0", "local-1"]
    assert all(row[1] == "stopped" and int(row[2]) > 0 for row in rows.values())  # steps from the checkpoints
    assert all(float(row[6]) >= 1.0 for row in rows.values())  # each one's recent evaluation

    target = tmp_path / "local-1.zip"
    exported = run_py("agents", "export", "tests/arms", "--client", "local-1", "-o", str(target), "--data", str(data))
    assert exported.returncode == 0, exported.stderr
    assert "client local-1" in exported.stdout
    with zipfile.ZipFile(io.BytesIO(target.read_bytes())) as archive:
        steps = json.loads(archive.read("shepherd.json"))["schedule"]["steps"]
    assert steps == int(rows["local-1"][2])

    onnx_file = tmp_path / "local-0.onnx"
    exported = run_py("agents", "export", "tests/arms", "--client", "local-0", "--format", "onnx",
                      "-o", str(onnx_file), "--data", str(data))
    assert exported.returncode == 0, exported.stderr
    info = metadata(onnx.load(str(onnx_file)))
    assert info["client"] == "local-0" and "without its advisor" in info["advice"]

    refused = run_py("agents", "export", "tests/arms", "--client", "arm-9", "-o", str(tmp_path / "x.zip"),
                     "--data", str(data))
    assert refused.returncode == 2
    assert "no client 'arm-9'; its clients: local-0, local-1" in refused.stderr
