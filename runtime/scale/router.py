"""Prefix-cache affinity as a Ray Serve request router, load-aware like SGLang's cache-aware router
and ray.serve.llm's PrefixCacheAffinityRouter: a request goes to the replica holding the longest
prefix of its prompt in its engine's prefix cache, unless that replica's load exceeds the
least-loaded replica's by more than `imbalance`; then the least-loaded replica takes it.

Two things make this hold when many requests arrive at once, where the first version failed
(16 chats sharing a system prompt all landed on one replica, docs/BENCHMARKS.md):
* Load is counted here, synchronously, as each request is placed (`Ledger`): Ray's queue-length
  cache is refreshed by probes that all the concurrent routing tasks await together, so every one
  of them saw the same stale loads and picked the same replica.
* A prefix is recorded as held by a replica the moment a request carrying it is placed there, and a
  prefix nobody holds goes to one replica chosen by rendezvous hashing of its first key: requests
  of a new family arriving together share one replica's prefill instead of each replica paying it.

The same policy as ray.serve.llm's router, which does not import without pyarrow (ray[llm]); this
one keeps its prefix index in the router itself (one per ingress replica: `llmpack serve --ray`
runs one ingress) instead of in a detached actor. Ray then picks the least-loaded replica of each
rank this router returns and retries with backoff when all are full.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter, OrderedDict
from typing import Any, Hashable, Optional

from ray.serve._private.request_router.pow_2_router import PowerOfTwoChoicesRequestRouter   # pinned ray 2.60.0
from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

logger = logging.getLogger("ray.serve")

IMBALANCE = 4             # requests more than the least-loaded replica that forfeit affinity (launch.py
                          # passes the replicas' slots instead: a full batch)
MAX_KEYS_PER_REPLICA = 50_000
RESERVATION_S = 60.0      # a placement Ray never confirmed (the request was cancelled while routed) is dropped


def prefix_keys_of(pending: Optional[PendingRequest]) -> list[str]:
    """The HttpCall's prefix keys (bridge.prefix_keys), or [] for a call without them."""
    if pending is None or not pending.args:
        return []
    return list(getattr(pending.args[0], "prefix_keys", None) or [])


def holders(keys: list[str], index: dict[Any, "OrderedDict[str, None]"], candidates: list[Any]) -> tuple[list[Any], int]:
    """(the candidates whose index holds the longest run of `keys` from the start, that length)."""
    best, best_len = [], 0
    for cand in candidates:
        seen = index.get(cand)
        n = 0
        while seen and n < len(keys) and keys[n] in seen:
            n += 1
        if n and n > best_len:
            best, best_len = [cand], n
        elif n and n == best_len:
            best.append(cand)
    return best, best_len


def best_match(keys: list[str], index: dict[Any, "OrderedDict[str, None]"], candidates: list[Any]) -> tuple[Any, int]:
    """(the first candidate holding the longest run of `keys`, that length); (None, 0) for none."""
    found, n = holders(keys, index, candidates)
    return (found[0] if found else None), n


def rendezvous(key: str, candidates: list[Any]) -> Any:
    """The candidate a prefix nobody holds belongs to: the same one for every request (and every
    ingress) that carries it, and a different one for different prefixes, spread evenly."""
    return max(candidates, key=lambda c: hashlib.blake2b(f"{key}|{c}".encode(), digest_size=8).digest())


def choose(keys: list[str], loads: dict[Hashable, int], index: dict[Any, "OrderedDict[str, None]"],
           imbalance: int = IMBALANCE, kv: Optional[dict[Hashable, float]] = None) -> Hashable:
    """The policy. `loads`: each live replica's requests in flight. Among the replicas within
    `imbalance` of the least-loaded one: the one holding the longest prefix of `keys`; of several,
    the prefix's home (its rendezvous replica), so that a family stays together up to the
    imbalance instead of evening out over every replica it once spilled to, else the least loaded
    of them. A prefix no such replica holds goes to its home among them; a request without one (or
    whose holders are all too busy) to the least loaded, fewest KV blocks in use among equals."""
    least = min(loads.values())
    near = [r for r in loads if loads[r] - least <= imbalance]
    if keys:
        home = rendezvous(keys[0], list(loads))
        found, _ = holders(keys, index, near)
        if found:
            return home if home in found else min(found, key=lambda r: loads[r])
        if not holders(keys[:1], index, list(loads))[0]:
            return home if home in near else rendezvous(keys[0], near)   # a new prefix: one replica for all
    kv = kv or {}
    return min((r for r in loads if loads[r] == least), key=lambda r: (kv.get(r, 0.0), len(index.get(r, ())), str(r)))


def remember(index: dict[Any, "OrderedDict[str, None]"], replica: Any, keys: list[str],
             cap: int = MAX_KEYS_PER_REPLICA) -> None:
    """Record that `replica` now holds these prefixes (most recent last; the oldest forgotten past `cap`)."""
    seen = index.setdefault(replica, OrderedDict())
    for key in keys:
        seen[key] = None
        seen.move_to_end(key)
    while len(seen) > cap:
        seen.popitem(last=False)


class Ledger:
    """Requests in flight per replica as this router placed them: +1 when placed (before Ray sends
    it), moved when Ray sent it elsewhere, -1 when Ray reports it completed."""

    def __init__(self) -> None:
        self.count: Counter = Counter()
        self.where: dict[str, tuple[Any, float]] = {}   # request id -> (replica, placed at)

    def place(self, request: str, replica: Any) -> None:
        self.drop(request)
        self.where[request] = (replica, time.monotonic())
        self.count[replica] += 1

    def drop(self, request: str) -> None:
        old = self.where.pop(request, None)
        if old is not None:
            self.count[old[0]] = max(0, self.count[old[0]] - 1)

    def expire(self, confirmed: set[str], now: float) -> None:
        for request, (_, at) in list(self.where.items()):
            if request not in confirmed and now - at > RESERVATION_S:
                self.drop(request)


class PrefixAffinityRouter(RequestRouter):
    """Ray Serve RequestRouter: prefix-cache affinity, falling back to the least-loaded replica."""

    def initialize_state(self, imbalance: int = IMBALANCE, **_: Any) -> None:
        self._imbalance = imbalance
        self._index: dict[ReplicaID, OrderedDict[str, None]] = {}
        self._ledger = Ledger()
        self._sent: set[str] = set()

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if target_of(pending_request):
            return targeted(candidate_replicas, pending_request)
        if len(candidate_replicas) == 1:
            return [candidate_replicas]
        try:
            return await self._affinity(candidate_replicas, pending_request)
        except Exception:  # noqa: BLE001 - Ray would retry a failing router forever: route, and say why
            logger.exception("llmpack's prefix-affinity router failed; this request goes to any replica")
            return [candidate_replicas]

    async def _affinity(self, candidate_replicas: list[RunningReplica],
                        pending_request: Optional[PendingRequest]) -> list[list[RunningReplica]]:
        by_id = {r.replica_id: r for r in candidate_replicas}
        ray_loads = await self._ray_loads(candidate_replicas)
        # from here on nothing awaits: the decision and its reservation are one step of the event loop
        self._ledger.expire(self._sent, time.monotonic())
        loads = {rid: max(self._ledger.count[rid], ray_loads.get(rid) or 0) for rid in by_id}
        keys = prefix_keys_of(pending_request)
        chosen = choose(keys, loads, self._index, self._imbalance,
                        {rid: kv_used(r) for rid, r in by_id.items()})
        request = _request_id(pending_request)
        if request:
            self._ledger.place(request, chosen)
        if keys:
            remember(self._index, chosen, keys)
        return [[by_id[chosen]], [r for r in candidate_replicas if r.replica_id != chosen]]

    async def _ray_loads(self, replicas: list[RunningReplica]) -> dict[ReplicaID, int | None]:
        """Ray's view of each replica's ongoing requests (it counts those other ingresses sent too):
        its cache, probing replicas it has no entry for, else what the engine reported last."""
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
        request = _request_id(pending_request)
        if request:
            self._sent.add(request)
            if self._ledger.where.get(request, (replica_id,))[0] != replica_id:
                self._ledger.place(request, replica_id)   # Ray sent it to another rank's replica
        keys = prefix_keys_of(pending_request)
        if keys:
            remember(self._index, replica_id, keys)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._sent.discard(internal_request_id)
        self._ledger.drop(internal_request_id)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        self._index.pop(replica_id, None)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for gone in [rid for rid in self._index if rid not in live]:
            del self._index[gone]


class PowerOfTwoRouter(PowerOfTwoChoicesRequestRouter):
    """Ray Serve's default policy (power of two choices), honouring HttpCall.replica as the
    prefix router does: `--router pow2` keeps /health and /metrics of every replica."""

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: Optional[PendingRequest] = None) -> list[list[RunningReplica]]:
        if target_of(pending_request):
            return targeted(candidate_replicas, pending_request)
        return await super().choose_replicas(candidate_replicas, pending_request)


def target_of(pending: Optional[PendingRequest]) -> str:
    """The replica a call names (HttpCall.replica), or ""."""
    return getattr(pending.args[0], "replica", "") if pending is not None and pending.args else ""


def targeted(candidates: list[RunningReplica], pending: Optional[PendingRequest]) -> list[list[RunningReplica]]:
    """Only the named replica; none while it is not running (Ray waits; the ingress gives up on it)."""
    want = target_of(pending)
    return [[r for r in candidates if r.replica_id.unique_id == want]]


def _request_id(pending: Optional[PendingRequest]) -> str:
    return getattr(getattr(pending, "metadata", None), "internal_request_id", "") if pending is not None else ""


def kv_used(replica: Any) -> float:
    """The share of a replica's KV blocks in use, from the stats it last reported (0 before any)."""
    stats = getattr(replica, "routing_stats", None) or {}
    total = stats.get("kv_blocks_total") or 0
    return (stats.get("kv_blocks_used") or 0) / total if total else 0.0
