"""Helpers that several test modules share, written once (`from helpers.ports import free_port`).

The older helper modules (apps.py, needs.py, server_fixtures.py, browser_fixtures.py...) sit
beside the tests in tests/; what more than one test module wrote for itself comes here. A
session-scoped fixture never does: it goes in conftest.py (tests/test_lint.py says why)."""
