"""The TensorFlow distribution pieces that run in this process: which strategy a plan
builds (GPU choices checked by recording the constructor TensorFlow would get),
model-building functions, models built outside the scope, timeouts and the
single-device reference. The real multi-device runs are in test_tf_distributed.py."""

from __future__ import annotations

import json
import re
import warnings

import pytest

import accelkit
from accelkit.frameworks import _common
from accelkit.hardware import environment
from accelkit.hardware.what_if import what_if
from accelkit.keras import strategies
from accelkit.keras import strategy as keras_strategy
from accelkit.planning import Distribution, Request, Status, plan
from accelkit.profiling.run_report import RunReport

from ..helpers.keras_models import classification_data, global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

TF_CONFIG = json.dumps(
    {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}
)
CPU_PLAN = plan(what_if(None), Request(framework="tensorflow"))
MULTI_WORKER_PLAN = plan(
    what_if(None, environ={"TF_CONFIG": TF_CONFIG}), Request(framework="tensorflow")
)


@pytest.fixture(autouse=True)
def fresh_strategies(monkeypatch):
    """Each test builds its own strategies, none kept after it; the policy and variables
    are restored."""
    strategies.forget()
    monkeypatch.delenv("ACCELKIT_DIST_TIMEOUT", raising=False)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with global_policy_kept():
        yield
    strategies.forget()


class Recorder:
    """Stands in for a strategy class: records how it was built."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def build(compile: bool = True):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((16,))
    model = keras.Model(inputs, keras.layers.Dense(4)(inputs), name="linear")
    if compile:
        model.compile(
            optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
    return model


# -- the plan's setting ---------------------------------------------------------------


@pytest.mark.parametrize(
    "hardware", [what_if("A100-SXM4-80GB", 2), what_if(None, environ={"TF_CONFIG": TF_CONFIG})]
)
def test_the_strategy_setting_is_left_to_plan_strategy(hardware) -> None:
    result = plan(hardware, Request(framework="tensorflow", precision="fp32"))
    setting = result.get("tf.distribute.Strategy")
    assert setting.kind == "helper"
    applied = _common.walk(result, {}, framework="tensorflow").get("tf.distribute.Strategy")
    assert applied.status is Status.DEFERRED and "accelkit.keras.strategy(plan)" in applied.detail


# -- which strategy is built -------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "ops"),
    [("A100-SXM4-80GB", "NcclAllReduce"), ("GeForce RTX 4090", "HierarchicalCopyAllReduce")],
)
def test_several_gpus_mirror_with_the_cross_device_ops_the_plan_chose(
    monkeypatch, gpu, ops
) -> None:
    result = plan(what_if(gpu, 2), Request(framework="tensorflow", precision="fp32"))
    assert ops in result.value("tf.distribute.Strategy")
    gpus = [tf.config.LogicalDevice(f"/device:GPU:{i}", "GPU") for i in range(2)]
    monkeypatch.setattr(
        tf.config, "list_logical_devices", lambda kind=None: gpus if kind == "GPU" else []
    )
    monkeypatch.setattr(tf.distribute, "MirroredStrategy", Recorder)
    strategy = keras_strategy(result)
    assert isinstance(strategy, Recorder)
    assert strategy.args == (["/device:GPU:0", "/device:GPU:1"],)
    assert type(strategy.kwargs["cross_device_ops"]).__name__ == ops
    assert keras_strategy(result) is strategy  # built once
    assert strategies.built_for_a_plan(strategy)


def test_a_mirrored_plan_on_one_device_falls_back_to_the_default_strategy() -> None:
    result = plan(what_if("A100-SXM4-80GB", 2), Request(framework="tensorflow"))
    if len(tf.config.list_logical_devices("CPU")) > 1 or tf.config.list_logical_devices("GPU"):
        pytest.skip("this process has several devices")
    with pytest.warns(UserWarning, match="MirroredStrategy but TensorFlow sees 0 GPU"):
        assert keras_strategy(result) is tf.distribute.get_strategy()


@pytest.mark.parametrize(("gpus", "implementation"), [([], "RING"), (["GPU:0"], "NCCL")])
@pytest.mark.parametrize(("variable", "collective_timeout"), [(None, None), ("30", 30.0)])
def test_tf_config_builds_multi_worker_with_its_communication_and_timeouts(
    monkeypatch, gpus, implementation, variable, collective_timeout
) -> None:
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG)
    if variable:
        monkeypatch.setenv("ACCELKIT_DIST_TIMEOUT", variable)
    registration = []
    monkeypatch.setattr(
        strategies, "_bound_registration", lambda resolver, timeout: registration.append(timeout)
    )
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus)
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", Recorder)
    strategy = keras_strategy(MULTI_WORKER_PLAN)
    options = strategy.kwargs["communication_options"]
    assert options.implementation.name == implementation
    # A per-collective timeout costs a thread per collective: only when asked for.
    assert options.timeout_seconds == collective_timeout
    assert registration == [collective_timeout or 600.0]  # joining is always bounded
    assert strategy.kwargs["cluster_resolver"].task_type == "worker"


def test_a_port_in_use_is_named_before_tensorflow_starts_a_server(monkeypatch) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = {
            "cluster": {"worker": [f"localhost:{port}", "localhost:2"]},
            "task": {"type": "worker", "index": 0},
        }
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
        monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", Recorder)
        with pytest.raises(
            RuntimeError, match=f"cannot listen on localhost:{port}: Address already in use"
        ):
            keras_strategy(MULTI_WORKER_PLAN)


@pytest.mark.parametrize("value", ["abc", "0", "-5"])
def test_a_bad_timeout_variable_names_the_valid_values(monkeypatch, value) -> None:
    # One rule for both frameworks (accelkit.hardware.environment.dist_timeout): a bad
    # value gives the default with a note naming the valid values, as PyTorch's side did.
    monkeypatch.setenv("ACCELKIT_DIST_TIMEOUT", value)
    seconds, note, explicit = environment.dist_timeout()
    assert (seconds, explicit) == (600.0, False)
    assert re.search("ACCELKIT_DIST_TIMEOUT=.*positive number of seconds", note)


def test_the_timeout_defaults_to_600_seconds() -> None:
    assert environment.dist_timeout() == (600.0, "", False)


# -- accelkit.keras.fit with a model-building function ------------------------------------


def test_fit_calls_the_function_inside_the_plan_strategy_scope() -> None:
    seen = []

    def builder():
        seen.append(tf.distribute.get_strategy())
        return build()

    x, y = classification_data(256)
    report = accelkit.keras.fit(builder, x, y, batch_size=32, epochs=2, verbose=0, plan=CPU_PLAN)
    assert seen == [keras_strategy(CPU_PLAN)]
    assert report.trained_model.name == "linear" and report.world_size == 1
    assert report.losses[-1] < report.losses[0]


@pytest.mark.parametrize(
    ("builder", "error", "message"),
    [
        (lambda: "not a model", TypeError, "returned str; it must return a compiled keras.Model"),
        (lambda: build(compile=False), ValueError, "compile the model before accelkit.keras.fit"),
    ],
)
def test_a_function_must_return_a_compiled_model(builder, error, message) -> None:
    x, y = classification_data(256)
    with pytest.raises(error, match=message):
        accelkit.keras.fit(builder, x, y, epochs=1, verbose=0, plan=CPU_PLAN)


def test_a_model_built_outside_a_multi_worker_plan_warns_and_trains_as_built() -> None:
    x, y = classification_data(256)
    with pytest.warns(UserWarning, match="built outside") as caught:
        report = accelkit.keras.fit(
            build(), x, y, batch_size=32, epochs=1, verbose=0, plan=MULTI_WORKER_PLAN
        )
    messages = [str(w.message) for w in caught if "accelkit" in str(w.message)]
    assert len(messages) == 1
    assert "instead of the 2 workers of TF_CONFIG (MultiWorkerMirroredStrategy)" in messages[0]
    assert "pass a function that builds and compiles the model" in messages[0]
    assert report.world_size == 1 and report.steps == 8
    assert "built outside the plan's strategy" in report.notes["distribution"]
    built = strategies.forget()
    assert not built  # no cluster was joined to say so


def test_a_model_under_the_users_own_strategy_is_kept_with_a_note() -> None:
    own = tf.distribute.OneDeviceStrategy("/cpu:0")
    with own.scope():
        model = build()
    x, y = classification_data(256)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no accelkit warning
        report = accelkit.keras.fit(
            model, x, y, batch_size=32, epochs=1, verbose=0, plan=MULTI_WORKER_PLAN
        )
    assert "model's own OneDeviceStrategy" in report.notes["distribution"]


# -- pieces of the measurement -------------------------------------------------------------


class _Split:
    """A value split across local replicas, as PerReplica holds one."""

    def __init__(self, *values):
        self.values = values


def test_samples_count_every_local_replica_even_when_uneven() -> None:
    from accelkit.keras import batches  # the callback's batch sizes, in their own module

    x = _Split(tf.zeros((26, 16)), tf.zeros((25, 16)))  # a last batch of 51 over two replicas
    assert batches.sizes((x, _Split(tf.zeros(26), tf.zeros(25)))) == (51, 0)
    tokens = _Split(tf.zeros((8, 128), tf.int32), tf.zeros((8, 128), tf.int32))
    assert batches.sizes((tokens,)) == (16, 16 * 128)


def test_a_lost_worker_error_keeps_its_type_and_says_what_to_do() -> None:
    from accelkit.keras import training

    error = tf.errors.UnavailableError(None, None, "Collective ops is aborted by: heartbeats")
    explained = training._explained(error, tf.distribute.get_strategy())
    assert isinstance(explained, tf.errors.UnavailableError)
    assert explained.message.startswith(
        "accelkit: multi-worker training stopped on worker 0: another worker stopped responding"
    )
    assert explained.message.endswith("TensorFlow said: Collective ops is aborted by: heartbeats")
    assert training._lost_worker(error)
    # The same types raised by input I/O are the user's errors: they pass unchanged.
    assert not training._lost_worker(tf.errors.UnavailableError(None, None, "GCS read failed"))
    assert not training._lost_worker(tf.errors.InvalidArgumentError(None, None, "collective"))


def test_the_single_device_figure_takes_a_number_a_report_or_a_saved_report(tmp_path) -> None:
    from accelkit.profiling.world import single_device_rate as single_device_figure

    one = RunReport(
        framework="tensorflow",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        samples_per_second=250.0,
    )
    one.save(tmp_path / "one.json")
    assert single_device_figure(None) is None
    assert single_device_figure(120) == 120.0
    assert single_device_figure(one) == 250.0
    assert single_device_figure(str(tmp_path / "one.json")) == 250.0
    assert single_device_figure(tmp_path / "one.json") == 250.0
    two = RunReport(
        framework="tensorflow",
        model="m",
        device="2 x cpu",
        precision="fp32",
        matmul_dtype="fp32",
        samples_per_second=400.0,
        world_size=2,
    )
    # One function and one set of errors for both frameworks' single_device= (it was
    # single_device_samples_per_second= here, with its own messages).
    for bad, message in [
        (two, "ran on 2 devices"),
        (0, "not valid"),
        (True, "not valid"),
        ("nan-report-path.json", "No such file"),
    ]:
        with pytest.raises((ValueError, TypeError), match=message):
            single_device_figure(bad)


def test_fit_reports_scaling_efficiency_against_the_single_device_figure() -> None:
    x, y = classification_data(256)
    report = accelkit.keras.fit(
        build(),
        x,
        y,
        batch_size=32,
        epochs=2,
        verbose=0,
        plan=CPU_PLAN,
        single_device_samples_per_second=1e9,
    )
    assert report.single_device_samples_per_second == 1e9
    assert report.scaling_efficiency == pytest.approx(report.samples_per_second / 1e9)


def test_the_distribution_kinds_the_adapter_knows() -> None:
    assert MULTI_WORKER_PLAN.distribution is Distribution.MULTI_WORKER_MIRRORED
    assert not strategies.is_multi_worker(tf.distribute.get_strategy())
    assert strategies.local_replicas(tf.distribute.get_strategy()) == 1
    assert strategies.worker_rank(tf.distribute.get_strategy()) == 0
