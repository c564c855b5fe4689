"""The board's and cross-play's shared ways of writing numbers and names."""

from cube_jax.bench.text import MISSING, fixed, markdown_cell, plot_label


def test_fixed_writes_three_decimals_never_negative_zero():
    assert fixed(0.12345) == "0.123" and fixed(-0.0001) == "0.000" and fixed(1) == "1.000"
    assert fixed(0.12, sign="+") == "+0.120" and fixed(-0.5, sign="+") == "-0.500"
    assert fixed(None) == MISSING


def test_markdown_cells_stay_one_cell_of_plain_text():
    assert markdown_cell("a|b\nc") == "a\\|b c"
    assert markdown_cell("<i>&</i>") == "&lt;i&gt;&amp;&lt;/i&gt;"
    assert markdown_cell("back\\slash|") == "back\\\\slash\\|"


def test_plot_labels_are_shortened_and_never_mathtext():
    assert plot_label("short", 10) == "short"
    assert plot_label("abcdefghijkl", 6) == "abcde…" and len(plot_label("x" * 50, 22)) == 22
    assert plot_label("$5 and $6", 20) == r"\$5 and \$6"
