"""The main job on the embedded sample: prepare, train a small Transformer briefly, evaluate, translate."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from nmt.cli import train_main, translate_main

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
    start = time.monotonic()
    print(f"== training {CONFIG} on the embedded sample (prepare -> train -> evaluate)", flush=True)
    if train_main([CONFIG, "--restart"]):
        return 1
    print("\n== translating a few German sentences with runs/sample_transformer", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.de", Path(tmp) / "out.en"
        src.write_text("\n".join(EXAMPLES) + "\n", encoding="utf-8")
        if translate_main(["--checkpoint", "runs/sample_transformer", "-i", str(src), "-o", str(out)]):
            return 1
        for de, en in zip(EXAMPLES, out.read_text(encoding="utf-8").splitlines()):
            print(f"  de: {de}\n  en: {en}")
    print(f"\ndemo finished in {time.monotonic() - start:.0f} s; everything is in runs/sample_transformer/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
