"""Every script in examples/ runs with ``--smoke`` and shows what it says it shows.

Each runs as a user runs it: ``python examples/NAME.py --smoke`` (DDP under torchrun)
from the repository root, in its own process session killed whole at its timeout
(tests/distributed/torch_launch.py starts them).
Beyond the exit status, each test reads a figure the script printed from a real run:
a report's throughput line, the ranks of a data-parallel run, a trainer's logged keys.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..distributed.torch_launch import environment, run, torchrun

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# A report's throughput row: "throughput   1,234.5 samples/s, ..."
THROUGHPUT = r"throughput\s+[\d,.]+ samples/s"


def _smoke(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``python examples/SCRIPT --smoke ARGS`` from the repository root, without a
    launcher's variables (`torch_launch.environment`), and return its stdout."""
    env = environment(TF_CPP_MIN_LOG_LEVEL="2")
    done = run([sys.executable, str(EXAMPLES / script), "--smoke", *args], env, timeout)
    assert done.returncode == 0, f"{script}: {done.explain()}"
    return done.stdout


@functools.cache
def _import_failure(module: str) -> str | None:
    """Why `module` cannot be imported, or None. Probed in a child process: a torchvision
    built for another torch can abort the interpreter, not just raise."""
    if importlib.util.find_spec(module) is None:
        return f"needs {module} installed"
    probe = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=environment(),
    )
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"])[-1]
    return f"{module} does not import beside this torch: {last}"


def _needs(*modules: str) -> None:
    for module in modules:
        if reason := _import_failure(module):
            pytest.skip(reason)


@pytest.mark.torch
def test_torch_amp_loop() -> None:
    out = _smoke("torch_amp_loop.py")
    assert re.search(r"precision (fp32|tf32|bf16|fp16) on (cpu|cuda)", out), out
    assert re.search(r"epoch 2/2: loss [\d.]+, [\d,]+ samples/s, held-out accuracy [\d.]+%", out)


@pytest.mark.torch
def test_torch_meter_loop() -> None:
    out = _smoke("torch_meter_loop.py")
    assert re.search(rf"{THROUGHPUT}, [\d,]+ tokens/s", out), out
    assert re.search(r"step 12: loss [\d.]+", out), out
    assert "TinyGPT" in out


@pytest.mark.torch
def test_torch_fit_causal_lm() -> None:
    _needs("transformers")
    out = _smoke("torch_fit_causal_lm.py")
    assert "LlamaForCausalLM" in out
    # dict batches with an attention mask: the real (unpadded) tokens are counted too
    assert re.search(rf"{THROUGHPUT}, [\d,]+ tokens/s \([\d,]+ real", out), out
    assert "tuning: " in out  # what tune="auto" decided, and why


@pytest.mark.torch
def test_torch_fit_resnet() -> None:
    _needs("torchvision")
    out = _smoke("torch_fit_resnet.py")
    assert "resnet18, batch 8" in out
    assert re.search(THROUGHPUT, out), out


@pytest.mark.torch
def test_torch_fit_timm_vit() -> None:
    _needs("torchvision", "timm")
    out = _smoke("torch_fit_timm_vit.py")
    assert "vit_tiny_patch16_224" in out
    assert re.search(THROUGHPUT, out), out


@pytest.mark.torch
@pytest.mark.distributed
def test_torch_ddp_under_torchrun() -> None:
    done = torchrun(str(EXAMPLES / "torch_ddp.py"), "--smoke", nproc=2, timeout=300)
    assert done.returncode == 0, done.explain()
    out = done.stdout
    assert "distribution ddp, world size 2" in out
    assert re.search(r"all ranks\s+2 processes, [\d,.]+ samples/s", out), out
    assert out.count("accelkit run:") == 1, "only rank 0 prints"


@pytest.mark.tensorflow
def test_keras_fit_cnn() -> None:
    out = _smoke("keras_fit_cnn.py")
    assert "mnist_cnn" in out
    assert re.search(THROUGHPUT, out), out
    assert re.search(r"epoch 2: loss [\d.]+, validation accuracy [\d.]+%", out), out


@pytest.mark.tensorflow
def test_keras_profile_callback() -> None:
    out = _smoke("keras_profile_callback.py")
    assert re.search(rf"{THROUGHPUT}, [\d,]+ tokens/s", out), out
    # the epoch figures reached Keras' History through the logs
    assert re.search(r"epoch 2: [\d,.]+ samples/s", out), out


@pytest.mark.tensorflow
@pytest.mark.distributed
def test_keras_multi_worker_with_two_local_workers() -> None:
    out = _smoke("keras_multi_worker.py", "--local-workers", "2", timeout=420)
    assert "workers exited with [0, 0]" in out
    assert "CollectiveAllReduceStrategy: 2 replicas in all" in out
    assert re.search(r"all ranks\s+2 processes, [\d,.]+ samples/s", out), out


@pytest.mark.torch
def test_project_cost() -> None:
    out = _smoke("project_cost.py")
    script, command = out.split("$ accelkit report ", 1)
    assert re.search(r"cheapest per epoch:\nwhat-if: 8 x NVIDIA \S+", script), script
    assert "assumes: MFU 40.0%" in script  # a CPU run: the assumed MFU, said
    for gpu in ("NVIDIA L4", "NVIDIA A100 SXM4 80GB", "NVIDIA H100 SXM5 80GB", "NVIDIA H200"):
        assert gpu in script and gpu in command, gpu  # the API, then the CLI


@pytest.mark.torch
def test_lightning_callback() -> None:
    _needs("lightning")
    out = _smoke("lightning_callback.py")
    assert re.search(THROUGHPUT, out), out
    csv = re.search(r"metrics logged to (\S+metrics\.csv)", out)
    assert csv, out
    header = Path(csv.group(1)).read_text().splitlines()[0]
    assert "accelkit/samples_per_second" in header.split(",")


@pytest.mark.torch
def test_hf_trainer_callback() -> None:
    _needs("transformers", "accelerate")
    out = _smoke("hf_trainer_callback.py")
    assert re.search(rf"{THROUGHPUT}, [\d,]+ tokens/s \([\d,]+ real", out), out
    assert "'accelkit/run/samples_per_second':" in out  # in the Trainer's log_history


def test_every_example_is_tested_and_documented() -> None:
    scripts = sorted(path.name for path in EXAMPLES.glob("*.py"))
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    readme = (EXAMPLES / "README.md").read_text()
    for script in scripts:
        stem = script.removesuffix(".py")
        assert any(name.startswith(stem) for name in tested), f"{script} has no test"
        assert f"{stem}.py" in readme, f"{script} is not in examples/README.md"
        source = (EXAMPLES / script).read_text()
        assert '"--smoke"' in source and f"examples/{script}" in source.split('"""')[1]
