"""SLURM's host lists and rendezvous, worked out without calling ``scontrol``.

- `expand_nodelist`: SLURM's compact host lists (``gpu[01-04,07]``, ``a[1-2],b3``,
  ``rack[1-2]-n[01-02]``) as the host names, in SLURM's order, up to `MAX_HOSTS`;
  `count_nodes` counts them without expanding;
- `first_node` and `default_port`: the rendezvous address and port of a job (the
  first node is read without expanding the list: a list of a million hosts costs what
  its text costs);
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
import math
import re
from typing import Any

DEFAULT_PORT = 12910  # without SLURM_JOB_ID, Lightning's fallback
PORT_BASE = 15000  # plus the job id's last four digits: 15000-24999
INTERACTIVE_JOB_NAMES = frozenset({"bash", "interactive"})  # `srun --pty bash`, `salloc`
# The most hosts `expand_nodelist` builds: above the largest machines in service (El
# Capitan, Frontier: about 11,000 and 9,400 nodes, TOP500 2024), far below what exhausts
# memory. Counting and the first host need no expansion and have no limit.
MAX_HOSTS = 65_536

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_nodelist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """The host names a SLURM host list names, in order.

    Entries are separated by commas (or spaces) outside brackets; each bracket group
    holds comma-separated numbers and ``lo-hi`` ranges, zero-padded to the width
    of ``lo`` (``[08-10]`` gives 08, 09, 10); several groups in one entry give
    every combination, the first group varying slowest, as SLURM expands them.

    Args:
        text: the host list, e.g. ``SLURM_JOB_NODELIST``.
        limit: the most hosts to expand (`MAX_HOSTS` by default); a list naming more
            is refused before anything is built (`count_nodes` counts them).

    Raises:
        ValueError: an unbalanced bracket, an empty or descending range, a bracket
            group that is not numbers and ranges, or more than `limit` hosts; the
            message quotes it.

    Example:
        >>> expand_nodelist("gpu[01-03,07],login1")
        ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']
        >>> expand_nodelist("a[1-2]-b[8-9]")
        ['a1-b8', 'a1-b9', 'a2-b8', 'a2-b9']
    """
    entries = _parse(text)
    total = sum(_entry_count(entry) for entry in entries)
    if total > limit:
        raise ValueError(
            f"host list {text[:60]!r} names {total:,} hosts, more than {limit:,} "
            "(no job spans that many nodes)"
        )
    return [host for entry in entries for host in _expand_entry(entry)]


def count_nodes(text: str) -> int:
    """How many hosts a SLURM host list names, counted without expanding it.

    Raises:
        ValueError: the list is malformed, as for `expand_nodelist`.

    Example:
        >>> count_nodes("gpu[01-04,07],login1"), count_nodes("n[1-100000000]")
        (6, 100000000)
    """
    return sum(_entry_count(entry) for entry in _parse(text))


def first_node(text: str | None) -> str | None:
    """The first host of a host list, or None when it is absent or malformed.

    Read without expanding the list, so its cost grows with the text, never with the
    number of hosts it names (``node[1-100000000]`` answers at once).

    Example:
        >>> first_node("node[003-005]"), first_node("bad[1-"), first_node(None)
        ('node003', None, None)
    """
    if not text or not text.strip():
        return None
    try:
        entries = _parse(text)
    except ValueError:
        return None
    if not entries:
        return None
    # the first host takes each group's first number, as the expansion's first row does
    return "".join(part if isinstance(part, str) else part[0][0] for part in entries[0])


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


# An entry is its literal text and bracket groups in order; a group is its (lo, hi)
# ranges, lo as written (its width is the zero padding).
_Group = tuple[tuple[str, int], ...]
_Entry = tuple[str | _Group, ...]


def _parse(text: str) -> list[_Entry]:
    """The entries of a host list, each checked, nothing expanded."""
    return [_parse_entry(entry) for entry in _split_entries(text)]


def _parse_entry(entry: str) -> _Entry:
    # literal text alternates with bracket groups: "a", "1-2", "-b", "8-9", ""
    parts = re.split(r"\[([^\]]*)\]", entry)
    return tuple(p if i % 2 == 0 else _parse_group(p, entry) for i, p in enumerate(parts))


def _parse_group(group: str, entry: str) -> _Group:
    ranges = []
    for item in group.split(","):
        match = _RANGE.match(item.strip())
        if match is None:
            raise ValueError(f"[{group}] in {entry!r} is not numbers and lo-hi ranges")
        low, high = match.group(1), int(match.group(2) or match.group(1))
        if high < int(low):
            raise ValueError(f"descending range {item!r} in {entry!r}")
        ranges.append((low, high))
    return tuple(ranges)


def _entry_count(entry: _Entry) -> int:
    return math.prod(
        sum(high - int(low) + 1 for low, high in part)
        for part in entry
        if not isinstance(part, str)
    )


def _expand_entry(entry: _Entry) -> list[str]:
    choices = [[part] if isinstance(part, str) else _expand_group(part) for part in entry]
    return ["".join(combination) for combination in itertools.product(*choices)]


def _expand_group(group: _Group) -> list[str]:
    return [str(n).zfill(len(low)) for low, high in group for n in range(int(low), high + 1)]


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
