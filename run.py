#!/usr/bin/env python
"""Shepherd's command line; ``python run.py -h`` lists everything.

    python run.py -l                              list the presets
    python run.py -p cartpole_ppo                 serve a preset on 127.0.0.1:8000
    python run.py -p cartpole_ppo --clients 4     ... and drive it with 4 local gymnasium clients
    python run.py deploy policy.onnx --port 8001  serve an exported policy, without torch
"""

import sys


def _deploy_arguments(argv: list[str]) -> list[str] | None:
    """The deploy command's arguments when the command line is `deploy ...` (after -v/--verbose, if given
    first), else None: the deploy server starts before the learning server's command line, which imports
    torch."""
    for index, arg in enumerate(argv):
        if arg == "deploy":
            return argv[index + 1:] + argv[:index]
        if arg not in ("-v", "--verbose"):
            return None
    return None


if __name__ == "__main__":
    deploy_argv = _deploy_arguments(sys.argv[1:])
    if deploy_argv is not None:
        from shepherd.deploy.cli import main as deploy

        sys.exit(deploy(deploy_argv))
    from shepherd.cli import main

    sys.exit(main())
