"""Where `AccelkitCallback` runs among a `Trainer`'s callbacks: right after
``DefaultFlowCallback``, before every logger.

The Trainer lists its callbacks as ``DefaultFlowCallback``, then one per ``report_to``
logger (TensorBoard, W&B, MLflow...), then the ``callbacks=`` you pass, then its
progress printer; its `CallbackHandler` calls each hook on them in that order. A logger
writes the ``logs`` dict in its ``on_log``, so a callback passed as ``callbacks=[cb]``
would add its figures after every logger has written them. ``DefaultFlowCallback``
must stay before: it sets ``control.should_log/should_evaluate/should_save`` in
``on_step_end``, which the callback reads there.

The Trainer hands callbacks no handle on their handler, but its hooks are called from
`CallbackHandler.call_event`, so at ``on_train_begin`` the handler is on the call stack.
It is iterating over the very list being reordered, so the reorder keeps in their places
the callbacks not yet called in this hook: moving back past callbacks already called is
safe; a callback placed ahead of the flow (``callbacks.insert(0, cb)``) stays, and the
flow callbacks move in front of it instead (their ``on_train_begin`` is the base class's
no-op, and ours is called once more: `AccelkitCallback` ignores a second call).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType


def handler_calling(callback: Any) -> Any | None:
    """The `transformers.CallbackHandler` that holds `callback` and is calling one of its
    hooks now (found up the call stack), or None."""
    from transformers.trainer_callback import CallbackHandler

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, CallbackHandler) and any(c is callback for c in owner.callbacks):
            return owner
        frame = frame.f_back
    return None


def after_flow(callbacks: list[Any], callback: Any) -> None:
    """Reorder `callbacks` in place so that `callback` comes right after the
    ``DefaultFlowCallback`` and before the rest, which keep their order.

    Example:
        >>> from transformers.trainer_callback import DefaultFlowCallback, PrinterCallback
        >>> flow, logger, ours = DefaultFlowCallback(), PrinterCallback(), PrinterCallback()
        >>> callbacks = [flow, logger, ours]
        >>> after_flow(callbacks, ours)
        >>> callbacks == [flow, ours, logger]
        True
        >>> callbacks = [ours, flow, logger]       # callbacks.insert(0, ours)
        >>> after_flow(callbacks, ours)
        >>> callbacks == [flow, ours, logger]
        True
    """
    from transformers.trainer_callback import DefaultFlowCallback

    at = next(i for i, c in enumerate(callbacks) if c is callback)
    flows = [i for i, c in enumerate(callbacks) if isinstance(c, DefaultFlowCallback)]
    last = flows[-1] if flows else -1
    if at > last:  # back to just after the flow: the callbacks it passes were called
        callbacks.insert(last + 1, callbacks.pop(at))
        return
    # Ahead of the flow (inserted at 0): the flow callbacks move in front of it instead,
    # so that the ones after it keep their places in the iteration under way.
    ahead = [callbacks[i] for i in flows if i > at]
    callbacks[:] = [c for c in callbacks if all(c is not f for f in ahead)]
    callbacks[at:at] = ahead
