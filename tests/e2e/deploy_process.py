"""``python run.py deploy POLICY`` in a subprocess, with the URL and API key it printed: for the deploy
tests here, and for an end-to-end test with a policy the exporter wrote (pass its file as ``policy``)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import AnnouncedProcess


class DeployProcess(AnnouncedProcess):
    """The deploy server on a free port of 127.0.0.1, run in ``cwd``; its stderr goes to ``log``. With
    ``import_log`` Python reports every module it imports (``-X importtime``) into the log, so a test can
    tell what the process ever imported."""

    PATTERNS = {"url": r"^deploying agent \S+ .* at (http://\S+)", "api_key": r"^API key .*: (\S+)$"}
    url: str | None
    api_key: str | None

    def __init__(self, policy: Path, cwd: Path, log: Path, *extra: str, import_log: bool = False,
                 timeout: float = 60.0) -> None:
        super().__init__(["deploy", str(policy), "--port", "0", *extra], cwd, log, timeout,
                         ("-X", "importtime") if import_log else ())
