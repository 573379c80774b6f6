"""Packaging hook (the project metadata is in pyproject.toml): a built wheel carries the chat
page's browser libraries. They are not in the repository; webui/vendor.py fetches them from npm,
pinned by version and sha512 in webui/vendor.lock.json, into webui/vendor/ before the files are
collected, so `pip install .` gives a page that renders Markdown offline."""
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithVendor(build_py):
    def run(self):
        path = Path(__file__).resolve().parent / "webui" / "vendor.py"
        spec = importlib.util.spec_from_file_location("llmpack_webui_vendor", path)
        vendor = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vendor)
        vendor.ensure_vendor()
        super().run()


setup(cmdclass={"build_py": BuildPyWithVendor})
