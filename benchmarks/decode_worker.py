"""The decoding timer that `python -m benchmarks.decode --against TREE` runs, once on this checkout's code and once
on TREE's, each in a fresh interpreter, and asks for one timed pass at a time.

`benchmarks.decode` starts it as `python -c <this file's text> SPEC` in the checkout's folder with PYTHONPATH set to
it, so that `nmt` is that checkout's. It therefore imports nothing from `benchmarks` and uses only what every
checkout since the Translator offers: `load_translator`, `decode_with`, `line_terms` and the Translator's line
search and detokenizer (see `layer`). SPEC is JSON: {"models" (one, or several: an ensemble), "device",
"precision", "threads", "length_penalty", "glossary" (a file whose terms every line's translation must contain, or
null)}. Each line on stdin is a request, {"lines": [...], "beam": N, "batch_tokens": N, "warm_up": bool}; each
answer is one line on stdout: {"seconds", "cpu_seconds" (the
process's CPU time, which a busy machine's other work does not inflate), "tokens" (each sentence's best token ids,
None for a line without any), "scores" (its score and log-probability), "hyps" (its text), "strays"}; the first
line, once the model is loaded, is {"strays"} alone. "strays" lists the loaded nmt modules whose files lie outside
the checkout (an editable install of another checkout serves a module that this one lacks), which the caller
refuses. Everything else the code prints goes to stderr.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def strays() -> list[str]:
    """Files of loaded nmt modules outside the checkout this runs in (its current folder)."""
    tree = Path.cwd().resolve()
    files = [getattr(module, "__file__", None) for name, module in list(sys.modules.items())
             if name == "nmt" or name.startswith("nmt.")]
    return sorted(f for f in files if f and tree not in Path(f).resolve().parents)


def layer(translator: Any, name: str) -> Callable[..., Any]:
    """The line search (`name` "search": lines in, n-best hypotheses out) or the detokenizer of a Translator of
    any checkout: the Translator's `hypotheses` and `detokenize` today, its searcher's `search` and `detokenize`
    before, the Translator's own `_name` or `name` before that."""
    if name == "search" and hasattr(translator, "hypotheses"):
        return translator.hypotheses
    searcher = getattr(translator, "searcher", None)
    if searcher is not None:
        return getattr(searcher, name)
    return getattr(translator, f"_{name}", None) or getattr(translator, name)


def main() -> None:
    answers, sys.stdout = sys.stdout, sys.stderr  # only answers on the pipe the caller reads
    spec = json.loads(sys.argv[1])
    import torch

    from nmt.config import decode_with

    if (Path.cwd() / "nmt" / "loader.py").is_file():
        from nmt.loader import load_translator
    else:  # a checkout whose translator module loads models itself
        from nmt.translator import load_translator

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    translator = load_translator(spec["models"], device, spec["precision"],
                                 {"length_penalty": spec["length_penalty"]})
    if spec["glossary"] is not None:
        from nmt.glossary import line_terms
    answers.write(json.dumps({"strays": strays()}) + "\n")
    answers.flush()
    for line in sys.stdin:
        request = json.loads(line)
        t = translator.with_decode(decode_with(translator.decode, {"beam": request["beam"], "n_best": 1,
                                                                   "batch_tokens": request["batch_tokens"]}))
        search, detokenize = layer(t, "search"), layer(t, "detokenize")
        lines = request["lines"]
        terms = {} if spec["glossary"] is None else {"terms": line_terms(lines, spec["glossary"])}
        if request["warm_up"]:
            search(lines[:2], **({"terms": terms["terms"][:2]} if terms else {}))  # first-call allocations
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start, cpu_start = time.perf_counter(), time.process_time()
        nbest = search(lines, **terms)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        answers.write(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds,
                                  "tokens": [list(n[0].tokens) if n else None for n in nbest],
                                  "scores": [[n[0].score, n[0].log_prob] if n else None for n in nbest],
                                  "hyps": [detokenize(n[0]) if n else "" for n in nbest], "strays": strays()})
                      + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
