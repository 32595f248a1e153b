"""Properties of the one environment parser: whatever a variable holds, the answer
follows the documented rule and nothing raises."""

from __future__ import annotations

import math
import re
import sys

from hypothesis import example, given
from hypothesis import strategies as st

from accelkit.hardware import environment

# Any text a shell could put in a variable, and the spellings that matter.
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        [
            "0",
            "1",
            " 0 ",
            "false",
            "No",
            "OFF",
            "yes",
            "",
            "-1",
            "+2",
            "007",
            "1e3",
            "nan",
            "inf",
            "-inf",
            "3.5",
            "0x10",
        ]
    ),
)


@given(TEXT)
def test_flag_is_off_exactly_for_the_off_spellings(text) -> None:
    expected = text.strip().lower() not in ("", "0", "false", "no", "off")
    assert environment.flag("ACCELKIT_DISABLE", {"ACCELKIT_DISABLE": text}) is expected
    assert environment.flag("ACCELKIT_DISABLE", {}) is False


def _non_negative_integer(text: str) -> int | None:
    try:
        value = int(text.strip())  # surrounding whitespace (str.strip's) is ignored
    except ValueError:
        return None
    return value if value >= 0 else None


@given(TEXT)
def test_rank_is_the_integer_or_zero(text) -> None:
    expected = _non_negative_integer(text)
    assert environment.rank({"RANK": text}) == (expected or 0)
    assert environment.is_rank_zero({"RANK": text}) is (not expected)


@given(TEXT)
def test_world_size_is_at_least_one(text) -> None:
    size = environment.world_size({"WORLD_SIZE": text})
    assert size >= 1
    try:
        parsed = int(text.strip())
    except ValueError:
        parsed = None
    assert size == (parsed if parsed and parsed > 1 else 1)


@given(TEXT)
def test_dist_timeout_never_raises_and_says_when_it_ignored_a_value(text) -> None:
    seconds, note, explicit = environment.dist_timeout({"ACCELKIT_DIST_TIMEOUT": text})
    assert seconds > 0 and math.isfinite(seconds)
    try:
        wanted = float(text.strip())
    except ValueError:
        wanted = math.nan
    valid = 0 < wanted <= environment.MAX_TIMEOUT_S
    longer = wanted > environment.MAX_TIMEOUT_S  # "never": the longest PyTorch keeps
    assert explicit is (valid or longer)
    kept = environment.MAX_TIMEOUT_S if longer else wanted
    assert seconds == (kept if valid or longer else environment.DEFAULT_TIMEOUT_S)
    assert bool(note) is (bool(text.strip()) and not valid)
    if note and not longer:
        assert "positive number of seconds" in note


# Past about 7.4e9 s PyTorch's deadlines (ns since 1970, int64) overflow: gloo refuses the
# group, or the rendezvous gives up at once or hangs.
_TOO_LONG = st.floats(min_value=environment.MAX_TIMEOUT_S, exclude_min=True)
_SPELLINGS = st.sampled_from([repr, lambda x: f" {x!r} ", lambda x: repr(x).upper()])


@given(_TOO_LONG, _SPELLINGS)
@example(1e13, repr).via("faults4 E10")
@example(1e15, repr).via("faults4 E10")
@example(7.5e9, repr).via("hangs the rendezvous")
def test_a_timeout_pytorch_cannot_keep_is_taken_as_the_largest_it_can(seconds, spell) -> None:
    """faults4 E10: ACCELKIT_DIST_TIMEOUT=1e13 ("never time out") was taken, then the
    process group could not start and every rank trained alone."""
    text = spell(seconds)
    found, note, explicit = environment.dist_timeout({"ACCELKIT_DIST_TIMEOUT": text})
    assert (found, explicit) == (environment.MAX_TIMEOUT_S, True)
    assert f"ACCELKIT_DIST_TIMEOUT={text.strip()!r} is more than PyTorch can keep" in note
    assert "taken as 1e+09 s" in note


@given(st.floats(min_value=0, max_value=environment.MAX_TIMEOUT_S, exclude_min=True))
def test_every_timeout_up_to_the_largest_is_taken(seconds) -> None:
    assert environment.dist_timeout({"ACCELKIT_DIST_TIMEOUT": repr(seconds)}) == (
        seconds,
        "",
        True,
    )


_LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "CRITICAL": 50}
# int()'s limit on digits (Python 3.10.7 on; 0 before: none)
_INT_DIGITS = getattr(sys, "get_int_max_str_digits", lambda: 0)() or math.inf
# Digits str.isdigit accepts and int() refuses ("²") or reads ("٣" as 3), among others.
_UNICODE_NUMBERS = st.text(st.characters(categories=("Nd", "No", "Zs")), max_size=6)


@given(st.one_of(TEXT, _UNICODE_NUMBERS, st.sampled_from([*_LEVELS, "debug ", "\u00b2"])))
@example("\u00b2").via("faults4 E09")
@example("\u0663")
@example("9" * 5000)  # past int()'s limit on digits
def test_log_level_never_raises_and_takes_names_and_ascii_numbers(text) -> None:
    """faults4 E09: ACCELKIT_LOG_LEVEL=\u00b2 passed str.isdigit, then int() raised, and
    `import accelkit` with it."""
    level, note, was_set = environment.log_level({"ACCELKIT_LOG_LEVEL": text})
    wanted = text.strip()
    number = re.fullmatch("[0-9]+", wanted) and len(wanted) <= _INT_DIGITS
    valid = wanted.upper() in _LEVELS or bool(number)
    assert was_set is valid
    assert level == (_LEVELS.get(wanted.upper()) or int(wanted) if valid else 20)
    assert bool(note) is (bool(wanted) and not valid)
    if note:
        assert "debug, info, warning, error, critical or a whole number >= 0" in note


class _Recording(dict):
    """An environment that records every variable read from it."""

    def __init__(self, values, read):
        super().__init__(values)
        self.read = read

    def get(self, name, default=None):
        self.read.add(name)
        return super().get(name, default)

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)

    def __contains__(self, name):
        self.read.add(name)
        return super().__contains__(name)


_LAUNCHER_TEXT = st.one_of(TEXT, st.sampled_from(["2", "4", "gpu[1-2]", "train", "bash"]))


@given(st.dictionaries(st.sampled_from(environment.LAUNCHER_VARIABLES), _LAUNCHER_TEXT))
def test_launcher_variables_name_every_variable_the_launcher_reads(values) -> None:
    """`environment.launcher` remembers its answer for the values of LAUNCHER_VARIABLES:
    a variable read_launcher reads outside the list would be missed (issue 25 D16)."""
    read: set[str] = set()
    everything = dict.fromkeys(("SLURM_NTASKS", "SLURM_PROCID", "TF_CONFIG"), "1")
    for environ in (values, {**everything, **values}):
        assert environment.read_launcher(_Recording(environ, read)) == environment.launcher(environ)
    assert read <= set(environment.LAUNCHER_VARIABLES), read - set(environment.LAUNCHER_VARIABLES)


@given(rank=st.integers(-3, 12), world=st.integers(-2, 12), slurm=st.booleans())
def test_a_rank_outside_its_world_size_is_named_and_no_launcher(rank, world, slurm) -> None:
    """Issue faults4 E19: RANK=5 with WORLD_SIZE=2 (or SLURM's) waited the whole
    ACCELKIT_DIST_TIMEOUT for a rendezvous that cannot happen."""
    names = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID") if slurm else _TORCHRUN
    environ = dict(zip(names, (str(rank), str(world), "0"), strict=True))
    environ["SLURM_JOB_NODELIST"] = "localhost"
    notes: list[str] = []
    launcher = environment.read_launcher(environ, notes)
    read = world > 1 or not slurm  # SLURM's variables count for several tasks only
    valid = 0 <= rank < world
    named = f"{names[0]}={rank} is not a rank of {names[1]}={world} processes"
    assert any(named in note for note in notes) is (read and not valid)
    expected = (rank, world) if read and valid else (None, None)
    assert (launcher.rank, launcher.world_size) == expected
    assert 0 <= environment.rank(environ) < environment.world_size(environ)


_TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
