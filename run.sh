#!/usr/bin/env bash
# Set up and run accelkit on a fresh machine.
#   ./run.sh demo   hardware report and plan, a what-if plan, a profiled run of a built-in GPT
#   ./run.sh test   the test suite (real PyTorch CPU build and TensorFlow)
# The first call creates .venv and installs everything; later calls reuse it.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.accelkit-installed

setup() {
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    local want
    want=$(cat pyproject.toml run.sh | sha256sum | cut -c1-16)
    if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
        "$VENV/bin/python" -m pip install -q --upgrade pip
        # torch==2.13.0 is the CPU build; a looser pin pulls a multi-GB CUDA build.
        "$VENV/bin/python" -m pip install -q "torch==2.13.0" "tensorflow>=2.16"
        "$VENV/bin/python" -m pip install -q -e ".[dev]"
        echo "$want" > "$STAMP"
    fi
}

case "${1:-}" in
    demo)
        setup
        "$VENV/bin/accelkit" doctor
        echo
        "$VENV/bin/accelkit" plan --gpu "NVIDIA H200" --count 8 --framework torch
        echo
        "$VENV/bin/accelkit" bench --model gpt --framework torch --steps 20 --calibrate
        ;;
    test)
        setup
        shift
        "$VENV/bin/python" -m pytest -q "$@"
        ;;
    *)
        echo "usage: ./run.sh demo | test [pytest args]" >&2
        exit 2
        ;;
esac
