"""FLOP rules for the matmul-like TensorFlow ops: what `count_train_step_flops` reads
per op (see `accelkit.profiling.flops_tensorflow` for the convention).

TensorFlow's graph profiler gives an op the FLOPs of the rule registered for its
type with `ops.RegisterStatistics(op_type, "flops")`. A multiply-add is 2 FLOPs
(PaLM appendix B), so a matmul of (M, K) by (K, N) is 2·M·N·K and a convolution
2·(output elements)·(filter elements per output channel).

TensorFlow 2.x (checked on 2.21) has no FLOP rule for `Einsum`, `Conv`, the
`Conv3D` backprop ops, the `Conv2D` "V2" backprop ops and the depthwise backprop
ops; `register_flop_rules` adds them (once, idempotently). Two families of its
rules are wrong for training graphs and are replaced for the counted ops,
through the profiler's op log (`corrected_flops`), without touching TensorFlow's
registry: `BatchMatMul*` reads `transpose_a`, which those ops do not have (they
have `adj_x`), so a kernel gradient xᵀ·dy gets the wrong inner dimension (4x too
many FLOPs for T=16, D=64); and `Conv2DBackpropInput`/`Filter` reject NCHW (the
profiler then drops the op silently) and count the full input size over the
strides instead of the forward convolution's work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

_registered = False


def _shape(graph: Any, tensor_name: str) -> list[int]:
    """The fully defined shape of `tensor_name` ("op" or "op:1"); ValueError if not defined."""
    name = tensor_name if ":" in tensor_name else f"{tensor_name}:0"
    shape = graph.get_tensor_by_name(name).shape
    shape.assert_is_fully_defined()
    return shape.as_list()


def _product(values: Any) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


def einsum_flops(equation: str, input_shapes: list[list[int]], output_shape: list[int]) -> int:
    """FLOPs of an einsum: 2 x the product of the sizes of all distinct indices.

    That is 2·M·N·K for "mk,kn->mn", as for a matmul. Ellipsis dimensions count
    once each, broadcast across the operands. A one-operand einsum is a
    transpose (0 FLOPs) or a sum (one add per input element it folds away).

    Example:
        >>> einsum_flops("BTNH,BSNH->BNTS", [[2, 3, 4, 5], [2, 6, 4, 5]], [2, 4, 3, 6])
        1440
    """
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    specs = inputs.split(",")
    sizes: dict[str, int] = {}
    ellipsis: list[int] = []
    # The graph's shapes as TensorFlow gives them: a rule counts what it can, never raises.
    for spec, shape in zip(specs, input_shapes, strict=False):
        before, dots, after = spec.partition("...")
        labels = [*before, *after]
        dims = [*shape[: len(before)], *shape[len(shape) - len(after) :]] if dots else list(shape)
        for label, dim in zip(labels, dims, strict=False):
            sizes[label] = max(sizes.get(label, 1), int(dim))
        if dots:
            middle = [int(d) for d in shape[len(before) : len(shape) - len(after)]]
            ellipsis = _broadcast(ellipsis, middle)
    if len(specs) == 1:
        folded = arrow and set(specs[0].replace("...", "")) - set(output.replace("...", ""))
        return max(_product(input_shapes[0]) - _product(output_shape), 0) if folded else 0
    return 2 * _product(sizes.values()) * _product(ellipsis)


def _broadcast(left: list[int], right: list[int]) -> list[int]:
    size = max(len(left), len(right))
    left, right = [1] * (size - len(left)) + left, [1] * (size - len(right)) + right
    return [max(a, b) for a, b in zip(left, right, strict=True)]


def _einsum_rule(graph: Any, node: Any) -> Any:
    from tensorflow.python.framework import ops

    inputs = [_shape(graph, name) for name in node.input if not name.startswith("^")]
    equation = node.attr["equation"].s.decode()
    return ops.OpStats("flops", einsum_flops(equation, inputs, _shape(graph, node.name)))


def _batch_matmul_rule(graph: Any, node: Any) -> Any:
    """2·(output elements)·K, K read from `adj_x` (TensorFlow's rule reads `transpose_a`)."""
    from tensorflow.python.framework import ops

    a_shape = _shape(graph, node.input[0])
    inner = a_shape[-2] if node.attr["adj_x"].b else a_shape[-1]
    return ops.OpStats("flops", 2 * inner * _product(_shape(graph, node.name)))


def _conv_rule(graph: Any, node: Any) -> Any:
    """Forward `Conv`: 2·(output elements)·(filter elements per output channel), any layout."""
    from tensorflow.python.framework import ops

    kernel = _shape(graph, node.input[1])
    per_output = _product(kernel) // kernel[-1]
    return ops.OpStats("flops", 2 * _product(_shape(graph, node.name)) * per_output)


def _conv_backprop_rule(kernel_from_output: bool, depthwise: bool = False) -> Callable[..., Any]:
    """Backprop of a convolution: the forward's work, 2·(out_backprop elements)·(filter
    elements per output channel), whatever the layout, stride, padding or groups.

    Inputs are (input or its sizes, filter or its sizes, out_backprop); the filter's
    shape is input 1 for the input gradient and the op's output for the filter gradient.
    """

    def rule(graph: Any, node: Any) -> Any:
        from tensorflow.python.framework import ops

        kernel = _shape(graph, node.name if kernel_from_output else node.input[1])
        per_output = _product(kernel[:-2]) if depthwise else _product(kernel) // kernel[-1]
        return ops.OpStats("flops", 2 * _product(_shape(graph, node.input[2])) * per_output)

    return rule


# Op types TensorFlow has no FLOP rule for: registered with ops.RegisterStatistics.
_MISSING_RULES: dict[str, Callable[..., Any]] = {
    "Einsum": _einsum_rule,
    "Conv": _conv_rule,
    "Conv2DBackpropInputV2": _conv_backprop_rule(kernel_from_output=False),
    "Conv2DBackpropFilterV2": _conv_backprop_rule(kernel_from_output=True),
    "Conv3DBackpropInput": _conv_backprop_rule(kernel_from_output=False),
    "Conv3DBackpropFilter": _conv_backprop_rule(kernel_from_output=True),
    "Conv3DBackpropInputV2": _conv_backprop_rule(kernel_from_output=False),
    "Conv3DBackpropFilterV2": _conv_backprop_rule(kernel_from_output=True),
    "DepthwiseConv2dNativeBackpropInput": _conv_backprop_rule(False, depthwise=True),
    "DepthwiseConv2dNativeBackpropFilter": _conv_backprop_rule(True, depthwise=True),
}
# Op types whose TensorFlow rule is wrong in training graphs: replaced, per op, in the op log.
_CORRECTED_RULES: dict[str, Callable[..., Any]] = {
    "BatchMatMul": _batch_matmul_rule,
    "BatchMatMulV2": _batch_matmul_rule,
    "BatchMatMulV3": _batch_matmul_rule,
    "Conv2DBackpropInput": _conv_backprop_rule(kernel_from_output=False),
    "Conv2DBackpropFilter": _conv_backprop_rule(kernel_from_output=True),
}


def register_flop_rules() -> None:
    """Register FLOP rules for the matmul-like ops TensorFlow 2.x has none for.

    Safe to call any number of times, from any number of imports of this module:
    an op type that already has a rule (TensorFlow's own, or ours from an
    earlier call) keeps it.

    Example:
        >>> register_flop_rules(); register_flop_rules()   # the second call does nothing
    """
    global _registered
    if _registered:
        return
    from tensorflow.python.framework import ops

    # TensorFlow's own rules first, so that its later import never collides with ours.
    from tensorflow.python.profiler.internal import flops_registry  # noqa: F401

    for op_type, rule in _MISSING_RULES.items():
        with contextlib.suppress(KeyError):  # registered already
            ops.RegisterStatistics(op_type, "flops")(rule)
    _registered = True


def corrected_flops(graph: Any, op: Any) -> int | None:
    """FLOPs of `op` (an operation of `graph`) by our rule where TensorFlow's is wrong in
    training graphs: `BatchMatMul*` and `Conv2DBackpropInput`/`Filter`.

    None where TensorFlow's rule stands: for any other op type, and when a shape is
    not fully defined (TensorFlow's rule then fails too, and the counter reports the op).

    Example:
        >>> import tensorflow as tf
        >>> matmul = tf.function(lambda a, b: tf.linalg.matmul(a, b, adjoint_a=True))
        >>> graph = matmul.get_concrete_function(
        ...     tf.TensorSpec((8, 16, 64)), tf.TensorSpec((8, 16, 32))).graph
        >>> op = next(op for op in graph.get_operations() if op.type.startswith("BatchMatMul"))
        >>> corrected_flops(graph, op)   # 2·K·(output elements), K = 16 under adj_x
        524288
    """
    rule = _CORRECTED_RULES.get(op.type)
    if rule is None:
        return None
    try:
        return int(rule(graph, op.node_def).value)
    except ValueError:  # shape not fully defined
        return None
