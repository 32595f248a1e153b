"""A note on dtype errors raised under a mixed policy: what the policy is, and the fix.

Under ``mixed_float16`` or ``mixed_bfloat16`` layers compute in 16 bits, and code that
makes its own tensors beside them in float32 (``tf.random.normal(shape)`` in a VAE's
sampling layer, ``tf.ones``, a constant) fails with Keras' or TensorFlow's dtype error.
The error stays theirs; where it passes through accelkit (`accelkit.keras.fit`, the
train function of `ProfileCallback`) it gets a note (PEP 678) naming the policy and
the fix, so a user who called `accelkit.auto_configure()` at the top of a script is not
left guessing.
"""

from __future__ import annotations

import re
from typing import Any

from accelkit.frameworks.tensorflow_adapter import OPT_OUT

# Words of TensorFlow's and Keras' dtype errors about a 16-bit tensor meeting another.
_HALF = re.compile(r"\b(half|float16|bfloat16)\b")
_MISMATCH = re.compile(
    r"dtype|expected to be|must be|cannot compute|not match|same type", re.IGNORECASE
)


def note_for(error: BaseException, policy: str) -> str | None:
    """The note for `error` under `policy`, or None when it is not a 16-bit dtype error.

    Example:
        >>> error = TypeError("Input 'y' of 'AddV2' Op has type float32 that does not "
        ...                   "match type float16 of argument 'x'.")
        >>> note_for(error, "mixed_float16").split(":")[0]
        'accelkit'
        >>> note_for(error, "float32") is None
        True
    """
    if not policy.startswith("mixed"):
        return None
    text = str(getattr(error, "message", "") or error)
    if not (_HALF.search(text) and _MISMATCH.search(text)):
        return None
    dtype = "bfloat16" if "bfloat16" in policy else "float16"
    return (
        f"accelkit: this ran under the Keras dtype policy {policy}, which layers built after "
        f"it follow: they compute in {dtype} while a tensor made beside them is float32. "
        "Give such tensors the layer's dtype (tf.random.normal(shape, dtype=z.dtype), "
        f"keras.ops.ones(shape, dtype=self.compute_dtype)), or opt out: {OPT_OUT}. "
        "docs/keras.md lists the known cases."
    )


def add_policy_note(error: BaseException) -> None:
    """Add `note_for` `error` under the global policy, once (PEP 678's ``__notes__``).

    Example:
        >>> import keras
        >>> keras.mixed_precision.set_global_policy("mixed_bfloat16")
        >>> error = ValueError("Tensor conversion requested dtype bfloat16 for Tensor "
        ...                    "with dtype float32")
        >>> add_policy_note(error)
        >>> keras.mixed_precision.set_global_policy("float32")
        >>> "mixed_bfloat16" in error.__notes__[0]
        True
    """
    try:
        import keras

        note = note_for(error, keras.mixed_precision.global_policy().name)
    except Exception:  # noqa: BLE001 - a note, never a second error
        return
    if note is not None and note not in getattr(error, "__notes__", ()):
        add_note(error, note)


def add_note(error: BaseException, note: str) -> None:
    """`error.add_note(note)`; on Python 3.10, which lacks it, append to ``__notes__``."""
    adder: Any = getattr(error, "add_note", None)
    if adder is not None:
        adder(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]  # type: ignore[attr-defined]
