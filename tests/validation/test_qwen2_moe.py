"""Qwen2-MoE measured on CPU (validation/qwen2_moe.py): counts and saved tensors exact, the published counts too."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):
    import torch  # noqa: F401  (CI installs the validate extra: a missing torch is a failure, not a skip)
else:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

from validation import qwen2_moe  # noqa: E402

pytestmark = pytest.mark.validation


@pytest.mark.parametrize("case", qwen2_moe.CASES, ids=lambda case: case.label)
def test_counts_and_saved_tensors_match_transformers(case):
    assert qwen2_moe.measure(case) == qwen2_moe.predict(case)


def test_published_counts_match_transformers_on_the_meta_device():
    for measured, counted in qwen2_moe.published_counts().values():
        assert measured == counted
