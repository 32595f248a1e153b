"""accelkit.keras.fit on several devices and workers, for real, on this CPU.

MirroredStrategy runs over two logical CPU devices and MultiWorkerMirroredStrategy
over two worker processes on loopback ports. Logical devices must be set before
TensorFlow starts, and a process holds one cluster, so each run is a subprocess
(tf_worker.py) with a timeout: a hang fails the test, it never stalls the suite.

    python -m pytest tests/distributed -m distributed        # only these
"""

from __future__ import annotations

import json
import socket

import pytest

from .tf_cluster import free_ports, run_cluster, run_mirrored

pytest.importorskip("tensorflow")
pytestmark = [pytest.mark.tensorflow, pytest.mark.distributed]

BATCH = 64  # tf_worker.BATCH: the global batch
# The MLP of tf_worker.py (tests/helpers/keras_models.mlp) on a batch of B: forward
# 2·B·(16·64 + 64·4), backward both kernel gradients and the second layer's input
# gradient (as in tests/keras).
FLOPS_64 = 2 * 64 * (16 * 64 + 64 * 4) * 2 + 2 * 64 * 64 * 4


def _tail(finished) -> str:
    lines = [
        line
        for line in finished.output.splitlines()
        if not line.startswith(("I0000", "W0000", "WARNING: All log messages"))
    ]
    return "\n".join(lines)[-4000:]


# -- MirroredStrategy over two logical CPU devices ------------------------------------


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    out = tmp_path_factory.mktemp("mirrored")
    finished = run_mirrored(out)
    assert finished.returncode == 0 and not finished.timed_out, _tail(finished)
    return json.loads((out / "mirrored.json").read_text())


def test_plan_strategy_mirrors_over_the_logical_cpu_devices(mirrored) -> None:
    assert mirrored["strategy"] == "MirroredStrategy" and mirrored["replicas"] == 2
    # NCCL and hierarchical copy need GPUs: on CPUs the reduction goes through one device.
    assert mirrored["cross_device_ops"] == "ReductionToOneDevice"
    assert mirrored["model_in_plan_strategy"]  # the function ran inside plan.strategy.scope()


def test_mirrored_fit_learns_and_counts_the_global_batch(mirrored) -> None:
    report = mirrored["report"]
    assert report["losses"][-1] < 0.6 * report["losses"][0]
    assert report["world_size"] == 2 and report["device"] == "2 x cpu"
    # 1024 samples in global batches of 64: 16 steps an epoch, each counting 64 samples
    # (both replicas' 32), not one replica's share.
    assert report["steps"] == 3 * 16
    assert report["batch_size"] == BATCH and report["facts"]["batch_size"] == BATCH
    assert report["facts"]["devices_used"] == 2 and report["facts"]["distributed"] is True
    assert report["samples_per_second"] == pytest.approx(
        BATCH * report["steady_steps"] / report["steady_seconds"]
    )
    # One process: its throughput is the global one, and there is one rank.
    assert report["global_samples_per_second"] == pytest.approx(report["samples_per_second"])
    assert [r["devices"] for r in report["ranks"]] == [2]
    assert report["scaling_efficiency"] == pytest.approx(
        report["global_samples_per_second"] / (2 * 1000.0)
    )
    assert report["flops_per_step"] == FLOPS_64  # one replica's 32 samples, x 2 replicas
    plan = {s["key"]: s for s in report["plan"]["settings"]}
    assert plan["tf.distribute.Strategy"]["status"] == "planned"  # a what-if plan, not applied
    assert report["plan"]["distribution"] == "mirrored"


def test_a_model_built_outside_the_scope_warns_with_the_fix_and_trains_as_built(mirrored):
    outside = mirrored["outside"]
    assert len(outside["warnings"]) == 1
    warning = outside["warnings"][0]
    assert "built outside the plan's strategy scope" in warning
    assert "2 devices of the plan's MirroredStrategy" in warning
    assert "pass a function that builds and compiles the model" in warning
    report = outside["report"]
    assert report["world_size"] == 1 and report["batch_size"] == BATCH
    assert "built outside the plan's strategy" in report["notes"]["distribution"]


# -- MultiWorkerMirroredStrategy: two workers from TF_CONFIG ------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    out = tmp_path_factory.mktemp("cluster")
    finished = run_cluster(out, dist_timeout="60")
    for worker in finished:
        assert worker.returncode == 0 and not worker.timed_out, _tail(worker)
    return [json.loads((out / f"worker{i}.json").read_text()) for i in (0, 1)]


def test_tf_config_gives_a_ring_multi_worker_strategy(cluster) -> None:
    for result in cluster:
        assert result["strategy"] in ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")
        assert result["replicas"] == 2  # one CPU replica on each of two workers
        assert result["communication"].endswith("RING")
        assert result["plan"]["distribution"] == "multi_worker_mirrored"
        setting = {s["key"]: s for s in result["plan"]["settings"]}["tf.distribute.Strategy"]
        assert setting["value"] == "RING"  # the typed cross-device choice, CrossDevice.RING
        assert setting["status"] == "deferred"  # built by plan.strategy, in fit


def test_workers_train_in_step_on_half_the_batch_each(cluster) -> None:
    first, second = (result["report"] for result in cluster)
    assert first["losses"] == pytest.approx(second["losses"])  # one model, kept in sync
    for result in cluster:  # validation runs too (Keras' evaluate under the strategy)
        assert len(result["history"]["val_loss"]) == 3
    assert cluster[0]["history"]["val_loss"] == pytest.approx(cluster[1]["history"]["val_loss"])
    assert first["losses"][-1] < 0.6 * first["losses"][0]
    for report in (first, second):
        assert report["steps"] == 3 * 16 and report["facts"]["steps_per_epoch"] == 16
        assert report["batch_size"] == BATCH / 2  # this worker's share of the global batch
        assert report["facts"]["devices_used"] == 1 and report["facts"]["distributed"]
        assert "keras-team/keras#20585" in report["notes"]["distribution"]


def test_every_worker_reports_the_whole_cluster(cluster) -> None:
    first, second = (result["report"] for result in cluster)
    for report in (first, second):
        assert report["world_size"] == 2
        assert [r["rank"] for r in report["ranks"]] == [0, 1]
        assert [r["devices"] for r in report["ranks"]] == [1, 1]
        assert report["slowest_rank"] in (0, 1)
        # The workers run in lockstep: global ≈ the sum of what each measured.
        total = sum(r["samples_per_second"] for r in report["ranks"])
        assert report["global_samples_per_second"] == pytest.approx(total, rel=0.1)
        assert report["global_samples_per_second"] == pytest.approx(
            sum(r["steady_samples"] for r in report["ranks"])
            / max(r["steady_seconds"] for r in report["ranks"])
        )
        assert report["scaling_efficiency"] == pytest.approx(
            report["global_samples_per_second"] / (2 * 1000.0)
        )
    # Both workers gathered the same figures; each knows which rank it is.
    assert first["ranks"][0]["steady_samples"] == second["ranks"][0]["steady_samples"]
    assert first["global_samples_per_second"] == pytest.approx(second["global_samples_per_second"])
    assert first["ranks"][0]["device"] == "cpu" and second["ranks"][1]["device"] == "cpu"
    assert first["ranks"][0]["samples_per_second"] == pytest.approx(first["samples_per_second"])
    assert second["ranks"][1]["samples_per_second"] == pytest.approx(second["samples_per_second"])


# -- failures end every worker with a clear error, never a hang ---------------------------


def test_a_worker_that_dies_mid_training_stops_the_other_with_a_clear_error(tmp_path) -> None:
    survivor, dead = run_cluster(
        tmp_path, dist_timeout="10", extra={1: {"ACCELKIT_TEST_DIE_AT": "5"}}
    )
    assert dead.returncode == 3, _tail(dead)
    assert not survivor.timed_out and survivor.returncode != 0, _tail(survivor)
    # Whichever TensorFlow notices first: the dead worker's missed heartbeats
    # (UnavailableError) or the survivor's collective outliving its 10 s timeout
    # (DeadlineExceededError). Both orders occur on this machine (4 runs in a row gave
    # the timeout; the CI runs of session 10 the heartbeats); both messages say what
    # happened and what to do.
    stopped = "accelkit: multi-worker training stopped on worker 0: "
    assert (
        f"UnavailableError: {stopped}another worker stopped responding" in survivor.output
        or f"DeadlineExceededError: {stopped}a collective waited longer than 10 s"
        in survivor.output
    ), _tail(survivor)
    assert "restart every worker" in survivor.output
    assert not (tmp_path / "worker0.json").exists()


def test_a_hung_worker_is_an_error_once_a_collective_outlives_the_timeout(tmp_path) -> None:
    # Alive, so its heartbeats go on: only the per-collective timeout that an explicit
    # ACCELKIT_DIST_TIMEOUT sets can tell. The hung worker is killed once the other ends.
    survivor, _ = run_cluster(
        tmp_path, dist_timeout="10", wait_for=[0], extra={1: {"ACCELKIT_TEST_STALL_AT": "5"}}
    )
    assert not survivor.timed_out and survivor.returncode != 0, _tail(survivor)
    assert (
        "DeadlineExceededError: accelkit: multi-worker training stopped on worker 0: a "
        "collective waited longer than 10 s (ACCELKIT_DIST_TIMEOUT)"
    ) in survivor.output


def test_a_worker_that_never_starts_is_an_error_after_the_timeout(tmp_path) -> None:
    (alone,) = run_cluster(tmp_path, started=1, dist_timeout="10")
    assert not alone.timed_out and alone.returncode != 0, _tail(alone)
    assert (
        "TF_CONFIG task worker:0 waited 10 s (ACCELKIT_DIST_TIMEOUT) for the 2 workers"
        in alone.output
    ), _tail(alone)
    assert "start every worker TF_CONFIG lists" in alone.output


def test_a_port_in_use_is_a_clear_error_on_every_worker(tmp_path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        ports = [holder.getsockname()[1], *free_ports(1)]
        first, second = run_cluster(tmp_path, ports=ports, dist_timeout="10")
    assert not first.timed_out and first.returncode != 0, _tail(first)
    assert f"TF_CONFIG task worker:0 cannot listen on localhost:{ports[0]}" in first.output
    assert "Address already in use" in first.output
    # The other worker waits for worker 0, which never joined: an error after the timeout.
    assert not second.timed_out and second.returncode != 0, _tail(second)
    assert "TF_CONFIG task worker:1 waited 10 s" in second.output
