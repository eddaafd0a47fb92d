"""Builders shared by the tests and the benchmarks, not shipped in the wheel.

``hermes_fixtures`` makes Hermes homes whose databases the real Hermes code wrote (in a
``hermes_writer`` subprocess); ``corruption`` damages closed copies of them and records
the ground truth; ``bot_api`` is a local HTTP server speaking the Telegram Bot API's
shape.
"""
