"""The llama.cpp both runtimes are built from: llama-cpp-python's sdist from PyPI (pinned by
sha256), with llmpack's patches to its vendored tree applied as exact text.

**In place.** llama.cpp's vision projector loader reads a GGUF that lies inside a bigger file,
as the text model already can (llama_model_load_from_file_ptr): a program built with
`--mmproj` then reads its projector in place instead of copying it to the cache first.

* ``clip_context_params`` gains ``file_offset``, the loader opens the file at that offset with
  ``gguf_init_from_file_ptr``. gguf then records absolute offsets, so the loader's later seeks
  (tensor data) need no change.
* ``mtmd_init_from_file_at(fname, offset, text_model, params)`` is ``mtmd_init_from_file`` with
  that offset, exported from libmtmd. llama-cpp-python does not bind it; runtime/vision binds it
  itself and falls back to a cached copy where a llama.cpp without it is installed.

**Media decoded apart.** ``mtmd_helper_decode_audio(buf, len, rate, max_frames, &out, &n)`` is the
WAV/MP3/FLAC decoding that ``mtmd_helper_bitmap_init_from_buf`` does, without a model, so a
sandboxed child can decode untrusted sound and pass the server only PCM; it reads the length
before allocating, and refuses more than ``max_frames``. mtmd is built without video
(``MTMD_VIDEO``), which would start an ``ffmpeg`` found on the PATH for pictures stb cannot read.

**RPC workers that cannot be crashed or used by strangers.** builder/llama_rpc_patch.py: a shared
key proved both ways before any command (HMAC-SHA256), upstream's later rpc-server fixes redone
for this build, and checked ``--cache`` entries. Both builds also turn the RDMA transport off
(``GGML_RPC_RDMA=OFF``: ./dev's DL flags, builder/windows/llama_dlls.py).

Each replacement must match its text exactly once, so a llama.cpp update that moved the text
stops the build instead of silently building something else. Both builds apply the same list:
the Linux wheel (`./dev`, before llmpack is installed, hence stdlib only) and the Windows DLLs
(builder/windows/llama_dlls.py). The patch's text is part of both caches' keys.

    python builder/llama_source.py --key          # what the wheel's cache key adds
    python builder/llama_source.py DIR SOURCES    # DIR/llama_cpp_python-<version>/, patched
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

if __package__:
    from .llama_rpc_patch import RPC_PATCHES
else:   # run as a script by ./dev, before llmpack is installed
    from llama_rpc_patch import RPC_PATCHES

NAME = "llama-cpp-python"
VERSION = "0.3.36"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
VENDORED = f"llama_cpp_python-{VERSION}/vendor/llama.cpp"

_OPEN_AT = """\
        if (file_offset == 0) {
            ctx_gguf = gguf_context_ptr(gguf_init_from_file(fname, params));
        } else {
            // llmpack: the projector lies inside a bigger file (a program llmpack built); gguf then
            // records absolute offsets, which load_tensors' seeks use as they are
            FILE * file = ggml_fopen(fname, "rb");
            if (file != nullptr) {
#ifdef _WIN32
                const bool at = _fseeki64(file, (__int64) file_offset, SEEK_SET) == 0;
#else
                const bool at = fseeko(file, (off_t) file_offset, SEEK_SET) == 0;
#endif
                if (at) {
                    ctx_gguf = gguf_context_ptr(gguf_init_from_file_ptr(file, params));
                }
                fclose(file);
            }
        }
"""

_INIT_AT = """\
// llmpack: mtmd_init_from_file for a projector GGUF that starts `offset` bytes into `fname`
mtmd_context * mtmd_init_from_file_at(const char * fname, uint64_t offset,
        const struct llama_model * text_model,
        const struct mtmd_context_params ctx_params) {
    try {
        return new mtmd_context(fname, text_model, ctx_params, /* no_alloc */ false, (size_t) offset);
    } catch (const std::exception & e) {
        LOG_ERR("%s: error: %s\\n", __func__, e.what());
        return nullptr;
    }
}

void mtmd_free(mtmd_context * ctx) {
"""

_DECODE_AUDIO = """\
} // namespace audio_helpers

// llmpack: mtmd_helper_bitmap_init_from_buf's audio decoding without a model, so that a sandboxed
// child process can decode untrusted sound and hand the server only PCM. The length is read before
// any sample buffer is allocated: longer than max_frames returns 2 with *n_frames set to it.
int32_t mtmd_helper_decode_audio(const unsigned char * buf, size_t len, int32_t sample_rate,
                                 uint64_t max_frames, float ** out, uint64_t * n_frames) {
    *out = nullptr;
    *n_frames = 0;
    if (sample_rate <= 0 || !audio_helpers::is_audio_file((const char *) buf, len)) {
        return 1;
    }
    ma_decoder_config config = ma_decoder_config_init(ma_format_f32, 1, (ma_uint32) sample_rate);
    ma_decoder decoder;
    if (ma_decoder_init_memory(buf, len, &config, &decoder) != MA_SUCCESS) {
        return 1;
    }
    ma_uint64 frames = 0;
    if (ma_decoder_get_length_in_pcm_frames(&decoder, &frames) != MA_SUCCESS || frames == 0) {
        ma_decoder_uninit(&decoder);
        return 1;
    }
    *n_frames = frames;
    if (frames > max_frames) {
        ma_decoder_uninit(&decoder);
        return 2;
    }
    float * data = (float *) malloc((size_t) frames * sizeof(float));
    if (data == nullptr) {
        ma_decoder_uninit(&decoder);
        return 3;
    }
    ma_uint64 got = 0;
    const ma_result result = ma_decoder_read_pcm_frames(&decoder, data, frames, &got);
    ma_decoder_uninit(&decoder);
    if ((result != MA_SUCCESS && result != MA_AT_END) || got == 0) {
        free(data);
        return 1;
    }
    *out = data;
    *n_frames = got;
    return 0;
}

void mtmd_helper_audio_free(float * data) {
    free(data);
}
"""

_DECODE_AUDIO_DECL = """\
// llmpack: decode WAV, MP3 or FLAC in `buf` to mono float PCM at `sample_rate` Hz, with no model.
// Returns 0 and a buffer to free with mtmd_helper_audio_free; 1 not audio or undecodable; 2 longer
// than `max_frames` (*n_frames holds its length; nothing allocated); 3 out of memory.
MTMD_API int32_t mtmd_helper_decode_audio(const unsigned char * buf, size_t len, int32_t sample_rate,
                                          uint64_t max_frames, float ** out, uint64_t * n_frames);
MTMD_API void mtmd_helper_audio_free(float * data);

// helper to count the total number of tokens from a list of chunks, useful to keep track of KV cache
"""

# (file under the vendored llama.cpp, exact old text, new text)
PATCHES: tuple[tuple[str, str, str], ...] = (
    ("tools/mtmd/clip.h",
     "    void * progress_callback_user_data;\n};\n",
     "    void * progress_callback_user_data;\n"
     "    size_t file_offset; // llmpack: where the GGUF starts in the file (0: it is the whole file)\n};\n"),
    ("tools/mtmd/clip.cpp",
     "            void * progress_user_data = nullptr)\n        : fname(fname),\n",
     "            void * progress_user_data = nullptr,\n            size_t file_offset = 0)\n        : fname(fname),\n"),
    ("tools/mtmd/clip.cpp",
     "        ctx_gguf = gguf_context_ptr(gguf_init_from_file(fname, params));\n",
     _OPEN_AT),
    ("tools/mtmd/clip.cpp",
     "            ctx_params.progress_callback,\n            ctx_params.progress_callback_user_data);\n",
     "            ctx_params.progress_callback,\n            ctx_params.progress_callback_user_data,\n"
     "            ctx_params.file_offset);\n"),
    ("tools/mtmd/mtmd.cpp",
     "                   bool no_alloc = false) :\n",
     "                   bool no_alloc = false,\n                   size_t file_offset = 0) :\n"),
    ("tools/mtmd/mtmd.cpp",
     "            /* progress_callback_user_data */ ctx_params.progress_callback_user_data,\n        };\n",
     "            /* progress_callback_user_data */ ctx_params.progress_callback_user_data,\n"
     "            /* file_offset       */ file_offset,\n        };\n"),
    ("tools/mtmd/mtmd.cpp",
     "void mtmd_free(mtmd_context * ctx) {\n",
     _INIT_AT),
    ("tools/mtmd/mtmd.h",
     "MTMD_API void mtmd_free(mtmd_context * ctx);\n",
     "// llmpack: the same for a projector GGUF that starts `offset` bytes into `fname`\n"
     "MTMD_API mtmd_context * mtmd_init_from_file_at(const char * fname, uint64_t offset,\n"
     "                                               const struct llama_model * text_model,\n"
     "                                               const struct mtmd_context_params ctx_params);\n\n"
     "MTMD_API void mtmd_free(mtmd_context * ctx);\n"),
    ("tools/mtmd/mtmd-helper.cpp", "} // namespace audio_helpers\n", _DECODE_AUDIO),
    ("tools/mtmd/mtmd-helper.h",
     "// helper to count the total number of tokens from a list of chunks, useful to keep track of KV cache\n",
     _DECODE_AUDIO_DECL),
    # No video: with it, a picture stb cannot read (WebP, anything else) makes mtmd's helper start
    # whatever `ffmpeg` the PATH finds, which on Windows includes the folder chat.exe was run from.
    ("tools/mtmd/CMakeLists.txt",
     'set(MTMD_VIDEO ON CACHE BOOL "${MTMD_VIDEO_HELP}")\n',
     'set(MTMD_VIDEO OFF CACHE BOOL "${MTMD_VIDEO_HELP}")  # llmpack: no ffmpeg from the PATH\n'),
) + RPC_PATCHES


class SourceError(Exception):
    """The sources cannot be fetched or patched; the message says what to do."""


def key() -> str:
    """What the built libraries depend on here: the sdist's hash and the patch's text."""
    text = json.dumps({"sdist": SHA256, "patches": PATCHES}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(name: str, version: str, sha256: str, sources: Path) -> Path:
    """`sources/<filename>`, downloaded with pip once and checked against the pinned sha256."""
    path = sources / f"{name.replace('-', '_')}-{version}.tar.gz"
    if path.is_file() and sha256_file(path) == sha256:
        return path
    sources.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=sources) as tmp:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "-q", "-d", tmp, f"{name}=={version}"], capture_output=True, text=True)
        got = Path(tmp) / path.name
        if proc.returncode != 0 or not got.is_file():
            raise SourceError(f"pip could not download {name}=={version} from PyPI: "
                              f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        digest = sha256_file(got)
        if digest != sha256:
            raise SourceError(f"{path.name} from PyPI has sha256 {digest}, not the pinned {sha256}; "
                              "refusing to build with it")
        shutil.move(str(got), path.with_name(path.name + ".tmp"))
        os.replace(path.with_name(path.name + ".tmp"), path)
    return path


def apply_patches(root: Path, patches: tuple[tuple[str, str, str], ...], owner: str) -> None:
    """Replace exact text in files under `root`, each (file, old, new) matching exactly once."""
    for rel, old, new in patches:
        path = root / rel
        text = path.read_text("utf-8")
        if text.count(old) != 1:
            raise SourceError(f"{path} does not hold the text llmpack patches there; update PATCHES in {owner}")
        path.write_text(text.replace(old, new), "utf-8")


def unpack_patched(dest: Path, sources: Path) -> Path:
    """`dest/llama_cpp_python-<version>/`: the pinned sdist unpacked, with PATCHES applied."""
    sdist = fetch_sdist(NAME, VERSION, SHA256, sources)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    apply_patches(dest / VENDORED, PATCHES, __name__)
    return dest / f"llama_cpp_python-{VERSION}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--key"]:
        print(key())
        sys.exit(0)
    if len(sys.argv) != 3:
        print("usage: python builder/llama_source.py --key | DEST SOURCES", file=sys.stderr)
        sys.exit(2)
    try:
        print(unpack_patched(Path(sys.argv[1]), Path(sys.argv[2])))
    except SourceError as exc:
        print(f"[dev] {exc}", file=sys.stderr)
        sys.exit(1)
