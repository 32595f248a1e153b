#!/usr/bin/env bash
# Set up and run accelkit on a fresh machine.
#   ./run.sh demo   hardware report and plan, a what-if plan, a profiled run of a built-in GPT
#                   and that run projected onto an H200
#   ./run.sh test   the test suite (real PyTorch CPU build and TensorFlow)
# The first call creates .venv and installs what that command runs; later calls reuse it.
#   demo: the CPU build of PyTorch, NumPy and accelkit (about 0.9 GB)
#   test: those, TensorFlow and the dev extras: Lightning, transformers, the docs and
#         lint tools (about 3.5 GB)
# Each command keeps its own stamp in .venv, so a demo's smaller set never passes for the
# test suite's; a stamp is redone when pyproject.toml or this file changes.
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-python3}
VENV=.venv

setup() {
    local profile=$1 stamp=$VENV/.accelkit-$1 want
    [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
    want=$(cat pyproject.toml run.sh | sha256sum | cut -c1-16)
    [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # torch==2.13.0 is the CPU build; a looser pin pulls a multi-GB CUDA build.
    case $profile in
        demo)
            # numpy: torch imports it when present and warns "Failed to initialize
            # NumPy" at the top of the bench when not.
            "$VENV/bin/python" -m pip install -q "torch==2.13.0" numpy
            "$VENV/bin/python" -m pip install -q -e ".[torch]"
            ;;
        test)
            "$VENV/bin/python" -m pip install -q "torch==2.13.0" "tensorflow>=2.16"
            "$VENV/bin/python" -m pip install -q -e ".[torch,tensorflow,dev]"
            ;;
    esac
    echo "$want" > "$stamp"
}

case "${1:-}" in
    demo)
        setup demo
        "$VENV/bin/accelkit" doctor
        echo
        "$VENV/bin/accelkit" plan --gpu "NVIDIA H200" --count 8 --framework torch
        echo
        # then what the same GPT would do on one H200, with the estimate's assumptions
        # (compiled: eager, its host would issue the ops slower than an H200 runs them)
        "$VENV/bin/accelkit" bench --model gpt --framework torch --steps 20 --calibrate \
            --compile --project H200
        ;;
    test)
        setup test
        shift
        "$VENV/bin/python" -m pytest -q "$@"
        ;;
    *)
        echo "usage: ./run.sh demo | test [pytest args]" >&2
        exit 2
        ;;
esac
