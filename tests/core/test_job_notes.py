"""A Job's notes (what to know about where its model came from) lead its estimate's warnings, and a question that
changes the model drops them."""

from __future__ import annotations

import dataclasses

from app import core
from app.core.job import Job, with_field


def test_notes_lead_the_warnings_until_the_model_changes():
    job = Job(architecture=core.get_preset("gpt2").architecture)
    noted = dataclasses.replace(job, notes=("where the model came from",))
    assert noted.estimate(reserve=False).warnings == ("where the model came from", *job.estimate(reserve=False).warnings)
    assert with_field(noted, "training.seq_len", 512).notes == noted.notes
    for path, value in (("model.preset", "llama-3-8b"), ("model.num_params", 10**9), ("model.hidden_size", 1536)):
        assert with_field(noted, path, value).notes == ()
