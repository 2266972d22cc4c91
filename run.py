#!/usr/bin/env python
"""Shepherd's command line; ``python run.py -h`` lists everything.

    python run.py -l                              list the presets
    python run.py -p cartpole_ppo                 serve a preset on 127.0.0.1:8000
    python run.py -p cartpole_ppo --clients 4     ... and drive it with 4 local gymnasium clients
    python run.py deploy policy.onnx --port 8001  serve an exported policy, without torch
"""

import sys

if __name__ == "__main__":
    if sys.argv[1:2] == ["deploy"]:  # before the learning server's command line, which imports torch
        from shepherd.deploy.cli import main as deploy

        sys.exit(deploy(sys.argv[2:]))
    from shepherd.cli import main

    sys.exit(main())
