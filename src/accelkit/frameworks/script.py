"""What the running script uses, read without running or importing anything.

`auto_configure(framework="auto")` asks two questions here before it imports a
framework: which frameworks does the `__main__` script import (read with `ast`,
never executed), and which framework does Keras run on (``KERAS_BACKEND``, else
``keras.json``, read the way Keras reads them). Nothing here raises: a script
that cannot be read is a script that tells nothing, with the reason.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import sys
import tokenize
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# What a script's imports say about its framework. "keras" runs on the backend
# Keras is configured with (see `keras_backend`).
TORCH, TENSORFLOW, KERAS = "torch", "tensorflow", "keras"
_LIBRARIES = {
    TORCH: (
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "torchmetrics",
        "torchrec",
        "functorch",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "timm",
        "transformers",
        "accelerate",
        "peft",
        "trl",
        "diffusers",
        "deepspeed",
        "fairscale",
        "xformers",
        "torch_geometric",
        "sentence_transformers",
        "ultralytics",
    ),
    TENSORFLOW: (
        "tensorflow",
        "tf_keras",
        "tensorflow_hub",
        "tensorflow_addons",
        "tensorflow_text",
        "tensorflow_io",
        "tensorflow_recommenders",
        "tensorflow_model_optimization",
    ),
    KERAS: ("keras", "keras_hub", "keras_nlp", "keras_cv", "keras_tuner", "keras_rs"),
}
_KIND = {library: kind for kind, libraries in _LIBRARIES.items() for library in libraries}
# accelkit's own framework packages say the same: `accelkit.torch.fit` is a PyTorch script.
_ACCELKIT = {"torch": TORCH, "lightning": TORCH, "hf": TORCH, "keras": KERAS}

_MAX_BYTES = 4_000_000  # a __main__ larger than this is generated code: not read


@dataclasses.dataclass(frozen=True)
class Use:
    """The first line where a script uses a framework.

    Attributes:
        kind: ``"torch"``, ``"tensorflow"`` or ``"keras"``.
        library: what it imports there (``"keras"``, ``"transformers"``, ``"accelkit.torch"``).
        line: its line number.
    """

    kind: str
    library: str
    line: int


@dataclasses.dataclass(frozen=True)
class Script:
    """The running script's framework imports.

    Attributes:
        name: how to name the source in a message (``"train.py"``, ``"the -c code"``),
            or ``""`` when there is none to read.
        uses: the first `Use` of each kind, in line order.
        problem: why nothing could be read (``""`` when the source was read).
    """

    name: str = ""
    uses: tuple[Use, ...] = ()
    problem: str = ""

    def first(self, kind: str) -> Use | None:
        return next((use for use in self.uses if use.kind == kind), None)

    def where(self, use: Use) -> str:
        """``"keras (train.py line 3)"``."""
        return f"{use.library} ({self.name} line {use.line})"


def uses_in(source: str) -> tuple[Use, ...]:
    """The first use of each framework kind in Python `source`, in line order; ``()``
    for source that does not parse.

    Every import counts, wherever it stands (a function, a branch, a ``try``): a
    script that may import either framework is a script that uses both.

    Example:
        >>> [(u.kind, u.line) for u in uses_in("import os\\nfrom tensorflow import keras\\n")]
        [('tensorflow', 2)]
    """
    return _parse(source)[0]


def _parse(source: str) -> tuple[tuple[Use, ...], str]:
    """(the first use of each kind, in line order; why the source could not be read)."""
    try:
        tree = ast.parse(source)
        first: dict[str, Use] = {}
        for use in sorted(_uses(tree), key=lambda u: u.line):
            first.setdefault(use.kind, use)
        return tuple(first.values()), ""
    except Exception as error:  # noqa: BLE001 - SyntaxError, ValueError (NUL), RecursionError...
        return (), type(error).__name__


def _uses(tree: ast.AST) -> Iterator[Use]:
    accelkit_names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _library(alias.name, node.lineno)
                if alias.name == "accelkit":
                    accelkit_names.add(alias.asname or "accelkit")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield from _library(node.module, node.lineno)
            if node.module == "accelkit":
                for alias in node.names:
                    yield from _library(f"accelkit.{alias.name}", node.lineno)
    for node in ast.walk(tree):  # accelkit.torch.fit(...) after a plain `import accelkit`
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in accelkit_names
        ):
            yield from _library(f"accelkit.{node.attr}", node.lineno)


def _library(module: str, line: int) -> Iterator[Use]:
    parts = module.split(".")
    if parts[0] == "accelkit":
        if len(parts) > 1 and parts[1] in _ACCELKIT:
            yield Use(_ACCELKIT[parts[1]], ".".join(parts[:2]), line)
    elif parts[0] in _KIND:
        yield Use(_KIND[parts[0]], parts[0], line)


def main_script(
    main_module: object | None = None, orig_argv: Sequence[str] | None = None
) -> Script:
    """The framework imports of the script running as ``__main__``.

    Reads ``__main__.__file__``; for ``python -c CODE``, the code from
    ``sys.orig_argv``. An interactive session, a notebook, a script read from stdin,
    a file that cannot be read or parsed: a `Script` with no uses and the reason.
    Never raises.
    """
    try:
        main_module = sys.modules.get("__main__") if main_module is None else main_module
        orig_argv = getattr(sys, "orig_argv", ()) if orig_argv is None else orig_argv
        path = getattr(main_module, "__file__", None)
        if not path:
            code = _command_code(orig_argv)
            if code is None:
                return Script(
                    problem="no script file (an interactive session, a notebook "
                    "or code read from stdin)"
                )
            return _read("the -c code", code)
        path = str(path)
        if path.startswith("<"):
            return Script(problem=f"no script file ({path})")
        return _read(Path(path).name, _source(Path(path)))
    except Exception as error:  # noqa: BLE001 - reading the script must never fail the run
        return Script(problem=f"the script could not be read ({type(error).__name__}: {error})")


def _source(path: Path) -> str:
    if path.stat().st_size > _MAX_BYTES:
        raise ValueError(f"{path.name} is over {_MAX_BYTES // 1_000_000} MB")
    with tokenize.open(path) as handle:  # honours a coding: cookie
        return handle.read()


def _read(name: str, source: str) -> Script:
    uses, error = _parse(source)
    return Script(name, uses, f"{name} does not parse ({error})" if error else "")


def _command_code(orig_argv: Sequence[str]) -> str | None:
    """The CODE of ``python [options] -c CODE``, or None when the interpreter was not
    started with ``-c``."""
    args = list(orig_argv[1:])
    index = 0
    while index < len(args):
        arg = args[index]
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--"):
            return None  # a script, stdin, or a long option Python does not have
        for position, letter in enumerate(arg[1:], start=1):
            rest = arg[position + 1 :]
            if letter == "c":
                if rest:
                    return rest
                return args[index + 1] if index + 1 < len(args) else None
            if letter == "m":
                return None
            if letter in "WX":  # options with a value: attached or the next argument
                index += 0 if rest else 1
                break
        index += 1
    return None


KERAS_BACKENDS = {"tensorflow": TENSORFLOW, "torch": TORCH, "pytorch": TORCH}


def keras_backend(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The backend Keras 3 runs on here, and where that came from, read as Keras reads
    it at import: ``KERAS_BACKEND``, else ``keras.json`` in ``KERAS_HOME`` (default
    ``~/.keras``), else TensorFlow. Never raises.

    Example:
        >>> keras_backend({"KERAS_BACKEND": "torch"})
        ('torch', 'KERAS_BACKEND=torch')
    """
    environ = os.environ if environ is None else environ
    backend = environ.get("KERAS_BACKEND", "").strip()
    if backend:
        return backend.lower(), f"KERAS_BACKEND={backend}"
    config, backend = _keras_json(environ)
    if backend:
        return backend.lower(), config
    return "tensorflow", "Keras's default"


def _keras_json(environ: Mapping[str, str]) -> tuple[str, str]:
    """(the keras.json Keras reads, the backend it names or "")."""
    try:
        home = environ.get("KERAS_HOME")
        if not home:
            user = os.path.expanduser("~")
            home = os.path.join(user if os.access(user, os.W_OK) else "/tmp", ".keras")
        config = Path(home).expanduser() / "keras.json"
        if not config.is_file():
            return str(config), ""
        return str(config), str(json.loads(config.read_text()).get("backend", "")).strip()
    except Exception as error:  # noqa: BLE001 - unreadable, not JSON: Keras's default
        return f"keras.json ({type(error).__name__})", ""
