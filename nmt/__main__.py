"""`python -m nmt COMMAND ...`: every console command without its installed script (handy under torchrun)."""

from __future__ import annotations

import importlib
import sys

# command -> "module:function"; a command's module is imported only when it runs (nmt-serve's needs the serve extra)
COMMANDS = {"prepare": "nmt.cli:prepare_main", "train": "nmt.cli:train_main", "evaluate": "nmt.cli:evaluate_main",
            "translate": "nmt.cli:translate_main", "compare": "nmt.cli:compare_main", "plot": "nmt.cli:plot_main",
            "average": "nmt.cli:average_main", "config-doc": "nmt.cli:config_doc_main",
            "export": "nmt.cli:export_main", "import": "nmt.cli:import_main", "serve": "nmt.serve.command:main"}


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m nmt {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    module, function = COMMANDS[sys.argv[1]].split(":")
    return getattr(importlib.import_module(module), function)(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
