"""``python -m shepherd.deploy POLICY.onnx``: the deploy server (`shepherd.deploy.cli`), as ``python run.py deploy``
runs it, for a host where Shepherd was installed without its repository (and torch)."""

import sys

from shepherd.deploy.cli import main

sys.exit(main())
