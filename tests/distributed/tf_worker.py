"""One TensorFlow process of the distributed tests (run by tf_cluster.py, never by pytest).

    python tf_worker.py mirrored OUT_DIR   # MirroredStrategy over two logical CPU devices
    python tf_worker.py worker OUT_DIR     # one MultiWorkerMirroredStrategy worker (TF_CONFIG)

Writes its results as JSON under OUT_DIR. ``ACCELKIT_TEST_DIE_AT=N`` makes a worker
exit abruptly after its N-th training step, as a crashed or killed worker would;
``ACCELKIT_TEST_STALL_AT=N`` makes it hang there, alive.
"""

from __future__ import annotations

import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

import accelkit
from tests.helpers.keras_models import classification_data, mlp  # ROOT: on tf_cluster's path

BATCH = 64  # the global batch: split across the replicas by the strategy


def build():
    """The model every run trains: the shared MLP, 16 -> 64 -> 4."""
    return mlp(name="mlp")


def mirrored(out: Path) -> None:
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    plan = accelkit.plan_for(
        "NVIDIA A100-SXM4-80GB", count=2, framework="tensorflow", precision="fp32"
    )
    strategy = accelkit.keras.strategy(plan)
    x, y = classification_data()
    report = accelkit.keras.fit(
        build,
        x,
        y,
        batch_size=BATCH,
        epochs=3,
        verbose=0,
        plan=plan,
        single_device_samples_per_second=1000.0,
    )
    model = report.trained_model
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outside = accelkit.keras.fit(
            build(), x, y, batch_size=BATCH, epochs=1, verbose=0, plan=plan
        )
    (out / "mirrored.json").write_text(
        json.dumps(
            {
                "strategy": type(strategy).__name__,
                "cross_device_ops": type(strategy.extended._cross_device_ops).__name__,
                "replicas": strategy.num_replicas_in_sync,
                "model_in_plan_strategy": model.distribute_strategy is strategy,
                "report": report.to_dict(),
                "outside": {
                    "report": outside.to_dict(),
                    "warnings": [str(w.message) for w in caught if "accelkit" in str(w.message)],
                },
            },
            default=str,
        )
    )


def _after_step(step: int, action):
    """A callback running `action` after training step `step` of the first epoch."""
    import keras

    class AfterStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch + 1 == step:
                action()

    return AfterStep()


def worker(out: Path) -> None:
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    plan = accelkit.auto_configure(framework="tensorflow", precision="fp32", verbose=False)
    x, y = classification_data()
    callbacks = []
    if os.environ.get("ACCELKIT_TEST_DIE_AT"):  # ends abruptly, like a crash or a kill
        callbacks.append(_after_step(int(os.environ["ACCELKIT_TEST_DIE_AT"]), lambda: os._exit(3)))
    if os.environ.get("ACCELKIT_TEST_STALL_AT"):  # alive (heartbeats go on) but stuck
        callbacks.append(
            _after_step(int(os.environ["ACCELKIT_TEST_STALL_AT"]), lambda: time.sleep(3600))
        )
    report = accelkit.keras.fit(
        build,
        x,
        y,
        batch_size=BATCH,
        epochs=3,
        verbose=0,
        plan=plan,
        callbacks=callbacks,
        validation_data=(x[:256], y[:256]),
        single_device_samples_per_second=1000.0,
    )
    strategy = accelkit.keras.strategy(plan)
    (out / f"worker{index}.json").write_text(
        json.dumps(
            {
                "strategy": type(strategy).__name__,
                "replicas": strategy.num_replicas_in_sync,
                "communication": str(strategy.extended._communication_options.implementation),
                "plan": plan.to_dict(),
                "history": report.history,
                "report": report.to_dict(),
            },
            default=str,
        )
    )


if __name__ == "__main__":
    mode, directory = sys.argv[1], Path(sys.argv[2])
    {"mirrored": mirrored, "worker": worker}[mode](directory)
    print(f"tf_worker {mode}: done", flush=True)
