"""`accelkit plan --params`: the memory estimate and the parallelism it decides, without
a GPU; its arguments checked with messages naming what is valid."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.cli import main
from accelkit.cli.plan import byte_count, parameters
from accelkit.planning.types import MAX_PARAMS


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_json_carries_the_memory_in_bytes(capsys) -> None:
    code, out, _ = run(capsys, "--gpu", "H100", "--count", "8", "--params", "8e9", "--json")
    assert code == 0
    document = json.loads(out)
    memory = document["memory"]
    assert memory["params"] == 8_000_000_000 and memory["state_bytes"] == 128_000_000_000
    assert memory["choice"] == "fsdp2" and memory["activations"] == "unknown"
    assert isinstance(memory["per_gpu_bytes"], int)
    keys = {s["key"]: s for s in document["settings"]}
    assert keys["sharding"]["value"] == "fsdp2" and keys["sharding"]["reason"]
    assert keys["activation_checkpointing"]["value"] is False


def test_plan_text_shows_the_memory_line_and_the_reasons(capsys) -> None:
    code, out, _ = run(
        capsys, "--gpu", "A100-SXM4-40GB", "--count", "8", "--params", "8B",
        "--activation-bytes", "30GB",
    )  # fmt: skip
    assert code == 0
    assert "memory: fsdp2+checkpointing:" in out
    assert "activation_checkpointing" in out and "Korthikanti" in out


def test_plan_refusal_exits_0_with_the_numbers(capsys) -> None:
    code, out, _ = run(
        capsys, "--gpu", "H100", "--framework", "tensorflow", "--params", "70e9", "--json"
    )
    assert code == 0  # a plan that says "does not fit" is an answer, not an error
    document = json.loads(out)
    assert document["memory"]["choice"] == "does not fit"
    refusal = next(s for s in document["settings"] if s["key"] == "memory")
    assert "1,120.00 GB of state" in refusal["reason"]


def test_plan_without_params_has_no_memory(capsys) -> None:
    code, out, _ = run(capsys, "--gpu", "H100", "--json")
    assert code == 0 and json.loads(out)["memory"] is None


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--params", "0"), "whole number > 0"),
        (("--params=-8e9",), "8e9, 8000000000 or 8B"),
        (("--params", "eight"), "suffixes k, m, b, g, t"),
        (("--params", "1e30"), "whole number"),
        (("--params", "1e9", "--optimizer", "lion"), "adamw"),
        (("--params", "1e9", "--activation-bytes", "lots"), "30e9 or 30GB"),
    ],
)
def test_bad_arguments_are_argparse_errors_naming_what_is_valid(capsys, args, named) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--gpu", "H100", *args])
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--trainable-params", "1e9"), "--trainable-params needs --params"),
        (("--activation-bytes", "1e9"), "--activation-bytes needs --params"),
        (("--params", "1e9", "--trainable-params", "2e9"), "at most params=1,000,000,000"),
        (("--params", "2e15"), "1e+15"),
    ],
)
def test_inconsistent_sizes_exit_2_with_the_reason(capsys, args, named) -> None:
    code, _, err = run(capsys, "--gpu", "H100", *args)
    assert code == 2 and named in err


# -- the parsers, for every spelling --------------------------------------------------------

counts = st.integers(min_value=1, max_value=MAX_PARAMS)


@settings(max_examples=300, deadline=None)
@given(counts)
def test_a_count_parses_in_every_spelling(count: int) -> None:
    assert parameters(str(count)) == count
    assert parameters(f"{count:_}") == count
    if float(f"{count:e}") == count:
        assert parameters(f"{count:e}") == count
    if count % 10**9 == 0:
        assert parameters(f"{count // 10**9}B") == count


@settings(max_examples=300, deadline=None)
@given(st.decimals(min_value=-1e6, max_value=1e6, places=3, allow_nan=False, allow_infinity=False))
def test_only_positive_whole_counts_parse(value) -> None:
    text = str(value)
    if value > 0 and value == value.to_integral_value():
        assert parameters(text) == int(value)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="whole number > 0"):
            parameters(text)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(["", "GB", "gb", "MiB", "GiB", "kb"]))
def test_bytes_take_a_unit(count: int, unit: str) -> None:
    scale = {"": 1, "gb": 10**9, "mib": 2**20, "gib": 2**30, "kb": 10**3}[unit.lower()]
    assert byte_count(f"{count}{unit}") == count * scale


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=12))
def test_any_text_parses_or_is_refused_with_the_forms(text: str) -> None:
    count, refused = None, ""
    try:
        count = parameters(text)
    except argparse.ArgumentTypeError as error:
        refused = str(error)
    if count is None:
        assert "8e9, 8000000000 or 8B" in refused
    else:
        assert isinstance(count, int) and count > 0


def _exact_value(mantissa: int, exponent: int, scale: int) -> Fraction | None:
    """mantissa·10^exponent·scale, or None when it is far outside 1 to 1e20 (not whole,
    or too large) and too big to write out."""
    if mantissa == 0:
        return Fraction(0)
    if abs(exponent) > 60:
        return None
    return Fraction(mantissa) * Fraction(10) ** exponent * scale


@settings(max_examples=300, deadline=None)
@given(
    mantissa=st.integers(0, 10**6),
    exponent=st.one_of(st.integers(-40, 40), st.integers(-(10**12), 10**12)),
    parser_and_suffix=st.sampled_from(
        [(parameters, s, k) for s, k in {"": 1, "k": 10**3, "B": 10**9, "t": 10**12}.items()]
        + [(byte_count, s, k) for s, k in {"": 1, "GB": 10**9, "MiB": 2**20}.items()]
    ),
)
def test_any_exponent_parses_exactly_or_is_refused(mantissa, exponent, parser_and_suffix) -> None:
    """Issue faults4 E08: 1e999999999 overflowed Decimal's context (a traceback)."""
    parser, suffix, scale = parser_and_suffix
    value = _exact_value(mantissa, exponent, scale)
    whole = value is not None and value.denominator == 1 and value < 10**20
    if whole and (value > 0 or parser is byte_count):
        assert parser(f"{mantissa}e{exponent}{suffix}") == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
            parser(f"{mantissa}e{exponent}{suffix}")


@pytest.mark.parametrize("flag", ["--params", "--trainable-params", "--activation-bytes"])
@pytest.mark.parametrize("value", ["1e999999999", "1e-999999999", "1e99999999999999999999"])
def test_a_huge_exponent_is_a_usage_error_naming_the_argument(capsys, flag, value) -> None:
    extra = [] if flag == "--params" else ["--params", "8B"]
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--gpu", "H100", *extra, flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}: {value!r} is not valid" in capsys.readouterr().err
