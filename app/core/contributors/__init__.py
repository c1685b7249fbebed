"""The ledger's contributors: one concern's buffers each, run in order by app/core/ledger.py."""
