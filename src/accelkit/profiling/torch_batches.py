"""How a PyTorch batch reaches the model and how the loss comes back: the convention of
the model libraries people train (Hugging Face transformers, timm, torchvision), in one
place for `accelkit.torch.fit`, `accelkit.torch.Meter` and the FLOP counter.

Batches:

- a dict (any mapping, transformers' `BatchEncoding` too) holds keyword arguments:
  ``model(**batch)``;
- a tuple or list is ``(inputs, targets)`` when there is a `loss_fn`, otherwise the
  model's positional arguments: ``model(*batch)``;
- anything else (a tensor) is the model's one argument: ``model(batch)``;
- torchvision's detection convention, ``(images, targets)`` with a list (or tuple) of
  image tensors and one target dict per image: the images are one argument, a list
  (``model(images)`` with a `loss_fn`, ``model(images, targets)`` without), and the
  batch holds as many samples as images.

With a `loss_fn` the loss is ``loss_fn(output, targets)``, where `output` is what the
model returned, exactly as it returned it (a tensor, a transformers `ModelOutput`, a
tuple...):

- ``(inputs, targets)``: ``loss_fn(model(inputs), targets)``; inputs are called as
  above (a dict as keywords, a tuple as positions); more than two items: the targets
  are ``tuple(batch[1:])``;
- a dict: its ``"labels"`` entry is the targets and the other entries the model's
  keyword arguments, ``loss_fn(model(**rest), batch["labels"])``, as the Hugging Face
  Trainer does with a `compute_loss_func`. A dict without ``"labels"`` is refused
  (the loss would have no targets).

With ``loss_fn=None`` the whole batch goes to the model and the loss is read from what
it returned (DESIGN.md): the output itself when a 0-d tensor; its ``["loss"]`` (a dict,
or a `ModelOutput`); its ``.loss``; a dict of 0-d losses whose names start with
``loss`` (torchvision's detection models: ``loss_classifier``, ``loss_box_reg``...),
summed as torchvision's own training reference does; or, in a tuple or list, its one
0-d tensor (transformers' ``return_dict=False`` puts the loss first, nanoGPT's
``(logits, loss)`` last). A tuple with several 0-d tensors is refused, naming their
positions: which is the loss (``(logits, aux_penalty, loss)``) cannot be told, and
training on the wrong one would go unnoticed. A `loss_fn` that returns one of these
containers is read the same way.

Anything else raises a `ValueError` naming what was received and what is accepted.
Only accelkit's reading of batches and outputs raises here: whatever the model or the
loss function raise themselves passes through unchanged.

Tokens: a dict's ``input_ids``, else the batch's first tensor, when it holds integer
ids of shape (batch, sequence); its ``attention_mask`` (same shape) tells the real
tokens from the padding.

The module duck-types tensors (``shape``, ``dim()``, ``is_floating_point()``) rather
than importing torch, so the profiling stage can use it and ``import accelkit`` stays
framework-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

MODEL = "the model"
LOSS_FN = "loss_fn"
LABELS = "labels"
TOKEN_IDS = "input_ids"
ATTENTION_MASK = "attention_mask"
_MISSING = object()  # an attribute that is absent, told from one that is None

_BATCHES = (
    "a dict of the model's keyword arguments with the targets under 'labels', "
    "or a tuple/list (inputs, targets)"
)
_OUTPUTS = (
    "a 0-d tensor, a dict or transformers ModelOutput with a 'loss', a dict of 0-d "
    "losses named 'loss...', an object with a .loss, or a tuple/list holding one 0-d tensor"
)
LOSS_PREFIX = "loss"  # torchvision's detection losses: loss_classifier, loss_box_reg, ...


def is_tensor(value: Any) -> bool:
    """Whether `value` is a tensor (duck-typed: a shape, ``dim()`` and a dtype test)."""
    return (
        hasattr(value, "shape")
        and callable(getattr(value, "dim", None))
        and callable(getattr(value, "is_floating_point", None))
    )


def split(batch: Any) -> tuple[Any, Any]:
    """``(inputs, targets)`` of a batch for ``loss_fn(model(inputs), targets)``.

    Args:
        batch: a tuple/list ``(inputs, targets, ...)`` or a mapping with ``"labels"``.

    Raises:
        ValueError: the batch holds no targets (a tensor, a one-item tuple, a dict
            without ``"labels"``); the message names what was received.

    The images of a detection batch (`per_image`) come back as the one argument they
    are: ``((images,), targets)``, so the model gets the list, not one image per argument.

    Example:
        >>> split({"input_ids": [[5, 7]], "labels": [[7, 9]]})
        ({'input_ids': [[5, 7]]}, [[7, 9]])
        >>> split(("x", "y", "weights"))
        ('x', ('y', 'weights'))
    """
    if isinstance(batch, Mapping):
        if LABELS in batch:
            return {k: v for k, v in batch.items() if k != LABELS}, batch[LABELS]
    elif isinstance(batch, (list, tuple)) and len(batch) >= 2:
        if per_image(batch) is not None and all(is_tensor(i) for i in batch[0]):
            return (batch[0],), batch[1]  # the images themselves: one argument, the list
        return batch[0], batch[1] if len(batch) == 2 else tuple(batch[1:])
    raise ValueError(
        f"with a loss_fn each batch must be {_BATCHES}; got {describe(batch)}. "
        "For a model that computes its own loss, pass loss_fn=None"
    )


def per_image(batch: Any) -> int | None:
    """The number of images of a batch in torchvision's detection convention, ``(images,
    targets)`` with a list or tuple of image tensors and one target dict per image (what
    its reference collate, ``tuple(zip(*samples))``, gives); the images may also come
    as the one positional argument, ``((images,), targets)``. None for any other batch.

    Example:
        >>> import torch
        >>> images = [torch.zeros(3, 64, 48), torch.zeros(3, 32, 32)]
        >>> per_image((images, [{"boxes": 0}, {"boxes": 1}]))
        2
        >>> per_image((torch.zeros(8, 3, 32, 32), torch.zeros(8))) is None
        True
    """
    if not isinstance(batch, (list, tuple)) or len(batch) != 2:
        return None
    images, targets = batch
    if isinstance(images, tuple) and len(images) == 1 and isinstance(images[0], list):
        images = images[0]  # ((images,), targets): the list as the one argument
    if not isinstance(images, (list, tuple)) or not isinstance(targets, (list, tuple)):
        return None
    if len(images) != len(targets) or not images:
        return None
    if all(is_tensor(i) for i in images) and all(isinstance(t, Mapping) for t in targets):
        return len(images)
    return None


def call(model: Callable[..., Any], inputs: Any) -> Any:
    """The model called on `inputs`: a mapping as keywords, a tuple/list as positions,
    anything else as the one argument.

    Example:
        >>> import torch
        >>> call(torch.nn.Linear(4, 2), {"input": torch.zeros(3, 4)}).shape
        torch.Size([3, 2])
    """
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (list, tuple)):
        return model(*inputs)
    return model(inputs)


def loss_of(output: Any, *, source: str = MODEL, notes: dict[str, str] | None = None) -> Any:
    """The scalar loss in `output`, what `source` returned.

    Args:
        output: a 0-d tensor; a mapping with ``"loss"`` (a dict, a `ModelOutput`); an
            object with ``.loss``; a mapping of 0-d losses named ``loss...`` (summed);
            a tuple/list holding exactly one 0-d tensor, the loss.
        source: who returned it: `MODEL` (``loss_fn=None``) or `LOSS_FN`.
        notes: where to say how the loss was read when it is a sum (key ``"loss"``).

    Raises:
        ValueError: no 0-d floating-point loss in `output` (a missing or None loss, a
            tensor of another shape), or a tuple with several; the message names what
            was received and what is accepted.

    Example:
        >>> import torch
        >>> loss_of({"loss": torch.tensor(0.5), "logits": torch.zeros(2, 3)})
        tensor(0.5000)
        >>> loss_of({"loss_classifier": torch.tensor(0.25), "loss_box_reg": torch.tensor(0.5)})
        tensor(0.7500)
    """
    if _is_loss(output):
        return output
    where, loss = f"{source} returned", output
    if not is_tensor(output):
        if isinstance(output, Mapping) and "loss" in output:
            where, loss = f"{source}'s output['loss'] is", output["loss"]
        elif getattr(output, "loss", None) is not None:
            where, loss = f"{source}'s output.loss is", output.loss
        elif isinstance(output, Mapping) and (names := summed_losses(output)):
            if notes is not None:
                notes["loss"] = (
                    f"the loss is the sum of the {len(names)} losses {source} returned "
                    f"({', '.join(names)}), as torchvision's training reference sums them"
                )
            return sum(output[name] for name in names)
        elif isinstance(output, (list, tuple)):
            loss = _one_loss(output, source)
        if _is_loss(loss):
            return loss
    accepted = (
        f"with loss_fn=None the model's output must be {_OUTPUTS}"
        if source == MODEL
        else f"loss_fn must return {_OUTPUTS}"
    )
    raise ValueError(
        f"{where} {describe(loss)}, which holds no loss: {accepted}; {_hint(loss, source)}"
    )


def summed_losses(output: Mapping[Any, Any]) -> tuple[str, ...]:
    """The names of a mapping's 0-d losses that `loss_of` sums (``loss...`` keys, in
    order), when it has no ``"loss"`` of its own; empty otherwise.

    Example:
        >>> import torch
        >>> summed_losses({"loss_objectness": torch.tensor(1.0), "boxes": torch.zeros(2, 4)})
        ('loss_objectness',)
    """
    if "loss" in output:
        return ()
    return tuple(
        name
        for name, value in output.items()
        if isinstance(name, str) and name.startswith(LOSS_PREFIX) and _is_loss(value)
    )


def _one_loss(output: list[Any] | tuple[Any, ...], source: str) -> Any:
    """A tuple's one 0-d loss (the tuple itself when it holds none, for the message)."""
    positions = [i for i, item in enumerate(output) if _is_loss(item)]
    if len(positions) > 1:
        named = ", ".join(str(i) for i in positions)
        raise ValueError(
            f"{source} returned {describe(output)}, with 0-d tensors at positions {named}: "
            "which one is the loss cannot be told (an auxiliary term, a metric?), and "
            "training on the wrong one would go unnoticed; return the loss under a name "
            "(a dict or transformers ModelOutput with 'loss', an object with .loss)"
            + (", or give a loss_fn" if source == MODEL else "")
        )
    return output[positions[0]] if positions else output


def _is_loss(value: Any) -> bool:
    return is_tensor(value) and value.dim() == 0 and value.is_floating_point()


def _hint(value: Any, source: str) -> str:
    if is_tensor(value) and value.dim() and value.is_floating_point():
        reduce = "reduce the loss to one number (e.g. .mean(), or reduction='mean')"
        return reduce if source != MODEL else f"give a loss_fn for these outputs, or {reduce}"
    if source == MODEL and (value is None or getattr(value, "loss", _MISSING) is None):
        return (
            "the model computes no loss without labels: put them in the batch (a "
            "dict's 'labels'), or give a loss_fn"
        )
    if source == MODEL:
        return "give a loss_fn, or return the loss from the model"
    return "return the loss as a 0-d tensor"


def forward_loss(
    model: Callable[..., Any],
    batch: Any,
    loss_fn: Callable[..., Any] | None,
    notes: dict[str, str] | None = None,
) -> Any:
    """The scalar loss of one batch: the model called and its loss read by the convention
    above (``loss_fn=None``: from the output; else ``loss_fn(output, targets)``); how it
    was read goes to `notes` where that is not plain (a sum of losses).

    Example:
        >>> import torch
        >>> def model(x, labels):   # computes its own loss, as transformers models do
        ...     return {"loss": torch.nn.functional.mse_loss(x, labels)}
        >>> forward_loss(model, {"x": torch.ones(4), "labels": torch.zeros(4)}, None)
        tensor(1.)
    """
    if loss_fn is None:
        return loss_of(call(model, batch), notes=notes)
    inputs, targets = split(batch)
    return loss_of(loss_fn(call(model, inputs), targets), source=LOSS_FN, notes=notes)


# -- counting: samples and tokens ----------------------------------------------------


def first_tensor(batch: Any) -> Any:
    """The first tensor with a batch dimension (not 0-d) in a tensor, tuple/list or
    mapping, searched depth-first; None when there is none.

    Example:
        >>> import torch
        >>> first_tensor({"mask": None, "x": torch.zeros(8, 3)}).shape
        torch.Size([8, 3])
    """
    if is_tensor(batch):
        return batch if batch.dim() else None
    items = (
        batch.values()
        if isinstance(batch, Mapping)
        else batch
        if isinstance(batch, (list, tuple))
        else ()
    )
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def batch_size(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of its token ids, else of its first tensor;
    the images of a detection batch (`per_image`).

    Example:
        >>> import torch
        >>> batch_size((torch.zeros(32, 10), torch.zeros(32)))
        32
    """
    return sizes(batch)[0]


def token_ids(batch: Any) -> Any:
    """The batch's token ids, an integer tensor of shape (batch, sequence), or None: a
    mapping's ``input_ids``, else the batch's first tensor when it has that form.

    Example:
        >>> import torch
        >>> ids = torch.zeros(8, 128, dtype=torch.long)
        >>> token_ids({"pixel_values": torch.zeros(8, 3, 32, 32), "input_ids": ids}) is ids
        True
    """
    return sizes(batch)[1]


def sizes(batch: Any) -> tuple[int | None, Any]:
    """`batch_size` and `token_ids` of a batch from one look at it (the meter's per-step
    path asks for both).

    Example:
        >>> import torch
        >>> sizes({"input_ids": torch.zeros(8, 128, dtype=torch.long)})[0]
        8
    """
    images = per_image(batch)
    if images is not None:  # a list of image tensors: its length, not an image's channels
        return images, None
    named = batch.get(TOKEN_IDS) if isinstance(batch, Mapping) else None
    first = first_tensor(batch) if named is None else None
    ids = _as_token_ids(named if named is not None else first)
    if ids is None and first is None and named is not None:
        first = first_tensor(batch)  # input_ids of another form: count by the first tensor
    found = ids if ids is not None else first
    return (None if found is None else int(found.shape[0])), ids


def _as_token_ids(found: Any) -> Any:
    if found is not None and found.dim() == 2 and not found.is_floating_point():
        return found
    return None


def attention_mask(batch: Any, ids: Any) -> Any:
    """A mapping's ``attention_mask`` when it has the shape of `ids` (ones for real
    tokens, zeros for padding), else None.

    Example:
        >>> import torch
        >>> ids, mask = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)
        >>> attention_mask({"input_ids": ids, "attention_mask": mask}, ids) is mask
        True
    """
    if ids is None or not isinstance(batch, Mapping):
        return None
    mask: Any = batch.get(ATTENTION_MASK)
    if is_tensor(mask) and tuple(mask.shape) == tuple(ids.shape):
        return mask
    return None


# -- messages ------------------------------------------------------------------------


def describe(value: Any, depth: int = 0) -> str:
    """What `value` is, for an error message: a tensor's shape and dtype, a mapping's
    keys, a tuple's items.

    Example:
        >>> import torch
        >>> describe((torch.zeros(8, 16), None))
        'tuple of 2: (Tensor of shape (8, 16) torch.float32, None)'
    """
    kind = type(value).__name__
    if is_tensor(value):
        return f"{kind} of shape {tuple(value.shape)} {getattr(value, 'dtype', '')}".rstrip()
    if isinstance(value, Mapping):
        keys = [str(k) for k in value]
        loss = getattr(value, "loss", _MISSING)
        shown = ", loss=None" if loss is None else ""
        return f"{kind} with keys {keys}{shown}"
    if isinstance(value, (list, tuple)):
        if depth:
            return f"{kind} of {len(value)}"
        items = ", ".join(describe(item, depth + 1) for item in value[:4])
        more = ", ..." if len(value) > 4 else ""
        return f"{kind} of {len(value)}: ({items}{more})"
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    loss = getattr(value, "loss", _MISSING)
    return f"{kind} with loss={describe(loss, depth + 1)}" if loss is not _MISSING else kind
