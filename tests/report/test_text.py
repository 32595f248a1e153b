"""`accelkit.report.text`: tables and paragraphs that fit the width they are given, and
lose no word on the way."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from accelkit.report.text import INDENT, MIN_WIDTH, TEXT_WIDTH, paragraph, table, terminal_width

words = st.text(string.ascii_letters + string.digits + ".,:()[]-_/=%", min_size=1, max_size=20)
prose = st.lists(words, max_size=40).map(" ".join)
cells = st.lists(words, min_size=1, max_size=3).map(" ".join)
widths = st.integers(MIN_WIDTH, 300)


@st.composite
def tables(draw):
    columns = draw(st.integers(2, 6))
    headers = draw(st.lists(words, min_size=columns, max_size=columns))
    rows = draw(
        st.lists(
            st.tuples(*[cells] * (columns - 1), prose).map(list),
            max_size=6,
        )
    )
    return headers, rows


def compact(text: str) -> str:
    return "".join(text.split())


@given(table_=tables(), width=widths)
def test_no_line_is_wider_than_the_width_and_every_word_stays(table_, width) -> None:
    headers, rows = table_
    text = table(headers, rows, width=width)
    for line in text.splitlines():
        assert len(line) <= width, (width, line)
    tokens = text.split()
    for row in rows:
        for cell in row:
            assert set(cell.split()) <= set(tokens)  # no word broken or lost
        assert compact(row[-1]) in compact(text)  # the wrapped column in its order


@given(rows=st.lists(st.tuples(words, prose), max_size=6), width=widths)
def test_prose_wraps_at_text_width_however_wide_the_terminal(rows, width) -> None:
    lead = max([len("key"), *(len(key) for key, _ in rows)]) + 2
    for line in table(("key", "reason"), rows, width=width).splitlines():
        assert len(line) <= lead + TEXT_WIDTH


@given(word=st.text(string.ascii_lowercase, min_size=120, max_size=200), width=widths)
def test_a_word_longer_than_the_line_stands_whole_on_its_own_line(word, width) -> None:
    text = table(("key", "source"), [("a", f"see {word} there")], width=width)
    (line,) = [line for line in text.splitlines() if word in line]
    assert line.strip() == word and line.startswith(INDENT)
    assert all(len(other) <= width for other in text.splitlines() if other != line)


@given(text=prose, width=widths)
def test_a_paragraph_fits_and_keeps_its_words(text, width) -> None:
    shown = paragraph("note: " + text, width)
    assert all(len(line) <= min(width, TEXT_WIDTH) for line in shown.splitlines())
    assert shown.split() == ("note: " + text).split()


def test_the_width_is_columns_or_100_and_never_under_40(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    assert terminal_width() == 132
    monkeypatch.setenv("COLUMNS", "12")
    assert terminal_width() == MIN_WIDTH
    monkeypatch.delenv("COLUMNS")  # pytest's stdout is no terminal: the default
    assert terminal_width() == 100
    assert terminal_width(70) == 70
