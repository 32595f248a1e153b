"""FLOPs of one Keras training step, counted by TensorFlow's profiler, against
formulas worked out by hand.

Convention (see `accelkit.profiling.flops_tensorflow`, the same as the PyTorch
counter's): multiply-add = 2 FLOPs; only matmul-like ops are in `total`; a
layer's backward is 2x its forward (input grad + weight grad), or 1x where its
input needs no grad (the first layer, fed by data: pruned, as TF prunes it).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from accelkit.profiling import flops_tensorflow, flops_tensorflow_rules
from accelkit.profiling.flops_tensorflow import count_train_step_flops
from accelkit.profiling.flops_tensorflow_rules import einsum_flops, register_flop_rules

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow


@pytest.fixture(autouse=True)
def keras_policy():
    with global_policy_kept():
        yield


def zeros(*shape: int, dtype: str = "float32") -> np.ndarray:
    return np.zeros(shape, dtype)


def mlp(batch: int = 32) -> tuple[keras.Model, np.ndarray, np.ndarray]:
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss=loss)
    return model, zeros(batch, 784), zeros(batch, dtype="int32")


def transformer_block(
    seq: int, width: int, heads: int, ffn: int, head_dtype: str | None = None
) -> keras.Model:
    inputs = keras.Input((seq, width))
    attended = keras.layers.MultiHeadAttention(heads, width // heads)(inputs, inputs)
    hidden = keras.layers.Dense(ffn, activation="relu")(attended)
    model = keras.Model(inputs, keras.layers.Dense(width, dtype=head_dtype)(hidden))
    model.compile(optimizer="adam", loss="mse")
    return model


def test_mlp_counts_match_the_formula_exactly():
    batch, sizes = 32, [(784, 256), (256, 10)]
    model, x, y = mlp(batch)

    count = count_train_step_flops(model, x, y)

    forward = sum(2 * batch * d * k for d, k in sizes)  # 13,008,896
    first_layer_input_grad = 2 * batch * 784 * 256  # never computed: x needs no grad
    assert count.forward == forward
    assert count.total == 3 * forward - first_layer_input_grad == 26_181_632
    assert count.by_op == {"MatMul": count.total}
    # Elementwise FLOPs TF's rules give, reported, not in total: bias add B·ΣK, its grad (B-1)·ΣK.
    units = sum(k for _, k in sizes)
    elementwise = next(note for note in count.notes if note.startswith("not in total"))
    assert f"BiasAdd {batch * units:,}" in elementwise
    assert f"BiasAddGrad {(batch - 1) * units:,}" in elementwise
    assert count.total is not None and "tensorflow profiler" in count.method


def test_the_count_is_for_the_batch_given():
    small, large = (count_train_step_flops(*mlp(batch)) for batch in (16, 32))
    assert 2 * small.total == large.total


def test_cnn_counts_match_the_formula_exactly():
    batch, side, classes = 8, 32, 10
    model = keras.Sequential(
        [
            keras.Input((side, side, 3)),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(classes),
        ]
    )
    model.compile(optimizer="adam", loss="mse")

    count = count_train_step_flops(model, zeros(batch, side, side, 3), zeros(batch, classes))

    conv1 = 2 * batch * side * side * 3 * 16 * 3 * 3  # 2·B·H·W·Cin·Cout·k·k
    conv2 = 2 * batch * side * side * 16 * 32 * 3 * 3
    dense = 2 * batch * (side * side * 32) * classes
    assert count.by_op == {
        "Conv2D": conv1 + conv2,
        "Conv2DBackpropFilter": conv1 + conv2,  # every kernel's gradient: its forward again
        "Conv2DBackpropInput": conv2,  # the first conv's input gradient is emitted, unused, pruned
        "MatMul": 3 * dense,
    }
    assert count.forward == conv1 + conv2 + dense
    assert count.total == 3 * (conv1 + conv2 + dense) - conv1 == 256_376_832


def test_strided_channels_first_convolutions_count_like_channels_last():
    """TF's own Conv2DBackprop* rules reject NCHW (the profiler drops those ops) and
    divide the full input by the strides; each backprop here costs its forward exactly."""
    batch, side = 4, 17

    def model(data_format: str) -> keras.Model:
        shape = (side, side, 3) if data_format == "channels_last" else (3, side, side)
        model = keras.Sequential(
            [
                keras.Input(shape),
                keras.layers.Conv2D(8, 3, padding="same", data_format=data_format),
                keras.layers.Conv2D(8, 3, strides=2, padding="valid", data_format=data_format),
                keras.layers.Flatten(),
                keras.layers.Dense(2),
            ]
        )
        model.compile(optimizer="adam", loss="mse")
        return model

    y = zeros(batch, 2)
    nhwc = count_train_step_flops(model("channels_last"), zeros(batch, side, side, 3), y)
    nchw = count_train_step_flops(model("channels_first"), zeros(batch, 3, side, side), y)

    conv1 = 2 * batch * side * side * 3 * 8 * 9
    conv2 = 2 * batch * 8 * 8 * 8 * 8 * 9  # (17 - 3) // 2 + 1 = 8
    assert nhwc.by_op["Conv2DBackpropInput"] == conv2
    assert nhwc.by_op["Conv2DBackpropFilter"] == nhwc.by_op["Conv2D"] == conv1 + conv2
    assert nchw.total == nhwc.total and nchw.by_op == nhwc.by_op


@pytest.mark.parametrize(
    ("layer", "shape", "op_types"),
    [
        (
            lambda: keras.layers.Conv1D(4, 3, padding="same"),
            (16, 4),
            ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"),
        ),
        (
            lambda: keras.layers.Conv3D(2, 3, padding="same"),
            (6, 6, 6, 2),
            ("Conv3D", "Conv3DBackpropFilterV2", "Conv3DBackpropInputV2"),
        ),
        (
            lambda: keras.layers.DepthwiseConv2D(3, padding="same"),
            (8, 8, 3),
            (
                "DepthwiseConv2dNative",
                "DepthwiseConv2dNativeBackpropFilter",
                "DepthwiseConv2dNativeBackpropInput",
            ),
        ),
        (
            lambda: keras.layers.Conv2DTranspose(3, 3, padding="same"),
            (8, 8, 3),
            ("Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2D"),
        ),
    ],
    ids=["conv1d", "conv3d", "depthwise", "transpose"],
)
def test_each_convolution_gradient_costs_its_forward(layer, shape, op_types):
    """Two identical same-padded layers (channels in = out): kernel grads = both forwards,
    input grad = the second layer's forward (the first one's is not needed)."""
    forward_op, filter_op, input_op = op_types
    model = keras.Sequential(
        [keras.Input(shape), layer(), layer(), keras.layers.Flatten(), keras.layers.Dense(2)]
    )
    model.compile(optimizer="adam", loss="mse")

    count = count_train_step_flops(model, zeros(4, *shape), zeros(4, 2))

    assert count.total is not None, count.notes
    assert count.by_op[filter_op] == count.by_op[forward_op] > 0
    assert 2 * count.by_op[input_op] == count.by_op[forward_op]


def test_transformer_block_counts_match_the_formula_exactly():
    batch, seq, width, heads, ffn = 8, 16, 64, 4, 256
    model = transformer_block(seq, width, heads, ffn)

    count = count_train_step_flops(model, zeros(batch, seq, width), zeros(batch, seq, width))

    qkv = 3 * 2 * batch * seq * width * width  # query, key, value projections (EinsumDense)
    scores = 2 * batch * seq * seq * width  # Q·Kᵀ over all heads (Einsum)
    context = 2 * batch * seq * seq * width  # probabilities·V (Einsum)
    out_proj = 2 * batch * seq * width * width
    ffn_fwd = 2 * (2 * batch * seq * width * ffn)
    weights = qkv + out_proj + ffn_fwd
    forward = weights + scores + context
    # Backward: every weight's gradient (= its forward), the input gradient of every
    # weight layer but QKV (fed by data), and both operands' gradients of both einsums.
    backward = weights + (weights - qkv) + 2 * (scores + context)
    assert count.forward == forward == 13_107_200
    assert count.total == forward + backward == 36_175_872
    assert count.by_op["Einsum"] == 3 * (scores + context)
    # EinsumDense lowers to a batch matmul; TF's own rule would count its kernel grads 4x.
    assert count.by_op["BatchMatMulV2"] == 3 * (qkv + out_proj) - qkv
    assert count.by_op["MatMul"] == 3 * ffn_fwd  # Dense on 3-D input: reshape + MatMul
    assert abs(count.total - 3 * forward) / count.total < 0.2


def test_mixed_float16_counts_the_same_flops():
    shapes = (zeros(4, 16, 64), zeros(4, 16, 64))
    float32 = count_train_step_flops(transformer_block(16, 64, 4, 256), *shapes)
    keras.mixed_precision.set_global_policy("mixed_float16")
    mixed = count_train_step_flops(transformer_block(16, 64, 4, 256, head_dtype="float32"), *shapes)
    assert mixed.total == float32.total and mixed.by_op == float32.by_op
    assert keras.mixed_precision.global_policy().name == "mixed_float16"  # as the caller set it


def test_a_loop_hides_its_body_so_total_is_none_with_the_reason():
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")

    count = count_train_step_flops(model, zeros(8, 5, 3), zeros(8, 2))

    assert count.total is None and count.forward is None
    assert any("While" in note and "bodies" in note for note in count.notes), count.notes
    assert count.by_op["MatMul"] > 0  # the Dense head is still counted, as a lower bound


class SparseProjection(keras.layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], 4))

    def call(self, x):
        return tf.sparse.sparse_dense_matmul(tf.sparse.from_dense(x), self.kernel)


def test_a_matmul_without_a_flop_rule_is_named_and_total_is_none():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5), SparseProjection()])
    model.compile(optimizer="adam", loss="mse")

    count = count_train_step_flops(model, np.ones((8, 6), "float32"), zeros(8, 4))

    assert count.total is None
    assert any("no FLOP rule" in note and "SparseTensorDenseMatMul" in note for note in count.notes)
    assert count.by_op["MatMul"] == 2 * 8 * 6 * 5 * 2  # what could be counted is kept


def test_an_uncompiled_model_gets_its_forward_counted_and_no_total():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
    count = count_train_step_flops(model, zeros(32, 784))
    assert count.total is None and count.forward == 2 * 32 * 784 * 10
    assert any("not compiled" in note for note in count.notes)


def test_a_loss_that_cannot_be_traced_gives_the_forward_and_the_reason():
    model, x, _ = mlp(8)
    count = count_train_step_flops(model, x)  # the compiled loss needs y
    assert count.total is None and count.forward == 2 * 8 * (784 * 256 + 256 * 10)
    assert any("could not be traced" in note and "\n" not in note for note in count.notes)


@pytest.mark.parametrize("model", [object(), None, "resnet"])
def test_never_raises_on_something_that_is_not_a_keras_model(model):
    count = count_train_step_flops(model, zeros(2, 3))
    assert count.total is None and count.notes


def test_a_dataset_is_counted_on_its_first_batch():
    model, x, y = mlp(16)
    dataset = tf.data.Dataset.from_tensor_slices((zeros(64, 784), zeros(64, dtype="int32")))
    from_dataset = count_train_step_flops(model, dataset.batch(16))
    assert from_dataset.total == count_train_step_flops(model, x, y).total


def test_sample_weights_and_dict_inputs_are_traced():
    inputs = {"a": keras.Input((4,), name="a"), "b": keras.Input((6,), name="b")}
    merged = keras.layers.Concatenate()([inputs["a"], inputs["b"]])
    model = keras.Model(inputs, keras.layers.Dense(3)(merged))
    model.compile(optimizer="sgd", loss="mse")
    x = {"a": zeros(8, 4), "b": zeros(8, 6)}

    count = count_train_step_flops(model, x, zeros(8, 3), sample_weight=np.ones(8, "float32"))

    assert count.total == 2 * (2 * 8 * 10 * 3)


def test_counting_leaves_weights_statistics_and_optimizer_untouched():
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(8),
            keras.layers.BatchNormalization(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(2),
        ]
    )
    model.compile(optimizer="adam", loss="mse")
    before = [v.numpy() for v in model.variables]

    count = count_train_step_flops(model, np.ones((16, 6), "float32"), np.ones((16, 2), "float32"))

    assert count.total == 3 * 2 * 16 * 8 * 2 + 2 * 2 * 16 * 6 * 8
    assert all(np.array_equal(b, v.numpy()) for b, v in zip(before, model.variables, strict=True))
    assert int(model.optimizer.iterations.numpy()) == 0


def test_inside_a_strategy_scope_the_count_is_one_replicas():
    """`fit` calls callbacks inside the strategy's scope, where a distributed variable's
    gradient can only be taken in a replica context."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model, x, y = mlp(32)
        inside = count_train_step_flops(model, x, y)
    assert inside.total == count_train_step_flops(model, x, y).total == 26_181_632


def test_with_two_replicas_the_count_is_one_replicas():
    script = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        import keras
        from accelkit.profiling.flops_tensorflow import count_train_step_flops
        with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
            model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
            model.compile(optimizer="sgd", loss="mse")
            x, y = np.zeros((32, 784), "float32"), np.zeros((32, 10), "float32")
            count = count_train_step_flops(model, x, y)
        print(count.total, count.forward, any("2 replicas" in note for note in count.notes))
    """)
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": src, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    forward = 2 * 32 * 784 * 10
    assert run.stdout.split() == [str(2 * forward), str(forward), "True"]


def test_registration_is_idempotent_and_counts_do_not_change():
    model = transformer_block(8, 32, 2, 64)
    x = zeros(2, 8, 32)
    first = count_train_step_flops(model, x, x)
    register_flop_rules()
    register_flop_rules()
    importlib.reload(flops_tensorflow_rules)  # registers again: TF's KeyError is absorbed
    flops_tensorflow_rules.register_flop_rules()
    second = flops_tensorflow.count_train_step_flops(model, x, x)
    assert first.total == second.total is not None and first.by_op == second.by_op
    assert first.by_op["Einsum"] > 0


@pytest.mark.parametrize(
    ("equation", "shapes", "output", "flops"),
    [
        ("mk,kn->mn", [[3, 4], [4, 5]], [3, 5], 2 * 3 * 4 * 5),
        ("BTNH,BSNH->BNTS", [[2, 3, 4, 5], [2, 6, 4, 5]], [2, 4, 3, 6], 2 * 2 * 3 * 4 * 5 * 6),
        ("...ij,jk->...ik", [[7, 2, 3, 4], [4, 5]], [7, 2, 3, 5], 2 * 7 * 2 * 3 * 4 * 5),
        (
            "...ij,...jk->...ik",
            [[1, 3, 4], [6, 4, 5]],
            [6, 3, 5],
            2 * 6 * 3 * 4 * 5,
        ),  # broadcast batch
        ("ab->ba", [[3, 4]], [4, 3], 0),  # a transpose
        ("abc->ac", [[3, 4, 5]], [3, 5], 3 * 4 * 5 - 3 * 5),  # a sum
    ],
)
def test_einsum_rule(equation, shapes, output, flops):
    assert einsum_flops(equation, shapes, output) == flops
