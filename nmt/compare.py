"""Compare finished runs: scores and speed, paired bootstrap significance, learning curves, attention.

`nmt-compare RUN_DIR...` reads each run's `eval_test.json`, `test.hyp.en`, `metrics.jsonl` and `config.yaml`,
and the reports and translations of any further test sets (`eval_<split>.json`, `<split>.hyp.en`), and writes
`compare.md`, `compare.json` and PNG plots into `--out`. A run without a report is kept in the report as failed,
with the reason (`train_failed.txt`, written by benchmarks/compare_suite.py, when present). The attention
diagnostics decode the run's checkpoint; a copy of a run without checkpoints brings them in `attention.json`
(`attention_record`), so that a comparison can be assembled from copied run files alone.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from nmt.checkpoint import load_model
from nmt.config import Config, load_config
from nmt.data import normalize
from nmt.diagnostics import DIAG_SENTENCES, HEATMAPS, Thresholds, attention_stats, summarize
from nmt.errors import CheckpointError, ConfigError, DataError, NmtError
from nmt.evaluation import split_pair
from nmt.fileio import atomic_output
from nmt.loader import from_loaded
from nmt.plots import AttentionPanel, Curve, attention_grid, learning_curves
from nmt.run.folder import RunDir, read_metrics
from nmt.search import Hypothesis
from nmt.translator import Translator
from nmt.utils import resolve_device

FAILED_NOTE = RunDir.FAILED
ATTENTION_RECORD = "attention.json"  # a run's attention diagnostics and heatmap panels (`attention_record`)
RUN_FILES = (RunDir.report_name("test"), RunDir.CONFIG, RunDir.METRICS, FAILED_NOTE,
             ATTENTION_RECORD)  # what is read of a run, besides its translations and further test sets' reports
NOT_TEST_SETS = ("train", "val", "test")  # eval_<split>.json reports that are no further test set


def run_files(path: str | Path) -> list[str]:
    """The names of the files read of a run folder: RUN_FILES and, once its config names the target language,
    its test translations."""
    try:
        target = load_config(RunDir(path).config).data.languages[1]
    except (NmtError, OSError):
        return list(RUN_FILES)
    return [*RUN_FILES, RunDir.hypotheses_name("test", target)]


@dataclass
class ComparedRun:
    """One run folder and what could be read from it."""

    name: str
    path: Path
    status: str = "ok"  # ok | failed (no usable report) | excluded (not comparable with the others)
    reason: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    cfg: Config | None = None
    hyps: list[str] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    tests: dict[str, tuple[dict[str, Any], list[str]]] = field(default_factory=dict)  # further test sets: split ->
    # (report, translations)

    def fail(self, reason: str, status: str = "failed") -> None:
        self.status, self.reason = status, reason


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a run's metrics.jsonl as `nmt.run.folder.read_metrics` reads them, each without the figures
    that are not finite numbers (a curve or a speed has no point for them)."""
    return [{k: v for k, v in entry.items() if k == "type" or _number(v)} for entry in read_metrics(path)]


def _check_report(report: Any) -> None:
    """Raise ValueError unless `report` is an evaluation report with finite scores and a sentence count."""
    scores = report.get("scores") if isinstance(report, dict) else None
    if not isinstance(scores, dict) or not all(_number(scores.get(k)) for k in ("bleu", "chrf", "ter")):
        raise ValueError("eval_test.json: not an evaluation report with finite bleu, chrf and ter scores")
    if not isinstance(report.get("sentences"), int) or not isinstance(report.get("train", {}), dict):
        raise ValueError("eval_test.json: its sentences count or train section is not what nmt-evaluate writes")


def load_run(path: Path) -> ComparedRun:
    """Read a run folder; problems make the run `failed` with a reason instead of raising."""
    run, folder = ComparedRun(path.name, path), RunDir(path)
    if not path.is_dir():
        run.fail("run folder not found")
        return run
    try:
        run.metrics = finite_metrics(folder.metrics)
        if folder.failed.exists():
            run.fail(folder.failed.read_text(encoding="utf-8").strip() or "training failed")
            return run
        for name in RUN_FILES[:2]:
            if not (path / name).exists():
                run.fail(f"no {name} (training failed or was not evaluated)")
                return run
        try:
            run.report = json.loads(folder.report("test").read_text(encoding="utf-8"))
        except ValueError as err:
            raise ValueError(f"eval_test.json: {err}") from None
        _check_report(run.report)
        run.cfg = load_config(folder.config)
        target = run.cfg.data.languages[1]
        if not folder.hypotheses("test", target).exists():
            run.fail(f"no {RunDir.hypotheses_name('test', target)} (training failed or was not evaluated)")
            return run
        run.hyps = folder.hypotheses("test", target).read_text(encoding="utf-8").split("\n")[:-1]
        run.tests = further_test_sets(path, target)
    except (OSError, ValueError) as err:
        run.fail(f"unreadable run files ({err})")
        run.report = {}
        return run
    if len(run.hyps) != run.report.get("sentences"):
        run.fail(f"{RunDir.hypotheses_name('test', run.cfg.data.languages[1])} has {len(run.hyps)} lines but the "
                 f"report scored {run.report.get('sentences')}")
    return run


def further_test_sets(path: Path, language: str) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """The reports and translations (into `language`) of the test sets other than `test` that a run folder
    holds."""
    found = {}
    for report_file in sorted(path.glob("eval_*.json")):
        split = report_file.stem.removeprefix("eval_")
        if split in NOT_TEST_SETS:
            continue
        try:
            report = json.loads(report_file.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ValueError(f"{report_file.name}: {err}") from None
        _check_report(report)
        hyps = RunDir(path).hypotheses(split, language).read_text(encoding="utf-8").split("\n")[:-1]
        if len(hyps) != report["sentences"]:
            raise ValueError(f"{RunDir.hypotheses_name(split, language)} has {len(hyps)} lines but its report "
                             f"scored {report['sentences']}")
        found[split] = report, hyps
    return found


def test_sources(cfg: Config) -> list[str]:
    """The test sources of a run's dataset, normalized as the trainer read them."""
    return [normalize(s, cfg.data.lowercase) for s in split_pair(cfg, "test")[0]]


def check_references(runs: list[ComparedRun]) -> tuple[list[str], list[str]]:
    """Sources and references shared by the ok runs; a run whose test set differs is excluded."""
    shared: tuple[list[str], list[str]] | None = None
    for run in (r for r in runs if r.status == "ok"):
        try:
            sources, refs = split_pair(run.cfg, "test")
        except DataError as err:
            run.fail(f"cannot read the test references ({err})")
            continue
        lowercase = run.cfg.data.lowercase  # normalized as the trainer scored them
        sources, refs = [normalize(s, lowercase) for s in sources], [normalize(r, lowercase) for r in refs]
        if len(refs) != len(run.hyps):
            run.fail(f"{len(run.hyps)} hypotheses for {len(refs)} test references", "excluded")
        elif shared is None:
            shared = sources, refs
        elif refs != shared[1]:
            run.fail("its test references differ from the other runs'", "excluded")
    return shared or ([], [])


def _round(value: float) -> float:
    return round(float(value), 2) + 0.0  # + 0.0 turns -0.0 into 0.0


def paired_bootstrap(systems: list[tuple[str, list[str]]], refs: list[str],
                     resamples: int = 1000) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """sacrebleu's paired bootstrap of every system against the first: per system and metric, the score,
    bootstrap mean, 95% confidence interval and p-value (None for the baseline); plus the signatures."""
    metrics = {"bleu": BLEU(), "chrf": CHRF()}
    signatures, table = PairedTest(systems, metrics, [refs], test_type="bs", n_samples=resamples)()
    columns = [name for name in table if name != "System"]  # sacrebleu's names, in the order of `metrics`
    baseline_hyps = systems[0][1]
    out: dict[str, dict[str, Any]] = {}
    for index, (name, hyps) in enumerate(systems):
        out[name] = {}
        for key, column in zip(metrics, columns):
            result, base = table[column][index], table[column][0]
            p_value = result.p_value
            if index and (hyps == baseline_hyps or result.ci == base.ci == 0.0):
                # every resample gave the same difference (identical outputs, or a test set too small to vary):
                # sacrebleu then says 1/(n+1), but there is no evidence at all
                p_value = 1.0
            out[name][key] = {"score": _round(result.score), "mean": _round(result.mean),
                              "ci95": [_round(result.mean - result.ci), _round(result.mean + result.ci)],
                              "p_value": None if p_value is None else round(float(p_value), 4)}
    return out, {key: str(signatures[column]) for key, column in zip(metrics, columns)}


def p_text(p_value: float | None, resamples: int) -> str:
    """A p-value as the report shows it: at the floor of the bootstrap (nothing below 1/(n+1) can come out of n
    resamples) it reads "≤ 1/n", since the test cannot say how much smaller it is; * marks p < 0.05."""
    if p_value is None:
        return "baseline"
    star = "*" if p_value < 0.05 else ""
    if p_value <= round(1 / (resamples + 1), 4):
        return f"≤ {1 / resamples:g}{star}"
    return f"{p_value:.3f}{star}"


FAMILY_BASELINE = {"rnn": "rnn/additive", "transformer": "transformer/full"}  # default baseline of each family


def family(run: ComparedRun) -> str:
    """The model family a run belongs to: its architecture (runs are tested against their family's baseline)."""
    return run.cfg.model.arch if run.cfg is not None else "unknown"


def pick_baselines(ok: list[ComparedRun], requested: list[str]) -> tuple[dict[str, ComparedRun], list[str]]:
    """The baseline of each family of usable runs: the requested one, else the family's default attention,
    else its first run. Also notes on requested baselines that could not be used."""
    by_family: dict[str, list[ComparedRun]] = {}
    for run in ok:
        by_family.setdefault(family(run), []).append(run)
    chosen, notes = {}, []
    for name, members in by_family.items():
        wanted = [r for r in members if r.name in requested]
        if len(wanted) > 1:
            raise ConfigError(f"--baseline {wanted[0].name} and --baseline {wanted[1].name}: both are {name} runs; "
                              "give one baseline per family")
        default = next((r for r in members if attention_label(r.cfg) == FAMILY_BASELINE.get(name)), members[0])
        chosen[name] = wanted[0] if wanted else default
    for name in requested:
        if not any(r.name == name for r in ok):
            notes.append(f"the requested baseline {name} is not usable")
    return chosen, notes


def significance(ok: list[ComparedRun], baselines: dict[str, ComparedRun], refs: list[str], resamples: int,
                 split: str = "test") -> dict[str, Any]:
    """Paired bootstrap of every usable run against its family's baseline (the baseline's p-value is None), on
    the test set `split`."""
    def hyps(run: ComparedRun) -> list[str]:
        return run.hyps if split == "test" else run.tests[split][1]

    runs: dict[str, dict[str, Any]] = {}
    signatures: dict[str, str] = {}
    for name, baseline in baselines.items():
        members = [r for r in ok if family(r) == name and r is not baseline]
        scores, signatures = paired_bootstrap([(baseline.name, hyps(baseline))] + [(r.name, hyps(r)) for r in members],
                                              refs, resamples)
        for run_name, result in scores.items():
            runs[run_name] = {"baseline": baseline.name, **result}
    return {"test": "paired bootstrap resampling (sacrebleu)", "resamples": resamples, "signatures": signatures,
            "runs": {r.name: runs[r.name] for r in ok}}


def further_significance(ok: list[ComparedRun], baselines: dict[str, ComparedRun], resamples: int) -> dict[str, Any]:
    """The paired bootstrap on each further test set that every usable run was decoded on (a set whose
    references do not match a run's translations line for line is left out)."""
    shared = set.intersection(*(set(r.tests) for r in ok)) if ok else set()
    out = {}
    for split in sorted(shared):
        lowercase = ok[0].cfg.data.lowercase
        refs = [normalize(r, lowercase) for r in split_pair(ok[0].cfg, split)[1]]
        if all(len(r.tests[split][1]) == len(refs) for r in ok):
            out[split] = significance(ok, baselines, refs, resamples, split)
    return out


def attention_label(cfg: Config) -> str:
    """The attention variant a run compares: the GRU decoder's attention or the Transformer's self-attention."""
    return f"rnn/{cfg.model.attention}" if cfg.model.arch == "rnn" else f"transformer/{cfg.model.self_attention}"


def summary_row(run: ComparedRun) -> dict[str, Any]:
    """The table row of one run (scores, size, speed) from its report and metrics."""
    row: dict[str, Any] = {"name": run.name, "path": str(run.path), "status": run.status, "reason": run.reason}
    speeds = [m["tgt_tok_s"] for m in run.metrics if m.get("type") == "train" and "tgt_tok_s" in m]
    row["train_tgt_tok_s"] = round(statistics.median(speeds), 1) if speeds else None
    if run.cfg is not None:
        row["attention"] = attention_label(run.cfg)
    if run.report:
        scores, train = run.report["scores"], run.report.get("train", {})
        row.update(bleu=scores["bleu"], chrf=scores["chrf"], ter=scores["ter"],
                   parameters=train.get("parameters"), train_steps=train.get("steps"),
                   train_minutes=train.get("minutes"), decode_sentences_per_s=run.report.get("sentences_per_s"))
        if run.tests:
            row["test_sets"] = {split: {key: report["scores"][key] for key in ("bleu", "chrf", "ter")}
                                for split, (report, _) in run.tests.items()}
    return row


def curves(runs: list[ComparedRun]) -> tuple[list[Curve], str]:
    """Validation curves of every run with metrics: BLEU when all of them logged it, else the loss."""
    valid = {run.name: [m for m in run.metrics if m.get("type") == "valid"] for run in runs}
    valid = {name: entries for name, entries in valid.items() if entries}
    key = "bleu" if all("bleu" in e for entries in valid.values() for e in entries) else "loss"
    valid = {name: [e for e in entries if key in e and "elapsed" in e] for name, entries in valid.items()}
    out = [Curve(name, [e["step"] for e in entries], [e["elapsed"] / 60 for e in entries], [e[key] for e in entries])
           for name, entries in valid.items() if entries]
    return out, "validation BLEU" if key == "bleu" else "validation loss"


def pick_sentences(sources: list[str], count: int) -> list[int]:
    """Indices of `count` readable test sentences (4-12 words), falling back to the first ones."""
    readable = [i for i, s in enumerate(sources) if 4 <= len(s.split()) <= 12]
    chosen = readable[:count]
    return chosen + [i for i in range(len(sources)) if i not in chosen][:count - len(chosen)]


def best_with_attention(run: ComparedRun, sources: list[str],
                        device: torch.device) -> tuple[Translator, list[Hypothesis]]:
    """The run's best translation of each source, decoded with its own settings, with cross-attention."""
    translator = from_loaded([load_model(run.path, device)], device)
    return translator, [n[0] for n in translator.hypotheses(sources, return_attention=True)]


def attention_record(run: ComparedRun, sources: list[str], device: torch.device, limit: int, heatmaps: int,
                     thresholds: Thresholds) -> dict[str, Any]:
    """A run's attention diagnostics over the first `limit` sources and the panels of the few drawn as heatmaps,
    decoded from its checkpoint: what `ATTENTION_RECORD` keeps for a copy of the run without checkpoints."""
    sample = sources[:limit]
    translator, best = best_with_attention(run, sample, device)
    weights = [h.attention.float() for h in best]  # each (T, S)
    panels = []
    for i in pick_sentences(sample, heatmaps):
        src, tgt = translator.attention_labels(sample[i], best[i])
        panels.append({"sentence": i, "weights": weights[i].tolist(), "source": src, "target": tgt,
                       "translation": translator.detokenize(best[i])})
    return {"sentences": len(sample), "thresholds": asdict(thresholds), "panels": panels,
            "summary": summarize([attention_stats(w, thresholds) for w in weights], thresholds)}


def _stored_record(run: ComparedRun, sentences: int, chosen: list[int],
                   thresholds: Thresholds) -> dict[str, Any] | None:
    """The run folder's ATTENTION_RECORD when it was made with these settings, else None."""
    try:
        record = json.loads((run.path / ATTENTION_RECORD).read_text(encoding="utf-8"))
        same = (record["sentences"] == sentences and record["thresholds"] == asdict(thresholds)
                and [p["sentence"] for p in record["panels"]] == chosen)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return record if same else None


def diagnose(runs: list[ComparedRun], sources: list[str], out: Path, device: torch.device, limit: int, heatmaps: int,
             thresholds: Thresholds) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Attention diagnostics of each run over the first `limit` test sentences, and heatmap PNGs of a few: from
    its checkpoint, else from the ATTENTION_RECORD of a copy made with the same settings."""
    sample = sources[:limit]
    chosen = pick_sentences(sample, heatmaps)
    panels: dict[int, list[AttentionPanel]] = {i: [] for i in chosen}
    diagnostics = {}
    for run in runs:
        print(f"nmt-compare: attention of {run.name} on {len(sample)} test sentences", file=sys.stderr)
        try:
            record = attention_record(run, sample, device, limit, heatmaps, thresholds)
        except CheckpointError as err:
            record = _stored_record(run, len(sample), chosen, thresholds)
            if record is None:
                diagnostics[run.name] = {"error": str(err)}
                continue
        diagnostics[run.name] = record["summary"]
        for p in record["panels"]:
            title = f"{run.name}\n{p['translation'][:60]}"
            panels[p["sentence"]].append(AttentionPanel(np.array(p["weights"]), p["source"], p["target"], title))
    files = []
    for i in chosen:
        if panels[i]:
            files.append(f"attention_test{i + 1:04d}.png")
            attention_grid(panels[i], out / files[-1], title=f"test sentence {i + 1}: {sample[i]}")
    return diagnostics, files


def _cell(value: Any, fmt: str = "{}") -> str:
    return "–" if value is None else fmt.format(value)


def markdown(data: dict[str, Any]) -> str:
    """The human-readable report: tables, then the plots."""
    baselines = ", ".join(f"{name} for {fam}" for fam, name in data["baselines"].items()) or "none"
    lines = [f"# Attention variants: {data['suite']}", "",
             f"Test set: {data['test_sentences']} sentences. Baselines for significance: {baselines}."]
    if data["baseline_note"]:
        lines.append(f"Note: {data['baseline_note']}.")
    lines += ["", "## Scores, size and speed", "",
              "| run | attention | status | BLEU | chrF | TER | parameters | steps | train min | train tgt tok/s "
              "(median) | decode sent/s |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in data["runs"]:
        status = r["status"] if r["status"] == "ok" else f"**{r['status']}**: {r['reason']}"
        lines.append(f"| {r['name']} | {r.get('attention', '–')} | {status} | {_cell(r.get('bleu'))} | "
                     f"{_cell(r.get('chrf'))} | {_cell(r.get('ter'))} | {_cell(r.get('parameters'), '{:,}')} | "
                     f"{_cell(r.get('train_steps'))} | {_cell(r.get('train_minutes'))} | "
                     f"{_cell(r.get('train_tgt_tok_s'), '{:.0f}')} | {_cell(r.get('decode_sentences_per_s'))} |")
    sig = data.get("significance")
    if sig:
        lines += ["", "## Significance against the baseline of each family", "",
                  f"{sig['test']}, {sig['resamples']} resamples; mean and 95% confidence interval of the resampled "
                  "scores; p-value of the difference to the run's baseline (* p < 0.05; "
                  f"≤ {1 / sig['resamples']:g}: the smallest p-value {sig['resamples']} resamples can give).", "",
                  "| run | baseline | BLEU | BLEU 95% CI | p (BLEU) | chrF | chrF 95% CI | p (chrF) |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name, result in sig["runs"].items():
            cells = [result["baseline"]]
            for key in ("bleu", "chrf"):
                m = result[key]
                cells += [f"{m['score']:.2f}", f"{m['ci95'][0]:.2f}–{m['ci95'][1]:.2f}",
                          p_text(m["p_value"], sig["resamples"])]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += [""] + [f"- {key}: `{value}`" for key, value in sig["signatures"].items()]
    further = data.get("further_test_sets") or {}
    if further and sig:
        splits = list(further)
        lines += ["", "## The other test sets", "",
                  "BLEU of each run, with the paired bootstrap's p-value against its baseline as above.", "",
                  "| run | baseline | " + " | ".join(f"{s} BLEU | p" for s in splits) + " |",
                  "|---|---|" + "---:|---:|" * len(splits)]
        for name in sig["runs"]:
            cells = [further[splits[0]]["runs"][name]["baseline"]]
            for split in splits:
                m = further[split]["runs"][name]["bleu"]
                cells += [f"{m['score']:.2f}", p_text(m["p_value"], further[split]["resamples"])]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if data.get("diagnostics"):
        lines += ["", "## Attention diagnostics", "",
                  f"Cross-attention of each run's own translations of the first {data['diagnostics_sentences']} "
                  "test sentences (Transformer: last decoder layer, averaged over heads). Entropy in nats; a "
                  "uniform row has log(source length). Near-uniform attention suggests an unsure model, rows with "
                  "over 90% of their weight on one token an over-fitted one.", "",
                  "| run | mean entropy | uniform entropy | mean max weight | rows > 90% on one token | "
                  "near-uniform rows | flagged sentences |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name, d in data["diagnostics"].items():
            if "error" in d:
                lines.append(f"| {name} | {d['error']} |" + " |" * 5)
                continue
            lines.append(f"| {name} | {d['mean_entropy']:.3f} | {d['mean_uniform_entropy']:.3f} | "
                         f"{d['mean_max_weight']:.3f} | {d['focused_share']:.1%} | {d['uniform_share']:.1%} | "
                         f"{d['flagged_share']:.1%} |")
    plots = data["plots"]
    if "learning_curves" in plots:
        lines += ["", "## Learning curves", "", f"![{data['learning_curve_metric']}]({plots['learning_curves']})"]
    if plots["attention"]:
        lines += ["", "## Attention heatmaps", ""] + [f"![{name}]({name})" for name in plots["attention"]]
    return "\n".join(lines) + "\n"


def compare(paths: list[Path], out: Path, suite: str, baselines: list[str] | None = None, device: str = "auto",
            diag_sentences: int = DIAG_SENTENCES, heatmaps: int = HEATMAPS, resamples: int = 1000,
            thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Build the whole comparison, write compare.md / compare.json / PNGs into `out`, return the JSON data."""
    runs = [load_run(p) for p in paths]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ConfigError(f"run folders need distinct names, got {', '.join(names)}")
    for name in baselines or []:
        if name not in names:
            raise ConfigError(f"--baseline {name}: not one of the runs ({', '.join(names)})")
    sources, refs = check_references(runs)
    ok = [r for r in runs if r.status == "ok"]
    chosen, notes = pick_baselines(ok, baselines or [])
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"suite": suite, "baselines": {fam: run.name for fam, run in chosen.items()},
                            "baseline_note": "; ".join(notes), "test_sentences": len(refs),
                            "runs": [summary_row(r) for r in runs]}
    heatmap_files: list[str] = []
    if ok:
        data["significance"] = significance(ok, chosen, refs, resamples)
        data["further_test_sets"] = further_significance(ok, chosen, resamples)
        resolved = resolve_device(device)
        data["diagnostics"], heatmap_files = diagnose(ok, sources, out, resolved, diag_sentences, heatmaps,
                                                      thresholds or Thresholds())
        data["diagnostics_sentences"] = min(diag_sentences, len(sources))
    learning, metric = curves(runs)
    plots = {"attention": heatmap_files}
    if learning:
        plots["learning_curves"] = "learning_curves.png"
        learning_curves(learning, out / plots["learning_curves"], metric)
    data["plots"] = plots
    data["learning_curve_metric"] = metric
    with atomic_output(out / "compare.json") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")
    with atomic_output(out / "compare.md") as handle:
        handle.write(markdown(data))
    return data
