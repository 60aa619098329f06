"""Dynamic batching: queued requests and those arriving within a short wait are translated together by one
worker thread, the only one touching the model; requests of clients gone away are dropped."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nmt.config import DecodeConfig
from nmt.serve.limits import WAIT_MS
from nmt.translator import Texts, Translation, Translator


@dataclass
class Job:
    """Texts to translate with `decode`, or (with `call`) one function to run alone on the worker."""

    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    texts: Texts = Texts(())
    decode: DecodeConfig | None = None
    call: Callable[[], Any] | None = None
    warn: Callable[[int, int], None] | None = None  # hears (text index, subwords) of each truncated sentence


def _warn_each(jobs: list[Job]) -> Callable[[int, int], None]:
    """A warn for the joined texts of `jobs` that passes (text index, subwords) on to the job owning the text."""
    owners = [(job, index) for job in jobs for index in range(len(job.texts.pieces))]

    def warn(text: int, length: int) -> None:
        job, index = owners[text]
        if job.warn is not None:
            job.warn(index, length)
    return warn


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # the client disconnected
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Batcher:
    """A queue and one translating thread; `on_batch` hears each search's sentence count."""

    def __init__(self, translator: Translator, wait_ms: float = 5.0, budget: int | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:
        self.translator = translator
        self.on_batch = on_batch
        WAIT_MS.check(wait_ms, "wait_ms")
        self.wait = wait_ms / 1000.0
        self.budget = budget or translator.decode.batch_tokens
        self.batches = 0
        self.queue: queue.Queue[Job | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="nmt-serve-decoder", daemon=True)
        self.thread.start()

    async def translate(self, texts: Texts, decode: DecodeConfig,
                        warn: Callable[[int, int], None] | None = None) -> list[list[Translation]]:
        """Each text's n-best list, searched in a batch with other requests; `warn` hears (text index, subwords)
        of each sentence cut to the source-length limit."""
        loop = asyncio.get_running_loop()
        job = Job(loop.create_future(), loop, texts, decode, warn=warn)
        self.queue.put(job)
        return await job.future

    async def run(self, call: Callable[[], Any]) -> Any:
        """Run `call` on the worker thread between batches."""
        loop = asyncio.get_running_loop()
        job = Job(loop.create_future(), loop, call=call)
        self.queue.put(job)
        return await job.future

    def close(self) -> None:
        """Finish the queued work, then stop the worker."""
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        pending: list[Job | None] = []  # a call or stop that ended the last batch
        while True:
            job = pending.pop() if pending else self.queue.get()
            if job is None:
                return
            if job.call is not None:
                self._call(job)
                continue
            jobs = [job]
            try:
                self._collect(jobs, pending)
                self._translate(jobs)
            except Exception as err:  # noqa: BLE001 - fail these requests, keep serving
                for failed in jobs:
                    failed.loop.call_soon_threadsafe(_settle, failed.future, None, err)

    def _tokens(self, job: Job) -> int:
        return sum(len(ids) + 1 for ids in self.translator.encode(job.texts.sentences))  # + EOS

    def _collect(self, jobs: list[Job], pending: list[Job | None]) -> None:
        """Add queued and newly arriving jobs to `jobs`, up to the token budget."""
        tokens, deadline = self._tokens(jobs[0]), time.monotonic() + self.wait
        while tokens < self.budget:
            try:
                extra = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return
            if extra is None or extra.call is not None:
                pending.append(extra)
                return
            jobs.append(extra)
            tokens += self._tokens(extra)

    def _call(self, job: Job) -> None:
        if job.future.cancelled():
            return
        try:
            result, error = job.call(), None
        except Exception as err:  # noqa: BLE001 - keep the worker alive
            result, error = None, err
        job.loop.call_soon_threadsafe(_settle, job.future, result, error)

    def _translate(self, jobs: list[Job]) -> None:
        """One search per group of jobs with equal settings; each job gets its slice of the results."""
        groups: dict[tuple, list[Job]] = {}
        for job in jobs:
            if not job.future.cancelled():
                groups.setdefault((dataclasses.astuple(job.decode), job.texts.terms is None), []).append(job)
        for group in groups.values():
            texts = Texts.joined([job.texts for job in group])
            results = self.translator.with_decode(group[0].decode).translations(texts, _warn_each(group))
            self.batches += 1
            if self.on_batch is not None:
                self.on_batch(len(texts.sentences))
            start = 0
            for job in group:
                part = results[start:start + len(job.texts.pieces)]
                start += len(job.texts.pieces)
                job.loop.call_soon_threadsafe(_settle, job.future, part, None)
