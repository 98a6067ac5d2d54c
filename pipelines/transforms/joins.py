"""LookupJoin: many requests per key against a few table values per key, in bounded groups.

The job's joins all have this shape: a small "table" side (one resolution per
title, the top aliases of one entity) and a "request" side that grows with
the corpus (every page that links to a title or an entity). A plain
CoGroupByKey puts every request for one key into one group on one worker: on
full English Wikipedia, the ~500k pages that link to "United States" would be
one group.

Here, keys with more than ``max_group`` requests are split. Their requests
are spread over ``ceil(1.25 n / max_group)`` salted sub-keys by a stable hash of a
per-request salt (the page id: one page's requests for a key always meet in
the same sub-group, so they can be de-duplicated there), and their table
values are copied to each sub-key. The heavy keys are found first, by
counting requests per key with a combiner (lifted before the shuffle); only
keys above the bound reach the side input, at most
``total requests / max_group`` of them. Sub-groups average 80% of the bound, so the
hash's spread (a few percent) keeps every group under ``max_group`` requests, whatever
the size of the corpus; the largest one seen is reported as
``largest_group/<join>`` in stats.json.

A request source may also send requests in batches, ``(key, (request, ...))``: one element for
many requests of one key, made where they are already together (ResolveLinks' group of one
link target yields the refs of all its linking pages to the entity at once). A batch of a heavy
key is split by its requests' sub-keys; groups, counters and outputs are the same as for single
requests, with fewer elements to encode, shuffle and decode.

Each join also reports the bytes it shuffles (``volume/<join>/table_bytes``, exact,
and ``volume/<join>/request_bytes``, estimated from a 1-in-16 sample of the requests
chosen by their salt key, so the estimate is the same on any runner and parallelism),
as Beam's default coder encodes them one by one (batched requests take a little less).
"""
from __future__ import annotations

import math
import os
import zlib
from typing import Callable, Iterable, Iterator

import apache_beam as beam
from apache_beam.coders import FastPrimitivesCoder

from pipelines.transforms.stats import STATS, CountingDoFn
from pipelines.transforms.write import stable_shard

DEFAULT_MAX_GROUP = 10_000


def salts_needed(requests: int, max_group: int) -> int:
    """Sub-keys for a key with ``requests`` requests (1 when it fits one group).

    A split key's sub-groups average 80% of ``max_group``: headroom for the uneven spread of a hash
    (measured with 1 sub-key per 100%: 2,036 requests in a group bounded at 2,000).
    """
    if requests <= max_group:
        return 1
    return math.ceil(requests * 5 / (4 * max_group))


# One request in this many is encoded to estimate a join's shuffled bytes. Benchmarks set
# WIKIEDM_JOIN_BYTES_SAMPLE=1 to encode every request: exact bytes, at some CPU (a small dump's
# few large pages make a 1-in-16 sample noisy).
BYTES_SAMPLE = max(1, int(os.environ.get("WIKIEDM_JOIN_BYTES_SAMPLE", "16")))
_CODER = FastPrimitivesCoder()  # what Beam uses for these untyped (key, value) elements


def in_bytes_sample(key) -> bool:
    """Is a request with this salt key (a page id, a title) in the 1-in-``BYTES_SAMPLE`` byte sample?
    Decided by the key's value alone (no per-process hash seed): the same on every worker."""
    if isinstance(key, int):
        # Fibonacci hashing (ids k, k+span, ... spread); the top bits pick the sample (>> 28 for 16).
        return ((key * 0x9E3779B1) & 0xFFFFFFFF) * BYTES_SAMPLE >> 32 == 0
    return zlib.crc32(str(key).encode("utf-8")) % BYTES_SAMPLE == 0


def encoded_size(value) -> int:
    return len(_CODER.encode(value))


class GroupJoinFn(CountingDoFn):
    """Base of the DoFn that consumes one (sub-)group of a LookupJoin.

    Subclasses implement ``join(key, salt, values, requests)`` and yield
    outputs; ``values`` is the (short) sorted list of table values of the key,
    ``requests`` an iterator over this sub-group's requests. ``join_name``
    names the ``largest_group/`` and ``volume/`` counters.
    """

    join_name = "Join"
    sample_key: Callable | None = None  # set by LookupJoin: a request's salt key, for the byte sample

    def join(self, key, salt: int, values: list, requests: Iterator) -> Iterable:
        raise NotImplementedError

    def process(self, element):
        (key, salt), tagged = element
        table, requests = [], []
        for tag, value in tagged:  # one pass over the group, as CoGroupByKey would, without its extra steps
            if tag == REQUEST:
                requests.append(value)
            elif tag == REQUESTS:
                requests.extend(value)
            else:
                table.append(value)
        name = self.join_name
        self.count(f"volume/{name}/table", len(table))
        if table:
            self.count(f"volume/{name}/table_bytes", sum(encoded_size(((key, salt), (TABLE, v))) for v in table))
        if requests:  # else: a table value nobody asked for (or a copy for an empty sub-key)
            yield from self.join(key, salt, sorted(table), iter(requests))
            n = len(requests)
            self.count(f"volume/{name}/requests", n)
            self.observe_max(f"largest_group/{name}", n)
            if self.sample_key is not None:
                sample_key = self.sample_key
                sampled = sum(encoded_size(((key, salt), (REQUEST, r)))
                              for r in requests if in_bytes_sample(sample_key(r)))
                self.count(f"volume/{name}/request_bytes", sampled * BYTES_SAMPLE)


# The two sides of a join travel through one GroupByKey, each value tagged with its side (a
# small int, not CoGroupByKey's tag string and its per-element tagging and regrouping steps);
# REQUESTS tags a batch of requests of one key.
TABLE, REQUEST, REQUESTS = 0, 1, 2


def _tag_request(kv):
    key, request = kv
    return key, (REQUEST, request)


def _tag_request_batch(kv):
    key, batch = kv
    return key, (REQUESTS, tuple(batch))


def _batch_size(kv):
    return kv[0], len(kv[1])


def _tag_table_value(kv):
    key, value = kv
    return key, (TABLE, value)


def _salt(kv, heavy: dict, salt_key: Callable, _none=object()):
    """(key, (side, value)) -> its salted sub-key(s): a request goes to one sub-key of a heavy key
    (by the stable hash of its salt key), a table value is copied to all of them."""
    key, tagged = kv
    salts = heavy.get(key, _none)
    if salts is _none:
        return (((key, 0), tagged),)
    tag = tagged[0]
    if tag == TABLE:
        return tuple(((key, salt), tagged) for salt in range(salts))
    if tag == REQUESTS:  # split the batch: each request goes where it would go alone
        by_salt: dict[int, list] = {}
        for request in tagged[1]:
            by_salt.setdefault(stable_shard(str(salt_key(request)), salts), []).append(request)
        return tuple(((key, salt), (REQUESTS, tuple(part))) for salt, part in sorted(by_salt.items()))
    return (((key, stable_shard(str(salt_key(tagged[1])), salts)), tagged),)


class LookupJoin(beam.PTransform):
    """{"requests": (key, request), "table": (key, value)[, "request_batches": (key, (request, ...)),
    "request_counts": (key, n)]} -> the outputs of ``join_fn`` applied to every bounded (sub-)group.

    ``requests`` may be a tuple of PCollections (several sources of requests, flattened here
    with the table in one step), or empty when ``request_batches`` brings them all.
    ``salt_key(request)`` picks the sub-group of a request of a heavy key.
    ``request_counts``, when given, are upper bounds of the requests per key
    that the job has already counted (e.g. links per entity); otherwise they
    are counted here. ``outputs`` are the extra tagged outputs of
    ``join_fn`` (its stats output is always there).
    """

    def __init__(self, join_fn: GroupJoinFn, salt_key: Callable, max_group: int = DEFAULT_MAX_GROUP,
                 outputs: tuple[str, ...] = (), main: str = "main") -> None:
        super().__init__()
        if max_group < 1:
            raise ValueError(f"max_group must be >= 1, got {max_group}")
        self.join_fn = join_fn
        join_fn.sample_key = salt_key
        self.salt_key = salt_key
        self.max_group = max_group
        self.outputs = outputs
        self.main = main

    def expand(self, inputs):
        requests, table = inputs.get("requests", ()), inputs["table"]
        parts = tuple(requests) if isinstance(requests, (tuple, list)) else (requests,)  # several request sources
        batches = inputs.get("request_batches")
        batch_parts = tuple(batches) if isinstance(batches, (tuple, list)) else (batches,) if batches else ()
        if not parts and not batch_parts:
            raise ValueError("LookupJoin needs requests or request_batches")
        counts = inputs.get("request_counts")
        if counts is None:
            keyed = [part | (f"KeyOnly{i}" if i else "KeyOnly") >> beam.Map(lambda kv: (kv[0], 1))
                     for i, part in enumerate(parts)]
            keyed += [part | (f"BatchSize{i}" if i else "BatchSize") >> beam.Map(_batch_size)
                      for i, part in enumerate(batch_parts)]
            if len(keyed) > 1:
                keyed = [tuple(keyed) | "FlattenToCount" >> beam.Flatten()]
            counts = keyed[0] | "CountRequests" >> beam.CombinePerKey(sum)
        bound = self.max_group
        heavy = beam.pvalue.AsDict(
            counts
            | "HeavyKeys" >> beam.Filter(lambda kv: kv[1] > bound)
            | "SaltsPerHeavyKey" >> beam.Map(lambda kv: (kv[0], salts_needed(kv[1], bound)))
        )
        # Both sides are tagged where they are made (fused there), flattened, and salted after the
        # flatten: the salting waits for the heavy keys (a side input computed from the requests), so
        # the requests are buffered once, in the flatten, not once for the salting and again for it.
        # (The tagging step also keeps a table that feeds several joins, as the redirect table feeds
        # every hop, from being fused as a sibling of their side-input consumers: a DirectRunner deadlock.)
        tagged = [table | "TagTable" >> beam.Map(_tag_table_value)]
        tagged += [part | (f"TagRequests{i}" if i else "TagRequests") >> beam.Map(_tag_request)
                   for i, part in enumerate(parts)]
        tagged += [part | (f"TagRequestBatches{i}" if i else "TagRequestBatches") >> beam.Map(_tag_request_batch)
                   for i, part in enumerate(batch_parts)]
        return (
            tuple(tagged)
            | "FlattenSides" >> beam.Flatten()
            | "SaltKeys" >> beam.FlatMap(_salt, heavy=heavy, salt_key=self.salt_key)
            | "GroupBySaltedKey" >> beam.GroupByKey()
            | "JoinGroups" >> beam.ParDo(self.join_fn).with_outputs(STATS, *self.outputs, main=self.main)
        )
