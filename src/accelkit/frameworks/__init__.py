"""Framework adapters: each applies a `Plan` to its framework, imported lazily.

`resolve` chooses the framework of ``auto_configure(framework="auto")`` from what
the script uses, never by importing a framework; `at_import` applies a plan when
its framework is imported, for scripts where that cannot be told in advance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from accelkit.frameworks import import_hook, script
from accelkit.frameworks.script import KERAS, KERAS_BACKENDS, Script, Use
from accelkit.planning.types import Framework, Plan
from accelkit.utils.imports import is_available, is_imported

# The modules whose import means the framework is in use; the first one is the framework.
MODULES = {Framework.TORCH: ("torch",), Framework.TENSORFLOW: ("tensorflow", "keras")}


@dataclasses.dataclass(frozen=True)
class Decision:
    """Which framework `auto_configure` plans for, and why.

    Attributes:
        framework: the framework of the plan `auto_configure` returns.
        reason: one line for the plan's notes.
        at_import: when not empty, nothing is applied now: these frameworks get
            their plan when the script imports them (`at_import`).
        first_decides: True when the script named neither framework: the first one
            it imports is the one it uses, and the other is not waited for. False
            when it named both: each is configured at its import.
        applies: False when the plan is only for reading (Keras on a backend
            accelkit does not configure).
    """

    framework: Framework
    reason: str
    at_import: tuple[Framework, ...] = ()
    first_decides: bool = False
    applies: bool = True


def resolve(framework: str | Framework) -> Decision:
    """Turn ``"auto"`` into the framework the script uses, importing none.

    In order, the first that tells:

    1. the frameworks the script has already imported (keras counts as the
       framework its backend runs on);
    2. the imports of the ``__main__`` script, read with `ast`, never run:
       ``import torch``, ``from tensorflow import keras``, ``import keras``, and
       libraries that imply one (transformers, lightning, timm -> torch; tf_keras
       -> tensorflow); ``python -c`` code is read too;
    3. ``KERAS_BACKEND`` in the environment, when the script names no framework.
       It is read after the script because it says what Keras runs on, not that
       the script uses Keras: a shell that exports it for another project must not
       turn a PyTorch script into a TensorFlow one.

    Keras runs on the framework of its backend (``KERAS_BACKEND``, else
    ``keras.json``, else TensorFlow, as Keras decides): on ``torch`` the PyTorch
    plan is the one whose settings reach the kernels Keras runs (TF32, cuDNN, the
    allocator), and the TensorFlow adapter would import a TensorFlow the script
    does not use; on ``jax`` or ``numpy`` accelkit configures nothing and the
    Keras plan is returned to read.

    When it still cannot tell, the decision is made at import: when the script
    names both, each is configured when the script imports it; when it names
    neither, the first installed framework it imports is the one it uses.
    """
    chosen = Framework.parse(framework, name="framework")
    if chosen is not Framework.AUTO:
        return Decision(chosen, f"framework={chosen.value!r} requested")
    return decide(
        _imported(),
        script.main_script(),
        script.keras_backend(),
        {f for f in MODULES if is_available(f.value)},
    )


def decide(
    imported: Mapping[str, bool],
    source: Script,
    keras_backend: tuple[str, str],
    installed: Iterable[Framework],
) -> Decision:
    """`resolve` on plain data: what is imported (``{"torch": True, "tensorflow": False,
    "keras": False}``), the script's imports, Keras's backend and where it came from,
    and the frameworks installed."""
    backend, backend_source = keras_backend
    keras_on = Framework(KERAS_BACKENDS[backend]) if backend in KERAS_BACKENDS else None
    keras_runs = f"which runs on {backend} ({backend_source})"
    if keras_on is None:
        keras_runs += ": accelkit configures Keras only on tensorflow or torch, nothing applied"

    # 1. What the script has imported already.
    found = {f for f in MODULES if imported.get(f.value)}
    if imported.get("keras") and keras_on is not None:
        found.add(keras_on)
    # 2. What the script imports, first use of each framework.
    named: dict[Framework, Use] = {}
    for use in source.uses:
        framework = keras_on if use.kind == KERAS else Framework(use.kind)
        if framework is not None:
            named.setdefault(framework, use)
    keras_use = source.first(KERAS)

    if len(found) == 1:
        (only,) = found
        keras = f" (keras, {keras_runs})" if imported.get("keras") and keras_on is only else ""
        return Decision(only, f"the script imported {only.value}{keras}")
    if found:  # both imported already: the script's own imports break the tie, else torch
        ours = [f for f in named if f in found]
        only = ours[0] if len(ours) == 1 else Framework.TORCH
        why = f"{source.name} imports {only.value}" if len(ours) == 1 else "planned for torch"
        return Decision(
            only,
            f"the script imported both torch and tensorflow; {why} "
            "(auto_configure(framework=...) configures the other)",
        )
    if imported.get("keras"):
        return Decision(
            Framework.TENSORFLOW, f"the script imported keras, {keras_runs}", applies=False
        )
    if len(named) == 1:
        ((only, use),) = named.items()
        keras = f", {keras_runs}" if use.kind == KERAS else ""
        return Decision(only, f"the script imports {source.where(use)}{keras}")
    if not named and keras_use is not None:
        return Decision(
            Framework.TENSORFLOW,
            f"the script imports {source.where(keras_use)}, {keras_runs}",
            applies=False,
        )
    # 3. KERAS_BACKEND set for this run, when the script names no framework.
    if not named and keras_on is not None and backend_source.startswith("KERAS_BACKEND="):
        return Decision(keras_on, f"{backend_source} ({_silent(source)})")
    # 4. Both or neither: each framework is configured when the script imports it.
    return _at_import(named, installed, source)


def _at_import(
    named: Mapping[Framework, Use], installed: Iterable[Framework], source: Script
) -> Decision:
    """The decision when the script names both frameworks or neither: each installed
    one is configured when the script imports it (neither named: the first it imports)."""
    candidates = tuple(f for f in MODULES if f in set(installed))
    if not candidates:
        return Decision(Framework.TORCH, "neither torch nor tensorflow is installed")
    if named:
        uses = sorted(named.values(), key=lambda u: u.line)
        why = "the script imports " + " and ".join(source.where(u) for u in uses)
        first = next(f for f, u in named.items() if u is uses[0])
    else:
        why, first = _silent(source), candidates[0]
    if len(candidates) == 1:
        waits = f"{candidates[0].value} is configured when the script imports it"
    elif named:
        waits = "torch and tensorflow are each configured when the script imports them"
    else:
        waits = "the first of torch and tensorflow the script imports is configured"
    return Decision(
        first, f"decided at import: {why}; {waits}", at_import=candidates, first_decides=not named
    )


def _silent(source: Script) -> str:
    """Why the script told nothing."""
    if source.problem:
        return source.problem
    return f"{source.name} names neither torch nor tensorflow"


def _imported() -> dict[str, bool]:
    return {name: is_imported(name) for name in ("torch", "tensorflow", "keras")}


def at_import(decision: Decision, on_import: Callable[[Framework, str], None]) -> None:
    """Call ``on_import(framework, module)`` right after the script imports each of
    the decision's `at_import` frameworks, or only the first it imports when
    `first_decides` (``module``: the import that finished, e.g. ``"keras"``).
    Replaces what an earlier call left waiting; see `accelkit.frameworks.import_hook`."""
    import_hook.watch(
        {f.value: MODULES[f] for f in decision.at_import},
        lambda group, trigger: on_import(Framework(group), trigger),
        first_only=decision.first_decides,
    )


def stop_at_import() -> None:
    """Forget the frameworks `at_import` is waiting for."""
    import_hook.unwatch()


def apply(plan: Plan) -> Plan:
    """Apply `plan` to its framework; the returned plan records each setting's outcome."""
    if plan.framework is Framework.TENSORFLOW:
        from accelkit.frameworks import tensorflow_adapter as adapter
    else:
        from accelkit.frameworks import torch_adapter as adapter  # type: ignore[no-redef]
    return adapter.apply(plan)
