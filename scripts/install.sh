#!/bin/sh
# Install Shepherd into ./.venv. With --test, also what the test suite needs.
#   scripts/install.sh          the server, its clients and presets
#   scripts/install.sh --test   ... and pytest, the example clients' needs and Node.js
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
    if ! command -v node >/dev/null 2>&1; then
        echo "installing Node.js for the JavaScript example client ..."
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        $SUDO apt-get update -q && $SUDO apt-get install -y -q nodejs
    fi
else
    $PIP install -e .
fi
echo "installed into $(pwd)/.venv"
