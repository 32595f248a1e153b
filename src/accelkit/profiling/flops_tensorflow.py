"""Count the FLOPs of one Keras training step through TensorFlow's graph profiler.

The step is traced, never run: forward, loss (`model.compute_loss`, so a loss
set by `compile`, `add_loss` terms, regularisers and an overridden
`compute_loss` are all included) and the gradients of the loss with respect to
`model.trainable_variables`, into one `tf.function` whose input signature has
the batch's real shapes. TensorFlow's profiler
(`tensorflow.python.profiler.model_analyzer.profile` with
`ProfileOptionBuilder.float_operation()`) then reads the FLOPs of every op from
the concrete function's graph, through the rules registered with
`ops.RegisterStatistics(op_type, "flops")`.

Convention (the one `FlopCount` states, PaLM appendix B; shared with the
PyTorch counter, so both frameworks give the same number for the same model):

- A multiply-add is 2 FLOPs. Counted ops are the matmul-like ones:
  `MatMul`, `BatchMatMul`/`V2`/`V3`, `Einsum`, `Conv`, `Conv2D`, `Conv3D`,
  `DepthwiseConv2dNative` and their backprop ops. A Dense layer with batch B,
  D inputs, K units costs 2·B·D·K forward and twice that backward (gradients
  of its input and of its kernel): 6·B·D·K in all.
- What TensorFlow runs is what is counted. Ops whose result nothing uses are
  pruned before a `tf.function` runs, so they are left out here too: the
  gradient of the first layer's input (the data needs none) costs nothing,
  which makes that layer 2x its forward, not 3x. For a Dense layer
  `tf.GradientTape` never emits it; for `Conv2D` and `EinsumDense` it is
  emitted, unused, and pruned.
- Elementwise ops (`BiasAdd`, `BiasAddGrad`, `Add`, `Mul`, `Softmax`, `Mean`,
  `Sum`, ... whatever TensorFlow registers a rule for), normalisation, the loss's
  own arithmetic, metrics and the optimizer update are not in `total`. How many
  FLOPs TensorFlow's rules give them is reported in `notes`, op by op. Ops
  TensorFlow has no rule for (`Relu`, `ReluGrad`, `Sigmoid`, `Tanh`, `Exp`,
  `SparseSoftmaxCrossEntropyWithLogits`, `Cast`, ...) count 0 even there.
- `forward` is the part of `total` outside the tape's `gradient_tape/` scope:
  the model and its loss. The dtype does not change either: under
  `mixed_float16` the numbers are the same.
- Attention is counted over the full T x T score matrix (`Einsum` of Q·Kᵀ and
  of the probabilities with V: 2·2·B·T²·D forward, 2x that backward).
- A `tf.recompute_grad` block's recomputed forward is in the traced graph and is not
  told apart from the model's: it counts in `total`, and `recomputed` stays 0 (HFU =
  MFU for Keras runs; the PyTorch counter separates it, `flops_recompute`).

TensorFlow 2.x has no FLOP rule for some of the counted ops and a wrong one for
others in training graphs (`BatchMatMul*`, `Conv2DBackprop*`): the rules used
instead, and why, are in `accelkit.profiling.flops_tensorflow_rules`.

Never raises: a model or op the profiler cannot count gives `total=None` and
`notes` saying why, listing matmul-like op types that had no rule and
loops or function calls whose bodies the profiler does not see.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.profiling.flop_count import FlopCount
from accelkit.profiling.flops_tensorflow_rules import corrected_flops, register_flop_rules
from accelkit.utils.imports import is_available

_METHOD = (
    "tensorflow profiler (model_analyzer.profile, float_operation) on the traced "
    "tf.function of forward + loss + gradients (no optimizer update)"
)
# tf.GradientTape names every op it emits under this scope (under "replica_N/" for replicas > 0).
_BACKWARD_SCOPE = re.compile(r"(?:^|/)gradient_tape/")
_LIVE_TYPE = "_accelkit_live"  # op-log type marking the ops the runtime keeps

# Matmul-like op types counted in `total`, all with a rule (TensorFlow's or
# flops_tensorflow_rules').
_COUNTED = frozenset(
    {
        "MatMul",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "Einsum",
        "Conv",
        "Conv2D",
        "Conv3D",
        "DepthwiseConv2dNative",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "Conv2DBackpropInputV2",
        "Conv2DBackpropFilterV2",
        "Conv3DBackpropInput",
        "Conv3DBackpropFilter",
        "Conv3DBackpropInputV2",
        "Conv3DBackpropFilterV2",
        "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
    }
)
# Any other op type matching this is matmul-like work the count would miss.
_MATMUL_LIKE = re.compile(r"MatMul|Conv(?!ert)|Einsum|Dot|Cudnn|Attention")


def count_train_step_flops(
    model: Any, x: Any, y: Any = None, *, sample_weight: Any = None
) -> FlopCount:
    """FLOPs of one training step of a Keras 3 model on one batch: forward, loss, gradients.

    The step is traced into a `tf.function` with the batch's shapes and
    counted by TensorFlow's graph profiler; nothing runs, so weights, optimizer,
    BatchNormalization statistics, random seeds and the global policy are left
    as they were (an unbuilt model gets built, as `fit` would build it).

    Args:
        model: a `keras.Model` on the TensorFlow backend, compiled with a loss
            (or with an overridden `compute_loss`). An uncompiled model has no
            loss to differentiate: its forward is counted and `total` is None.
        x: one batch of inputs, as `model.fit` takes them (array, tensor, list
            or dict of them), or a `tf.data.Dataset`, whose first element is used.
        y: the targets of that batch, if the loss needs them.
        sample_weight: the batch's sample weights, if any.

    Returns:
        A `FlopCount` for this batch size: `total` (forward + backward),
        `forward` (model and loss), `by_op` per TensorFlow op type, and `notes`.
        `total` is None, with the reason in `notes`, when part of the step could
        not be counted. Inside a distribution strategy's scope the figures are
        one replica's, for this batch: multiply by the replicas for the step.

    Example:
        >>> import keras
        >>> import numpy as np
        >>> model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
        >>> model.compile(optimizer="adam", loss="mse")
        >>> count_train_step_flops(model, np.zeros((32, 784)), np.zeros((32, 10))).total
        1003520
        >>> # 2·32·784·10 forward + the same for the kernel gradient: the input needs none
    """
    try:
        return _count(model, x, y, sample_weight)
    except Exception as error:  # noqa: BLE001 - counting must never break a training run
        return _failed(_describe(error))


def _describe(error: Exception) -> str:
    """The error's type and last line: tf.function prefixes the message with a traceback."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1].strip() if lines else ''}"


def _failed(note: str, forward: int | None = None) -> FlopCount:
    return FlopCount(None, forward, {}, _METHOD, (f"FLOP counting failed: {note}",))


def _count(model: Any, x: Any, y: Any, sample_weight: Any) -> FlopCount:
    if not is_available("tensorflow") or not is_available("keras"):
        return _failed(
            "TensorFlow is not installed; install it with: pip install 'accelkit[tensorflow]'"
        )
    import keras
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        return _failed(
            f"Keras runs on the {keras.backend.backend()} backend; this counter needs tensorflow"
        )
    if not isinstance(model, keras.Model):
        return _failed(f"expected a keras.Model, got {type(model).__name__}")
    if _no_call(keras, model):
        return _failed(
            f"{type(model).__name__} has no call(): its train_step calls its parts "
            "(an encoder, a decoder...), so there is no forward pass to trace; "
            "give the FLOPs of one step"
        )
    if isinstance(x, tf.data.Dataset):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(next(iter(x)))
    register_flop_rules()

    notes: list[str] = []
    signature, rebuild = _signature(tf, (x, y, sample_weight))
    traced: tuple[Any, int] | None = None  # (graph, replicas) of the training step
    forward_only = not getattr(model, "compiled", False)
    if forward_only:
        notes.append(
            "the model is not compiled, so it has no loss to differentiate: "
            "forward counted, total unknown; compile it with a loss to count the "
            "training step"
        )
    else:
        standard_step = getattr(keras.Model, "train_step", None)
        if getattr(type(model), "train_step", None) is not standard_step:
            notes.append(
                "the model overrides train_step: counted the standard step "
                "(forward, compute_loss, gradients of the trainable variables)"
            )
        try:
            traced = _trace(tf, _train_step(tf, model), signature, rebuild)
        except Exception as error:  # noqa: BLE001 - e.g. a loss that needs y when y is None
            notes.append(
                f"the training step could not be traced ({_describe(error)}): "
                "forward counted, total unknown"
            )
            forward_only = True
    if traced is None:  # not compiled, or the training step failed to trace
        traced = _trace(tf, _forward(model), signature, rebuild)
    graph, replicas = traced
    if replicas > 1:
        notes.append(
            f"traced under the distribution strategy, once per replica: "
            f"the figures are one replica's, for the batch given ({replicas} replicas)"
        )
    return _profile(graph, notes, forward_only, replicas)


def _no_call(keras: Any, model: Any) -> bool:
    """True for a subclassed model that never defined `call` (Keras' raises)."""
    return type(model).call in (keras.Model.call, keras.layers.Layer.call)


def _signature(tf: Any, data: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """TensorSpecs with the batch's real shapes for the arrays in `data`; how to put them back."""
    leaves = tf.nest.flatten(data)
    arrays = [i for i, leaf in enumerate(leaves) if leaf is not None]
    specs = []
    for i in arrays:
        array = leaves[i]
        if not (hasattr(array, "dtype") and hasattr(array, "shape")):
            array = tf.constant(array)
        specs.append(tf.TensorSpec(tuple(array.shape), tf.as_dtype(array.dtype)))

    def rebuild(tensors: list[Any]) -> Any:
        filled = list(leaves)
        for i, tensor in zip(arrays, tensors, strict=True):
            filled[i] = tensor
        return tf.nest.pack_sequence_as(data, filled)

    return specs, rebuild


def _train_step(tf: Any, model: Any) -> Callable[..., Any]:
    """Keras's TensorFlow `train_step` up to the gradients: no loss scaling, metrics or update."""
    # Keras < 3.3 overrides of compute_loss may lack `training`.
    takes_training = "training" in inspect.signature(model.compute_loss).parameters

    def step(x: Any, y: Any, sample_weight: Any) -> Any:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss_args = {"x": x, "y": y, "y_pred": y_pred, "sample_weight": sample_weight}
            if takes_training:
                loss_args["training"] = True
            loss = model.compute_loss(**loss_args)
        return loss, tape.gradient(loss, model.trainable_variables)

    return step


def _forward(model: Any) -> Callable[..., Any]:
    def step(x: Any, y: Any, sample_weight: Any) -> Any:
        return model(x, training=True)

    return step


def _trace(
    tf: Any, step: Callable[..., Any], signature: list[Any], rebuild: Callable[[list[Any]], Any]
) -> tuple[Any, int]:
    """The graph of `step` traced with the batch's static shapes (nothing runs), and the
    number of copies of it the graph holds: inside a strategy's scope (`fit` calls its
    callbacks there) distributed variables can only be differentiated in a replica
    context, so the step is traced through `strategy.run`, once per replica."""
    strategy = tf.distribute.get_strategy() if tf.distribute.in_cross_replica_context() else None

    def flat_step(*tensors: Any) -> Any:
        args = rebuild(list(tensors))
        return strategy.run(step, args=args) if strategy is not None else step(*args)

    function = tf.function(flat_step, input_signature=signature)
    replicas = int(strategy.num_replicas_in_sync) if strategy is not None else 1
    return function.get_concrete_function().graph, replicas


def _live_ops(graph: Any) -> set[str]:
    """Names of the ops the runtime keeps: those the outputs or a stateful op depend on."""
    pending = [tensor.op for tensor in graph.outputs] + list(graph.control_outputs)
    pending += [
        op for op in graph.get_operations() if op.op_def.is_stateful and op.type != "Placeholder"
    ]
    live: set[str] = set()
    while pending:
        op = pending.pop()
        if op.name not in live:
            live.add(op.name)
            pending.extend(tensor.op for tensor in op.inputs)
            pending.extend(op.control_inputs)
    return live


def _op_log(graph: Any, live: set[str]) -> Any:
    """Marks the live ops for the profiler; gives ops whose TensorFlow rule is wrong
    their corrected FLOPs (an op whose shapes are not fully defined: _uncounted reports it)."""
    from tensorflow.core.profiler import tfprof_log_pb2

    op_log = tfprof_log_pb2.OpLogProto()
    for name in sorted(live):
        entry = op_log.log_entries.add()
        entry.name = name
        entry.types.append(_LIVE_TYPE)
        flops = corrected_flops(graph, graph.get_operation_by_name(name))
        if flops is not None:
            entry.float_ops = flops
    return op_log


def _run_profiler(graph: Any, op_log: Any) -> Any:
    from tensorflow.python.profiler import model_analyzer
    from tensorflow.python.profiler.option_builder import ProfileOptionBuilder
    from tensorflow.python.util import deprecation

    builder = ProfileOptionBuilder(ProfileOptionBuilder.float_operation())
    options = builder.with_empty_output().build()
    options["account_type_regexes"] = [f"^{_LIVE_TYPE}$"]
    with deprecation.silence():  # TensorFlow's own rules call a deprecated shape helper
        return model_analyzer.profile(graph, op_log=op_log, cmd="scope", options=options)


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    for child in node.children:
        yield from _nodes(child)


def _uncounted(graph: Any, live: set[str], counted: set[str]) -> tuple[dict[str, set[str]], bool]:
    """Live matmul-like ops missing from `counted`, by reason; and whether one is in the forward."""
    missed: dict[str, set[str]] = {}
    in_forward = False
    for name in live - counted:
        op = graph.get_operation_by_name(name)
        if any(value.HasField("func") or value.list.func for value in op.node_def.attr.values()):
            reason = "loops or function calls whose bodies the profiler does not see"
        elif op.type in _COUNTED:  # its rule raised ValueError, which the profiler swallows
            reason = "matmul-like ops whose shapes are not fully known"
        elif _MATMUL_LIKE.search(op.type):
            reason = "matmul-like ops with no FLOP rule"
        else:
            continue
        missed.setdefault(reason, set()).add(op.type)
        in_forward = in_forward or not _BACKWARD_SCOPE.search(name)
    return missed, in_forward


def _profile(graph: Any, notes: list[str], forward_only: bool, replicas: int = 1) -> FlopCount:
    live = _live_ops(graph)
    result = _run_profiler(graph, _op_log(graph, live))
    by_op: dict[str, int] = {}
    other: dict[str, int] = {}
    forward = 0
    counted: set[str] = set()
    for node in _nodes(result):
        if not node.float_ops or node.name not in live:
            continue
        counted.add(node.name)
        op_type = graph.get_operation_by_name(node.name).type
        bucket = by_op if op_type in _COUNTED else other
        bucket[op_type] = bucket.get(op_type, 0) + int(node.float_ops)
        if op_type in _COUNTED and not _BACKWARD_SCOPE.search(node.name):
            forward += int(node.float_ops)
    if replicas > 1:  # identical copies, one per replica
        by_op = {op: flops // replicas for op, flops in by_op.items()}
        other = {op: flops // replicas for op, flops in other.items()}
        forward //= replicas
    total = sum(by_op.values())
    if other:
        listed = ", ".join(f"{op} {flops:,}" for op, flops in sorted(other.items(), key=_largest))
        notes.append(
            f"not in total, by the convention: {sum(other.values()):,} FLOPs "
            f"TensorFlow's rules give elementwise and reduction ops ({listed})"
        )
    missed, in_forward = _uncounted(graph, live, counted)
    for reason, op_types in sorted(missed.items()):
        notes.append(
            f"incomplete count, {total:,} FLOPs counted: {reason}: {', '.join(sorted(op_types))}"
        )
    if missed or forward_only:
        return FlopCount(None, None if in_forward else forward, by_op, _METHOD, tuple(notes))
    if total == 0:
        notes.append("no matmul, convolution or einsum op was counted: total is 0")
    return FlopCount(total, forward, by_op, _METHOD, tuple(notes))


def _largest(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]
