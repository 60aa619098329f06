"""`python -m nmt COMMAND ...`: the console commands without their installed scripts (handy under torchrun)."""

from __future__ import annotations

import sys

from nmt import cli

COMMANDS = {"prepare": cli.prepare_main, "train": cli.train_main, "evaluate": cli.evaluate_main,
            "translate": cli.translate_main, "compare": cli.compare_main, "average": cli.average_main,
            "config-doc": cli.config_doc_main, "export": cli.export_main}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m nmt {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    return COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
