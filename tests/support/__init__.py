"""Helpers the tests share: waiting for a condition, process liveness, the CLI runner,
a real daemon subprocess. Each is defined here once."""
