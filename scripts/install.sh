#!/bin/sh
# Install Shepherd into ./.venv. With --test, also what the test suite needs.
#   scripts/install.sh          the server, its clients and presets
#   scripts/install.sh --test   ... and pytest, Playwright, mkdocs (the documentation site), the example
#                               clients' needs, and (through apt,
#                               when missing) Node.js, npm, Chromium and wrk (benchmarks/perf.py's load
#                               generator); then onnxruntime-node into examples/node_modules (cartpole_onnx.js)
# torch is installed first, pinned to the CPU build that pip finds on this kind of machine, so that
# stable-baselines3 sees it satisfied instead of pulling a multi-GB CUDA build.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/python -m pip --disable-pip-version-check -q"
$PIP install --upgrade pip
$PIP install torch==2.13.0
if [ "${1:-}" = "--test" ]; then
    $PIP install -e '.[test]'
    MISSING=""
    command -v node >/dev/null 2>&1 || MISSING="nodejs"  # the JavaScript example client
    command -v npm >/dev/null 2>&1 || MISSING="$MISSING npm"  # installs onnxruntime-node for cartpole_onnx.js
    command -v chromium >/dev/null 2>&1 || MISSING="$MISSING chromium"  # the dashboard's browser tests
    command -v wrk >/dev/null 2>&1 || MISSING="$MISSING wrk"  # the load generator of benchmarks/perf.py
    if [ -n "$MISSING" ]; then
        MISSING="${MISSING# }"
        echo "installing $MISSING through apt ..."
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        # shellcheck disable=SC2086
        $SUDO apt-get update -q && $SUDO apt-get install -y -q $MISSING
    fi
    (cd examples && npm install --no-save --loglevel=error)  # examples/package.json and .npmrc: no lock file
else
    $PIP install -e .
fi
echo "installed into $(pwd)/.venv"
