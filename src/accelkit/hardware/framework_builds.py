"""Can the installed frameworks use the GPUs at all? What each was built for.

The most common installation mistake: NVML shows GPUs, but PyTorch is a build without
CUDA (``torch 2.13.0+cpu``, the CPU wheel; or a ROCm build) or TensorFlow one without
GPU support (``tensorflow-cpu``, macOS, native Windows since 2.11). The framework then
trains on the CPU without a word. `read` tells, from the framework's own files and
without importing it (``torch/version.py``, ``tensorflow/python/platform/build_info.py``),
or from the module when the script has imported it: never by initialising CUDA.

`usable_by` is the machine as one framework can use it: without the GPUs when it was
built without CUDA, with the reason and the fix (`install_fix`: for PyTorch the wheel
index of the newest CUDA the driver runs) in ``gpus_unusable`` and the notes. The
planner plans for that machine, so such a plan is a CPU plan that says why.

    >>> from accelkit.hardware.info import FrameworkBuild, GpuInfo, HardwareInfo
    >>> machine = HardwareInfo(
    ...     gpus=(GpuInfo(0, "NVIDIA H100 80GB HBM3"),), cuda_driver_version="12.4",
    ...     frameworks=(FrameworkBuild("torch", "2.6.0+cpu", False, "CPU only"),))
    >>> usable_by(machine, "torch").gpus
    ()
    >>> print(usable_by(machine, "torch").gpus_unusable)  # doctest: +ELLIPSIS
    1 x NVIDIA H100 80GB HBM3 visible to the driver, but torch 2.6.0+cpu was built ...
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelkit.hardware.info import FrameworkBuild, HardwareInfo

FRAMEWORKS = ("torch", "tensorflow")
# The CUDA versions PyTorch publishes wheels for (https://download.pytorch.org/whl/cuXYZ,
# listed on https://pytorch.org/get-started/locally/ and the previous-versions page).
# A driver runs wheels built for its CUDA version or older: the fix names the newest one.
TORCH_CUDA_WHEELS = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))
TORCH_INSTALL_PAGE = "https://pytorch.org/get-started/locally/"
# The distributions TensorFlow comes as; the first installed one gives the version.
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos")


def read(framework: str) -> FrameworkBuild | None:
    """What the installed `framework` (``"torch"`` or ``"tensorflow"``) was built for;
    None when it is not installed. Never imports it and never raises.

    Example:
        >>> read("torch").framework  # doctest: +SKIP
        'torch'
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework={framework!r} is not valid; use one of {FRAMEWORKS}")
    try:
        return _read_torch() if framework == "torch" else _read_tensorflow()
    except Exception as error:  # noqa: BLE001 - advisory: detection never stops a run
        return FrameworkBuild(framework, None, None, f"could not be read: {error}")


def read_all() -> tuple[FrameworkBuild, ...]:
    """What each installed framework was built for (those not installed left out)."""
    return tuple(build for build in map(read, FRAMEWORKS) if build is not None)


def usable_by(hardware: HardwareInfo, framework: str) -> HardwareInfo:
    """`hardware` as `framework` can use it: without its GPUs (and their links) when the
    installed build has no CUDA, ``gpus_unusable`` and a note saying so and how to fix
    it; else `hardware` itself.

    Args:
        hardware: a snapshot (`accelkit.detect()` reads the builds when it finds GPUs).
        framework: ``"torch"`` or ``"tensorflow"``.
    """
    why = unusable_reason(hardware, framework)
    if not why:
        return hardware
    return dataclasses.replace(
        hardware, gpus=(), links=(), gpus_unusable=why, notes=(*hardware.notes, why)
    )


def unusable_reason(hardware: HardwareInfo, framework: str) -> str:
    """Why `framework` cannot use the GPUs of `hardware`, with the fix; "" when it can
    (or when its build is unknown: a what-if snapshot plans for a GPU build)."""
    build = hardware.build_of(framework)
    if not hardware.gpus or build is None or build.cuda is not False:
        return ""
    count, name = len(hardware.gpus), hardware.gpus[0].name
    gpus = f"{count} x {name}" if all(g.name == name for g in hardware.gpus) else f"{count} GPUs"
    installed = f"{framework} {build.version}" if build.version else framework
    return (
        f"{gpus} visible to the driver, but {installed} was built without CUDA "
        f"({build.detail}): it cannot use them and trains on the CPU. "
        f"Fix: {install_fix(framework, hardware.cuda_driver_version)}"
    )


def install_fix(framework: str, cuda_driver_version: str | None) -> str:
    """How to install a build of `framework` that uses NVIDIA GPUs, for a driver that
    runs CUDA `cuda_driver_version` (NVML's, e.g. ``"12.4"``).

    Example:
        >>> install_fix("torch", "12.7").split()[-1]
        'https://download.pytorch.org/whl/cu126'
    """
    if framework == "tensorflow":
        return (
            "pip uninstall tensorflow-cpu (if installed), then pip install "
            "'tensorflow[and-cuda]' on Linux (TensorFlow >= 2.11 has no GPU build for "
            "native Windows: use WSL2)"
        )
    wheel = _newest_wheel(cuda_driver_version)
    if wheel is None:
        return f"pip uninstall torch, then install a CUDA build of it ({TORCH_INSTALL_PAGE})"
    tag = f"cu{wheel[0]}{wheel[1]}"
    return (
        f"pip uninstall torch, then pip install torch --index-url "
        f"https://download.pytorch.org/whl/{tag}"
    )


def _newest_wheel(cuda_driver_version: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (int(part) for part in str(cuda_driver_version).split(".")[:2])
    except ValueError:
        return None
    runnable = [wheel for wheel in TORCH_CUDA_WHEELS if wheel <= (major, minor)]
    return runnable[-1] if runnable else None


# -- reading a build without importing it -----------------------------------------------


def _read_torch() -> FrameworkBuild | None:
    module = sys.modules.get("torch.version")
    if module is not None:  # imported: its attributes are the answer
        values: Mapping[str, Any] = vars(module)
    else:
        text = _package_file("torch", "version.py")
        if text is None:
            return None if _location("torch") is None else FrameworkBuild("torch")
        values = _constants(text)
    version, cuda, hip = values.get("__version__"), values.get("cuda"), values.get("hip")
    if cuda:
        return FrameworkBuild("torch", version, True, f"CUDA {cuda}")
    return FrameworkBuild("torch", version, False, f"ROCm {hip}" if hip else "CPU only")


def _read_tensorflow() -> FrameworkBuild | None:
    if _location("tensorflow") is None:
        return None
    version = next(filter(None, map(_installed, _TENSORFLOW_DISTRIBUTIONS)), None)
    module = sys.modules.get("tensorflow.python.platform.build_info")
    if module is not None:
        info = dict(getattr(module, "build_info", {}))
    else:
        text = _package_file("tensorflow", "python", "platform", "build_info.py")
        info = _build_info(text) if text is not None else {}
    if "is_cuda_build" not in info:
        return FrameworkBuild("tensorflow", version)
    if info["is_cuda_build"]:
        return FrameworkBuild("tensorflow", version, True, f"CUDA {info.get('cuda_version')}")
    return FrameworkBuild("tensorflow", version, False, "CPU only")


def _location(package: str) -> Path | None:
    """The folder of `package`, found without importing it; None when not installed."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # ValueError: blocked (None in sys.modules)
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _package_file(package: str, *parts: str) -> str | None:
    folder = _location(package)
    try:
        return None if folder is None else folder.joinpath(*parts).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _installed(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _constants(text: str) -> dict[str, Any]:
    """The module-level ``name = constant`` assignments of a Python file, not run."""
    found: dict[str, Any] = {}
    for node in ast.parse(text).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            found[target.id] = value.value
    return found


def _build_info(text: str) -> dict[str, Any]:
    """TensorFlow's ``build_info`` dictionary (a dict literal or
    ``collections.OrderedDict([...])``), read without running the file."""
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)):
            continue
        if node.targets[0].id != "build_info":
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:
            value = value.args[0]
        try:
            return dict(ast.literal_eval(value))
        except (ValueError, TypeError, SyntaxError):
            return {}
    return {}
