"""How `auto_configure(framework="auto")` chooses its framework without importing one:
the script's imports read statically, Keras's backend, and the decision at import.

The end-to-end cases run real scripts (`tests/frameworks/scripts/`) in fresh
processes, started together so the suite pays for TensorFlow's import about once.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.frameworks import Decision, decide, import_hook, resolve
from accelkit.frameworks.script import Script, keras_backend, main_script, uses_in
from accelkit.planning import Framework

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
BOTH = {Framework.TORCH, Framework.TENSORFLOW}


def kinds(source: str) -> list[tuple[str, str, int]]:
    return [(u.kind, u.library, u.line) for u in uses_in(textwrap.dedent(source))]


# -- the static reader --------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch", [("torch", "torch", 1)]),
        ("from torch import nn", [("torch", "torch", 1)]),
        ("import torch.nn.functional as F", [("torch", "torch", 1)]),
        ("import tensorflow as tf", [("tensorflow", "tensorflow", 1)]),
        ("from tensorflow import keras", [("tensorflow", "tensorflow", 1)]),
        ("import keras", [("keras", "keras", 1)]),
        ("from keras import layers", [("keras", "keras", 1)]),
        ("import tf_keras", [("tensorflow", "tf_keras", 1)]),
        ("from transformers import AutoModel", [("torch", "transformers", 1)]),
        ("import lightning.pytorch as pl", [("torch", "lightning", 1)]),
        ("import timm, torchvision.models", [("torch", "timm", 1)]),
        ("from accelkit.keras import float32_head", [("keras", "accelkit.keras", 1)]),
        ("from accelkit import torch as at", [("torch", "accelkit.torch", 1)]),
        (
            "import accelkit as ak\n\nreport = ak.keras.fit(model, x)",
            [("keras", "accelkit.keras", 3)],
        ),
        ("import accelkit\naccelkit.auto_configure()", []),
        ("from . import torch\nfrom .keras import x\nimport torchy, mytorch, kerasx", []),
        ("# import torch\ntext = 'import keras'", []),
        (
            "import os\nimport keras\nimport torch\nimport keras.layers\nfrom torch import nn",
            [("keras", "keras", 2), ("torch", "torch", 3)],
        ),
        (
            """
     def main():
         try:
             import torch
         except ImportError:
             pass
     if __name__ == "__main__":
         from tensorflow import keras
     """,
            [("torch", "torch", 4), ("tensorflow", "tensorflow", 8)],
        ),
        ("import torch\ndef broken(:\n", []),
        ("import torch\x00", []),
    ],
)
def test_the_reader_finds_the_first_use_of_each_framework(source, expected) -> None:
    assert kinds(source) == expected


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_the_reader_never_raises_on_any_text(source) -> None:
    assert isinstance(uses_in(source), tuple)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "import torch",
                "from tensorflow import keras",
                "import keras",
                "(",
                "def f():",
                "    import tf_keras",
                "x = 1",
                "\\",
                "\t",
                "from . import y",
                "import accelkit",
                "accelkit.torch",
                '"""',
                "if x:",
                "# -*- coding: latin-1 -*-",
            ]
        ),
        max_size=12,
    )
)
def test_the_reader_never_raises_on_near_python(lines) -> None:
    uses = uses_in("\n".join(lines))
    assert [u.line for u in uses] == sorted(u.line for u in uses)


def test_the_main_script_file_is_read(tmp_path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\nimport keras\n")
    script = main_script(types.SimpleNamespace(__file__=str(path)), [])
    assert script.name == "train.py" and not script.problem
    assert script.where(script.uses[0]) == "keras (train.py line 3)"


@pytest.mark.parametrize(
    "content",
    [
        b"import torch\ndef (:\n",
        b"\x00\xff\xfe binary",
        b"# -*- coding: nope -*-\nimport torch\n",
        None,
        "dir",
    ],
)
def test_a_script_that_cannot_be_read_tells_why_and_never_raises(tmp_path, content) -> None:
    path = tmp_path / "train.py"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    script = main_script(types.SimpleNamespace(__file__=str(path)), [])
    assert script.uses == () and script.problem


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python"], None),
        (["python", "-"], None),
        (["python", "-m", "pkg.train"], None),
        (["python", "-c", "import torch"], "torch"),
        (["python", "-cimport keras"], "keras"),
        (
            ["python", "-W", "ignore", "-X", "dev", "-Ic", "from tensorflow import keras"],
            "tensorflow",
        ),
        (["python", "-Wignore", "-c"], None),
    ],
)
def test_python_c_code_is_read_from_the_command_line(argv, expected) -> None:
    script = main_script(types.SimpleNamespace(), argv)
    if expected is None:
        assert script.uses == () and "no script file" in script.problem
    else:
        assert script.name == "the -c code" and [u.kind for u in script.uses] == [expected]


def test_stdin_and_odd_main_modules_tell_nothing() -> None:
    assert "<stdin>" in main_script(types.SimpleNamespace(__file__="<stdin>"), []).problem
    assert main_script(types.SimpleNamespace(__file__=3), []).problem  # not a path


def test_keras_backend_is_read_as_keras_reads_it(tmp_path) -> None:
    assert keras_backend({"KERAS_BACKEND": " torch "}) == ("torch", "KERAS_BACKEND=torch")
    home = tmp_path / "kh"
    assert keras_backend({"KERAS_HOME": str(home)}) == ("tensorflow", "Keras's default")
    home.mkdir()
    (home / "keras.json").write_text(json.dumps({"backend": "jax"}))
    assert keras_backend({"KERAS_HOME": str(home)}) == ("jax", str(home / "keras.json"))
    assert (
        keras_backend({"KERAS_HOME": str(home), "KERAS_BACKEND": "tensorflow"})[0] == "tensorflow"
    )
    (home / "keras.json").write_text("[not json")
    assert keras_backend({"KERAS_HOME": str(home)}) == ("tensorflow", "Keras's default")


# -- the decision --------------------------------------------------------------------

NOTHING = {"torch": False, "tensorflow": False, "keras": False}
DEFAULT = ("tensorflow", "Keras's default")


def script(source: str) -> Script:
    return Script("train.py", uses_in(textwrap.dedent(source)))


def test_an_explicit_framework_is_taken_as_asked() -> None:
    assert resolve("tensorflow") == Decision(
        Framework.TENSORFLOW, "framework='tensorflow' requested"
    )
    with pytest.raises(ValueError, match="'torch'"):
        resolve("jax")


@pytest.mark.parametrize(
    ("imported", "source", "backend", "framework", "reason"),
    [
        ({"torch": True}, "import keras", DEFAULT, "torch", "the script imported torch"),
        (
            {"tensorflow": True, "keras": True},
            "",
            DEFAULT,
            "tensorflow",
            "the script imported tensorflow (keras, which runs on tensorflow",
        ),
        (
            {"torch": True, "keras": True},
            "",
            ("torch", "KERAS_BACKEND=torch"),
            "torch",
            "the script imported torch (keras, which runs on torch (KERAS_BACKEND=torch))",
        ),
        (
            {"torch": True, "tensorflow": True},
            "import tensorflow",
            DEFAULT,
            "tensorflow",
            "imported both torch and tensorflow; train.py imports tensorflow",
        ),
        ({"torch": True, "tensorflow": True}, "", DEFAULT, "torch", "both torch and tensorflow"),
        (
            {},
            "import os\nimport keras",
            DEFAULT,
            "tensorflow",
            (
                "the script imports keras (train.py line 2), which runs on tensorflow"
                " (Keras's default)"
            ),
        ),
        ({}, "import keras", ("torch", "KERAS_BACKEND=torch"), "torch", "runs on torch"),
        (
            {},
            "from transformers import Trainer",
            ("tensorflow", "KERAS_BACKEND=tensorflow"),
            "torch",
            "the script imports transformers (train.py line 1)",
        ),
        ({}, "import tf_keras", DEFAULT, "tensorflow", "tf_keras (train.py line 1)"),
        (
            {},
            "import os",
            ("tensorflow", "KERAS_BACKEND=tensorflow"),
            "tensorflow",
            "KERAS_BACKEND=tensorflow (train.py names neither torch nor tensorflow)",
        ),
    ],
)
def test_the_framework_the_script_uses_is_chosen(
    imported, source, backend, framework, reason
) -> None:
    decision = decide({**NOTHING, **imported}, script(source), backend, BOTH)
    assert decision.framework is Framework(framework) and decision.applies
    assert not decision.at_import
    assert reason in decision.reason


@pytest.mark.parametrize(("imported", "source"), [({"keras": True}, ""), ({}, "import keras")])
def test_keras_on_jax_gets_a_plan_to_read_applied_to_nothing(imported, source) -> None:
    decision = decide({**NOTHING, **imported}, script(source), ("jax", "KERAS_BACKEND=jax"), BOTH)
    assert decision.framework is Framework.TENSORFLOW and not decision.applies
    assert "runs on jax" in decision.reason and "nothing applied" in decision.reason


@pytest.mark.parametrize(
    ("source", "backend", "first", "why"),
    [
        (
            "import keras\nimport torch",
            DEFAULT,
            "tensorflow",
            "the script imports keras (train.py line 1) and torch (train.py line 2)",
        ),
        ("import torch\nfrom tensorflow import keras", DEFAULT, "torch", "torch (train.py line 1)"),
        ("import os", DEFAULT, "torch", "train.py names neither torch nor tensorflow"),
        ("import os", ("tensorflow", "/home/u/.keras/keras.json"), "torch", "names neither"),
        ("import os", ("jax", "KERAS_BACKEND=jax"), "torch", "names neither"),
    ],
)
def test_both_or_neither_is_decided_at_import(source, backend, first, why) -> None:
    decision = decide(NOTHING, script(source), backend, BOTH)
    assert decision.at_import == (Framework.TORCH, Framework.TENSORFLOW)
    assert decision.framework is Framework(first)
    assert decision.reason.startswith("decided at import: ") and why in decision.reason
    if "names neither" in why:
        assert decision.first_decides
        assert decision.reason.endswith(
            "the first of torch and tensorflow the script imports is configured"
        )
    else:
        assert not decision.first_decides
        assert decision.reason.endswith(
            "torch and tensorflow are each configured when the script imports them"
        )


def test_only_installed_frameworks_wait_for_their_import() -> None:
    unread = Script(problem="no script file (<stdin>)")
    decision = decide(NOTHING, unread, DEFAULT, {Framework.TENSORFLOW})
    assert decision.at_import == (Framework.TENSORFLOW,)
    assert decision.reason == (
        "decided at import: no script file (<stdin>); tensorflow is "
        "configured when the script imports it"
    )
    none = decide(NOTHING, unread, DEFAULT, set())
    assert (none.framework, none.at_import) == (Framework.TORCH, ())
    assert "neither torch nor tensorflow is installed" in none.reason


# -- the import hook, on packages made for the test ----------------------------------


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """`fakeouter` imports `fakeinner`, which imports `fakeouter` back (as keras and
    tensorflow do); `fakeother` stands alone; `fakebroken` raises while importing."""
    files = {
        "fakeinner/__init__.py": "import fakeouter\nWHOLE = True\n",
        "fakeouter/__init__.py": "import fakeinner\nWHOLE = True\n",
        "fakeother/__init__.py": "WHOLE = True\n",
        "fakebroken/__init__.py": "raise ValueError('broken on purpose')\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    import_hook.unwatch()
    for name in ("fakeinner", "fakeouter", "fakeother", "fakebroken"):
        sys.modules.pop(name, None)


def hooks() -> int:
    return sum(isinstance(f, import_hook._Hook) for f in sys.meta_path)


def test_the_hook_fires_once_after_the_outermost_import_is_whole(packages) -> None:
    calls = []

    def on_import(group, trigger):
        calls.append(
            (group, trigger, sys.modules["fakeinner"].WHOLE, sys.modules["fakeouter"].WHOLE)
        )

    import_hook.watch({"g": ("fakeinner", "fakeouter"), "other": ("fakeother",)}, on_import)
    import_hook.watch({"g": ("fakeinner", "fakeouter"), "other": ("fakeother",)}, on_import)
    assert hooks() == 1  # a second watch replaces the first
    import fakeouter

    assert calls == [("g", "fakeouter", True, True)]
    assert not isinstance(fakeouter.__loader__, import_hook._Loader)
    assert not isinstance(fakeouter.__spec__.loader, import_hook._Loader)
    assert import_hook.watching() == ("other",) and hooks() == 1
    import fakeother  # noqa: F401

    assert calls[-1][:2] == ("other", "fakeother")
    assert import_hook.watching() == () and hooks() == 0


def test_an_error_in_the_callback_is_logged_and_the_import_goes_on(packages, caplog) -> None:
    def on_import(group, trigger):
        raise RuntimeError("callback failed")

    import_hook.watch({"g": ("fakeother",)}, on_import)
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        import fakeother
    assert fakeother.WHOLE
    assert "could not configure g when fakeother was imported: RuntimeError" in caplog.text


def test_a_failing_import_fails_as_it_would_and_the_hook_waits(packages) -> None:
    calls = []
    import_hook.watch({"g": ("fakebroken",)}, lambda g, t: calls.append(g))
    with pytest.raises(ValueError, match="broken on purpose"):
        import fakebroken  # noqa: F401
    assert calls == [] and import_hook.watching() == ("g",)


def test_imports_made_by_the_callback_are_not_hooked_yet_their_group_fires(packages) -> None:
    calls = []

    def on_import(group, trigger):
        calls.append((group, trigger))
        if group == "g":
            import fakeother  # noqa: F401

    import_hook.watch({"g": ("fakeouter", "fakeinner"), "other": ("fakeother",)}, on_import)
    import fakeinner  # noqa: F401

    assert calls == [("g", "fakeinner"), ("other", "fakeinner")] and hooks() == 0


def test_with_first_only_the_first_import_decides(packages) -> None:
    calls = []
    import_hook.watch(
        {"g": ("fakeouter", "fakeinner"), "other": ("fakeother",)},
        lambda g, t: calls.append(g),
        first_only=True,
    )
    import fakeother  # noqa: F401
    import fakeouter  # noqa: F401

    assert calls == ["other"] and hooks() == 0 and import_hook.watching() == ()


def test_unwatch_stops_the_hook(packages) -> None:
    calls = []
    import_hook.watch({"g": ("fakeother",)}, lambda g, t: calls.append(g))
    import_hook.unwatch()
    import fakeother  # noqa: F401

    assert calls == [] and hooks() == 0


# -- real scripts in fresh processes ----------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KERAS_BACKEND", "ACCELKIT_PRECISION", "ACCELKIT_DISABLE", "RANK")
    }
    env.update(PYTHONPATH=str(ROOT / "src"), TF_CPP_MIN_LOG_LEVEL="3", **extra)
    return env


RUNS = {  # name: (arguments, stdin, extra environment)
    "keras": ([str(SCRIPTS / "keras_script.py")], None, {}),
    "torch": ([str(SCRIPTS / "torch_script.py")], None, {"KERAS_BACKEND": "tensorflow"}),
    "keras_on_torch": (
        [str(SCRIPTS / "keras_script.py"), "plan-only"],
        None,
        {"KERAS_BACKEND": "torch"},
    ),
    "torch_then_keras": ([str(SCRIPTS / "both_script.py"), "torch,keras"], None, {}),
    "keras_then_torch": (
        [str(SCRIPTS / "both_script.py"), "keras,torch"],
        None,
        {"ACCELKIT_PRECISION": "fp16"},
    ),
    "stdin": (["-"], (SCRIPTS / "torch_script.py").read_text(), {}),
    "command": (["-c", (SCRIPTS / "torch_script.py").read_text()], None, {}),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every script of RUNS started at once; name -> the JSON it printed."""
    missing = [
        name for name in ("torch", "tensorflow", "keras") if importlib.util.find_spec(name) is None
    ]
    if missing:
        pytest.skip(
            f"the scripts import torch, tensorflow and keras; {', '.join(missing)} not installed"
        )
    home = tmp_path_factory.mktemp("keras_home")  # no user keras.json decides here
    started = {}
    for name, (args, _stdin, extra) in RUNS.items():
        started[name] = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=str(ROOT),
            env=_env(KERAS_HOME=str(home), **extra),
        )
    results = {}
    for name, process in started.items():
        out, err = process.communicate(RUNS[name][1], timeout=300)
        assert process.returncode == 0, f"{name}:\n{err}"
        results[name] = json.loads(out.strip().splitlines()[-1])
    return results


def _line(script: str, text: str) -> int:
    """The line of `text` in one of the scripts, so the tests follow edits to them."""
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.strip().startswith(text))


def _note(plan: dict) -> str:
    return next(n for n in plan["notes"] if n.startswith("framework: "))


def test_a_keras_script_gets_the_tensorflow_plan_and_no_torch(runs) -> None:
    seen = runs["keras"]
    assert seen["plan"]["framework"] == "tensorflow"
    assert _note(seen["plan"]).startswith(
        f"framework: the script imports keras (keras_script.py line "
        f"{_line('keras_script.py', 'import keras')}), which runs on tensorflow"
    )
    assert "torch" not in seen["after"] and seen["policy"] == "float32"


def test_a_torch_script_gets_the_torch_plan_whatever_keras_backend_says(runs) -> None:
    seen = runs["torch"]
    assert seen["plan"]["framework"] == "torch"
    line = _line("torch_script.py", "import torch")
    assert (
        _note(seen["plan"]) == f"framework: the script imports torch (torch_script.py line {line})"
    )
    assert seen["after"] == ["torch"]


def test_keras_on_the_torch_backend_gets_the_torch_plan(runs) -> None:
    seen = runs["keras_on_torch"]
    assert seen["plan"]["framework"] == "torch"
    assert "which runs on torch (KERAS_BACKEND=torch)" in _note(seen["plan"])
    assert "tensorflow" not in seen["after"]


def test_a_script_using_both_configures_each_at_its_import(runs) -> None:
    seen = runs["torch_then_keras"]
    assert seen["plan"]["hooks"] == 1 and seen["plan"]["modules"] == []
    assert set(seen["plan"]["statuses"].values()) == {"planned"}
    assert _note(seen["plan"]).startswith(
        "framework: decided at import: the script imports torch (both_script.py line "
        f"{_line('both_script.py', 'import torch')}) and keras"
    )
    after_torch = seen["torch"]
    assert after_torch["framework"] == "torch" and after_torch["modules"] == ["torch"]
    assert "framework: decided at import: the script imported torch" in after_torch["notes"]
    assert "planned" not in after_torch["statuses"].values()
    after_keras = seen["keras"]
    assert after_keras["framework"] == "tensorflow" and after_keras["hooks"] == 0
    assert "framework: decided at import: the script imported keras" in after_keras["notes"]


def test_the_keras_policy_lands_at_the_import_of_keras(runs) -> None:
    seen = runs["keras_then_torch"]
    assert seen["policy"] == "mixed_float16"  # the plan's, set before the script's next line
    after_keras = seen["keras"]
    assert after_keras["framework"] == "tensorflow"
    assert after_keras["modules"] == ["keras", "tensorflow"] and after_keras["hooks"] == 1
    assert after_keras["statuses"]["keras.mixed_precision.global_policy"] == "applied"
    assert "precision from ACCELKIT_PRECISION='fp16'" in after_keras["notes"]
    assert seen["torch"]["framework"] == "torch" and seen["torch"]["hooks"] == 0


def test_code_from_stdin_is_configured_at_import(runs) -> None:
    seen = runs["stdin"]
    assert seen["plan"]["statuses"] == ["planned"]
    assert _note(seen["plan"]).startswith("framework: decided at import: no script file")
    assert seen["after"] == ["torch"]
    assert seen["current"]["framework"] == "torch" and seen["current"]["statuses"] != ["planned"]
    assert seen["waiting"] == []  # torch came first: tensorflow is not waited for
    assert "framework: decided at import: the script imported torch" in seen["current"]["notes"]


def test_python_c_code_is_read(runs) -> None:
    seen = runs["command"]
    assert seen["plan"]["framework"] == "torch"
    line = _line("torch_script.py", "import torch")
    assert _note(seen["plan"]) == f"framework: the script imports torch (the -c code line {line})"
    assert seen["after"] == ["torch"]
