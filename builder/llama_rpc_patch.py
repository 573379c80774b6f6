"""llmpack's changes to llama.cpp's RPC backend (ggml-rpc), applied as exact text by
builder/llama_source.py to the Linux wheel and the Windows DLLs alike. Stdlib only: `./dev`
runs llama_source.py as a script before llmpack is installed.

**A shared key, proved both ways before any command.** ``ggml_backend_rpc_set_key`` (through
the RPC backend's proc-address table; runtime/hardware/rpc.py calls it in the head and in the
worker) holds the key. A worker with a key opens every connection with ``llmpkey1`` and a
32-byte random nonce; the head answers with its own nonce and HMAC-SHA256(key, "llmpack-rpc
head" || both nonces); the worker checks it (constant time) and answers HMAC(key, "llmpack-rpc
worker" || both nonces), which the head checks. Only then does llama.cpp's HELLO run. A wrong or
missing key closes the connection; a peer that says nothing is dropped after 10 s (the worker
serves one connection at a time). SHA-256 and HMAC are written here (FIPS 180-4, RFC 2104); the
nonces come from the OS (/dev/urandom, BCryptGenRandom).

**Upstream's later rpc-server fixes, redone for b11312** (docs/ARCHITECTURE.md lists the
advisories): a GRAPH_COMPUTE whose node is missing (id 0 or unknown) is refused; GET_ROWS,
SET_ROWS and SSM_SCAN nodes must have the shapes ggml's constructors assert (the CPU kernels only
assert() them, compiled out in release builds) and, where no node of the graph writes them, index
values inside the tensor they index (SSM_SCAN's ids always: its kernel checks nothing); a tensor
outside its buffer, a shape whose size overflows, an unknown op, a failed computation and a
message size past what a vector can hold (std::length_error) are refused instead of ending the
worker; COPY_TENSOR checks the destination with overflow-safe
arithmetic and the destination tensor's own size.

**The --cache entries are checked.** An entry is stored as HMAC-SHA256(key, content) followed by
the content (SHA-256 keyed with nothing when the worker has no key), written under a temporary
name and renamed; one whose tag does not match is deleted and treated as absent, so the head sends
the tensor again.
"""
from __future__ import annotations

RPC = "ggml/src/ggml-rpc/"

_SHA = r"""
// ---- llmpack: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and the key handshake -------------
namespace llmpack_rpc {

struct sha256 {
    uint32_t h[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                     0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    uint64_t length = 0;
    uint8_t  pending[64];
    size_t   n_pending = 0;

    static uint32_t rotr(uint32_t x, int r) { return (x >> r) | (x << (32 - r)); }

    void block(const uint8_t * p) {
        static const uint32_t k[64] = {
            0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
            0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
            0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
            0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
            0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
            0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
            0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
            0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u};
        uint32_t w[64];
        for (int i = 0; i < 16; i++) {
            w[i] = (uint32_t) p[4*i] << 24 | (uint32_t) p[4*i + 1] << 16 | (uint32_t) p[4*i + 2] << 8 | p[4*i + 3];
        }
        for (int i = 16; i < 64; i++) {
            const uint32_t s0 = rotr(w[i-15], 7) ^ rotr(w[i-15], 18) ^ (w[i-15] >> 3);
            const uint32_t s1 = rotr(w[i-2], 17) ^ rotr(w[i-2], 19) ^ (w[i-2] >> 10);
            w[i] = w[i-16] + s0 + w[i-7] + s1;
        }
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], x = h[7];
        for (int i = 0; i < 64; i++) {
            const uint32_t t1 = x + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            x = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += x;
    }

    void update(const void * data, size_t size) {
        const uint8_t * p = (const uint8_t *) data;
        length += size;
        while (size > 0) {
            if (n_pending == 0 && size >= 64) {
                block(p);
                p += 64;
                size -= 64;
                continue;
            }
            const size_t take = std::min(size, 64 - n_pending);
            memcpy(pending + n_pending, p, take);
            n_pending += take;
            p += take;
            size -= take;
            if (n_pending == 64) {
                block(pending);
                n_pending = 0;
            }
        }
    }

    void final(uint8_t out[32]) {
        const uint64_t bits = length * 8;
        const uint8_t one = 0x80, zero = 0;
        update(&one, 1);
        while (n_pending != 56) {
            update(&zero, 1);
        }
        uint8_t be[8];
        for (int i = 0; i < 8; i++) {
            be[i] = (uint8_t) (bits >> (56 - 8*i));
        }
        update(be, 8);
        for (int i = 0; i < 8; i++) {
            out[4*i] = (uint8_t) (h[i] >> 24); out[4*i + 1] = (uint8_t) (h[i] >> 16);
            out[4*i + 2] = (uint8_t) (h[i] >> 8); out[4*i + 3] = (uint8_t) h[i];
        }
    }
};

struct hmac_sha256 {
    sha256 inner, outer;

    hmac_sha256(const uint8_t * key, size_t key_len) {
        uint8_t k[64] = {0};
        if (key_len > 64) {
            sha256 s;
            s.update(key, key_len);
            s.final(k);
        } else if (key_len > 0) {
            memcpy(k, key, key_len);
        }
        uint8_t pad[64];
        for (int i = 0; i < 64; i++) { pad[i] = k[i] ^ 0x36; }
        inner.update(pad, 64);
        for (int i = 0; i < 64; i++) { pad[i] = k[i] ^ 0x5c; }
        outer.update(pad, 64);
    }
    void update(const void * data, size_t size) { inner.update(data, size); }
    void final(uint8_t out[32]) {
        uint8_t digest[32];
        inner.final(digest);
        outer.update(digest, 32);
        outer.final(out);
    }
};

static const char   AUTH_MAGIC[8] = {'l', 'l', 'm', 'p', 'k', 'e', 'y', '1'};
static const size_t NONCE = 32, TAG = 32;
static const int    AUTH_TIMEOUT_MS = 10000;   // a peer that says nothing must not hold the worker

static std::mutex           key_mutex;
static std::vector<uint8_t> key_bytes;   // empty: no key (llama.cpp's own behaviour)

static void set_key(const void * key, size_t len) {
    std::lock_guard<std::mutex> lock(key_mutex);
    if (key == nullptr || len > 4096) {
        key_bytes.clear();
        return;
    }
    key_bytes.assign((const uint8_t *) key, (const uint8_t *) key + len);
}

static std::vector<uint8_t> get_key() {
    std::lock_guard<std::mutex> lock(key_mutex);
    return key_bytes;
}

static void tag(const std::vector<uint8_t> & key, const char * label, const uint8_t * worker_nonce,
                const uint8_t * head_nonce, uint8_t out[32]) {
    hmac_sha256 mac(key.data(), key.size());
    mac.update(label, strlen(label) + 1);
    mac.update(worker_nonce, NONCE);
    mac.update(head_nonce, NONCE);
    mac.final(out);
}

static bool same(const uint8_t * a, const uint8_t * b, size_t n) {
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++) {
        diff |= a[i] ^ b[i];
    }
    return diff == 0;
}

// worker: the connection's first bytes; false closes it before any command is read
static bool check_head(const socket_ptr & sock) {
    const std::vector<uint8_t> key = get_key();
    if (key.empty()) {
        return true;
    }
    uint8_t challenge[sizeof(AUTH_MAGIC) + NONCE];
    uint8_t answer[NONCE + TAG], expect[TAG], proof[TAG];
    memcpy(challenge, AUTH_MAGIC, sizeof(AUTH_MAGIC));
    if (!rpc_random_bytes(challenge + sizeof(AUTH_MAGIC), NONCE)) {
        return false;
    }
    sock->set_recv_timeout(AUTH_TIMEOUT_MS);
    if (!sock->send_data(challenge, sizeof(challenge)) || !sock->flush() || !sock->recv_data(answer, sizeof(answer))) {
        return false;
    }
    tag(key, "llmpack-rpc head", challenge + sizeof(AUTH_MAGIC), answer, expect);
    if (!same(expect, answer + NONCE, TAG)) {
        return false;
    }
    tag(key, "llmpack-rpc worker", challenge + sizeof(AUTH_MAGIC), answer, proof);
    if (!sock->send_data(proof, TAG) || !sock->flush()) {
        return false;
    }
    return sock->set_recv_timeout(0);
}

// head: before HELLO; false when the worker asks no key, asks another one, or does not prove it
static bool prove_to_worker(const socket_ptr & sock) {
    const std::vector<uint8_t> key = get_key();
    if (key.empty()) {
        return true;
    }
    uint8_t challenge[sizeof(AUTH_MAGIC) + NONCE];
    uint8_t answer[NONCE + TAG], expect[TAG], proof[TAG];
    sock->set_recv_timeout(AUTH_TIMEOUT_MS);
    if (!sock->recv_data(challenge, sizeof(challenge)) || memcmp(challenge, AUTH_MAGIC, sizeof(AUTH_MAGIC)) != 0) {
        return false;
    }
    if (!rpc_random_bytes(answer, NONCE)) {
        return false;
    }
    tag(key, "llmpack-rpc head", challenge + sizeof(AUTH_MAGIC), answer, answer + NONCE);
    if (!sock->send_data(answer, sizeof(answer)) || !sock->flush() || !sock->recv_data(proof, TAG)) {
        return false;
    }
    tag(key, "llmpack-rpc worker", challenge + sizeof(AUTH_MAGIC), answer, expect);
    return same(expect, proof, TAG) && sock->set_recv_timeout(0);
}

// a --cache entry's tag: HMAC-SHA256 of its content under the worker's key
static void cache_tag(const void * data, size_t size, uint8_t out[32]) {
    const std::vector<uint8_t> key = get_key();
    hmac_sha256 mac(key.data(), key.size());
    mac.update("llmpack-rpc cache", 18);
    mac.update(data, size);
    mac.final(out);
}

} // namespace llmpack_rpc

static void ggml_backend_rpc_set_key(const void * key, size_t len) {
    llmpack_rpc::set_key(key, len);
}

"""

_GRAPH_CHECK = r"""// ---- llmpack: a graph from the network is checked before any kernel runs -----------------------
// Every node is a tensor in this worker's buffers with an op ggml knows. GET_ROWS, SET_ROWS and
// SSM_SCAN index memory by the values of an index tensor: their shapes must be what ggml's
// constructors assert (the kernels only assert() them, which release builds compile out), and the
// index values must lie inside the indexed tensor wherever no node of this graph writes them
// (SSM_SCAN's ids always: its kernel checks nothing; GET_ROWS and SET_ROWS check computed indices
// themselves).
namespace llmpack_graph {

static bool is_view(ggml_op op) {
    return op == GGML_OP_NONE || op == GGML_OP_VIEW || op == GGML_OP_RESHAPE || op == GGML_OP_PERMUTE ||
           op == GGML_OP_TRANSPOSE;
}

static bool rows_packed(const ggml_tensor * t) {
    return t->nb[0] == ggml_type_size(t->type);
}

static bool shape_is(const ggml_tensor * t, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    return t->ne[0] == n0 && t->ne[1] == n1 && t->ne[2] == n2 && t->ne[3] == n3;
}

static bool written_by_graph(const ggml_cgraph * graph, const ggml_tensor * t) {
    const uint64_t a0 = (uint64_t) t->data, a1 = a0 + ggml_nbytes(t);
    for (int i = 0; i < graph->n_nodes; i++) {
        const ggml_tensor * node = graph->nodes[i];
        if (is_view(node->op)) {
            continue;
        }
        const uint64_t b0 = (uint64_t) node->data, b1 = b0 + ggml_nbytes(node);
        if (a0 < b1 && b0 < a1) {
            return true;
        }
    }
    return false;
}

enum indices { INDICES_BAD, INDICES_OK, INDICES_COMPUTED };

static indices indices_below(const ggml_cgraph * graph, const ggml_tensor * ids, int64_t bound) {
    if (written_by_graph(graph, ids)) {
        return INDICES_COMPUTED;
    }
    if (!ggml_is_contiguous(ids)) {
        return INDICES_BAD;
    }
    const size_t size = ggml_nbytes(ids);
    std::vector<uint8_t> host(size);
    if (size > 0) {
        ggml_backend_tensor_get(ids, host.data(), 0, size);
    }
    const int64_t count = ggml_nelements(ids);
    for (int64_t i = 0; i < count; i++) {
        int64_t v;
        if (ids->type == GGML_TYPE_I32) {
            int32_t v32;
            memcpy(&v32, host.data() + 4*i, 4);
            v = v32;
        } else {
            memcpy(&v, host.data() + 8*i, 8);
        }
        if (v < 0 || v >= bound) {
            return INDICES_BAD;
        }
    }
    return INDICES_OK;
}

static bool get_rows(const ggml_cgraph * graph, const ggml_tensor * t) {
    const ggml_tensor * a = t->src[0], * b = t->src[1];
    if (a == nullptr || b == nullptr || b->type != GGML_TYPE_I32) {
        return false;
    }
    // the types the CPU kernel reads (others abort it); a GPU backend says for itself in supports_op
    if (!(a->type == GGML_TYPE_F32 || a->type == GGML_TYPE_F16 || a->type == GGML_TYPE_BF16 || a->type == GGML_TYPE_I32 ||
          (ggml_is_quantized(a->type) && a->type != GGML_TYPE_Q8_K))) {
        return false;
    }
    const ggml_type out = a->type == GGML_TYPE_I32 ? GGML_TYPE_I32 : GGML_TYPE_F32;
    return t->type == out && a->ne[2] == b->ne[1] && a->ne[3] == b->ne[2] && b->ne[3] == 1 &&
           shape_is(t, a->ne[0], b->ne[0], b->ne[1], b->ne[2]) &&
           rows_packed(a) && rows_packed(b) && rows_packed(t) &&
           indices_below(graph, b, a->ne[1]) != INDICES_BAD;
}

static bool set_rows(const ggml_cgraph * graph, const ggml_tensor * t) {
    const ggml_tensor * b = t->src[0], * c = t->src[1];
    if (b == nullptr || c == nullptr || (b->type != GGML_TYPE_F32 && b->type != GGML_TYPE_F16) ||
        (c->type != GGML_TYPE_I64 && c->type != GGML_TYPE_I32)) {
        return false;
    }
    switch (t->type) {   // the KV cache types llama.cpp writes: each has a CPU from_float (others may not)
        case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_IQ4_NL: break;
        default: return false;
    }
    return t->ne[0] == b->ne[0] && t->ne[2] == b->ne[2] && t->ne[3] == b->ne[3] && b->ne[1] == c->ne[0] &&
           c->ne[1] > 0 && c->ne[2] > 0 && b->ne[2] % c->ne[1] == 0 && b->ne[3] % c->ne[2] == 0 && c->ne[3] == 1 &&
           rows_packed(b) && rows_packed(c) && rows_packed(t) &&
           indices_below(graph, c, t->ne[1]) != INDICES_BAD;
}

static bool ssm_scan(const ggml_cgraph * graph, const ggml_tensor * t) {
    const ggml_tensor * s = t->src[0], * x = t->src[1], * dt = t->src[2], * A = t->src[3];
    const ggml_tensor * B = t->src[4], * C = t->src[5], * ids = t->src[6];
    if (!s || !x || !dt || !A || !B || !C || !ids || ids->type != GGML_TYPE_I32 || t->type != GGML_TYPE_F32) {
        return false;
    }
    for (const ggml_tensor * f : {s, x, dt, A, B, C}) {
        if (f->type != GGML_TYPE_F32) {
            return false;
        }
    }
    const int64_t K = ggml_get_op_params_i32(t, 0);
    const int64_t d_state = s->ne[0], head_dim = x->ne[0], n_head = x->ne[1];
    const int64_t n_tokens = x->ne[2], n_seqs = x->ne[3], n_group = B->ne[1];
    if (K < 1 || !ggml_is_contiguous(s) || !ggml_is_contiguous(dt) || !ggml_is_contiguous(A) || !ggml_is_contiguous(t) ||
        !rows_packed(x) || !rows_packed(B) || !rows_packed(C) ||
        x->nb[1] != x->ne[0]*x->nb[0] || B->nb[1] != B->ne[0]*B->nb[0] || C->nb[1] != C->ne[0]*C->nb[0] ||
        !ggml_are_same_shape(B, C) || !shape_is(dt, n_head, n_tokens, n_seqs, 1) ||
        s->ne[1] != head_dim || s->ne[2] != n_head || B->ne[0] != d_state || B->ne[2] != n_tokens ||
        B->ne[3] != n_seqs || n_group < 1 || n_head % n_group != 0 || !shape_is(ids, n_seqs, 1, 1, 1) ||
        A->ne[1] != n_head || A->ne[2] != 1 || A->ne[3] != 1 ||
        (A->ne[0] != 1 && (A->ne[0] != d_state || K != 1))) {
        return false;
    }
    if (ggml_nelements(t) != ggml_nelements(x) + K*d_state*head_dim*n_head*n_seqs) {
        return false;
    }
    return indices_below(graph, ids, s->ne[3]) == INDICES_OK;
}

// nullptr when the graph may run; otherwise what is wrong with it
static const char * refuse(ggml_backend_t backend, const ggml_cgraph * graph) {
    for (int i = 0; i < graph->n_nodes; i++) {
        const ggml_tensor * t = graph->nodes[i];
        if (t == nullptr) {
            return "a graph node that names no tensor";
        }
        if ((uint32_t) t->op >= GGML_OP_COUNT) {
            return "an unknown op";
        }
        if ((t->op == GGML_OP_UNARY && (uint32_t) ggml_get_unary_op(t) >= GGML_UNARY_OP_COUNT) ||
            (t->op == GGML_OP_GLU && (uint32_t) ggml_get_glu_op(t) >= GGML_GLU_OP_COUNT)) {
            return "an unknown unary or gated op";
        }
        if (t->buffer == nullptr || t->data == nullptr) {
            return "a node outside this worker's buffers";
        }
        for (int j = 0; j < GGML_MAX_SRC; j++) {
            if (t->src[j] != nullptr && (t->src[j]->buffer == nullptr || t->src[j]->data == nullptr)) {
                return "a source outside this worker's buffers";
            }
        }
        bool ok = true;
        switch (t->op) {
            case GGML_OP_GET_ROWS: ok = get_rows(graph, t); break;
            case GGML_OP_SET_ROWS: ok = set_rows(graph, t); break;
            case GGML_OP_SSM_SCAN: ok = ssm_scan(graph, t); break;
            default: continue;
        }
        if (!ok || !ggml_backend_supports_op(backend, t)) {
            return ggml_op_name(t->op);
        }
    }
    return nullptr;
}

} // namespace llmpack_graph

bool rpc_server::graph_compute(const std::vector<uint8_t> & input) {
"""

_DESERIALIZE_SHAPE = """\
    // llmpack: what ggml_new_tensor_4d would assert on is refused here: a message must not abort the worker
    {
        const int64_t blck = ggml_blck_size((enum ggml_type)tensor->type);
        int64_t n = tensor->ne[0];
        for (int i = 1; i < GGML_MAX_DIMS; i++) {
            const int64_t ne = tensor->ne[i];
            if (ne > 1 && INT64_MAX / ne <= n) {
                GGML_LOG_ERROR("[%s] tensor shape overflows\\n", __func__);
                return nullptr;
            }
            n = ne > 1 ? n * ne : n;
        }
        if (tensor->ne[0] % blck != 0) {
            GGML_LOG_ERROR("[%s] row length is not a multiple of the type's block\\n", __func__);
            return nullptr;
        }
        uint64_t bytes = blck == 1 ? ggml_type_size((enum ggml_type)tensor->type)
                                   : (uint64_t) tensor->ne[0] * tensor->nb[0] / blck;
        for (int i = blck == 1 ? 0 : 1; i < GGML_MAX_DIMS; i++) {
            const uint64_t span = tensor->ne[i] == 0 ? 0 : (uint64_t) (tensor->ne[i] - 1) * tensor->nb[i];
            if (bytes > UINT64_MAX / 2 - span) {
                GGML_LOG_ERROR("[%s] tensor strides overflow\\n", __func__);
                return nullptr;
            }
            bytes += span;
        }
    }

    ggml_tensor * result = ggml_new_tensor_4d(ctx, (ggml_type) tensor->type,
"""

_BOUNDS_OLD = """\
        GGML_ASSERT(tensor->data + tensor_size >= tensor->data); // check for overflow
        GGML_ASSERT(tensor->data >= buffer_start && tensor->data + tensor_size <= buffer_start + buffer_size);
"""
_BOUNDS_NEW = """\
        // llmpack: refused, not asserted (an assert aborts the worker)
        if (tensor->data + tensor_size < tensor->data || tensor->data < buffer_start ||
            tensor->data - buffer_start > buffer_size || tensor_size > buffer_size - (tensor->data - buffer_start)) {
            GGML_LOG_ERROR("[%s] tensor data out of its buffer\\n", __func__);
            return nullptr;
        }
"""

_CACHE_WRITE_OLD = """\
        fs::path cache_file = fs::path(cache_dir) / hash_str;
        std::ofstream ofs(cache_file, std::ios::binary);
        ofs.write((const char *)data, size);
        GGML_LOG_INFO("[%s] saved to '%s'\\n", __func__, cache_file.string().c_str());
"""
_CACHE_WRITE_NEW = """\
        // llmpack: the entry is its tag (HMAC-SHA256 of the content) then the content, renamed into place
        fs::path cache_file = fs::path(cache_dir) / hash_str;
        fs::path partial = fs::path(cache_dir) / (std::string(hash_str) + ".part");
        uint8_t entry_tag[32];
        llmpack_rpc::cache_tag(data, size, entry_tag);
        bool written;
        {
            std::ofstream ofs(partial, std::ios::binary | std::ios::trunc);
            ofs.write((const char *)entry_tag, sizeof(entry_tag));
            ofs.write((const char *)data, size);
            written = (bool) ofs;
        }
        std::error_code ec;
        if (written) {
            fs::rename(partial, cache_file, ec);
        }
        if (!written || ec) {
            fs::remove(partial, ec);
            GGML_LOG_ERROR("[%s] could not save '%s'\\n", __func__, cache_file.string().c_str());
        } else {
            GGML_LOG_INFO("[%s] saved to '%s'\\n", __func__, cache_file.string().c_str());
        }
"""

_CACHE_READ_OLD = """\
    std::ifstream ifs(cache_file, std::ios::binary);
    ifs.seekg(0, std::ios::end);
    size_t size = ifs.tellg();
    ifs.seekg(0, std::ios::beg);
    data.resize(size);
    ifs.read((char *)data.data(), size);
    return true;
}
"""
_CACHE_READ_NEW = """\
    // llmpack: an entry whose tag does not match its content is deleted and counts as absent
    bool good = false;
    {
        std::ifstream ifs(cache_file, std::ios::binary);
        ifs.seekg(0, std::ios::end);
        const std::streamoff end = ifs.tellg();
        ifs.seekg(0, std::ios::beg);
        uint8_t stored[32], computed[32];
        if (ifs && end >= (std::streamoff) sizeof(stored)) {
            try {
                data.resize((size_t) end - sizeof(stored));
            } catch (const std::exception &) {
                return false;
            }
            ifs.read((char *)stored, sizeof(stored));
            ifs.read((char *)data.data(), data.size());
            if (ifs) {
                llmpack_rpc::cache_tag(data.data(), data.size(), computed);
                good = llmpack_rpc::same(stored, computed, sizeof(stored));
            }
        }
    }
    if (!good) {
        GGML_LOG_ERROR("[%s] cache entry '%s' does not match its hash: removed\\n", __func__, cache_file.string().c_str());
        fs::remove(cache_file, ec);
        data.clear();
    }
    return good;
}
"""

_COPY_OLD = "    if (dst_data + src_size > dst_base + dst_buf_sz) {\n"
_COPY_NEW = ("    // llmpack: overflow-safe, and never more than the destination tensor holds\n"
             "    if (src_size > (uint64_t) ggml_nbytes(dst) || dst_data < dst_base || dst_data - dst_base > dst_buf_sz ||\n"
             "        src_size > dst_buf_sz - (dst_data - dst_base)) {\n")

_COMPUTE_OLD = """\
    ggml_status status = ggml_backend_graph_compute(backends[device], graph);
    GGML_ASSERT(status == GGML_STATUS_SUCCESS && "Unsuccessful graph computations are not supported with RPC");
    stored_graphs[device].graph = graph;
    return true;
"""
_COMPUTE_NEW = """\
    if (const char * why = llmpack_graph::refuse(backends[device], graph)) {
        GGML_LOG_ERROR("[%s] graph refused: %s\\n", __func__, why);
        return false;
    }
    ggml_status status = ggml_backend_graph_compute(backends[device], graph);
    if (status != GGML_STATUS_SUCCESS) {
        GGML_LOG_ERROR("[%s] graph computation failed (%d)\\n", __func__, (int) status);
        return false;
    }
    stored_graphs[device].graph = graph;
    return true;
"""

_RECOMPUTE_OLD = """\
    LOG_DBG("[%s] device: %u\\n", __func__, device);
    ggml_status status = ggml_backend_graph_compute(backends[device], graph);
    GGML_ASSERT(status == GGML_STATUS_SUCCESS && "Unsuccessful graph computations are not supported with RPC");
    return true;
"""
_RECOMPUTE_NEW = """\
    LOG_DBG("[%s] device: %u\\n", __func__, device);
    if (const char * why = llmpack_graph::refuse(backends[device], graph)) {   // its index values may have changed
        GGML_LOG_ERROR("[%s] graph refused: %s\\n", __func__, why);
        stored_graphs[device].graph = nullptr;
        return false;
    }
    ggml_status status = ggml_backend_graph_compute(backends[device], graph);
    if (status != GGML_STATUS_SUCCESS) {
        GGML_LOG_ERROR("[%s] graph computation failed (%d)\\n", __func__, (int) status);
        return false;
    }
    return true;
"""

_TRANSPORT_FNS = """\
bool socket_t::flush() {
    return pimpl->flush();
}

// llmpack: how long a read may wait (0: for ever), for the key handshake
bool socket_t::set_recv_timeout(int ms) {
#ifdef _WIN32
    DWORD t = (DWORD) ms;
    return setsockopt(pimpl->fd, SOL_SOCKET, SO_RCVTIMEO, (const char *) &t, sizeof(t)) == 0;
#else
    struct timeval tv;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return setsockopt(pimpl->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0;
#endif
}

// llmpack: bytes from the operating system's random source, for the handshake's nonces
bool rpc_random_bytes(void * out, size_t size) {
#ifdef _WIN32
    return BCryptGenRandom(NULL, (PUCHAR) out, (ULONG) size, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0;
#else
    FILE * f = fopen("/dev/urandom", "rb");
    if (f == nullptr) {
        return false;
    }
    const bool ok = fread(out, 1, size, f) == size;
    fclose(f);
    return ok;
#endif
}
"""



def _range_check(offset: str, size: str) -> str:
    return (f"    if ((uint64_t) {offset} > ggml_nbytes(tensor) || (uint64_t) {size} > ggml_nbytes(tensor) - (uint64_t) {offset}) {{"
            "   // llmpack\n"
            "        GGML_LOG_ERROR(\"[%s] range outside the tensor\\n\", __func__);\n"
            "        return false;\n    }\n")


# (file under the vendored llama.cpp, exact old text, new text)
RPC_PATCHES: tuple[tuple[str, str, str], ...] = (
    (RPC + "transport.h", "    bool flush();\n",
     "    bool flush();\n    // llmpack: a bound on each read (ms, 0: none), for the key handshake\n"
     "    bool set_recv_timeout(int ms);\n"),
    (RPC + "transport.h", "void rpc_transport_shutdown();\n",
     "void rpc_transport_shutdown();\n// llmpack: `size` bytes from the OS's random source\n"
     "bool rpc_random_bytes(void * out, size_t size);\n"),
    (RPC + "transport.cpp", "#  include <winsock2.h>\n#else\n",
     "#  include <winsock2.h>\n#  include <bcrypt.h>\n#else\n#  include <sys/time.h>\n"),
    (RPC + "transport.cpp", "#include <cstdlib>\n#include <cstring>\n",
     "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n"),
    (RPC + "transport.cpp", "bool socket_t::flush() {\n    return pimpl->flush();\n}\n", _TRANSPORT_FNS),
    (RPC + "CMakeLists.txt", "    target_link_libraries(ggml-rpc PRIVATE ws2_32)\n",
     "    target_link_libraries(ggml-rpc PRIVATE ws2_32 bcrypt)  # llmpack: BCryptGenRandom\n"),
    (RPC + "ggml-rpc.cpp", "static bool send_msg(socket_ptr sock, const void * msg, size_t msg_size) {\n",
     _SHA + "static bool send_msg(socket_ptr sock, const void * msg, size_t msg_size) {\n"),
    (RPC + "ggml-rpc.cpp", "    if (!negotiate_hello(sock)) {\n",
     "    if (!llmpack_rpc::prove_to_worker(sock)) {\n"
     "        GGML_ABORT(\"RPC handshake failed for %s: the worker refused this key or did not prove it\\n\", "
     "endpoint.c_str());\n    }\n    if (!negotiate_hello(sock)) {\n"),
    (RPC + "ggml-rpc.cpp", "    rpc_server server(backends, cache_dir);\n    uint8_t cmd;\n",
     "    if (!llmpack_rpc::check_head(sock)) {\n"
     "        GGML_LOG_ERROR(\"refused a connection that did not prove the key\\n\");\n        return;\n    }\n"
     "    rpc_server server(backends, cache_dir);\n    uint8_t cmd;\n"),
    (RPC + "ggml-rpc.cpp",
     "        return (void *)ggml_backend_rpc_start_server;\n    }\n",
     "        return (void *)ggml_backend_rpc_start_server;\n    }\n"
     "    if (std::strcmp(name, \"ggml_backend_rpc_set_key\") == 0) {   // llmpack\n"
     "        return (void *)ggml_backend_rpc_set_key;\n    }\n"),
    (RPC + "ggml-rpc.cpp", "\n    ggml_tensor * result = ggml_new_tensor_4d(ctx, (ggml_type) tensor->type,\n",
     "\n" + _DESERIALIZE_SHAPE),
    (RPC + "ggml-rpc.cpp", _BOUNDS_OLD, _BOUNDS_NEW),
    # a size past vector::max_size() throws length_error, not bad_alloc: uncaught, it ended the worker
    (RPC + "ggml-rpc.cpp", "    } catch (const std::bad_alloc & e) {\n        GGML_LOG_ERROR(\"Failed to allocate input buffer",
     "    } catch (const std::exception & e) {   // llmpack: length_error too\n"
     "        GGML_LOG_ERROR(\"Failed to allocate input buffer"),
    # ggml_backend_tensor_set/get GGML_ASSERT(offset + size <= nbytes), which an offset near 2^64 wraps past
    # the buffer checks before them: the range is checked against the tensor, overflow-safe, first
    (RPC + "ggml-rpc.cpp", "    const void * data = input.data() + header_size;\n",
     _range_check("offset", "size") + "    const void * data = input.data() + header_size;\n"),
    (RPC + "ggml-rpc.cpp", "    ggml_backend_tensor_set(tensor, cached_file.data(), request.offset, size);\n",
     _range_check("request.offset", "size") +
     "    ggml_backend_tensor_set(tensor, cached_file.data(), request.offset, size);\n"),
    (RPC + "ggml-rpc.cpp", "    response.resize(request.size, 0);\n",
     _range_check("request.offset", "request.size") + "    response.resize(request.size, 0);\n"),
    (RPC + "ggml-rpc.cpp", _CACHE_WRITE_OLD, _CACHE_WRITE_NEW),
    (RPC + "ggml-rpc.cpp", _CACHE_READ_OLD, _CACHE_READ_NEW),
    (RPC + "ggml-rpc.cpp", _COPY_OLD, _COPY_NEW),
    (RPC + "ggml-rpc.cpp", "bool rpc_server::graph_compute(const std::vector<uint8_t> & input) {\n", _GRAPH_CHECK),
    (RPC + "ggml-rpc.cpp",
     "    size_t buf_size = ggml_tensor_overhead()*(n_nodes + n_tensors) + ggml_graph_overhead_custom(n_nodes, false);\n",
     "    stored_graphs[device].graph = nullptr;   // llmpack: its memory is about to be reused\n"
     "    size_t buf_size = ggml_tensor_overhead()*((size_t) n_nodes + n_tensors) + ggml_graph_overhead_custom(n_nodes, false);\n"),
    (RPC + "ggml-rpc.cpp", "        if (graph->nodes[i] == nullptr && id != 0) {\n",
     "        if (graph->nodes[i] == nullptr) {   // llmpack: id 0 names no tensor either\n"),
    (RPC + "ggml-rpc.cpp", _COMPUTE_OLD, _COMPUTE_NEW),
    (RPC + "ggml-rpc.cpp", _RECOMPUTE_OLD, _RECOMPUTE_NEW),
)
