"""Parallel data: sources (sample, Multi30k, files, TSV; as monolingual text files, Multi30k task 2 and one side
of task 1's training pairs), streaming preparation (its worker pool and stream samplers) into a memory-mapped id
store and the cache it opens, token-bucket batching and the preparation summary."""

from nmt.data.batching import Batch, TokenBatchSampler, collate, padding_fraction
from nmt.data.cache import CACHE_FORMAT, DROP_REASONS, cache_key
from nmt.data.pipeline import Prepared, prepare
from nmt.data.report import summary, vocabulary_warning
from nmt.data.sources import (
    MIRROR_ENV,
    MULTI30K_SHA256,
    MULTI30K_SPLITS,
    MULTI30K_TEST_SETS,
    MULTI30K_URL,
    Corpus,
    SplitFiles,
    evaluation_files,
    evaluation_splits,
    fetch_multi30k,
    resolve_corpora,
    resolve_files,
    sample_dir,
)
from nmt.data.store import IdFile, RaggedIds, Split
from nmt.data.task2 import (
    TASK2_MIRROR_ENV,
    TASK2_SHA256,
    TASK2_URL,
    Monolingual,
    task1_training,
    task2_monolingual,
    write_monolingual,
    write_task1_training,
)
from nmt.data.text import normalize, read_lines, read_pair

__all__ = [
    "CACHE_FORMAT",
    "DROP_REASONS",
    "MIRROR_ENV",
    "MULTI30K_SHA256",
    "MULTI30K_SPLITS",
    "MULTI30K_TEST_SETS",
    "MULTI30K_URL",
    "TASK2_MIRROR_ENV",
    "TASK2_SHA256",
    "TASK2_URL",
    "Batch",
    "Corpus",
    "IdFile",
    "Monolingual",
    "Prepared",
    "RaggedIds",
    "Split",
    "SplitFiles",
    "TokenBatchSampler",
    "cache_key",
    "collate",
    "evaluation_files",
    "evaluation_splits",
    "fetch_multi30k",
    "normalize",
    "padding_fraction",
    "prepare",
    "read_lines",
    "read_pair",
    "resolve_corpora",
    "resolve_files",
    "sample_dir",
    "summary",
    "task1_training",
    "task2_monolingual",
    "write_monolingual",
    "write_task1_training",
    "vocabulary_warning",
]
