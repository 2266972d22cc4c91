#!/usr/bin/env python
"""Shepherd's command line; ``python run.py -h`` lists everything.

    python run.py -l                              list the presets
    python run.py -p cartpole_ppo                 serve a preset on 127.0.0.1:8000
    python run.py -p cartpole_ppo --clients 4     ... and drive it with 4 local gymnasium clients
"""

import sys

from shepherd.cli import main

if __name__ == "__main__":
    sys.exit(main())
