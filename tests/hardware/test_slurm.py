"""SLURM's host lists and task variables (`accelkit.hardware.slurm`), and `detect()` under
srun, from plain environments."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.hardware import detect, environment
from accelkit.hardware.environment import rank, read_launcher, read_slurm_task, world_size
from accelkit.hardware.info import LauncherEnv
from accelkit.hardware.slurm import (
    MAX_HOSTS,
    count_nodes,
    default_port,
    expand_nodelist,
    first_node,
    process_group_env,
)

SRC = Path(__file__).resolve().parents[2] / "src"

SRUN_2 = {
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_NNODES": "1",
    "SLURM_JOB_NODELIST": "gpu[07-08]",
    "SLURM_JOB_ID": "4242123",
}


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("localhost", ["localhost"]),
        ("127.0.0.1", ["127.0.0.1"]),
        ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
        ("a[1-2],b3", ["a1", "a2", "b3"]),
        ("node[008-011]", ["node008", "node009", "node010", "node011"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("n[5]", ["n5"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("x[1-2]y,z[3,5]", ["x1y", "x2y", "z3", "z5"]),
        ("c1 c2", ["c1", "c2"]),
        ("gpu-a100-[1-2].cluster", ["gpu-a100-1.cluster", "gpu-a100-2.cluster"]),
        ("", []),
    ],
)
def test_expand_nodelist(text: str, hosts: list[str]) -> None:
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("gpu[01-04", "'[' without ']'"),
        ("gpu01]", "']' without '['"),
        ("gpu[[1]]", "nested"),
        ("gpu[4-1]", "descending"),
        ("gpu[a-b]", "not numbers"),
        ("gpu[]", "not numbers"),
    ],
)
def test_malformed_nodelist_raises_naming_it(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        expand_nodelist(text)


def test_first_node_never_raises() -> None:
    assert first_node("gpu[03-04],cpu1") == "gpu03"
    assert first_node("gpu[4-1]") is None and first_node("") is None and first_node(None) is None


def test_default_port_follows_the_job_id() -> None:
    assert default_port("4242123") == 15000 + 2123
    assert default_port("7") == 15007
    assert default_port(None) == default_port("") == default_port("12_3") == 12910


# -- property: SLURM's compressed form expands to the hosts it was made from ----------


def _compress(hosts: list[str]) -> str:
    """SLURM's compact form (as `scontrol show hostlist` writes it), order kept: neighbours
    with one prefix and equally wide numbers share a bracket group of ranges."""

    def key(host: str) -> tuple[str, int]:
        prefix, digits = re.match(r"^(.*?)(\d*)$", host).groups()
        return prefix, len(digits)

    entries = []
    for (prefix, width), group in itertools.groupby(hosts, key=key):
        run = list(group)
        if not width:
            entries += run
            continue
        numbers = [int(h[len(prefix) :]) for h in run]
        ranges, start = [], 0
        for i in range(1, len(numbers) + 1):
            if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
                low, high = numbers[start], numbers[i - 1]
                ranges.append(f"{low:0{width}d}" + (f"-{high:0{width}d}" if high > low else ""))
                start = i
        entries.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(entries)


_HOST = st.builds(
    lambda prefix, number, width: prefix + ("" if number is None else f"{number:0{width}d}"),
    st.from_regex(r"[a-z][a-z0-9.-]{0,6}[a-z.-]", fullmatch=True),
    st.none() | st.integers(0, 120),
    st.integers(1, 4),
)


@given(
    st.lists(_HOST, max_size=12)
    | st.builds(
        lambda prefix, start, count: [f"{prefix}{n:03d}" for n in range(start, start + count)],
        st.sampled_from(["gpu", "node-", "r1n"]),
        st.integers(0, 990),
        st.integers(1, 9),
    )
)
def test_compressed_hosts_expand_to_themselves(hosts: list[str]) -> None:
    text = _compress(hosts)
    assert expand_nodelist(text) == hosts
    # counted and the first one read without expanding, in agreement with the expansion
    assert count_nodes(text) == len(hosts)
    assert first_node(text) == (hosts[0] if hosts else None)


# -- issue 25 D16: a huge host list is never expanded to be read ------------------------


def test_a_huge_host_list_is_counted_and_read_without_expanding() -> None:
    assert first_node("node[1-100000000]") == "node1"
    assert first_node("gpu[0007-99999999]-ib[2-9],x") == "gpu0007-ib2"
    assert count_nodes("node[1-100000000],rack[1-1000]-n[1-1000]") == 101_000_000
    with pytest.raises(ValueError, match="names 100,000,000 hosts, more than 65,536"):
        expand_nodelist("node[1-100000000]")
    assert len(expand_nodelist("n[1-65536]")) == MAX_HOSTS


_LOG_RECORDS_UNDER_SRUN = r"""
import logging, os, resource, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))  # a MemoryError, not the OOM killer
import accelkit
from accelkit.hardware import environment
start = time.perf_counter()
for _ in range(200):
    logging.getLogger("accelkit").info("x")
print(environment.rank(), environment.launcher().master_addr, time.perf_counter() - start)
"""


@pytest.mark.parametrize("nodelist", ["node[1-1000000]", "node[1-100000000]"])
def test_log_records_under_a_huge_host_list_cost_no_expansion(nodelist: str) -> None:
    """Before: the rank filter expanded the list at each record (1.1 s per record for a
    million hosts; MemoryError out of the first record for 100 million)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD"))}
    env.update(SLURM_NTASKS="2", SLURM_PROCID="1", SLURM_JOB_NODELIST=nodelist, PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-c", _LOG_RECORDS_UNDER_SRUN],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rank_, address, seconds = done.stdout.split()
    assert (rank_, address) == ("1", "node1")
    assert float(seconds) < 5  # 200 records; was 220 s for the million


def test_the_rank_check_reads_the_same_variables_once(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(
        environment, "read_launcher", lambda env, notes=None: calls.append(env) or LauncherEnv()
    )
    environment._launcher_of.cache_clear()
    huge = {**SRUN_2, "SLURM_JOB_NODELIST": "n[1-1000000]"}
    for _ in range(100):
        environment.rank(huge)
        environment.is_rank_zero(huge)
        environment.world_size(huge)
    assert len(calls) == 1
    environment.rank({**huge, "SLURM_PROCID": "0"})  # a variable set later is read
    assert len(calls) == 2
    environment._launcher_of.cache_clear()


# -- the task's variables --------------------------------------------------------------


def test_srun_task_gives_rank_world_and_rendezvous() -> None:
    env = read_launcher(SRUN_2)
    assert (env.rank, env.local_rank, env.world_size, env.nodes) == (1, 1, 2, 1)
    assert (env.master_addr, env.master_port, env.job_id) == ("gpu07", 17123, "4242123")
    assert env.slurm and not env.torchrun
    assert rank(SRUN_2) == 1 and world_size(SRUN_2) == 2


def test_user_master_addr_and_port_win() -> None:
    env = read_launcher({**SRUN_2, "MASTER_ADDR": "10.0.0.9", "MASTER_PORT": "29400"})
    assert (env.master_addr, env.master_port) == ("10.0.0.9", 29400)


def test_torchrun_variables_win_over_slurm() -> None:
    under_srun = {
        **SRUN_2,
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "job",
    }
    env = read_launcher(under_srun)
    assert env.torchrun and not env.slurm and (env.rank, env.world_size) == (5, 8)


def test_variables_exported_from_slurm_still_read_as_slurm() -> None:
    exported = {**SRUN_2, **process_group_env(read_launcher(SRUN_2))}
    assert exported["RANK"] == "1" and exported["MASTER_PORT"] == "17123"
    assert read_launcher(exported) == read_launcher(SRUN_2)


@pytest.mark.parametrize(
    "environ",
    [
        {**SRUN_2, "SLURM_NTASKS": "1"},
        {**SRUN_2, "SLURM_JOB_NAME": "interactive"},
        {key: value for key, value in SRUN_2.items() if key != "SLURM_PROCID"},
        {},
    ],
)
def test_not_several_srun_tasks_is_no_launcher(environ: dict[str, str]) -> None:
    env = read_launcher(environ)
    assert not env.slurm and env.world_size is None and env.scheduler is None


def test_malformed_variables_are_notes() -> None:
    notes: list[str] = []
    task = read_slurm_task(
        {**SRUN_2, "SLURM_LOCALID": "one", "SLURM_JOB_NODELIST": "gpu[1-"}, notes
    )
    assert task["local_rank"] is None and task["master_addr"] is None
    assert any("SLURM_LOCALID='one'" in n for n in notes)
    assert any("set MASTER_ADDR" in n for n in notes)


def test_process_group_env_is_empty_for_other_launchers() -> None:
    assert (
        process_group_env(read_launcher({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})) == {}
    )


def test_detect_reads_slurm_and_round_trips() -> None:
    info = detect(environ={**SRUN_2, "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a[1-2],b3"})
    assert info.launcher.slurm and info.launcher.nodes == 2
    assert info.launcher.master_addr == "a1"
    assert type(info).from_json(info.to_json()).launcher == info.launcher
