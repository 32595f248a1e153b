#!/usr/bin/env bash
# Runs on the lent H200 machine, from the repository root there:
#   bash benchmarks/h200_session.sh core    "$OUT"   # real-machine examples, GPU tests, MFU check, meter cost
#   bash benchmarks/h200_session.sh gpt2    "$OUT"   # accelkit vs defaults / hand-tuned / Lightning, GPT-2 small
#   bash benchmarks/h200_session.sh resnet50 "$OUT"  # the same, ResNet-50
set -uo pipefail
phase=${1:?usage: h200_session.sh core|gpt2|resnet50 OUT_DIR}
out=${2:?usage: h200_session.sh core|gpt2|resnet50 OUT_DIR}
export PYTHONPATH=src PYTHONUNBUFFERED=1
py=python3

case "$phase" in
core)
    $py -m accelkit doctor > "$out/doctor.txt" 2>&1
    $py -m accelkit doctor --json > "$out/doctor.json" 2> "$out/doctor.err"
    $py -c "import accelkit; accelkit.auto_configure()" > "$out/auto_configure.txt" 2>&1
    $py -m pytest tests -q -p no:cacheprovider -rs > "$out/pytest.txt" 2>&1
    $py -m accelkit bench --model gpt2 --steps 60 --calibrate --save "$out/gpt2_bench.json" \
        > "$out/gpt2_bench.txt" 2>&1
    $py benchmarks/meter_overhead.py --framework torch --model gpt2 --steps 40 --repeats 5 \
        --out "$out/meter_overhead_gpt2.json" > "$out/meter_overhead_gpt2.txt" 2>&1
    ;;
gpt2)
    $py benchmarks/gpu_compare.py --model gpt2 --steps 30 --repeats 3 \
        --out "$out/gpu_compare_gpt2.json" > "$out/gpu_compare_gpt2.txt" 2>&1
    ;;
resnet50)
    $py benchmarks/gpu_compare.py --model resnet50 --batch-size 256 --steps 20 --repeats 3 \
        --out "$out/gpu_compare_resnet50.json" > "$out/gpu_compare_resnet50.txt" 2>&1
    ;;
esac
tail -n 25 "$out"/*.txt
