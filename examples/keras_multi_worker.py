"""Keras on several machines: `MultiWorkerMirroredStrategy` from `TF_CONFIG`.

Shows: one script that every worker runs. With `TF_CONFIG` set,
`accelkit.auto_configure()` plans `MultiWorkerMirroredStrategy` (NCCL between
GPU workers, RING over gRPC between CPU workers) and `accelkit.keras.fit` builds
the model inside it from a function, trains it (Keras 3 cannot `fit` under this
strategy by itself, keras-team/keras#20585; accelkit works around it for the
fit), and measures the run across all workers: every worker's report holds the
cluster's `world_size`, each worker's figures and the global samples/s.

Run on two machines (the same script on each, with its own task index):

    TF_CONFIG='{"cluster": {"worker": ["host-a:12345", "host-b:12345"]},
                "task": {"type": "worker", "index": 0}}' python examples/keras_multi_worker.py
    TF_CONFIG='{"cluster": {"worker": ["host-a:12345", "host-b:12345"]},
                "task": {"type": "worker", "index": 1}}' python examples/keras_multi_worker.py

or try it on one machine, the script starting both workers on localhost ports,
each with half of the GPUs:

    python examples/keras_multi_worker.py --local-workers 2

Smoke test (two local CPU workers, tiny sizes):

    python examples/keras_multi_worker.py --smoke --local-workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np

import accelkit


def build() -> keras.Model:
    """A tabular classifier, compiled; `accelkit.keras.fit` calls this inside the strategy."""
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])  # fmt: skip
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return accelkit.keras.float32_head(model)


def train(epochs: int, samples: int, batch_size: int, window: int) -> None:
    """One worker: the same call on every worker; Keras shards the data between them."""
    plan = accelkit.auto_configure()  # TF_CONFIG set: MultiWorkerMirroredStrategy
    rng = np.random.default_rng(0)  # the same data on every worker
    x = rng.standard_normal((samples, 64)).astype("float32")
    y = (x[:, :10] @ rng.standard_normal((10, 10))).argmax(axis=1)
    report = accelkit.keras.fit(
        build, x, y, batch_size=batch_size, epochs=epochs, verbose=0, window=window
    )
    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    if task.get("index", 0) == 0:  # worker 0 is the chief when the cluster names none
        strategy = type(accelkit.keras.strategy(plan)).__name__
        print(f"{strategy}: {report.world_size} replicas in all")
        print(report)
        loss, accuracy = report.history["loss"][-1], report.history["accuracy"][-1]
        print(f"final loss {loss:.4f}, accuracy {accuracy:.1%}")


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def launch_local(workers: int, worker_args: list[str], timeout: float) -> int:
    """Start `workers` copies of this script on localhost, each with its TF_CONFIG and
    GPUs of its own, and wait for them; if one fails or the time runs out, stop the others."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(workers)]}
    # NCCL cannot share a GPU between processes: give each worker its own share of the
    # GPUs (NVML's count: CUDA is not initialised here), none when there are too few.
    share = accelkit.detect().gpu_count // workers
    processes = []
    for index in range(workers):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
        if "CUDA_VISIBLE_DEVICES" not in os.environ:
            gpus = range(index * share, (index + 1) * share)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(gpu) for gpu in gpus)
        processes.append(subprocess.Popen([sys.executable, __file__, *worker_args], env=env))
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in processes):
        failed = any(p.returncode not in (None, 0) for p in processes)
        if failed or time.monotonic() > deadline:
            print("stopping the workers: " + ("one failed" if failed else "time is up"))
            for p in processes:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.2)
    codes = [p.wait() for p in processes]
    print(f"workers exited with {codes}")
    return next((code for code in codes if code != 0), 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--local-workers", type=int, help="start this many workers here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds, local workers")
    args = parser.parse_args()
    if args.local_workers:
        worker_args = ["--epochs", str(args.epochs)] + (["--smoke"] if args.smoke else [])
        sys.exit(launch_local(args.local_workers, worker_args, args.timeout))
    if args.smoke:  # a global batch of 64: 32 per worker
        train(epochs=2, samples=256, batch_size=64, window=2)
    else:
        train(args.epochs, samples=1_000_000, batch_size=4096, window=50)


if __name__ == "__main__":
    main()
