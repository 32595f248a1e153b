#!/usr/bin/env bash
# One call on the lent H200 machine: the real-machine examples, the GPU tests, the
# GPT-2 small MFU check and the meter's cost. Run from the repository root there:
#   bash benchmarks/h200_session.sh "$OUT"
set -uo pipefail
out=${1:?usage: h200_session.sh OUT_DIR}
export PYTHONPATH=src PYTHONUNBUFFERED=1
py=python3

$py -m accelkit doctor > "$out/doctor.txt" 2>&1
$py -m accelkit doctor --json > "$out/doctor.json" 2> "$out/doctor.err"
$py -c "import accelkit; accelkit.auto_configure()" > "$out/auto_configure.txt" 2>&1
$py -m pytest tests -q -p no:cacheprovider -x > "$out/pytest.txt" 2>&1
$py -m accelkit bench --model gpt2 --steps 60 --calibrate --save "$out/gpt2_bench.json" \
    > "$out/gpt2_bench.txt" 2>&1
$py benchmarks/meter_overhead.py --framework torch --model gpt2 --steps 40 --repeats 5 \
    --out "$out/meter_overhead_gpt2.json" > "$out/meter_overhead_gpt2.txt" 2>&1
tail -n 3 "$out"/*.txt
