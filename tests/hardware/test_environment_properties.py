"""Properties of the one environment parser: whatever a variable holds, the answer
follows the documented rule and nothing raises."""

from __future__ import annotations

import math

from hypothesis import given
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
    valid = wanted > 0 and math.isfinite(wanted)
    assert explicit is valid
    assert seconds == (wanted if valid else environment.DEFAULT_TIMEOUT_S)
    assert bool(note) is (bool(text.strip()) and not valid)
    if note:
        assert "positive number of seconds" in note


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
