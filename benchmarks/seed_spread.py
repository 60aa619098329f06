"""The spread of one config over seeds: archive the runs, evaluate their models and ensemble, report.

Usage (the three steps in order, or `all` for the three at once):
    python -m benchmarks.seed_spread archive RUN RUN RUN [--hardware TEXT] [--config configs/X.yaml]
    python -m benchmarks.seed_spread evaluate RUN RUN RUN
    python -m benchmarks.seed_spread report [--check]
    python -m benchmarks.seed_spread all RUN RUN RUN [--hardware TEXT]

`archive` copies each finished run's test report as nmt-train wrote it (of its final model: the average of its
best checkpoints, or best.pt where that average validated worse), translations, metrics log and resolved config
into results/multi30k/seeds/<run>/, with run.json (the training command, the seed, the hardware). `evaluate` runs
`nmt-evaluate`, all with the same code and settings, on each run's final model (<run>/final/), on its best single
checkpoint (<run>/best/) and on the ensemble of the final models (ensemble/), each report with its translations as
test.hyp.en; the figures compared come from these, the training-time scores are kept beside them. `report` reads
only the archived files and writes seeds.json (the machine, the date, the commands, each model's checkpoint sha256
and updates, mean and sample standard deviation of BLEU and chrF, the ensemble and its gain over the mean, final
against best checkpoint) and the README block between <!-- seeds:start --> and <!-- seeds:end -->; with --check it
writes nothing and exits 1 when seeds.json or the block is not what the archived reports give.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    ROOT,
    arguments,
    blamed,
    command_line,
    finite,
    machine_info,
    now,
    prog,
    read_json,
    table_header,
    write_or_check,
)
from nmt.cli import command
from nmt.config import load_config
from nmt.errors import FileError
from nmt.fileio import write_json
from nmt.rundir import RunDir

MODULE = "benchmarks.seed_spread"
SEEDS = ROOT / "results" / "multi30k" / "seeds"
START, END = "<!-- seeds:start -->", "<!-- seeds:end -->"
ARCHIVED = ("eval_test.json", "test.hyp.en", "metrics.jsonl", "config.yaml")
ENSEMBLE, FINAL, BEST = "ensemble", "final", "best"
METRICS = ("bleu", "bleu_lc", "chrf", "ter")
EMPTY = (f"No seed spread yet: `python -m {MODULE} all RUN RUN RUN` archives three finished runs of one "
         "config and writes this table.\n")


def _runs(paths: list[str]) -> list[Path]:
    runs = [Path(p) for p in paths]
    for run in runs:
        missing = [name for name in ARCHIVED if not (run / name).is_file()]
        if missing:
            raise FileError(f"{run}: no {', '.join(missing)} (has the run finished and been evaluated?)")
    if len({run.name for run in runs}) != len(runs):
        raise FileError("the runs need distinct folder names")
    return runs


def _side_by_side() -> str:
    """The default hardware line: this machine, the runs side by side with one thread each."""
    cpu = machine_info(torch.device("cpu"))
    return f"side by side on one {cpu['cpu_count']}-core {cpu['cpu']}, one torch thread each"


def archive(runs: list[Path], seeds: Path, hardware: str, config: str) -> None:
    """Copy each run's report, translations, metrics and config; write its run.json."""
    for run in runs:
        target = seeds / run.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ARCHIVED:
            shutil.copyfile(run / name, target / name)
        seed = load_config(run / "config.yaml").train.seed
        train = shlex.join(["nmt-train", config, "--set", f"name={run.name}", "--set", f"train.seed={seed}",
                            "--set", "train.threads=1"])
        write_json(target / "run.json", {"command": train, "hardware": hardware, "seed": seed})
        print(f"archived {run} in {target}")


def _evaluate(args: list[str], out: Path) -> None:
    """Run nmt-evaluate on the test split into `out`/eval_test.json, its translations into `out`/test.hyp.en."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "eval_test.json"
    argv = [*args, "--split", "test", "--output", str(report)]
    print(f"== nmt-evaluate {shlex.join(argv)}", flush=True)
    subprocess.run([sys.executable, "-m", "nmt", "evaluate", *argv], check=True)
    report.with_suffix(".hyp.txt").replace(out / "test.hyp.en")


def _decoding(run: Path) -> list[str]:
    """The beam and length penalty of a run's own test report (its validation choice), as flags: a best.pt can
    hold another penalty than the final model, and the re-evaluated final model should give the report's scores."""
    path = run / "eval_test.json"
    with blamed(path):
        decode = read_json(path)["decode"]
        return ["--beam", str(decode["beam"]), "--length-penalty", str(decode["length_penalty"])]


def evaluate(runs: list[Path], seeds: Path) -> None:
    """Each run's final model and best single checkpoint with the run's own settings, then the ensemble of the
    final models with the settings most of the runs chose (the first run's on a tie)."""
    for run in runs:
        _evaluate([str(run), *_decoding(run)], seeds / run.name / FINAL)
        _evaluate([str(RunDir(run).best), *_decoding(run)], seeds / run.name / BEST)
    first, *others = [str(run) for run in runs]
    flags = statistics.mode(tuple(_decoding(run)) for run in runs)
    _evaluate([first, *[flag for other in others for flag in ("-c", other)], *flags], seeds / ENSEMBLE)


def _model(folder: Path) -> dict[str, Any]:
    """One evaluated model (or ensemble): scores, and each member's checkpoint, sha256 and updates."""
    path = folder / "eval_test.json"
    report = read_json(path)
    with blamed(path):
        scores = {key: finite(report["scores"][key], f"scores.{key}") for key in METRICS}
        members = [{"checkpoint": m["path"], "sha256": m["sha256"], "updates": m["steps"]}
                   for m in report["members"]]
        return {**scores, "members": members, "command": report["command"],
                "decode": {k: report["decode"][k] for k in ("beam", "length_penalty")}}


def _final_models(runs: list[dict[str, Any]]) -> str:
    """What the runs' final models are, from their file names: the average of the best checkpoints, or best.pt
    where that average validated worse (nmt-train then keeps best.pt)."""
    names = {Path(r["final"]["members"][0]["checkpoint"]).name for r in runs}
    if names == {RunDir.AVERAGED}:
        return "the average of its best checkpoints"
    if names == {RunDir.BEST}:
        return "its best checkpoint, as the average of its best checkpoints validated worse"
    return "the average of its best checkpoints, or its best checkpoint where that average validated worse"


def _spread(models: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and sample standard deviation (n - 1) of each metric."""
    return {key: {"mean": round(statistics.mean(m[key] for m in models), 2),
                  "std": round(statistics.stdev(m[key] for m in models), 2)} for key in METRICS}


def summarize(seeds: Path) -> dict[str, Any]:
    """Every figure of seeds.json, from the archived files alone (what --check recomputes)."""
    folders = sorted(p for p in seeds.iterdir() if (p / "run.json").is_file())
    if len(folders) < 2:
        raise FileError(f"{seeds}: {len(folders)} archived run(s); a spread needs at least 2")
    runs = []
    for folder in folders:
        run_file = folder / "run.json"
        run = read_json(run_file)
        with blamed(run_file):
            trained = _model(folder)
            runs.append({"name": folder.name, "seed": run["seed"], "training_command": run["command"],
                         "hardware": run["hardware"], "final": _model(folder / FINAL), "best": _model(folder / BEST),
                         "training_report": {key: trained[key] for key in METRICS}})
    finals = [r["final"] for r in runs]
    spread = _spread(finals)
    ensemble = _model(seeds / ENSEMBLE)
    return {
        "runs": runs,
        "spread": spread,
        "ensemble": {**ensemble, "gain_over_mean": {key: round(ensemble[key] - spread[key]["mean"], 2)
                                                    for key in METRICS}},
        "final_minus_best": {key: round(statistics.mean(r["final"][key] - r["best"][key] for r in runs), 2)
                             for key in METRICS},
    }


def _settings(model: dict[str, Any]) -> str:
    return f"{model['decode']['beam']} / {model['decode']['length_penalty']}"


def _pm(spread: dict[str, float]) -> str:
    return f"{spread['mean']:.2f} ± {spread['std']:.2f}"


def table(seeds: Path) -> str:
    """The README block: one row per seed, the mean ± standard deviation, the ensemble; or a line saying how."""
    if not (seeds / "seeds.json").is_file():
        return EMPTY
    data = read_json(seeds / "seeds.json")
    with blamed(seeds / "seeds.json"):
        runs, spread, ensemble = data["runs"], data["spread"], data["ensemble"]
        lines = [f"**Seed spread**: `{data['config']}` trained {len(runs)} times, seeds "
                 f"{', '.join(str(r['seed']) for r in runs)}, {runs[0]['hardware']}; test BLEU and chrF of each "
                 f"final model ({_final_models(runs)}) and of its best single checkpoint, each run "
                 "decoded with its own validation-chosen beam and length penalty, the ensemble with the most common "
                 "one. Mean ± sample standard deviation. Evidence: [results/multi30k/seeds/seeds.json]"
                 "(results/multi30k/seeds/seeds.json).", "",
                 *table_header(["model", "updates", "checkpoint sha256", "beam / lp", "BLEU", "chrF",
                                "best checkpoint: BLEU", "chrF"], "lrl" + "r" * 5)]
        for r in runs:
            final, best, member = r["final"], r["best"], r["final"]["members"][0]
            lines.append(f"| `{r['name']}` (seed {r['seed']}) | {member['updates']:,} | `{member['sha256'][:12]}` "
                         f"| {_settings(final)} | {final['bleu']:.2f} | {final['chrf']:.2f} | {best['bleu']:.2f} "
                         f"| {best['chrf']:.2f} |")
        gain, diff = ensemble["gain_over_mean"], data["final_minus_best"]
        members = " -c ".join(chr(ord("A") + i) for i in range(len(runs)))
        lines += [f"| mean ± std | | | | {_pm(spread['bleu'])} | {_pm(spread['chrf'])} | "
                  f"final − best: {diff['bleu']:+.2f} | {diff['chrf']:+.2f} |",
                  f"| ensemble of the {len(runs)} (`nmt-evaluate {members}`) | | | {_settings(ensemble)} "
                  f"| {ensemble['bleu']:.2f} ({gain['bleu']:+.2f} over the mean) | {ensemble['chrf']:.2f} "
                  f"({gain['chrf']:+.2f}) | | |"]
    return "\n".join(lines) + "\n"


def report(seeds: Path, config: str, argv: list[str]) -> None:
    """Write seeds.json from the archived files."""
    data = {"date": now(), "machine": machine_info(torch.device("cpu")), "config": config,
            "command": command_line(MODULE, argv), **summarize(seeds)}
    write_json(seeds / "seeds.json", data)
    print(f"wrote {seeds / 'seeds.json'}")


def check(seeds: Path, readme: Path) -> int:
    """0 when seeds.json holds what the archived reports give and the README block is current, else 1."""
    if (seeds / "seeds.json").is_file():
        recorded = read_json(seeds / "seeds.json")
        fresh = summarize(seeds)
        stale = [key for key, value in fresh.items() if recorded.get(key) != value]
        if stale:
            print(f"{seeds / 'seeds.json'}: {', '.join(stale)} differ from the archived reports; run "
                  f"`python -m {MODULE} report`", file=sys.stderr)
            return 1
    return write_or_check(readme, START, END, table(seeds), True, "seed table", f"python -m {MODULE} report")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("archive", "evaluate", "report", "all"))
    parser.add_argument("runs", nargs="*", help="the finished run folders (archive, evaluate, all)")
    parser.add_argument("--seeds", type=Path, default=SEEDS, help="archive folder (default results/multi30k/seeds)")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md", help="file holding the seeds block")
    parser.add_argument("--config", default="configs/multi30k_transformer_20min.yaml", help="the runs' config")
    parser.add_argument("--hardware", help="how the runs were trained, in words (kept in each run.json; default: "
                        "side by side on this machine's CPU, one torch thread each)")
    parser.add_argument("--check", action="store_true", help="report: write nothing, exit 1 if anything is stale")
    args = parser.parse_args(argv)
    if args.step in ("archive", "evaluate", "all") and len(args.runs) < 2:
        parser.error(f"{args.step} needs the run folders (at least 2)")
    return args


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    if args.step == "report" and args.check:
        return check(args.seeds, args.readme)
    if args.step in ("archive", "all"):
        archive(_runs(args.runs), args.seeds, args.hardware or _side_by_side(), args.config)
    if args.step in ("evaluate", "all"):
        evaluate(_runs(args.runs), args.seeds)
    if args.step in ("report", "all"):
        report(args.seeds, args.config, argv)
        return write_or_check(args.readme, START, END, table(args.seeds), False, "seed table", f"python -m {MODULE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
