"""SLURM's host lists and task variables (`accelkit.hardware.slurm`), and `detect()` under
srun, from plain environments."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.hardware import detect
from accelkit.hardware.environment import rank, read_launcher, read_slurm_task, world_size
from accelkit.hardware.slurm import (
    default_port,
    expand_nodelist,
    first_node,
    process_group_env,
)

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
    assert expand_nodelist(_compress(hosts)) == hosts


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
