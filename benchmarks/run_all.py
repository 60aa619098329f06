"""Run the training, decoding and attention benchmarks, then regenerate the tables in docs/benchmarks.md.

Usage: python -m benchmarks.run_all [--seconds 60] [--run RUN] [--only train decode attention] [--report-only]
       python -m benchmarks.run_all --check

Training runs for each Multi30k config (the data come from NMT_DATA_MIRROR when it is set, as for
nmt-prepare); decoding uses --run or, when present, the run folder of configs/multi30k_transformer.yaml;
the attention sweep gets a time budget. The defaults fit in about 10 minutes on 2 CPU cores. Each benchmark
runs in its own process, so its peak memory is its own; the tables are rebuilt from every JSON file in
benchmarks/results: all of them between <!-- bench:start --> and <!-- bench:end --> (docs/benchmarks.md), the
training, peer (training and decoding) and serving tables between <!-- bench-summary:start --> and
<!-- bench-summary:end --> (README.md).
--check runs nothing and writes nothing: it exits 1 when a block differs from what the JSON files give. Run it
from the repository root (as `make bench` does): config, run and data paths are relative to it. Memory is in
MiB (2**20 bytes) throughout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.attention import markdown_table
from benchmarks.common import (
    RESULTS,
    ROOT,
    arguments,
    blamed,
    cell,
    module_command,
    module_env,
    prog,
    read_json,
    replace_block,
    table_header,
    write_or_check,
)
from benchmarks.decode_profile import ceiling_lines
from benchmarks.decode_profile import markdown_table as decode_profile_table
from benchmarks.profile_step import markdown_table as profile_table
from nmt.cli import command
from nmt.config import load_config
from nmt.errors import FileError

MODULE = "benchmarks.run_all"
CONFIGS = ["configs/multi30k_transformer.yaml", "configs/multi30k_gru_bahdanau.yaml"]
DECODE_CONFIG = "configs/multi30k_transformer.yaml"
START, END = "<!-- bench:start -->", "<!-- bench:end -->"
SUMMARY_START, SUMMARY_END = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"
SUMMARY_KINDS = ("train", "peers", "peers_decode", "serve")  # the headline tables the front page shows
STAGES = ("train", "decode", "attention")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="timed training seconds per config (default 60)")
    parser.add_argument("--warmup-steps", type=int, default=2, help="untimed training updates per config")
    parser.add_argument("--configs", nargs="+", default=CONFIGS, help="configs to benchmark training on")
    parser.add_argument("--run", help="run folder to benchmark decoding on (default: the multi30k_transformer run)")
    parser.add_argument("--decode-limit", type=int, default=100, help="sentences decoded one at a time")
    parser.add_argument("--attention-budget", type=float, default=180.0, help="seconds for the attention sweep")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads for every benchmark")
    parser.add_argument("--only", nargs="+", choices=STAGES, default=list(STAGES), help="benchmarks to run")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the README tables")
    parser.add_argument("--check", action="store_true", help="run nothing; exit 1 if a generated block is stale")
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON folder (default benchmarks/results)")
    parser.add_argument("--readme", type=Path, nargs="+", help="README files whose marked block is updated",
                        default=[ROOT / "docs" / "benchmarks.md", ROOT / "README.md"])
    return parser.parse_args(argv)


def _script(name: str, args: list[str], common: list[str]) -> list[str]:
    return module_command(f"benchmarks.{name}", *args, *common)


def _commands(args: argparse.Namespace) -> list[list[str]]:
    """The benchmark command lines to run, printing why any is left out."""
    common = ([] if args.results == RESULTS else ["--out-dir", str(args.results)]) + (
        ["--threads", str(args.threads)] if args.threads else [])
    commands = []
    if "train" in args.only:
        commands += [_script("train", [config, "--seconds", str(args.seconds), "--warmup-steps",
                                                str(args.warmup_steps)], common) for config in args.configs]
    if "decode" in args.only:
        run = Path(args.run) if args.run else load_config(DECODE_CONFIG).run_dir
        if run.exists():
            commands.append(_script("decode", [str(run), "--split", "test", "--limit",
                                                        str(args.decode_limit)], common))
        else:
            print(f"decoding benchmark skipped: no run at {run} (train {DECODE_CONFIG} or pass --run)")
    if "attention" in args.only:
        commands.append(_script("attention", ["--budget", str(args.attention_budget)], common))
    return commands


def _penalty(value: float | str | None) -> str:
    """A length penalty as recorded: a number, or a word such as `auto`."""
    return value if isinstance(value, str) else cell(value, ",.1f")


def _provenance(name: str, record: dict) -> str:
    """Where a row comes from: file, date, machine and command."""
    m = record["machine"]
    machine = f"{m['cpu']} ({m['cpu_count']} cores, {m['torch_threads']} torch threads)"
    if "gpu" in m:
        machine += f", {m['gpu']} (CUDA {m['cuda']})"
    date = record["date"][:16].replace("T", " ")
    return f"- `{name}`: {date} UTC, {machine}, torch {m['torch']}: `{record['command']}`"


def _model(name: str, record: dict) -> str:
    """Which model a decoding record measured: its checkpoint, sha256 and updates when the record has them."""
    where = record.get("checkpoint") or f"runs/{record['run']}"
    updates = record.get("updates") or record.get("steps")
    if record.get("checkpoint_sha256") and updates:
        fairseq = record.get("fairseq", {})
        theirs = (f"; fairseq checkpoint sha256 {fairseq['sha256'][:12]}, {fairseq['updates']:,} updates"
                  if fairseq.get("sha256") and fairseq.get("updates") else "")
        return f"- `{name}`: model `{where}`, sha256 {record['checkpoint_sha256'][:12]}, {updates:,} updates{theirs}"
    return (f"- `{name}`: model `{where}` as it was on the day; the record has no checkpoint sha256 or update "
            "count, so these figures are not tied to the committed run of that name")


def _train_section(records: dict[str, dict]) -> list[str]:
    lines = ["### Training", "", *table_header(
        ["config", "device", "precision", "tgt tok/s", "src tok/s", "steps/s", "padding", "peak RSS MiB",
         "peak GPU MiB", "train MFLOP / tgt token", "MFU", "matmul peak TFLOP/s: fp32 / bf16"], "lll" + "r" * 9)]
    for r in records.values():
        peaks = r["matmul_peak_tflops"]
        lines.append(f"| {r['config']} | {r['device']} | {r['precision']} | {cell(r['tgt_tokens_per_s'])} "
                     f"| {cell(r['src_tokens_per_s'])} | {r['steps_per_s']:.2f} | {100 * r['padding_share']:.1f}% "
                     f"| {cell(r['peak_rss_mb'])} | {cell(r['peak_gpu_mb'])} "
                     f"| {r['train_flops_per_tgt_token'] / 1e6:.1f} | {100 * r['mfu']:.1f}% "
                     f"| {peaks['fp32']:.3g} / {peaks['bf16']:.3g} |")
    return lines + ["", "MFU: the model's FLOP/s over the matmul peak of the run's own precision, measured by the "
                    "same run."] + [""] + [_provenance(name, r) for name, r in records.items()] + [""]


def _decode_section(records: dict[str, dict]) -> list[str]:
    lines = ["### Decoding", "", *table_header(
        ["run", "device", "precision", "length penalty", "search", "one at a time: sent/s", "tok/s",
         "batched: sent/s", "tok/s", "speed-up", "peak RSS MiB"], "lllrl" + "r" * 6)]
    for r in records.values():
        for search, s in r["searches"].items():
            one, many = s["one_at_a_time"], s["batched"]
            lines.append(f"| {r['run']} | {r['device']} | {r['precision']} | {_penalty(r.get('length_penalty'))} "
                         f"| {search} "
                         f"| {one['sentences_per_s']:.1f} | {cell(one['tgt_tokens_per_s'])} "
                         f"| {many['sentences_per_s']:.1f} | {cell(many['tgt_tokens_per_s'])} "
                         f"| x{s['speedup']:.1f} | {cell(r['peak_rss_mb'])} |")
    lines += _engine_table(records)
    return (lines + [""] + [_model(name, r) for name, r in records.items()]
            + [_provenance(name, r) for name, r in records.items()] + [""])


def _engine_table(records: dict[str, dict]) -> list[str]:
    """PyTorch against its CTranslate2 exports: batched sentences/s (and the ratio to PyTorch) and BLEU."""
    with_engines = [r for r in records.values() if r.get("engines")]
    if not with_engines:
        return []
    lines = ["", *table_header(["run", "threads", "length penalty", "engine", "search", "sent/s", "tok/s",
                                "x PyTorch", "BLEU"], "lrrllrrrr")]
    for r in with_engines:
        baseline = next(iter(r["engines"].values()))
        for engine, searches in r["engines"].items():
            for search, m in searches.items():
                ratio = m["sentences_per_s"] / baseline[search]["sentences_per_s"]
                penalty = _penalty(r.get("length_penalty"))
                lines.append(f"| {r['run']} | {r['threads']} | {penalty} | {engine} | {search} "
                             f"| {m['sentences_per_s']:.1f} "
                             f"| {cell(m['tgt_tokens_per_s'])} | x{ratio:.2f} | {m['bleu']:.2f} |")
    return lines


def _attention_section(records: dict[str, dict]) -> list[str]:
    lines = ["### Attention", ""]
    for name, r in records.items():
        shape = r["shape"]
        lines += [f"{r['device']}, {r['precision']}: one layer's attention core, forward + backward, batch "
                  f"{shape['batch']}, {shape['heads']} heads, head size {shape['head_dim']}, local window "
                  f"{r['window']}; median of {r['repeats']} passes; memory above the inputs.", "",
                  markdown_table(r), "", _provenance(name, r), ""]
    return lines


def _peers_section(records: dict[str, dict]) -> list[str]:
    """Our training throughput against fairseq and OpenNMT-py, each record measured in one run."""
    lines = ["### Against fairseq and OpenNMT-py (one run, one after the other)", "",
             *table_header(["config", "seconds each", "nmt tgt tok/s", "fairseq", "OpenNMT-py", "x the faster peer",
                            "nmt peak RSS MiB", "fairseq", "OpenNMT-py"], "l" + "r" * 8)]
    for r in records.values():
        cells = {field: [cell(r["peers"][key][field]) if key in r["peers"] else "-" for key in ("fairseq", "opennmt")]
                 for field in ("tgt_tokens_per_s", "peak_rss_mb")}
        ratio = "-" if r["ratio_to_fastest"] is None else f"x{r['ratio_to_fastest']:.2f}"
        lines.append(f"| {r['nmt']['config']} | {r['seconds']} | {cell(r['nmt']['tgt_tokens_per_s'])} "
                     f"| {' | '.join(cells['tgt_tokens_per_s'])} | {ratio} | {cell(r['nmt']['peak_rss_mb'])} "
                     f"| {' | '.join(cells['peak_rss_mb'])} |")
    return lines + [""] + [_provenance(name, r) for name, r in records.items()] + [""]


def _peers_decode_section(records: dict[str, dict]) -> list[str]:
    """Our batched decoding against fairseq-generate on the same test set, each record measured in one run."""
    lines = ["### Decoding against fairseq-generate (one run, one after the other)", "",
             *table_header(["run", "search", "nmt sent/s", "BLEU", "nmt MFU", "fairseq sent/s", "BLEU", "x fairseq"],
                           "ll" + "r" * 6)]
    for r in records.values():
        for search, ratio in r["ratio"].items():
            ours, theirs = r["nmt"][search], r["fairseq"][search]
            lines.append(f"| {r['run']} | {search} | {ours['sentences_per_s']:.1f} | {ours['bleu']:.2f} "
                         f"| {100 * ours['mfu']:.1f}% "
                         f"| {theirs['sentences_per_s']:.1f} | {theirs['bleu']:.2f} | x{ratio:.2f} |")
    notes = [f"- `{name}`: nmt batches of {r['nmt']['batch_tokens']:,} source tokens, GNMT length penalty "
             f"{_penalty(r['nmt']['length_penalty'])}, {r['nmt']['threads']} threads; fairseq batches of "
             f"{r['fairseq']['batch_sentences']} sentences, its default length normalisation"
             f"; nmt MFU: the model's FLOP/s over the fp32 matmul peak measured in the same run, "
             f"{r['nmt']['matmul_peak_tflops']['fp32']:.3f} TFLOP/s"
             for name, r in records.items()]
    models = [_model(name, r) for name, r in records.items()]
    return lines + [""] + models + notes + [_provenance(name, r) for name, r in records.items()] + [""]


def _profile_section(records: dict[str, dict]) -> list[str]:
    """Where a training step's time goes (torch.profiler, operator self times summed by kind)."""
    lines = ["### Where a training step's time goes", ""]
    for name, r in records.items():
        lines += [f"{r['config']}, {r['device']} {r['precision']}, {r['threads']} threads: {r['steps']} updates "
                  f"profiled, {r['seconds']:.1f} s with the profiler on.", "", profile_table(r), "",
                  _provenance(name, r), ""]
    return lines


def _decode_profile_section(records: dict[str, dict]) -> list[str]:
    """Where batched decoding's time goes, its output arithmetic apart, and the ceiling that arithmetic sets."""
    lines = ["### Where decoding's time goes, and the ceiling at unchanged outputs", ""]
    for name, r in records.items():
        lines += [f"{r['run']} on {r['split']}, batches of {r['batch_tokens']:,} source tokens, each batch on one "
                  "thread (seconds summed over the batches, profiler on):", "", decode_profile_table(r), "",
                  *ceiling_lines(r), _model(name, r), _provenance(name, r), ""]
    return lines


def _serve_section(records: dict[str, dict]) -> list[str]:
    """nmt-serve: one-sentence requests from 1, 8, 32 ... concurrent clients over the loopback, through each API
    measured (records from before --apis hold the native API alone, with a flat speedup)."""
    lines = ["### Serving (nmt-serve over the loopback, one sentence per request)", "",
             *table_header(["run", "API", "clients", "requests", "sent/s", "x 1 client", "vs native", "p50 ms",
                            "p95 ms"], "ll" + "r" * 7)]
    for r in records.values():
        for level in r["levels"]:
            api, clients = level.get("api", "native"), str(level["clients"])
            speedup = r["speedup"][api][clients] if "apis" in r else r["speedup"][clients]
            versus = r.get("vs_native", {}).get(api, {}).get(clients)
            lines.append(f"| {r['run']} | {api} | {level['clients']} | {level['requests']} "
                         f"| {level['sentences_per_s']:.1f} | x{speedup:.2f} "
                         f"| {'' if versus is None else f'{versus:.3f}'} | {level['p50_ms']:.0f} "
                         f"| {level['p95_ms']:.0f} |")
    models = [f"- `{name}`: model `{r['checkpoint']}`, sha256 {r['sha256'][:12]}, {r['updates']:,} updates; "
              f"server `{r['server']}`" for name, r in records.items()]
    return lines + [""] + models + [_provenance(name, r) for name, r in records.items()] + [""]


def _agreement_section(records: dict[str, dict]) -> list[str]:
    """PyTorch beam search against its float32 CTranslate2 export: BLEU at each length penalty, identical lines."""
    lines = ["### PyTorch against its CTranslate2 export (beam search, validation split)", "",
             *table_header(["run", "updates", "length penalty", "PyTorch BLEU", "CTranslate2 BLEU", "difference",
                            "identical lines"], "l" + "r" * 6)]
    tests = []
    for r in records.values():
        for row in r["val"]["table"]:
            lines.append(f"| {r['run']} | {r['updates']:,} | {row['length_penalty']:.1f} | {row['pytorch_bleu']:.2f} "
                         f"| {row['ctranslate2_bleu']:.2f} | {row['difference']:.2f} "
                         f"| {100 * row['identical_share']:.1f}% |")
        t = r["test"]
        tests.append(f"- `{r['run']}` on the test split at length penalty {t['length_penalty']:.1f}: "
                     f"{100 * t['identical_share']:.1f}% of {t['sentences']:,} lines identical, BLEU "
                     f"{t['pytorch_bleu']:.2f} (PyTorch) and {t['ctranslate2_bleu']:.2f} (CTranslate2)")
    models = [f"- `{name}`: model `{r['checkpoint']}`, sha256 {r['checkpoint_sha256'][:12]}, {r['updates']:,} "
              f"updates; beam {r['beam']}, stop rule `{r['stop']}`, CTranslate2 {r['ctranslate2_version']}"
              for name, r in records.items()]
    return lines + [""] + tests + models + [_provenance(name, r) for name, r in records.items()] + [""]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _constraints_section(records: dict[str, dict]) -> list[str]:
    """Terminology (benchmarks/constraints.py): constraints from the references and a glossary, scored with and
    without, and constrained beam search's speed against plain beam search."""
    lines = ["### Terminology: constraints taken from the references (constrained beam search)", "",
             *table_header(["run", "set", "lines constrained", "terms", "outputs holding every term",
                            "searches meeting every term", "BLEU without", "with", "chrF without", "with",
                            "unconstrained lines changed"], "ll" + "r" * 9)]
    glossary = ["", "### Terminology: a glossary of Multi30k terms", "",
                *table_header(["run", "set", "lines fired in", "firings", "reference lacks the target",
                               "outputs holding every target", "BLEU without", "with", "chrF without", "with",
                               "other lines changed"], "ll" + "r" * 9)]
    speeds = []
    for r in records.values():
        for name, s in r["sets"].items():
            g = s["glossary"]
            lines.append(f"| {r['run']} | {name} | {s['lines_given_constraints']:,} of {s['lines']:,} "
                         f"| {s['terms']:,} | {_percent(s['outputs_holding_every_term_share'])} "
                         f"| {_percent(s['searches_meeting_every_term_share'])} "
                         f"| {s['scores']['without']['bleu']:.2f} | {s['scores']['with']['bleu']:.2f} "
                         f"| {s['scores']['without']['chrf']:.2f} | {s['scores']['with']['chrf']:.2f} "
                         f"| {s['lines_without_constraints_differing']} of {s['lines_without_constraints']:,} |")
            glossary.append(f"| {r['run']} | {name} | {g['lines_fired_in']:,} | {g['firings']:,} "
                            f"| {g['absent_from_reference']:,} ({_percent(g['absent_from_reference_share'])}) "
                            f"| {_percent(g['outputs_holding_every_target_share'])} "
                            f"| {g['scores']['without']['bleu']:.2f} | {g['scores']['with']['bleu']:.2f} "
                            f"| {g['scores']['without']['chrf']:.2f} | {g['scores']['with']['chrf']:.2f} "
                            f"| {g['lines_not_fired_in_differing']} of {s['lines'] - g['lines_fired_in']:,} |")
        if "speed" in r:
            sp = r["speed"]
            speeds.append(f"- `{r['run']}` on {sp['set']}, beam {r['decode']['beam']}, {r['threads']} threads: "
                          f"{sp['without']['sentences_per_s']:.1f} sentences/s without constraints, "
                          f"{sp['with_one_constraint']['sentences_per_s']:.1f} with one per line "
                          f"({sp['lines_given_a_constraint']:,} of {sp['lines']:,} lines), x{sp['ratio']:.2f}")
    models = [_model(name, r) + f"; glossary `{r['glossary']['file']}` ({r['glossary']['entries']} entries)"
              for name, r in records.items()]
    return (lines + glossary + [""] + speeds + models + [_provenance(name, r) for name, r in records.items()]
            + [""])


def _sentence_split_section(records: dict[str, dict]) -> list[str]:
    """Paragraphs (benchmarks/sentence_split.py): test lines in threes, translated with sentence splitting against
    the same lines translated one by one and joined, in both paragraph forms."""
    lines = ["### Paragraphs: sentence splitting against line by line", "",
             *table_header(["run", "form", "paragraphs", "split into their lines", "BLEU line by line, joined",
                            "BLEU split", "difference", "BLEU unsplit"], "ll" + "r" * 6)]
    for r in records.values():
        for form, f in r["forms"].items():
            lines.append(f"| {r['run']} | {form} | {r['paragraphs']:,} | {f['split_into_their_lines']:,} "
                         f"| {f['scores']['line_by_line_joined']['bleu']:.2f} | {f['scores']['split']['bleu']:.2f} "
                         f"| {f['split_minus_line_by_line_joined_bleu']:+.2f} | {r['unsplit']['bleu']:.2f} |")
    return (lines + [""] + [_model(name, r) for name, r in records.items()]
            + [_provenance(name, r) for name, r in records.items()] + [""])


SECTIONS = {"train": _train_section, "decode": _decode_section, "attention": _attention_section,
            "peers": _peers_section, "peers_decode": _peers_decode_section, "profile": _profile_section,
            "decode_profile": _decode_profile_section,
            "serve": _serve_section, "lp_agreement": _agreement_section, "constraints": _constraints_section,
            "sentence_split": _sentence_split_section}


def _records(results: Path) -> dict[str, dict[str, dict]]:
    """The benchmark records of each kind in `results`, by file name; a record its section cannot show is a
    FileError naming its file, and so is a missing folder (which would leave the README without its tables)."""
    if not results.is_dir():
        raise FileError(f"--results {results}: no such folder")
    found: dict[str, dict[str, dict]] = {kind: {} for kind in SECTIONS}
    for path in sorted(results.glob("*.json")):
        record = read_json(path)
        kind = record.get("benchmark")
        if kind in found:
            with blamed(path):
                SECTIONS[kind]({path.name: record})
            found[kind][path.name] = record
    return found


def tables(results: Path, kinds: tuple[str, ...] = tuple(SECTIONS)) -> str:
    """The generated Markdown: one section per benchmark kind in `kinds`, rows from every JSON file in `results`."""
    found = {kind: records for kind, records in _records(results).items() if kind in kinds}
    if not any(found.values()):
        return "No results yet: run `make bench`.\n"
    lines = ["Generated by `python -m benchmarks.run_all` from `benchmarks/results/*.json`; under each table, the "
             "file, date, machine and command of every row. Memory in MiB.", ""]
    for kind, records in found.items():
        if records:
            lines += SECTIONS[kind](records)
    return "\n".join(lines).rstrip() + "\n"


def generated_blocks(readme: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """The generated blocks `readme` holds (the full one when it holds neither, so a new file gets it)."""
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    blocks = [(START, END, tuple(SECTIONS)), (SUMMARY_START, SUMMARY_END, SUMMARY_KINDS)]
    return [b for b in blocks if b[0] in text] or blocks[:1]


def update_readme(readme: Path, results: Path) -> None:
    """Rewrite the generated blocks of `readme` (created if missing) from the JSON files in `results`."""
    for start, end, kinds in generated_blocks(readme):
        replace_block(readme, start, end, tables(results, kinds), title="# Benchmarks")


def check_readme(readme: Path, results: Path) -> int:
    """0 when every generated block of `readme` is what the JSON files in `results` give, else 1 (said why)."""
    failed = 0
    for start, end, kinds in generated_blocks(readme):
        failed |= write_or_check(readme, start, end, tables(results, kinds), True, "speed tables",
                                 f"python -m {MODULE} --report-only")
    return failed


@command
def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    if args.check:
        return max(check_readme(readme, args.results) for readme in args.readme)
    failed = []
    if not args.report_only:
        start = time.monotonic()
        for cmd in _commands(args):
            print(f"\n== python {' '.join(cmd[1:])}", flush=True)
            if subprocess.run(cmd, check=False, env=module_env()).returncode:
                failed.append(cmd[2])
        print(f"\nbenchmarks took {(time.monotonic() - start) / 60:.1f} minutes")
    if failed:  # said before the tables, which fail in turn when no benchmark wrote anything
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    for readme in args.readme:
        update_readme(readme, args.results)
        print(f"tables updated in {readme}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
