"""SLURM's host lists and rendezvous, worked out without calling ``scontrol``.

- `expand_nodelist`: SLURM's compact host lists (``gpu[01-04,07]``, ``a[1-2],b3``,
  ``rack[1-2]-n[01-02]``) as the host names, in SLURM's order;
- `first_node` and `default_port`: the rendezvous address and port of a job;
- `process_group_env`: the variables PyTorch's ``init_method="env://"`` reads,
  made from a SLURM launcher.

Which variables a task ``srun`` started reads (rank, local rank, task and node counts)
is `accelkit.hardware.environment.read_slurm_task`, beside torchrun's: the one place
that parses the environment.

The rendezvous is the first node of ``SLURM_JOB_NODELIST``, port
``15000 + the last four digits of SLURM_JOB_ID`` (12910 without a job id), as
Lightning's SLURMEnvironment does, so that two jobs sharing a node do not collide.
``MASTER_ADDR`` and ``MASTER_PORT`` set by the user win.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

DEFAULT_PORT = 12910  # without SLURM_JOB_ID, Lightning's fallback
PORT_BASE = 15000  # plus the job id's last four digits: 15000-24999
INTERACTIVE_JOB_NAMES = frozenset({"bash", "interactive"})  # `srun --pty bash`, `salloc`

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(text: str) -> list[str]:
    """The host names a SLURM host list names, in order.

    Entries are separated by commas (or spaces) outside brackets; each bracket group
    holds comma-separated numbers and ``lo-hi`` ranges, zero-padded to the width
    of ``lo`` (``[08-10]`` gives 08, 09, 10); several groups in one entry give
    every combination, the first group varying slowest, as SLURM expands them.

    Raises:
        ValueError: an unbalanced bracket, an empty or descending range, or a
            bracket group that is not numbers and ranges; the message quotes it.

    Example:
        >>> expand_nodelist("gpu[01-03,07],login1")
        ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']
        >>> expand_nodelist("a[1-2]-b[8-9]")
        ['a1-b8', 'a1-b9', 'a2-b8', 'a2-b9']
    """
    return [host for entry in _split_entries(text) for host in _expand_entry(entry)]


def first_node(text: str | None) -> str | None:
    """The first host of a host list, or None when it is absent or malformed.

    Example:
        >>> first_node("node[003-005]"), first_node("bad[1-"), first_node(None)
        ('node003', None, None)
    """
    if not text or not text.strip():
        return None
    try:
        hosts = expand_nodelist(text)
    except ValueError:
        return None
    return hosts[0] if hosts else None


def default_port(job_id: str | None) -> int:
    """The rendezvous port for a job: 15000 plus the last four digits of its id, so jobs
    sharing a node get different ports; 12910 without a (numeric) job id.

    Example:
        >>> default_port("4242123"), default_port(None)
        (17123, 12910)
    """
    digits = (job_id or "").strip()
    return PORT_BASE + int(digits[-4:]) if digits.isdigit() else DEFAULT_PORT


def process_group_env(launcher: Any) -> dict[str, str]:
    """The variables ``init_process_group(init_method="env://")`` reads, from a SLURM
    launcher (a `LauncherEnv`); empty for any other launcher. The caller sets only those
    the user has not set.

    Example:
        >>> from accelkit.hardware.info import LauncherEnv
        >>> process_group_env(LauncherEnv(rank=1, local_rank=0, world_size=2,
        ...                               master_addr="n1", master_port=29500,
        ...                               scheduler="slurm"))["RANK"]
        '1'
    """
    if launcher.scheduler != "slurm":
        return {}
    values = {
        "RANK": launcher.rank,
        "LOCAL_RANK": launcher.local_rank,
        "WORLD_SIZE": launcher.world_size,
        "LOCAL_WORLD_SIZE": launcher.local_world_size,
        "MASTER_ADDR": launcher.master_addr,
        "MASTER_PORT": launcher.master_port,
    }
    return {name: str(value) for name, value in values.items() if value is not None}


def _split_entries(text: str) -> list[str]:
    entries, current, depth = [], "", 0
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in host list {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"']' without '[' in host list {text!r}")
        if depth == 0 and (char == "," or char.isspace()):
            entries.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"'[' without ']' in host list {text!r}")
    return [e for e in [*entries, current] if e]


def _expand_entry(entry: str) -> list[str]:
    # literal text alternates with bracket groups: "a", "1-2", "-b", "8-9", ""
    parts = re.split(r"\[([^\]]*)\]", entry)
    choices = [[p] if i % 2 == 0 else _expand_group(p, entry) for i, p in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_group(group: str, entry: str) -> list[str]:
    names: list[str] = []
    for item in group.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise ValueError(f"[{group}] in {entry!r} is not numbers and lo-hi ranges")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ValueError(f"descending range {item!r} in {entry!r}")
        names += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return names
