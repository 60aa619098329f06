"""Shared helpers: tiny configs on the embedded sample, written into a temporary folder, one data cache for the
whole session, a trained run made once and copied by the tests that change it, and untrained run folders."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from nmt.fileio import atomic_output

REPO = Path(__file__).resolve().parents[1]
CACHE_ENV = "NMT_TEST_DATA_CACHE"  # the data cache of every tiny config, child processes' included
# The settings of `trained_run`: it tunes its length penalty at the end, as a run does by default.
SHARED = {"name": "shared", "train": {"max_steps": 60, "eval_every": 30}, "decode": {"length_penalty": "auto"}}


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fails_cleanly(main, argv: list[str], capsys, folder: Path, message: str, status: int = 1) -> str:
    """Run a command that must fail: its exit status, one line naming the problem, no traceback, nothing changed."""
    before = snapshot(folder)
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and message in err, err
    assert snapshot(folder) == before
    return err


def tiny_config(folder: Path, name: str = "tiny", arch: str = "transformer", **sections: dict) -> Path:
    """Write a tiny, fast config for the sample corpus into `folder` and return its path.

    Its data cache is the session's (keyed by the data and tokenizer settings, so a cache another test built is
    the one this config would build); outside a test session, `folder`/cache. One process prepares the data: a
    worker pool costs more than it saves on the sample.
    """
    model = ({"arch": "transformer", "d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1,
              "decoder_layers": 1} if arch == "transformer" else
             {"arch": "rnn", "emb_dim": 32, "hidden_size": 32, "encoder_layers": 1, "decoder_layers": 1})
    raw = {
        "name": name,
        "run_root": str(folder / "runs"),
        "data": {"dataset": "sample", "cache_dir": os.environ.get(CACHE_ENV) or str(folder / "cache"), "workers": 1},
        "tokenizer": {"vocab_size": 300},
        "model": {**model, "dropout": 0.1},
        # The CPU unless NMT_TEST_DEVICE says otherwise (benchmarks/gpu_check.py runs the suite with cuda).
        "train": {"batch_tokens": 512, "max_steps": 30, "max_epochs": 0, "lr": 3e-3, "warmup": 10, "log_every": 5,
                  "eval_every": 10, "eval_bleu": False, "keep_best": 2,
                  "device": os.environ.get("NMT_TEST_DEVICE", "cpu")},
        # A fixed length penalty: the end of a run tunes none (four validation searches), unless a test asks
        # for `auto`, as `trained_run` does.
        "decode": {"beam": 2, "batch_tokens": 2000, "length_penalty": 1.0},
    }
    for section, values in sections.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    with atomic_output(path) as handle:  # torchrun ranks write the same config at once: none may read it half-written
        handle.write(yaml.safe_dump(raw))
    return path


# Modules whose tests share a costly module fixture (a torchrun launch, trained runs and their exports, a
# server): under pytest-xdist each runs whole in one worker, and they go out first, the torchrun launch (which needs
# no `trained_run`) before the others. The other tests follow in runs of CHUNK, in order, so that the cheap module
# fixtures are not rebuilt at every switch between modules, and so that the last units to run are small.
GROUPED_MODULES = ("test_distributed.py", "test_serve_compat.py", "test_huggingface.py", "test_export.py",
                   "test_compare.py")
CHUNK = 8


def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist, the grouped modules' tests first (every worker collects the same order)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        first = {name: rank for rank, name in enumerate(GROUPED_MODULES)}
        items.sort(key=lambda item: first.get(item.path.name, len(first)))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: nothing when it is not installed
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s scheduling (`--dist loadgroup`): pytest-xdist's own groups are the xdist_group marks, which
    pytest 9.2 no longer passes on to it (pytest-dev/pytest-xdist#1386), so the groups are named here."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        """Work units: a grouped module whole, other modules' tests CHUNK at a time, in the collection's order."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.units: dict[str, str] = {}
            self.counts: dict[str, int] = {}

        def _split_scope(self, nodeid: str) -> str:
            if nodeid not in self.units:
                module = nodeid.split("::", 1)[0]
                if Path(module).name in GROUPED_MODULES:
                    self.units[nodeid] = module
                else:
                    index = self.counts[module] = self.counts.get(module, -1) + 1
                    self.units[nodeid] = f"{module}#{index // CHUNK}"
            return self.units[nodeid]

    config.option.loadscopereorder = False  # the order is the collection's (pytest_collection_modifyitems)
    return Scheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def shared_data_cache(tmp_path_factory) -> Iterator[Path]:
    """The data cache of the session's tiny configs: sentencepiece trains once per distinct setting, not once per
    test. Under pytest-xdist the workers share it (a cache is published by one rename, so two workers building
    the same one at once leave one complete cache)."""
    folder = _session_root(tmp_path_factory) / "data_cache"
    folder.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(folder))
        yield folder


@pytest.fixture(scope="session", autouse=True)
def cores_shared_by_workers() -> Iterator[None]:
    """Under pytest-xdist (`make test` runs TEST_WORKERS processes) each worker's torch, and the commands its tests
    start, take the worker's share of the cores, not all of them."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        yield
        return
    import torch

    share = max(1, len(os.sched_getaffinity(0)) // workers)
    torch.set_num_threads(share)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", str(share))
        yield


def _session_root(tmp_path_factory) -> Path:
    """The folder every process of this test session sees: pytest-xdist's workers each have their own below it."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory) -> Path:
    """A tiny Transformer trained briefly on the sample, with its test report (shared: never change it; a test
    that does takes `trained_copy`). Trained once per session: under pytest-xdist by the first worker that needs
    it, while the others wait for it (the `done` file is written last)."""
    import fcntl

    from nmt.cli import train_main

    folder = _session_root(tmp_path_factory) / "trained"
    folder.mkdir(exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            assert train_main([str(tiny_config(folder, **SHARED))]) == 0
            (folder / "done").touch()
    return folder / "runs" / "shared"


@pytest.fixture()
def trained_copy(trained_run, tmp_path) -> tuple[Path, Path]:
    """A copy of `trained_run` in tmp_path and its config, which resumes it: (config, run folder). For tests of
    what a later command does to a trained run (refusals, resumes), so that they need not train one."""
    run = tmp_path / "runs" / SHARED["name"]
    shutil.copytree(trained_run, run)
    return tiny_config(tmp_path, **SHARED), run


def untrained_run(folder: Path, name: str = "untrained", arch: str = "transformer", **sections: dict) -> Path:
    """A run folder holding a freshly initialised model as checkpoints/best.pt (no training state): for tests
    that need a model of some shape or vocabulary, not a trained one."""
    import torch

    from nmt.checkpoint import save_contents
    from nmt.config import load_config
    from nmt.data import prepare
    from nmt.trainer import Trainer

    cfg = load_config(tiny_config(folder, name, arch, **sections))
    trainer = Trainer(cfg, prepare(cfg, log=lambda _msg: None), torch.device("cpu"))
    save_contents(trainer.contents(training=False), cfg.run_dir / "checkpoints" / "best.pt")
    return cfg.run_dir


@pytest.fixture(scope="session")
def other_vocabulary_run(tmp_path_factory) -> Path:
    """An untrained run folder like `trained_run` but with another vocabulary (a tokenizer of 280 subwords)."""
    return untrained_run(tmp_path_factory.mktemp("othervocab"), "othervocab", tokenizer={"vocab_size": 280})


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    """Tiny models run fastest on one torch thread, and then do not fight other processes for the cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
