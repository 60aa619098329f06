"""How much prose Python code carries: code lines, docstring and comment words, and words per code line.

Usage: python -m tools.prose [PATH ...] [--by-file]   (default: nmt)

A docstring is the string that opens a module, class or function; a comment is a `#` token; a word is a run of
non-space characters. A code line is a line holding any other token. The density is docstring and comment words
together per code line, so prose moved from one to the other counts the same. --by-file adds a row per file,
densest first.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from dataclasses import dataclass
from pathlib import Path

LAYOUT = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


@dataclass
class Prose:
    code_lines: int = 0
    docstring_words: int = 0
    comment_words: int = 0

    @property
    def density(self) -> float:
        """Docstring and comment words per code line."""
        return (self.docstring_words + self.comment_words) / max(self.code_lines, 1)

    def __add__(self, other: Prose) -> Prose:
        return Prose(self.code_lines + other.code_lines, self.docstring_words + other.docstring_words,
                     self.comment_words + other.comment_words)


def measure(source: str) -> Prose:
    """The counts of one file's source text."""
    docstrings = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                docstrings.append(first)
    docstring_lines = {row for d in docstrings for row in range(d.lineno, d.end_lineno + 1)}
    code, comment_words = set(), 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment_words += len(token.string.lstrip("#").split())
        elif token.type not in LAYOUT and token.start[0] not in docstring_lines:
            code.update(range(token.start[0], token.end[0] + 1))
    return Prose(len(code), sum(len(d.value.value.split()) for d in docstrings), comment_words)


def python_files(paths: list[Path]) -> list[Path]:
    """The .py files of `paths` (files, or folders searched recursively), sorted."""
    return sorted({f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py"))})


def row(name: str, prose: Prose) -> str:
    return (f"{name:<44} {prose.code_lines:>6} {prose.docstring_words:>7} {prose.comment_words:>7} "
            f"{prose.density:>6.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.prose", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[Path("nmt")])
    parser.add_argument("--by-file", action="store_true", help="a row per file, densest first")
    args = parser.parse_args(argv)
    files = {str(f): measure(f.read_text(encoding="utf-8")) for f in python_files(args.paths)}
    print(f"{'':<44} {'code':>6} {'docstr':>7} {'comment':>7} {'words':>6}")
    print(f"{'':<44} {'lines':>6} {'words':>7} {'words':>7} {'/line':>6}")
    if args.by_file:
        for name, prose in sorted(files.items(), key=lambda item: -item[1].density):
            print(row(name, prose))
    print(row(f"total ({len(files)} files)", sum(files.values(), Prose())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
