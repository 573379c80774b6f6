"""The prefix-affinity policy of `serve --ray` (runtime/scale/router.py) on its own: requests
placed one after another as Ray's routing tasks place them when many arrive at once."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from needs import skip_or_fail

try:
    from llmpack.runtime.scale.router import IMBALANCE, Ledger, best_match, choose, kv_used, remember
except ImportError:
    skip_or_fail("ray[serve] is not installed (pip install 'llmpack[ray]')", module=True)

from llmpack.runtime.scale.bridge import prefix_keys

SYSTEM = "You are the ship's navigator. " + " ".join(f"Rule {i}: keep bearing {i * 7 % 360}." for i in range(80))


def place(ledger: Ledger, index: dict, keys: list[str], request: str, replicas=("a", "b")) -> str:
    """What PrefixAffinityRouter.choose_replicas does with one request, without Ray."""
    chosen = choose(keys, {r: ledger.count[r] for r in replicas}, index)
    ledger.place(request, chosen)
    remember(index, chosen, keys)
    return chosen


def test_sixteen_chats_arriving_at_once_fill_one_replica_up_to_the_imbalance_then_spill():
    ledger, index = Ledger(), {}
    placed = [place(ledger, index, prefix_keys(SYSTEM + f"<user>question {i}"), f"r{i}") for i in range(16)]
    counts = Counter(placed)
    assert sorted(counts.values()) == [(16 - IMBALANCE) // 2, (16 + IMBALANCE) // 2], counts
    first = placed[0]
    assert placed[:IMBALANCE + 1] == [first] * (IMBALANCE + 1)   # the family stays together while it may
    # the holder's requests finish: the next chat of the family goes back to it
    for i, where in enumerate(placed):
        ledger.drop(f"r{i}")
    assert place(ledger, index, prefix_keys(SYSTEM + "<user>later"), "late") == first


def test_a_new_prefix_goes_to_the_same_replica_whoever_routes_it_and_families_spread():
    families = [prefix_keys(f"Family {n}. " * 60) for n in range(24)]
    first = [choose(keys, {"a": 0, "b": 0}, {}) for keys in families]
    again = [choose(keys, {"b": 0, "a": 0}, {}) for keys in families]
    assert first == again                               # a second ingress, with no shared state, agrees
    assert 6 <= first.count("a") <= 18, first           # different prompts spread over the replicas


def test_a_busy_holder_loses_the_request_to_the_least_loaded_and_the_longest_prefix_wins():
    keys = prefix_keys(SYSTEM)
    index: dict = {}
    remember(index, "a", keys)
    assert choose(keys, {"a": IMBALANCE, "b": 0}, index) == "a"
    assert choose(keys, {"a": IMBALANCE + 1, "b": 0}, index) == "b"
    remember(index, "b", keys[:2])
    assert choose(keys, {"a": 1, "b": 0}, index) == "a"                 # a holds more of it
    assert choose([], {"a": 1, "b": 0, "c": 0}, index, kv={"b": 0.5}) == "c"   # no prompt: least loaded, least KV


def test_the_ledger_follows_requests_ray_moved_or_never_sent():
    ledger = Ledger()
    ledger.place("x", "a")
    ledger.place("x", "b")                             # Ray sent it to the other rank
    assert ledger.count == Counter({"a": 0, "b": 1})
    ledger.expire(confirmed=set(), now=ledger.where["x"][1] + 1e6)   # routed, then cancelled: never sent
    assert ledger.count["b"] == 0 and not ledger.where


def test_the_index_prefers_the_longest_held_prefix_and_forgets_the_oldest():
    index: dict = {}
    remember(index, "a", ["k1", "k2"])
    remember(index, "b", ["k1", "k2", "k3"])
    assert best_match(["k1", "k2", "k3", "k4"], index, ["a", "b"]) == ("b", 3)
    assert best_match(["k1", "x"], index, ["a", "b"])[1] == 1
    assert best_match(["x"], index, ["a", "b"]) == (None, 0)
    assert best_match(["k1"], index, ["c"]) == (None, 0)           # only live candidates count
    remember(index, "a", ["k9", "k8"], cap=3)                      # a now holds k2, k9, k8: k1 forgotten
    assert best_match(["k1", "k2"], index, ["a"]) == (None, 0)
    assert kv_used(SimpleNamespace(routing_stats={"kv_blocks_used": 32, "kv_blocks_total": 128})) == 0.25
    assert kv_used(SimpleNamespace(routing_stats={})) == 0.0
