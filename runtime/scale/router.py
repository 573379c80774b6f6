"""Prefix-cache affinity as a Ray Serve request router: a request goes to the replica that most
recently served the longest prefix of its prompt (whose engine therefore holds those KV blocks
in its prefix cache), unless that replica is busier than the least-loaded one by more than
`imbalance`, in which case, and for a prompt no replica has seen, the least-loaded replica takes it.

The same policy as ray.serve.llm's PrefixCacheAffinityRouter, which does not import without
pyarrow (ray[llm]); this one keeps its prefix index in the router itself (one per ingress
replica: `llmpack serve --ray` runs one ingress) instead of in a detached actor. Queue lengths
are Ray Serve's own (its cache, probing the replicas when the cache has no entry); Ray then picks
the least-loaded replica of each rank this router returns and retries with backoff when all are full.
"""
from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any, Optional

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

IMBALANCE = 4             # queued requests more than the least-loaded replica that forfeit affinity
MAX_KEYS_PER_REPLICA = 50_000


def prefix_keys_of(pending: Optional[PendingRequest]) -> list[str]:
    """The HttpCall's prefix keys (bridge.prefix_keys), or [] for a call without them."""
    if pending is None or not pending.args:
        return []
    return list(getattr(pending.args[0], "prefix_keys", None) or [])


def best_match(keys: list[str], index: dict[Any, "OrderedDict[str, None]"], candidates: list[Any]) -> tuple[Any, int]:
    """(the candidate whose index holds the longest run of `keys` from the start, that length)."""
    best, best_len = None, 0
    for cand in candidates:
        seen = index.get(cand)
        if not seen:
            continue
        n = 0
        while n < len(keys) and keys[n] in seen:
            n += 1
        if n > best_len:
            best, best_len = cand, n
    return best, best_len


def kv_used(replica: Any) -> float:
    """The share of a replica's KV blocks in use, from the stats it last reported (0 before any)."""
    stats = getattr(replica, "routing_stats", None) or {}
    total = stats.get("kv_blocks_total") or 0
    return (stats.get("kv_blocks_used") or 0) / total if total else 0.0


def remember(index: dict[Any, "OrderedDict[str, None]"], replica: Any, keys: list[str],
             cap: int = MAX_KEYS_PER_REPLICA) -> None:
    """Record that `replica` now holds these prefixes (most recent last; the oldest forgotten past `cap`)."""
    seen = index.setdefault(replica, OrderedDict())
    for key in keys:
        seen[key] = None
        seen.move_to_end(key)
    while len(seen) > cap:
        seen.popitem(last=False)


class PrefixAffinityRouter(RequestRouter):
    """Ray Serve RequestRouter: prefix-cache affinity, falling back to the least-loaded replica."""

    def initialize_state(self, imbalance: int = IMBALANCE, **_: Any) -> None:
        self._imbalance = imbalance
        self._index: dict[ReplicaID, OrderedDict[str, None]] = {}

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if len(candidate_replicas) == 1:
            return [candidate_replicas]
        keys = prefix_keys_of(pending_request)
        by_id = {r.replica_id: r for r in candidate_replicas}
        loads = await self._loads(candidate_replicas)
        known = {rid: q for rid, q in loads.items() if q is not None}
        if not known:
            return [candidate_replicas]            # nothing answered: Ray probes again, with backoff
        least = min(known.values())
        best, _ = best_match(keys, self._index, list(by_id)) if keys else (None, 0)
        if best is not None and best in known and known[best] - least <= self._imbalance:
            chosen = best                          # it holds the prefix, and is not much busier
        else:   # the least-loaded; among equals the one with the least KV in use (its engine's own count,
            # LlmpackReplica.record_routing_stats), then the one holding the fewest prefixes, so that
            # different prompt families spread over the replicas instead of piling on the first
            chosen = min(known, key=lambda rid: (known[rid], kv_used(by_id[rid]), len(self._index.get(rid, ())),
                                                 random.random()))
        return [[by_id[chosen]], [r for r in candidate_replicas if r.replica_id != chosen]]

    async def _loads(self, replicas: list[RunningReplica]) -> dict[ReplicaID, int | None]:
        """Each replica's ongoing requests: Ray's cache, probing those it has no entry for, and for a
        replica whose probe did not answer in time, what its engine reported last (record_routing_stats)."""
        loads: dict[ReplicaID, int | None] = {}
        missing = []
        for r in replicas:
            q = self._replica_queue_len_cache.get(r.replica_id) if self._use_replica_queue_len_cache else None
            if q is None:
                missing.append(r)
            loads[r.replica_id] = q
        if missing:
            for r, q in await self._probe_queue_lens(missing, 0):
                loads[r.replica_id] = q
        for r in replicas:   # a probe can miss its short deadline on a busy node: the engine's last report
            stats = r.routing_stats or {}
            if loads[r.replica_id] is None and "num_running" in stats:
                loads[r.replica_id] = stats["num_running"] + stats.get("num_waiting", 0)
        return loads

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        keys = prefix_keys_of(pending_request)
        if keys:
            remember(self._index, replica_id, keys)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._index.pop(replica_id, None)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for gone in [rid for rid in self._index if rid not in live]:
            del self._index[gone]
