"""tools/prose.py counts what it says: code lines apart from docstrings and comments, and the words of each."""

from __future__ import annotations

from pathlib import Path

from tools.prose import Prose, main, measure

SOURCE = '''"""A module docstring of six words."""

import os  # two words


def f(x):
    """Three words here.

    And three more."""
    text = """not a docstring,
    but code"""
    # a comment of five words
    return os.path.join(x, text)
'''


def test_code_lines_docstring_words_and_comment_words_are_counted_apart():
    prose = measure(SOURCE)
    assert prose == Prose(code_lines=5, docstring_words=12, comment_words=7)
    assert prose.density == 19 / 5


def test_the_command_totals_every_file_of_a_folder(tmp_path: Path, capsys):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text(SOURCE, encoding="utf-8")
    (tmp_path / "pkg" / "b.py").write_text("x = 1\n", encoding="utf-8")
    assert main([str(tmp_path / "pkg"), "--by-file"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].split() == ["total", "(2", "files)", "6", "12", "7", "3.17"]
    assert [line.split()[0] for line in lines[2:4]] == [str(tmp_path / "pkg" / "a.py"), str(tmp_path / "pkg" / "b.py")]
