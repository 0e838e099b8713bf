from unlearnkit.markdown import markdown_table


def test_markdown_table_escapes_pipes_and_has_one_line_per_row():
    assert markdown_table(["a", "b|c"], [["1", "x | y"], ["2", "3"]]) == [
        "| a | b\\|c |", "|---|---|", "| 1 | x \\| y |", "| 2 | 3 |"]
