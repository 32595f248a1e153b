"""What the process environment says: launcher variables, accelkit's own variables,
visible devices, host facts. The one place that parses them.

- the launcher: `read_launcher` (torchrun's RANK / LOCAL_RANK / WORLD_SIZE,
  SLURM's srun variables when torchrun's are absent (`read_slurm_task`, with SLURM's
  host lists and ports from `accelkit.hardware.slurm`), TF_CONFIG,
  CUDA_VISIBLE_DEVICES), and from it `rank`, `is_rank_zero` and `world_size`, which
  every part of accelkit uses (a RANK that is empty or not an integer is no launcher's:
  rank 0, as for a process started alone; a rank not below its world size is no
  launcher's either, and noted), through `launcher`, which reads the same values once;
- accelkit's variables: `flag` (``0/false/no/off`` and empty are off),
  `dist_timeout` (``ACCELKIT_DIST_TIMEOUT``), `log_level` (``ACCELKIT_LOG_LEVEL``),
  `comm_timing` (``ACCELKIT_COMM_TIMING``);
- the host: CPU count, memory, InfiniBand (which GPUs CUDA_VISIBLE_DEVICES
  shows: `accelkit.hardware.visible_devices`).

Nothing here raises on bad input from the environment: a malformed variable
becomes a note, because a typo in TF_CONFIG must not stop detection or training.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelkit.hardware import slurm
from accelkit.hardware.info import HardwareInfo, LauncherEnv

# Every variable `read_launcher` reads (tests/hardware/test_environment_properties.py
# keeps the list whole): `launcher` remembers its answer for their values.
LAUNCHER_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS",
    "SLURM_JOB_NAME",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NNODES",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    "TF_CONFIG",
    "CUDA_VISIBLE_DEVICES",
)

_TORCHRUN_INTEGERS = {
    "RANK": "rank",
    "LOCAL_RANK": "local_rank",
    "WORLD_SIZE": "world_size",
    "LOCAL_WORLD_SIZE": "local_world_size",
}


DISABLE_ENV = "ACCELKIT_DISABLE"
PRECISION_ENV = "ACCELKIT_PRECISION"
TIMEOUT_ENV = "ACCELKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # PyTorch's default NCCL collective timeout
# PyTorch keeps its deadlines as nanoseconds since 1970 in a signed 64-bit integer, so a
# timeout above about 7.4e9 s (2**63 ns less the time since 1970, in 2026) overflows:
# gloo refuses the group, a TCPStore client gives up at once or the rendezvous hangs,
# and every rank trains alone. 1e9 s (about 31.7 years) stays clear of it until ~2230.
MAX_TIMEOUT_S = 1e9
LOG_LEVEL_ENV = "ACCELKIT_LOG_LEVEL"
COMM_TIMING_ENV = "ACCELKIT_COMM_TIMING"
COMM_TIMING_OFF = f"{COMM_TIMING_ENV}=0: not timed"  # the report's note when it is off
_LOG_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "CRITICAL": 50}

_OFF = frozenset({"", "0", "false", "no", "off"})


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when the variable `name` is set to anything but ``0/false/no/off`` or empty
    (case and surrounding spaces ignored).

    Example:
        >>> flag("ACCELKIT_DISABLE", {"ACCELKIT_DISABLE": " Off "})
        False
        >>> flag("ACCELKIT_DISABLE", {"ACCELKIT_DISABLE": "1"})
        True
    """
    return _environ(environ).get(name, "").strip().lower() not in _OFF


def comm_timing(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `accelkit.torch.fit` times the gradient all-reduce of a DDP run: on
    unless ``ACCELKIT_COMM_TIMING`` is set to an off value (``0/false/no/off``).

    Example:
        >>> comm_timing({}), comm_timing({"ACCELKIT_COMM_TIMING": "0"})
        (True, False)
    """
    return COMM_TIMING_ENV not in _environ(environ) or flag(COMM_TIMING_ENV, environ)


def rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's global rank from the launcher's RANK; 0 when unset, empty, negative
    or not an integer (no launcher set it: the process runs alone).

    Example:
        >>> rank({"RANK": " 3 "}), rank({"RANK": ""}), rank({"RANK": "x"})
        (3, 0, 0)
    """
    value = launcher(environ).rank
    return value if value is not None and value >= 0 else 0


def is_rank_zero(environ: Mapping[str, str] | None = None) -> bool:
    """True on the process that speaks for the run: rank 0, or a process alone."""
    return rank(environ) == 0


def world_size(environ: Mapping[str, str] | None = None) -> int:
    """Processes the launcher started (WORLD_SIZE); 1 when unset or not an integer."""
    return max(launcher(environ).world_size or 1, 1)


def launcher(environ: Mapping[str, str] | None = None) -> LauncherEnv:
    """`read_launcher` of `environ` (default ``os.environ``), remembered for the values of
    the variables it reads (`LAUNCHER_VARIABLES`).

    The logger's rank filter asks at every record, and the variables may be set late
    (by the script, or exported for a process group), so the answer follows them, but
    the same values are read once: a record costs a few lookups, whatever the variables
    hold (a SLURM_JOB_NODELIST of a million hosts, a long TF_CONFIG).

    Example:
        >>> launcher({"RANK": "2", "WORLD_SIZE": "4"}).rank
        2
    """
    source = _environ(environ)
    return _launcher_of(tuple(source.get(name) for name in LAUNCHER_VARIABLES))


@functools.lru_cache(maxsize=32)
def _launcher_of(values: tuple[str | None, ...]) -> LauncherEnv:
    environ = {
        name: value
        for name, value in zip(LAUNCHER_VARIABLES, values, strict=True)
        if value is not None
    }
    return read_launcher(environ)


def dist_timeout(environ: Mapping[str, str] | None = None) -> tuple[float, str, bool]:
    """Seconds a process waits for its peers (rendezvous, registration, collectives).

    From ``ACCELKIT_DIST_TIMEOUT``; unset gives 600 s. A value that is not a number of
    seconds > 0 gives the default, with a note naming the valid values: a typo must not
    stop a run, in either framework. A "never time out" beyond `MAX_TIMEOUT_S` (1e9 s,
    about 31.7 years), such as ``1e13`` or ``inf``, is taken as that, with a note:
    PyTorch's deadlines overflow above about 7.4e9 s, and a larger value would leave
    every rank training alone.

    Returns:
        (seconds, note or "", True when the user set a value that is used).

    Example:
        >>> dist_timeout({"ACCELKIT_DIST_TIMEOUT": "30"})
        (30.0, '', True)
        >>> dist_timeout({"ACCELKIT_DIST_TIMEOUT": "1e13"})[0]
        1000000000.0
    """
    text = _environ(environ).get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S, "", False
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:  # also refuses nan
        return (
            DEFAULT_TIMEOUT_S,
            (
                f"{TIMEOUT_ENV}={text!r} is not valid; use a positive number of seconds "
                f"(at most {MAX_TIMEOUT_S:g} is kept). Used the default, {DEFAULT_TIMEOUT_S:g} s"
            ),
            False,
        )
    if seconds > MAX_TIMEOUT_S:
        return (
            MAX_TIMEOUT_S,
            (
                f"{TIMEOUT_ENV}={text!r} is more than PyTorch can keep (its deadlines overflow "
                f"above about 7.4e9 s): taken as {MAX_TIMEOUT_S:g} s, about 31.7 years"
            ),
            True,
        )
    return seconds, "", True


def log_level(environ: Mapping[str, str] | None = None) -> tuple[int, str, bool]:
    """The level of the ``accelkit`` logger, from ``ACCELKIT_LOG_LEVEL``.

    A level name (``debug``, ``info``, ``warning``, ``error``, ``critical``, any case) or
    a whole number >= 0 in the digits 0-9; unset or empty gives INFO. Anything else
    (``loud``, ``-1``, a superscript ``²``) gives INFO too, with a note naming the valid
    values: a typo must not stop a run, and ``import accelkit`` reads this.

    Returns:
        (level, note or "", True when the user set a valid value).

    Example:
        >>> log_level({"ACCELKIT_LOG_LEVEL": " debug "})
        (10, '', True)
        >>> log_level({"ACCELKIT_LOG_LEVEL": "loud"})[0]
        20
    """
    text = _environ(environ).get(LOG_LEVEL_ENV, "").strip()
    if not text:
        return _LOG_LEVELS["INFO"], "", False
    if text.upper() in _LOG_LEVELS:
        return _LOG_LEVELS[text.upper()], "", True
    # str.isdigit alone accepts "²" and "٣", which int() refuses or reads as 3
    if text.isascii() and text.isdigit():
        try:
            return int(text), "", True
        except ValueError:  # more digits than int() reads (sys.get_int_max_str_digits)
            pass
    return (
        _LOG_LEVELS["INFO"],
        (
            f"{LOG_LEVEL_ENV}={text!r} is not valid; use one of "
            "debug, info, warning, error, critical or a whole number >= 0 (digits 0-9). "
            "Used the default, info"
        ),
        False,
    )


def read_launcher(environ: Mapping[str, str], notes: list[str] | None = None) -> LauncherEnv:
    """Read torchrun's variables (or SLURM's, for srun's tasks without torchrun),
    TF_CONFIG and CUDA_VISIBLE_DEVICES.

    Args:
        environ: the environment, usually ``os.environ``.
        notes: if given, why a variable was ignored (a malformed TF_CONFIG, a
            RANK that is not a number) is appended here.

    Example:
        >>> env = read_launcher({"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "8"})
        >>> env.rank, env.world_size, env.torchrun
        (1, 8, True)
    """
    notes = notes if notes is not None else []
    ranks = {
        field: integer(environ, variable, notes) for variable, field in _TORCHRUN_INTEGERS.items()
    }
    impossible = _impossible_rank(ranks["rank"], ranks["world_size"], "RANK", "WORLD_SIZE")
    if impossible:
        notes.append(impossible)
        ranks = dict.fromkeys(ranks)
    torchrun: dict[str, object] = {
        **ranks,
        "master_addr": environ.get("MASTER_ADDR") or None,
        "master_port": integer(environ, "MASTER_PORT", notes),
    }
    slurm_notes: list[str] = []
    task = read_slurm_task(environ, slurm_notes)
    if task is None or _torchrun_absent(environ, torchrun, task):
        notes += slurm_notes
        torchrun = task or torchrun
    workers, tf_task = _read_tf_config(environ.get("TF_CONFIG"), notes)
    return LauncherEnv(
        **torchrun,  # type: ignore[arg-type]
        tf_config_workers=workers,
        tf_config_task=tf_task,
        cuda_visible_devices=environ.get("CUDA_VISIBLE_DEVICES"),
    )


def read_slurm_task(environ: Mapping[str, str], notes: list[str]) -> dict[str, Any] | None:
    """`LauncherEnv` fields for a task ``srun`` started, or None when SLURM did not start
    several tasks (unset, one task, an interactive ``srun --pty bash`` / ``salloc`` shell,
    whose SLURM_NTASKS describes the allocation, not processes started here).

    Args:
        environ: the environment.
        notes: why SLURM's variables were not used, when they look meant to be.

    Example:
        >>> task = read_slurm_task({"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2",
        ...                   "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "gpu[07-08]",
        ...                   "SLURM_JOB_ID": "31337"}, [])
        >>> task["rank"], task["world_size"], task["master_addr"], task["master_port"]
        (1, 2, 'gpu07', 16337)
    """
    tasks = integer(environ, "SLURM_NTASKS", notes)
    if tasks is None or tasks <= 1:
        return None
    name = environ.get("SLURM_JOB_NAME", "").strip()
    if name in slurm.INTERACTIVE_JOB_NAMES:
        notes.append(
            f"SLURM_NTASKS={tasks} in an interactive job ({name!r}): not started "
            "by srun as one of several tasks, so SLURM's variables are not used"
        )
        return None
    rank = integer(environ, "SLURM_PROCID", notes)
    if rank is None:
        notes.append(f"SLURM_NTASKS={tasks} but no SLURM_PROCID: start each task with srun")
        return None
    impossible = _impossible_rank(rank, tasks, "SLURM_PROCID", "SLURM_NTASKS")
    if impossible:
        notes.append(impossible)
        return None
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    address = environ.get("MASTER_ADDR") or slurm.first_node(nodelist)
    if address is None:
        notes.append(f"SLURM_JOB_NODELIST={nodelist!r} names no host; set MASTER_ADDR")
    job_id = environ.get("SLURM_JOB_ID")
    return {
        "rank": rank,
        "local_rank": integer(environ, "SLURM_LOCALID", notes),
        "world_size": tasks,
        "local_world_size": integer(environ, "SLURM_NTASKS_PER_NODE", []),  # "2(x3)": None
        "nnodes": integer(environ, "SLURM_NNODES", notes),
        "master_addr": address,
        # read_launcher notes a MASTER_PORT that is not a number
        "master_port": integer(environ, "MASTER_PORT", []) or slurm.default_port(job_id),
        "job_id": job_id,
        "scheduler": "slurm",
    }


def _impossible_rank(rank: int | None, world_size: int | None, names: str, counts: str) -> str:
    """Why `rank` (variable `names`) cannot be a process of the `world_size` that `counts`
    gives, or "" when it can or either is unset: a rank runs from 0 to the world size - 1.

    Such a process would wait the whole ``ACCELKIT_DIST_TIMEOUT`` for a rendezvous that
    cannot complete, so the launcher's variables are ignored at once, like a malformed
    one: the process trains alone, saying why.

    Example:
        >>> _impossible_rank(5, 2, "RANK", "WORLD_SIZE")  # doctest: +ELLIPSIS
        "RANK=5 is not a rank of WORLD_SIZE=2 processes (0 to 1): no rendezvous..."
        >>> _impossible_rank(1, 2, "RANK", "WORLD_SIZE"), _impossible_rank(5, None, "R", "W")
        ('', '')
    """
    if rank is None or world_size is None or 0 <= rank < world_size:
        return ""
    ranks = f"0 to {world_size - 1}" if world_size > 0 else "none"
    return (
        f"{names}={rank} is not a rank of {counts}={world_size} processes ({ranks}): no "
        "rendezvous could complete, so the launcher's variables are ignored and this "
        "process trains alone"
    )


def _torchrun_absent(
    environ: Mapping[str, str], torchrun: Mapping[str, object], task: Mapping[str, object]
) -> bool:
    """True when SLURM, not torchrun, started this process: torchrun's variables are
    unset, or say what SLURM's do (exported from them, by accelkit for ``env://`` or by
    the job script). torchrun's own variables, under srun or not, win."""
    if environ.get("TORCHELASTIC_RUN_ID"):
        return False
    return all(
        torchrun[field] is None or torchrun[field] == task[field]
        for field in ("rank", "local_rank", "world_size")
    )


def integer(environ: Mapping[str, str], variable: str, notes: list[str]) -> int | None:
    """The integer in `variable`; None when unset or empty, or not an integer (noted)."""
    text = environ.get(variable)
    if text is None or not text.strip():
        return None
    try:
        return int(text.strip())
    except ValueError:
        notes.append(f"{variable}={text!r} is not an integer; ignored")
        return None


def _read_tf_config(text: str | None, notes: list[str]) -> tuple[int | None, str | None]:
    """(workers incl. chief, "type:index") from TF_CONFIG; (None, None) when absent or bad.

    Layout: ``{"cluster": {"chief": [...], "worker": [...], "ps": [...]},
    "task": {"type": "worker", "index": 0}}`` (tf.distribute.cluster_resolver).
    """
    if text is None or not text.strip():
        return None, None  # TensorFlow treats an empty TF_CONFIG as none
    try:
        config = json.loads(text)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise TypeError("'cluster' and 'task' must be objects")
        addresses = [cluster.get("chief", []), cluster.get("worker", [])]
        if not all(isinstance(a, list) for a in addresses):
            raise TypeError("'chief' and 'worker' must be lists of addresses")
        workers = sum(len(a) for a in addresses)
    except (ValueError, TypeError, AttributeError) as err:
        notes.append(f"TF_CONFIG is not valid JSON in TensorFlow's layout ({err}); ignored")
        return None, None
    task_type, task_index = task.get("type"), task.get("index", 0)
    return workers, f"{task_type}:{task_index}" if task_type else None


def cpu_count() -> int | None:
    """CPUs this process may run on (its affinity mask, so taskset and cgroups count).

    Example:
        >>> cpu_count() >= 1
        True
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count()


def host_memory_bytes() -> int | None:
    """Physical memory of the host in bytes, or None when it cannot be told.

    Example:
        >>> host_memory_bytes() > 0
        True
    """
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # sysconf is POSIX-only
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def has_infiniband(path: str | os.PathLike[str] = "/sys/class/infiniband") -> bool:
    """True when the kernel lists an InfiniBand (or RoCE) device.

    Args:
        path: where the kernel lists them; tests point it elsewhere.

    Example:
        >>> has_infiniband("/nonexistent")
        False
    """
    try:
        return any(Path(path).iterdir())
    except OSError:
        return False


def cpu_host(launcher: LauncherEnv) -> HardwareInfo:
    """A snapshot of this host without GPUs, for a run measured on the CPU: its CPU count
    and memory as detected, the launcher as given (never a figure made up)."""
    return HardwareInfo(
        launcher=launcher,
        source="cpu",
        cpu_count=cpu_count(),
        host_memory_bytes=host_memory_bytes(),
    )
