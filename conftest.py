"""Loads the harness's pytest plugin for every directory of the project."""

pytest_plugins = ("fixtures.plugin",)
