"""Validation of trainmem's memory model against real PyTorch training steps on CPU.

Run ``python -m validation`` for the fast subset, ``python -m validation --full`` for the whole
sweep (writes docs/VALIDATION.md and docs/validation.json). Needs the ``validate`` extra.
"""
