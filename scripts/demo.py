"""The main job on the embedded sample, through the Python API: prepare, train a small Transformer briefly,
evaluate on the test split, translate a few sentences."""

from __future__ import annotations

import argparse
import logging
import sys
import time

import nmt

CONFIG = "configs/sample_transformer.yaml"
EXAMPLES = [
    "Ein Mann in einem blauen Hemd fährt Fahrrad.",
    "Zwei Kinder spielen im Park mit einem Hund.",
    "Eine Frau trinkt Kaffee in einem kleinen Café.",
    "Der Zug kommt um acht Uhr an.",
    "Ich habe heute keine Zeit.",
]


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__).parse_args(argv)  # --help only: the demo takes no options
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    start = time.monotonic()
    print(f"== training {CONFIG} on the embedded sample (prepare -> train -> evaluate)", flush=True)
    try:
        run = nmt.train(CONFIG, restart=True)
        scores = run.report["scores"]
        print(f"\ntest BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} ({scores['bleu_signature']})")
        print(f"\n== translating a few German sentences with {run.path}", flush=True)
        for de, en in zip(EXAMPLES, run.translator().translate(EXAMPLES)):
            print(f"  de: {de}\n  en: {en}")
    except nmt.NmtError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"\ndemo finished in {time.monotonic() - start:.0f} s; everything is in {run.path}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
