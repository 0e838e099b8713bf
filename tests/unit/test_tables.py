"""Tables on the terminal fit 100 columns (issue 44: they were 130-180 wide and wrapped every row):
progress.print_table keeps numbers whole, wraps free text, and moves the columns that do not fit into a
second table led by the row labels again."""
from __future__ import annotations

import io

import pytest

from unlearnkit.progress import print_table

HEADER = ["model", "forget acc", "retain acc", "test acc", "test forget", "MIA-eff.", "MIA AUC", "Gap", "time (s)",
          "speedup", "verdict"]
ROWS = [["original", "99.44", "98.43", "97.89", "99.00", "3.89", "0.490", "49.02", "30.2", "0.8x", "not_forgotten"],
        ["finetune", "84.44", "98.92", "98.00", "89.00", "38.33", "0.497", "36.60", "7.5", "3.3x",
         "not_forgotten · utility −3.1 pts"],
        ["gradient_ascent[lr=0.01]", "0.00", "24.51", "25.11", "0.00", "100.00", "0.482", "36.75", "0.9", "27.8x",
         "collapsed"]]


@pytest.mark.parametrize("width", [100, 80, 60, 40])
def test_a_wide_table_fits_and_keeps_every_number_whole(width):
    buf = io.StringIO()
    parts = print_table("digits / small_cnn: forget classes 3", HEADER, ROWS, right=set(range(1, 10)), wrap={10},
                        order=[0, 10, *range(1, 10)], width=width, file=buf)
    text = buf.getvalue()
    assert max(map(len, text.splitlines())) <= width, text
    for row in ROWS:
        for cell in row[1:10]:
            assert cell in text, cell  # a number is never folded across two lines
        assert text.count(row[0]) == parts  # each part is led by the row labels
    assert parts >= 2 if width <= 60 else parts >= 1


def test_user_text_is_printed_literally():
    buf = io.StringIO()
    print_table("[red]title[/]", ["name", "value"], [["[bold]x$y$", "1"]], file=buf, width=100)
    assert "[red]title[/]" in buf.getvalue() and "[bold]x$y$" in buf.getvalue()
