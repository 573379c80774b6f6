"""Block-manager rules on their own, with a recorder standing in for llama.cpp's memory.
(The engine tests check the same bookkeeping against the real llama.cpp memory.)"""
from __future__ import annotations

import pytest

from llmpack.runtime.engine.block_manager import BlockManager
from llmpack.runtime.engine.detokenizer import Detokenizer
from llmpack.runtime.engine.sampling_params import SamplingParams
from llmpack.runtime.engine.sequence import Sequence


class RecordingKV:
    """Tracks which positions each llama.cpp sequence id holds, like llama_memory_seq_*."""

    def __init__(self) -> None:
        self.pos: dict[int, set[int]] = {}

    def seq_rm(self, s, p0, p1):
        held = self.pos.setdefault(s, set())
        self.pos[s] = {p for p in held if not ((p0 < 0 or p >= p0) and (p1 < 0 or p < p1))}

    def seq_cp(self, src, dst, p0, p1):
        self.pos.setdefault(dst, set()).update(p for p in self.pos.get(src, ()) if p0 <= p < p1)

    def seq_pos_max(self, s):
        return max(self.pos.get(s) or {-1})

    def compute(self, seq: Sequence, n: int) -> None:
        self.pos.setdefault(seq.llama_seq, set()).update(range(seq.num_computed_tokens, seq.num_computed_tokens + n))
        seq.num_computed_tokens += n


def make_seq(tokens: list[int], salt: str | None = None) -> Sequence:
    return Sequence(request=None, index=0, token_ids=list(tokens), num_prompt_tokens=len(tokens),
                    sampler=None, detok=Detokenizer([]), cache_salt=salt)


def admit(bm: BlockManager, kv: RecordingKV, seq: Sequence) -> None:
    assert bm.assign_llama_seq(seq)
    hits = bm.match_prefix(seq)
    n = seq.num_tokens - len(hits) * bm.block_size
    assert bm.allocate(seq, hits, n)
    kv.compute(seq, n)
    bm.commit(seq)


def test_blocks_are_allocated_on_demand_and_freed_at_the_end():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=8, block_size=4, num_llama_seqs=4, kv=kv, enable_prefix_cache=False)
    seq = make_seq(range(10))
    admit(bm, kv, seq)
    assert len(seq.block_table) == 3 and bm.num_used_blocks == 3
    assert bm.allocate(seq, [], 2)            # tokens 10, 11 fit in block 3
    assert len(seq.block_table) == 3
    assert bm.allocate(seq, [], 3)            # ...and 12 needs a fourth
    assert len(seq.block_table) == 4
    sid = seq.llama_seq
    bm.free(seq)
    assert bm.num_free_blocks == 8 and kv.seq_pos_max(sid) == -1


def test_allocation_that_does_not_fit_changes_nothing():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=2, block_size=4, num_llama_seqs=4, kv=kv)
    seq = make_seq(range(12))
    assert bm.assign_llama_seq(seq)
    assert not bm.allocate(seq, [], 12)
    assert bm.num_free_blocks == 2 and seq.block_table == []


def test_prefix_cache_reuses_full_blocks_and_shares_cells():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=4, kv=kv)
    first = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    admit(bm, kv, first)
    bm.free(first)                             # blocks 0 and 1 stay cached under a parked id
    assert bm.num_used_blocks == 0 and bm.num_cached_blocks == 2 and bm.parked_ids
    second = make_seq([1, 2, 3, 4, 5, 6, 7, 8, 99])
    assert bm.assign_llama_seq(second)
    hits = bm.match_prefix(second)
    assert len(hits) == 2
    assert bm.allocate(second, hits, 1)
    bm.note_lookup(second, len(hits))
    assert second.num_computed_tokens == 8 and second.num_cached_tokens == 8
    assert (bm.prefix_queries, bm.prefix_hits) == (9, 8)
    assert kv.pos[second.llama_seq] == set(range(8))   # shared through seq_cp
    assert bm.blocks[hits[0]].ref_count == 1 and bm.blocks[hits[0]] not in bm.free_queue


def test_hash_chain_depends_on_the_whole_prefix():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=4, kv=kv)
    admit(bm, kv, make_seq([1, 2, 3, 4, 5, 6, 7, 8, 0]))
    other = make_seq([9, 9, 9, 9, 5, 6, 7, 8, 0])      # same second block, different first
    assert bm.match_prefix(other) == []


def test_a_prefix_whose_python_hash_collides_cannot_borrow_another_prefix_blocks():
    """The attack of vLLM GHSA-rm76-4mrf-v9r8: the attacker's first block differs from the
    victim's but its chained key collides, so the attacker's *second* block - computed on top
    of the attacker's text - gets registered under the key of the victim's prefix + that
    block, and a later victim prompt reuses those poisoned KV cells. Here the collision comes
    from CPython's hash(-1) == hash(-2); with a 64-bit key a real attacker finds one by search."""
    assert hash((None, (-1,) * 4)) == hash((None, (-2,) * 4))   # what the old key was built from
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=4, kv=kv)
    victim_prefix, attacker_prefix, shared = [-2] * 4, [-1] * 4, [7, 8, 9, 10]
    admit(bm, kv, make_seq(victim_prefix + [0]))                      # caches the victim's block 0
    attacker = make_seq(attacker_prefix + shared + [0])
    admit(bm, kv, attacker)                                           # caches shared-on-attacker
    victim = make_seq(victim_prefix + shared + [0])
    hits = bm.match_prefix(victim)
    assert attacker.block_table[1] not in hits, "the victim would run on KV computed from the attacker's prompt"
    assert len(hits) == 1


def test_unreferenced_cached_blocks_are_evicted_least_recently_used_first():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=4, block_size=4, num_llama_seqs=8, kv=kv)
    old, new = make_seq([1] * 8 + [0]), make_seq([2] * 8 + [0])
    admit(bm, kv, old)
    bm.free(old)
    admit(bm, kv, new)
    bm.free(new)
    big = make_seq([3] * 9)                               # needs 3 blocks: evicts old's two first
    admit(bm, kv, big)
    assert bm.match_prefix(make_seq([1] * 8 + [0])) == []
    assert len(bm.match_prefix(make_seq([2] * 8 + [0]))) == 1   # new's tail went, its head survives


def test_fork_shares_full_blocks_and_gives_the_child_its_own_partial_block():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=4, kv=kv)
    parent = make_seq(range(10))
    admit(bm, kv, parent)
    child = make_seq(range(10))
    assert bm.fork(parent, child)
    assert child.block_table[:2] == parent.block_table[:2]
    assert child.block_table[2] != parent.block_table[2]
    assert kv.pos[child.llama_seq] == set(range(10))
    assert bm.num_used_blocks == 4          # 3 for the prompt + 1 partial for the child, not 6
    bm.free(parent)
    bm.free(child)
    assert bm.num_used_blocks == 0


def test_reclaiming_a_parked_id_frees_its_cells():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=1, kv=kv)
    a = make_seq([1] * 8 + [0])
    admit(bm, kv, a)
    bm.free(a)
    assert bm.parked_ids                       # the only id holds the cached prefix
    b = make_seq([5] * 5)
    admit(bm, kv, b)                           # needs the id: the parked one is reclaimed
    assert kv.pos[b.llama_seq] == set(range(5))
    assert bm.match_prefix(make_seq([1] * 8 + [0])) == []     # a's cached blocks went with the id
    assert list(bm.idle_ids) == []             # reclaimed once, handed out once


def test_sequence_ids_are_never_handed_out_twice():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=64, block_size=4, num_llama_seqs=4, kv=kv)
    live = []
    for round_ in range(6):                    # cycles of parked ids with several cached blocks each
        for i in range(4):
            seq = make_seq([round_ * 10 + i] * 12 + [0])
            admit(bm, kv, seq)
            live.append(seq)
        ids = [s.llama_seq for s in live]
        assert len(set(ids)) == len(ids)
        for seq in live:
            bm.free(seq)
        live.clear()
        free = list(bm.idle_ids)
        assert len(free) == len(set(free)) and len(free) + len(bm.parked_ids) == 4


def test_free_queue_takes_uncached_blocks_first_then_cached_ones_least_recently_freed_first():
    from llmpack.runtime.engine.free_block_queue import Block, FreeBlockQueue

    blocks = [Block(i) for i in range(5)]
    q = FreeBlockQueue(blocks)
    taken = [q.popleft() for _ in range(5)]
    assert [b.block_id for b in taken] == [0, 1, 2, 3, 4] and len(q) == 0
    q.append(blocks[3])            # cached, freed first
    q.append(blocks[1])            # cached, freed later
    q.appendleft(blocks[4])        # caches nothing: reused before any cached block
    q.append(blocks[0])
    q.remove(blocks[1])            # a prefix hit takes it out of the middle
    assert [b.block_id for b in q] == [4, 3, 0] and blocks[1] not in q
    assert [q.popleft().block_id for _ in range(3)] == [4, 3, 0]
    with pytest.raises(IndexError):
        q.popleft()


def test_taking_a_cached_block_evicts_it_once_and_frees_the_parked_id():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=3, block_size=4, num_llama_seqs=2, kv=kv)
    old = make_seq([1] * 8 + [0])
    admit(bm, kv, old)
    sid = old.llama_seq
    bm.free(old)                               # [1]*4 and [1]*4 cached, the partial block freed
    assert sid in bm.parked_ids and bm.num_cached_blocks == 2
    big = make_seq([2] * 12)                   # 3 blocks: the free one, then both cached ones
    admit(bm, kv, big)
    assert bm.match_prefix(make_seq([1] * 8 + [0])) == [] and bm.num_cached_blocks == 3   # big's own now
    assert sid not in bm.parked_ids and kv.seq_pos_max(sid) == -1
    assert sid in bm.idle_ids and len(set(big.block_table)) == 3


def test_cache_salt_separates_prefix_cache_entries():
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=4, kv=kv)
    tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    alice = make_seq(tokens, salt="alice")
    admit(bm, kv, alice)
    assert len(bm.match_prefix(make_seq(tokens, salt="alice"))) == 2
    assert bm.match_prefix(make_seq(tokens, salt="bob")) == []
    assert bm.match_prefix(make_seq(tokens)) == []            # no salt is its own namespace too
    plain = make_seq(tokens)
    admit(bm, kv, plain)
    assert len(bm.match_prefix(make_seq(tokens))) == 2
    assert bm.match_prefix(make_seq(tokens, salt="")) == []    # an empty salt is still a salt


def test_detokenizer_holds_back_a_stop_string_split_across_pieces():
    d = Detokenizer(["STOP"])
    out = [d.add(b"Hello ST"), d.add(b"O"), d.add(b"P and more")]
    assert "".join(out) == "Hello " and d.stopped_by == "STOP"
    assert out[0] == "Hello "                  # "ST" was held back, never streamed


def test_detokenizer_releases_a_false_alarm():
    d = Detokenizer(["STOP"])
    assert d.add(b"a ST") == "a "
    assert d.add(b"ILL") == "STILL"


def test_detokenizer_never_emits_half_a_character():
    d = Detokenizer([])
    raw = "日本".encode()
    out = [d.add(raw[i:i + 1]) for i in range(len(raw))]
    assert out == ["", "", "日", "", "", "本"]


def test_sampling_params_reject_out_of_range_values():
    import pytest

    from llmpack.runtime.engine.sampling_params import InvalidParameterError

    for bad in (dict(temperature=-1), dict(top_p=0), dict(n=0), dict(max_tokens=0), dict(logprobs=99)):
        with pytest.raises(InvalidParameterError):
            SamplingParams(**bad)


def test_an_id_whose_cached_blocks_are_all_shared_is_reclaimed_for_a_new_sequence():
    """A parked id whose cached blocks a running sequence now holds too holds nothing of its own;
    a new sequence must still get it (this once left 64 streams waiting forever behind an engine
    that scheduled nothing: every id was parked)."""
    kv = RecordingKV()
    bm = BlockManager(num_blocks=16, block_size=4, num_llama_seqs=2, kv=kv)
    prompt = list(range(1, 10))
    first, second = make_seq(prompt), make_seq(prompt)
    admit(bm, kv, first)
    bm.free(first)                        # its id is parked, holding the cached prompt
    admit(bm, kv, second)                 # reads the cached blocks: both ids hold them
    assert not bm.idle_ids and bm.parked_ids
    third = make_seq([50, 51, 52, 53, 54])
    assert bm.assign_llama_seq(third)
    assert len(second.block_table) == 3 and kv.seq_pos_max(second.llama_seq) == 8   # the reader keeps its cells


def test_a_long_prefill_evicts_the_unreferenced_cache_and_keeps_its_own_hits():
    """llama.cpp attends over every cell up to the highest in use, so a long prompt pays for every
    cached cell: before a chunk of PREFILL_TRIM_TOKENS or more, unreferenced cached blocks go. A
    short chunk evicts nothing, and the long prompt's own hits (a person continuing their chat)
    are never among those evicted."""
    from llmpack.runtime.engine.block_manager import PREFILL_TRIM_TOKENS

    kv = RecordingKV()
    bm = BlockManager(num_blocks=64, block_size=16, num_llama_seqs=12, kv=kv)
    chats = [make_seq(range(1000 * i, 1000 * i + 129)) for i in range(4)]   # 8 full blocks each
    ids = []
    for seq in chats:
        admit(bm, kv, seq)
        ids.append(seq.llama_seq)
        bm.free(seq)
    cached = lambda: sum(1 for b in bm.free_queue if b.hash is not None)   # noqa: E731
    assert cached() == 32

    short = make_seq(range(9000, 9040))            # 40 new tokens: nothing evicted
    admit(bm, kv, short)
    assert cached() == 32

    again = make_seq(list(range(0, 129)) + list(range(5000, 5000 + PREFILL_TRIM_TOKENS)))   # chat 0, continued
    admit(bm, kv, again)
    assert cached() == 0                           # chats 1-3 evicted
    assert all(bm.blocks[b].hash is not None for b in again.block_table[:8])    # its own hits stay
    assert kv.seq_pos_max(again.llama_seq) >= 127
    for sid in ids[1:]:                            # their cells are gone, their ids free again
        assert kv.seq_pos_max(sid) == -1 and sid not in bm.parked_ids


def test_a_long_prompt_read_in_small_chunks_evicts_the_unreferenced_cache_too():
    """Beside decoding streams a document is read a few dozen tokens a step (issue 48's time-sized
    steps): what counts is the prompt left to read, not the chunk, or every cached document would
    stay in each later step's attention. A short prompt still evicts nothing."""
    from llmpack.runtime.engine.block_manager import PREFILL_TRIM_TOKENS

    kv = RecordingKV()
    bm = BlockManager(num_blocks=64, block_size=16, num_llama_seqs=12, kv=kv)
    for i in range(2):
        seq = make_seq(range(1000 * i, 1000 * i + 129))
        admit(bm, kv, seq)
        bm.free(seq)
    cached = lambda: sum(1 for b in bm.free_queue if b.hash is not None)   # noqa: E731
    assert cached() == 16
    question = make_seq(range(9000, 9000 + PREFILL_TRIM_TOKENS - 1))
    assert bm.assign_llama_seq(question) and bm.allocate(question, [], 40)
    assert cached() == 16                          # under PREFILL_TRIM_TOKENS in all: a chat's turn
    document = make_seq(range(7000, 7000 + 4 * PREFILL_TRIM_TOKENS))
    assert bm.assign_llama_seq(document) and bm.allocate(document, [], 40)
    assert cached() == 0                           # a 40-token chunk of a long prompt
