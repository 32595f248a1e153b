"""ProfileCallback on a Keras backend other than TensorFlow (PyTorch here; JAX on the
H200, benchmarks/meter_overhead.py --framework keras): the timing, the precision
that ran and the notes for what only TensorFlow measures, without importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("keras")
pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import keras
    import accelkit

    plan = accelkit.plan_for("Tesla T4", framework="tensorflow")  # mixed_float16
    keras.mixed_precision.set_global_policy("mixed_float16")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 16)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    inputs = keras.Input((16,))
    hidden = keras.layers.Dense(64, activation="relu")(inputs)
    model = accelkit.keras.float32_head(keras.Model(inputs, keras.layers.Dense(2)(hidden)))
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callback = accelkit.keras.ProfileCallback(plan, warmup=2, window=4, sample_gpu=False)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[callback])
    report = callback.report
    print(json.dumps({"backend": keras.config.backend(), "report": report.to_dict(),
                      "tensorflow_imported": "tensorflow" in sys.modules}))
""")


def test_the_callback_measures_on_the_pytorch_backend_without_tensorflow() -> None:
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    report = result["report"]
    assert result["backend"] == "torch" and not result["tensorflow_imported"]
    assert report["steps"] == 2 * 16 and report["steady_steps"] == 2 * 16 - 2
    assert report["batch_size"] == 32 and report["samples_per_second"] > 0
    assert report["precision"] == "fp16" and report["matmul_dtype"] == "fp16"
    assert len(report["losses"]) == 2
    assert "TensorFlow backend only (Keras runs on torch)" in report["notes"]["flops_per_step"]
    assert "PyTorch backend" in report["notes"]["input_wait_share"]
