"""Inline tags in translated HTML: do they all come back, in order and balanced, and around the right word?

Usage: python -m benchmarks.markup MODEL [--choose-lines 300] [--device auto] [--threads N] [--out-dir DIR]

Documents are made of a split's lines joined in threes (one <p> each; text escaped), with a tag (b, i, em, span,
a with an href) around the letters of one word of each line, chosen by a generator seeded per line, and every third
line's tagged word inside a wider <strong> of up to three words. Each document is translated as
`Translator.translate_markup` does (sentence splitting `nonewlines`), and checked: every tag back, in order,
balanced. Each one-word tag is judged by eflomal (a word aligner trained here on the Multi30k training set with
the translated sentences, lowercased, links of both directions intersected): right when the target words inside
the tag are exactly those eflomal links to its source word (tags on a word eflomal leaves unlinked are not
judged). Run on the first --choose-lines lines of val for each decoder layer's cross-attention (how
nmt.translator.ALIGNMENT_LAYER was chosen) and for tags at the sentence edges (an engine without attention), then
on the test split with ALIGNMENT_LAYER. Writes benchmarks/results/markup_<run name>_<device>.json.
"""

from __future__ import annotations

import argparse
import functools
import html
import random
import sys
from html.parser import HTMLParser
from typing import Any

import torch

from benchmarks.align import eflomal_links
from benchmarks.common import begin, device_tag, finish, measurement_parser, run_name
from nmt.cli import command, number
from nmt.config import AT_LEAST_ONE
from nmt.evaluation import split_pair
from nmt.loader import load_translator
from nmt.markup import Aligned, SentenceTranslator, splitter, translate_document
from nmt.translator import ALIGNMENT_LAYER, Translator

MODULE = "benchmarks.markup"
TAGS = (("<b id={n}>", "</b>"), ("<i id={n}>", "</i>"), ("<em id={n}>", "</em>"), ("<span class=x id={n}>", "</span>"),
        ('<a href="https://example.org/?a=1&amp;b=2" id={n}>', "</a>"))
GROUP = 3  # lines per document


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = measurement_parser(MODULE, __doc__)
    parser.add_argument("model", help="run folder or checkpoint file")
    parser.add_argument("--choose-lines", type=number(AT_LEAST_ONE, integer=True), default=300,
                        help="val lines the layers are compared on (default 300)")
    return parser.parse_args(argv)


def documents(lines: list[str]) -> list[tuple[str, dict[str, int]]]:
    """The test documents, each with its judged tags: tag id -> the word it surrounds (counted in the document)."""
    out = []
    for first in range(0, len(lines), GROUP):
        parts, judged, before = [], {}, 0
        for line_number in range(first, min(first + GROUP, len(lines))):
            rng = random.Random(line_number)
            words = [html.escape(word, quote=False) for word in lines[line_number].split()]
            if not words:
                continue
            cores = [n for n, word in enumerate(words) if any(c.isalnum() for c in word)] or [0]
            chosen = rng.choice(cores)
            opening, closing = rng.choice(TAGS)
            tag_id = f"t{line_number}"
            words[chosen] = _wrapped(words[chosen], opening.format(n=tag_id), closing)
            judged[tag_id] = before + chosen
            before += len(words)
            if line_number % 3 == 0:
                low, high = max(0, chosen - rng.randint(0, 1)), min(len(words) - 1, chosen + rng.randint(0, 1))
                words[low] = "<strong>" + words[low]  # one statement each: low may be high
                words[high] = words[high] + "</strong>"
            parts.append(" ".join(words))
        out.append(("<p>" + " ".join(parts) + "</p>", judged))
    return out


def _wrapped(word: str, opening: str, closing: str) -> str:
    """`word` with the tag around its letters and digits (punctuation around them stays outside)."""
    alnum = [n for n, c in enumerate(word) if c.isalnum()]
    if not alnum:
        return opening + word + closing
    lead, trail = alnum[0], alnum[-1] + 1
    return word[:lead] + opening + word[lead:trail] + closing + word[trail:]


class Read(HTMLParser):
    """A translated document's tags in order, its plain text, and where each tag with an id starts and ends."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text = ""
        self.spans: dict[str, list[int]] = {}
        self.open: list[str | None] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        tag_id = dict(attrs).get("id")
        self.open.append(tag_id)
        if tag_id:
            self.spans[tag_id] = [len(self.text)]

    def handle_endtag(self, tag: str) -> None:
        self.tags.append("/" + tag)
        tag_id = self.open.pop() if self.open else None
        if tag_id in self.spans:
            self.spans[tag_id].append(len(self.text))

    def handle_data(self, data: str) -> None:
        self.text += data


def balanced(tags: list[str]) -> bool:
    stack = []
    for tag in tags:
        if not tag.startswith("/"):
            stack.append(tag)
        elif not stack or stack.pop() != tag[1:]:
            return False
    return not stack


def words_inside(text: str, start: int, end: int) -> set[int]:
    """The whitespace-separated words of `text` that overlap characters start..end."""
    inside, position = set(), 0
    for index, word in enumerate(text.split()):
        position = text.index(word, position)
        if position < end and position + len(word) > start:
            inside.add(index)
        position += len(word)
    return inside


def recording(translate: SentenceTranslator, pairs: list[tuple[str, str]]) -> SentenceTranslator:
    """`translate`, noting each (sentence, translation) in order."""
    def record(sentences: list[str]) -> list[Aligned]:
        results = translate(sentences)
        pairs.extend((s, r.text) for s, r in zip(sentences, results))
        return results
    return record


def run_documents(docs: list[tuple[str, dict]], translate: SentenceTranslator) -> list[dict[str, Any]]:
    """Each document translated: the output and the (sentence, translation) pairs it was made of."""
    split = splitter("nonewlines", "de")
    out = []
    for document, judged in docs:
        pairs: list[tuple[str, str]] = []
        out.append({"source": document, "output": translate_document(document, "html", recording(translate, pairs),
                                                                     split=split),
                    "pairs": pairs, "judged": judged})
    return out


def judge(results: list[dict[str, Any]], links: dict[tuple[str, str], set]) -> dict[str, Any]:
    """The tags kept in order and balanced, and the share of judged tags around the right words."""
    kept = judged = right = touching = unjudged = mismatched = 0
    for result in results:
        source, output = Read(result["source"]), Read(result["output"])
        kept += source.tags == output.tags and balanced(output.tags)
        source_words = [w for s, _ in result["pairs"] for w in s.split()]
        if source_words != source.text.split() or [w for _, t in result["pairs"] for w in t.split()] != \
                output.text.split():
            mismatched += len(result["judged"])
            continue
        where = []  # each source word of the document: (its sentence, its place there)
        starts = []  # where each sentence's translation starts among the output's words
        for index, (sentence, _) in enumerate(result["pairs"]):
            where += [(index, w) for w in range(len(sentence.split()))]
            starts.append(sum(len(t.split()) for _, t in result["pairs"][:index]))
        for tag_id, word in result["judged"].items():
            index, local = where[word]
            linked = {starts[index] + t for s, t in links[result["pairs"][index]] if s == local}
            if not linked:
                unjudged += 1
                continue
            placed = words_inside(output.text, *output.spans[tag_id])
            judged += 1
            right += placed == linked
            touching += bool(placed & linked)
    return {"documents": len(results), "documents_all_tags_in_order_and_balanced": kept,
            "tags": sum(len(r["judged"]) for r in results), "judged": judged, "right": right,
            "right_share": round(right / judged, 4) if judged else None,
            "overlapping_share": round(touching / judged, 4) if judged else None,
            "unlinked_by_eflomal": unjudged, "words_not_matching_sentences": mismatched}


def main_result(translator: Translator, args: argparse.Namespace) -> dict[str, Any]:
    cfg = translator.cfg
    val = split_pair(cfg, "val")[0][:args.choose_lines]
    test = split_pair(cfg, "test")[0]
    train = split_pair(cfg, "train")
    runs: dict[str, list[dict[str, Any]]] = {}
    layers = cfg.model.decoder_layers
    for layer in range(1, layers + 1):
        aligned = functools.partial(translator.aligned, layer=layer)
        runs[f"val layer {layer}"] = run_documents(documents(val), aligned)
        print(f"val layer {layer}: translated")
    translations = {s: t for result in runs["val layer 1"] for s, t in result["pairs"]}
    runs["val edges"] = run_documents(documents(val), lambda sentences: [Aligned(translations[s]) for s in sentences])
    runs["test"] = run_documents(documents(test), translator.aligned)
    links = eflomal_links([p for results in runs.values() for r in results for p in r["pairs"]], train)
    table = {name: judge(results, links) for name, results in runs.items()}
    for name, row in table.items():
        print(f"{name}: {row}")
    member = translator.members[0]
    return {"benchmark": "markup", "run": run_name(member.path, cfg.name), "checkpoint": member.path,
            "checkpoint_sha256": member.sha256, "updates": member.steps, "decode": translator.settings()["decode"],
            "alignment_layer": ALIGNMENT_LAYER if ALIGNMENT_LAYER > 0 else layers + 1 + ALIGNMENT_LAYER,
            "decoder_layers": layers, "threads": torch.get_num_threads(), "choose_lines": len(val),
            "test_lines": len(test), "results": table}


@command
def main(argv: list[str] | None = None) -> int:
    argv, args, device = begin(argv, parse_args)
    translator = load_translator(args.model, device)
    result = main_result(translator, args)
    return finish(args.out_dir / f"markup_{result['run']}_{device_tag(device)}.json", device, MODULE, argv, result)


if __name__ == "__main__":
    sys.exit(main())

