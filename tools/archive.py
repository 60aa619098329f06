"""Archive a finished Multi30k run, or an ensemble of runs, in results/multi30k/ on the four official test sets.

Usage:
    python -m tools.archive run RUN --beside TEXT [--as NAME] [--commit SHA]
    python -m tools.archive ensemble RUN RUN [RUN ...] --as NAME --beside TEXT [--commit SHA]

`run` decodes the run's final model (what nmt-train chose: the average of its best checkpoints, or best.pt where
that average validated worse) with the beam and length penalty of the run's own test report (the penalty chosen
on the validation split) on test2016, test2017, mscoco2017 and test2018, in the run's direction (data.direction:
an English→German model is scored against the German references), and writes results/multi30k/NAME/:
eval_<split>.json and <split>.hyp.<target language> for each (nmt-evaluate's report and translations, the
report's command the nmt-evaluate line that reproduces it), the run's metrics.jsonl and config.yaml, and run.json:
the training command, the git commit of the code that trained it (--commit, default this checkout's HEAD), the
checkpoint and its sha256, seed, updates, epochs, training minutes, threads, the CPU, and what else ran on the
machine meanwhile (--beside).
`ensemble` decodes the final models of the runs together with the settings most of them chose (the first run's on a
tie) and writes the same reports, the first run's config.yaml, and run.json naming the members. A folder of the
same name is replaced whole.
`make results` then rebuilds the tables from what is archived (README's for German→English, docs/training.md's for
every other direction).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    arguments,
    blamed,
    checkout,
    command_line,
    cpu_model,
    now,
    prog,
    read_json,
)
from nmt.api import evaluate
from nmt.cli import command
from nmt.config import load_config
from nmt.data import evaluation_splits
from nmt.errors import FileError
from nmt.evaluation import write_report
from nmt.fileio import write_json
from nmt.run.folder import RunDir, read_metrics

MODULE = "tools.archive"
RESULTS = ROOT / "results" / "multi30k"
SPLITS = ("test", "test2017", "mscoco2017", "test2018")  # Multi30k's test sets; "test" is test2016 (flickr)
SEED_SUFFIX = re.compile(r"_seed\d+$")


def group_of(name: str) -> str:
    """The table row a model belongs to: its name without a `_seed<N>` ending (the seeds of one recipe)."""
    return SEED_SUFFIX.sub("", name)


def _finished(run: Path) -> dict[str, Any]:
    """The run's own test report (its final model's decode settings and the training command); an error naming
    what is missing when the run has not finished."""
    report = RunDir(run).report("test")
    if not report.is_file():
        raise FileError(f"{run}: no {report.name} (has the run finished?)")
    return read_json(report)


def _decoding(report: dict[str, Any], path: Path) -> tuple[int, float]:
    with blamed(path):
        return int(report["decode"]["beam"]), float(report["decode"]["length_penalty"])


def test_sets(run: Path) -> list[str]:
    """The test sets of the run's dataset: Multi30k's four, or the one test split of another dataset."""
    return [split for split in evaluation_splits(load_config(RunDir(run).config)) if split not in ("train", "val")]


def _translate_all(models: list[Path], beam: int, penalty: float, target: Path) -> dict[str, Any]:
    """Every test set decoded into `target`; the test (for Multi30k test2016) report."""
    shown = [str(models[0]), *(flag for model in models[1:] for flag in ("-c", str(model)))]
    reports = {}
    language = load_config(RunDir(models[0]).config).data.languages[1]
    for split in test_sets(models[0]):
        report = evaluate(models, split=split, beam=beam, length_penalty=penalty)
        hyps = report.pop("hypotheses")
        report["command"] = shlex.join(["nmt-evaluate", *shown, "--split", split, "--beam", str(beam),
                                        "--length-penalty", str(penalty)])
        write_report(report, hyps, RunDir(target).report(split), RunDir(target).hypotheses(split, language))
        print(f"{split}: BLEU {report['scores']['bleu']:.2f}", flush=True)
        reports[split] = report
    return reports["test"]


def _checked_name(name: str) -> str:
    if not name or Path(name).name != name or name in (".", "..") or name.startswith("."):
        raise FileError(f"--as {name!r}: a plain folder name")
    return name


def _replace(building: Path, target: Path) -> Path:
    """Put the finished folder in place of `target` (the earlier archive of that name goes only now)."""
    if target.exists():
        shutil.rmtree(target)
    building.rename(target)
    return target


def _building(name: str, results: Path) -> Path:
    """An empty folder beside results/NAME to write the archive into: a failure leaves NAME as it was."""
    folder = results / f".{_checked_name(name)}.partial"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _provenance(commit: str | None, beside: str, argv: list[str]) -> dict[str, Any]:
    """Who and what made the model: the code's commit, the machine, what shared it, when it was archived."""
    return {"commit": commit or checkout()["commit"], "hardware": f"{os.cpu_count()}-core {cpu_model()}",
            "beside": beside, "date": now(), "archived_by": command_line(MODULE, argv)}


def archive_run(run: Path, name: str, commit: str | None, beside: str, argv: list[str],
                results: Path = RESULTS) -> Path:
    """One finished run on the four test sets, with its log, config and run.json; the folder written."""
    own = _finished(run)
    beam, penalty = _decoding(own, RunDir(run).report("test"))
    cfg = load_config(RunDir(run).config)
    records = read_metrics(RunDir(run).metrics)
    if not records:
        raise FileError(f"{RunDir(run).metrics}: no records")
    target = _building(name, results)
    report = _translate_all([run], beam, penalty, target)
    for source in (RunDir(run).metrics, RunDir(run).config):
        shutil.copyfile(source, target / source.name)
    member = report["members"][0]
    per_epoch = next((r["step"] for r in records if r.get("type") == "valid" and r.get("epoch") == 1), 0)
    write_json(target / "run.json", {
        "name": name, "group": group_of(name), "kind": "run", "training_command": own["command"],
        "checkpoint": member["path"], "sha256": member["sha256"], "seed": cfg.train.seed, "updates": member["steps"],
        "epochs": round(records[-1]["step"] / per_epoch, 1) if per_epoch else None,
        "training_minutes": round(records[-1]["elapsed"] / 60, 1), "threads": cfg.train.threads,
        "decode": {"beam": beam, "length_penalty": penalty}, **_provenance(commit, beside, argv)})
    return _replace(target, results / name)


def archive_ensemble(runs: list[Path], name: str, commit: str | None, beside: str, argv: list[str],
                     results: Path = RESULTS) -> Path:
    """The ensemble of the runs' final models on the four test sets; the folder written."""
    if len({run.resolve() for run in runs}) != len(runs):
        raise FileError("an ensemble needs distinct runs")
    settings = [_decoding(_finished(run), RunDir(run).report("test")) for run in runs]
    beam, penalty = statistics.mode(settings)
    target = _building(name, results)
    report = _translate_all(runs, beam, penalty, target)
    shutil.copyfile(RunDir(runs[0]).config, target / RunDir.CONFIG)  # the model's recipe, for the tables
    groups = {group_of(run.name) for run in runs}
    write_json(target / "run.json", {
        "name": name, "group": groups.pop() if len(groups) == 1 else name, "kind": "ensemble",
        "members": [{"run": run.name, "checkpoint": m["path"], "sha256": m["sha256"], "updates": m["steps"]}
                    for run, m in zip(runs, report["members"])],
        "decode": {"beam": beam, "length_penalty": penalty}, **_provenance(commit, beside, argv)})
    return _replace(target, results / name)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("run", "ensemble"))
    parser.add_argument("runs", nargs="+", type=Path, help="finished run folder(s)")
    parser.add_argument("--as", dest="name", help="the folder under results/multi30k (run: default the run's name)")
    parser.add_argument("--beside", required=True, help="what else ran on the machine while it trained, in words")
    parser.add_argument("--commit", help="git commit of the code that trained it (default: this checkout's HEAD)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="results folder (default results/multi30k)")
    args = parser.parse_args(argv)
    if args.kind == "run" and len(args.runs) != 1:
        parser.error("run archives one run folder")
    if args.kind == "ensemble" and (len(args.runs) < 2 or not args.name):
        parser.error("ensemble needs two or more run folders and --as NAME")
    return args


@command
def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    if args.kind == "run":
        target = archive_run(args.runs[0], args.name or args.runs[0].name, args.commit, args.beside, argv,
                             args.results)
    else:
        target = archive_ensemble(args.runs, args.name, args.commit, args.beside, argv, args.results)
    print(f"archived in {target}; `make results` rebuilds the tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
