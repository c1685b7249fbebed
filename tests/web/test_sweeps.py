"""The page's sweeps: which values are drawn, that every number is the estimate's, and what the charts show."""

from __future__ import annotations

import math
from itertools import pairwise

from app import core
from app.core.job import Job, with_field
from app.web import sweeps as sweeps_module
from app.web.sweeps import data_values, sequence_values, short_tokens, sweeps
from app.web.view import format_bytes

GIB = 1 << 30


def _job(preset: str = "llama-3-8b", **training) -> Job:
    return Job(core.get_preset(preset).architecture, None, core.Training(**({"seq_len": 4096} | training)),
               core.Parallelism(), core.get_gpu("h100-80gb"))


def _size(value: int) -> str:
    return format_bytes(value, "GiB")


def _charts(job: Job):
    return sweeps(job, job.estimate(), size=_size, unit="GiB", unit_bytes=GIB)


def test_lengths_double_from_256_to_twice_the_models_positions():
    # Llama 3 8B has 8,192 positions: 256 to 16,384 is six doublings, four lengths each where the sweep is exact.
    exact = sequence_values(4096, 8192, exact=True)
    assert exact[0] == 256 and exact[-1] == 16384 and len(exact) == 6 * 4 + 1
    assert all(b / a == 2 ** 0.25 or abs(b / a - 2 ** 0.25) < 0.01 for a, b in pairwise(exact))
    assert len(sequence_values(4096, 8192, exact=False)) == 6 * 2 + 1  # an estimate each: half as many
    # A longer current length stretches the range past it; a short one starts it lower.
    assert sequence_values(100_000, 8192, exact=True)[-1] == 131072
    assert sequence_values(100, 8192, exact=True)[0] == 64
    # At most 40 lengths: 1 to 16,384 is fourteen doublings, so two a doubling (one fewer: 1 × √2 rounds to 1).
    longest = sequence_values(1, 8192, exact=True)
    assert longest[:4] == (1, 2, 3, 4) and longest[-1] == 16384 and len(longest) == 14 * 2


def test_data_parallel_degrees_are_powers_of_two_to_1024_or_past_the_current():
    assert data_values(8) == tuple(2 ** k for k in range(11))
    assert data_values(3000)[-1] == 4096
    assert data_values(8, every=2) == (1, 4, 16, 64, 256, 1024)
    assert short_tokens(4096) == "4k" and short_tokens(362) == "362" and short_tokens(131072) == "128k"


def test_no_sweeps_for_a_bare_parameter_count():
    job = Job(None, 7 * 10**9, core.Training(), core.Parallelism(), core.get_gpu("h100-80gb"))
    assert _charts(job) is None


def test_every_number_in_the_sequence_table_is_an_estimates_peak():
    job = _job()
    chart = _charts(job).sequence
    assert chart.head == ("Tokens", "Peak per GPU", "Activations at the peak", "Fits")
    current = [row for row in chart.rows if row.current]
    assert len(current) == 1 and current[0].cells[0] == "4,096 (now)"
    for row in chart.rows[::6]:
        tokens = int(row.cells[0].split()[0].replace(",", ""))
        result = with_field(job, "training.seq_len", tokens).estimate()
        activations = result.peak.breakdown["activations"]
        assert activations is not None and result.gpu is not None
        assert row.cells[1] == _size(result.peak.bytes)
        assert row.cells[2] == _size(activations)
        assert row.cells[3] == ("yes" if result.gpu.fits else "no")


def _doubling(desc: str) -> float:
    head, _, tail = desc.partition("multiplies the activations at the peak by ")
    assert tail, desc
    return float(tail.split(".")[0] + "." + tail.split(".")[1][:2])


def test_eager_attention_grows_with_the_square_of_the_length_and_flash_does_not():
    eager = _charts(_job(attention="eager")).sequence
    flash = _charts(_job(attention="flash")).sequence
    # From 8,192 to 16,384 tokens: eager keeps s × s scores, so nearly × 4; flash keeps O(s), × 2.
    assert 3.5 < _doubling(eager.desc) < 4.0
    assert math.isclose(_doubling(flash.desc), 2.0, abs_tol=0.05)
    assert eager.clipped  # hundreds of GiB at 16k: cut off at three times the capacity
    assert "Beyond 8,192 tokens (shaded)" in eager.desc and eager.shade_x is not None


def test_the_data_chart_has_a_line_per_zero_stage_and_says_where_each_fits():
    job = with_field(with_field(_job(precision=core.precision_preset("bf16")), "parallelism.data", 8), "parallelism.zero_stage", 1)
    chart = _charts(job).data
    assert [line.label for line in chart.lines] == ["ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"]
    assert chart.head == ("GPUs", "ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3")
    row = next(row for row in chart.rows if row.current)
    assert row.cells[0] == "8" and row.cells[2] == _size(job.estimate().peak.bytes)
    last = chart.rows[-1]
    assert last.cells[0] == "1,024"
    z3 = with_field(with_field(job, "parallelism.data", 1024), "parallelism.zero_stage", 3).estimate()
    assert last.cells[4] == _size(z3.peak.bytes)
    assert "ZeRO-0 from 1 GPU" in chart.desc  # pure bf16 at 4,096 tokens fits one H100


def test_sweeps_are_kept_for_the_job_with_the_swept_field_set_aside():
    job = _job(seq_len=3000)
    _charts(job)
    before = sweeps_module._sequence_points.cache_info().hits, sweeps_module._data_peaks.cache_info().hits
    _charts(with_field(job, "training.seq_len", 3500))  # same lengths drawn: the sweep is kept
    _charts(with_field(job, "gpu", "b200-180gb"))  # the GPU changes only the fit
    after = sweeps_module._sequence_points.cache_info().hits, sweeps_module._data_peaks.cache_info().hits
    assert after[0] - before[0] == 2 and after[1] - before[1] == 1
    # The current length, not on the grid, is drawn from the estimate itself.
    chart = _charts(with_field(job, "training.seq_len", 3500)).sequence
    row = next(row for row in chart.rows if row.current)
    assert row.cells[0] == "3,500 (now)"
    assert row.cells[1] == _size(with_field(job, "training.seq_len", 3500).estimate().peak.bytes)


def test_a_length_the_setup_does_not_allow_is_a_note_not_an_error(monkeypatch):
    def refuse(*args, **kwargs):
        raise core.DomainError("training.seq_len", "must be divisible by 2 × the context-parallel degree")

    monkeypatch.setattr(sweeps_module, "series", refuse)
    sweeps_module._sequence_points.cache_clear()
    sweeps_module._data_peaks.cache_clear()
    charts = _charts(_job(seq_len=4100))
    assert charts.sequence is None and "must be divisible" in charts.sequence_note
    assert charts.data is None and charts.data_note.startswith("No chart of data-parallel GPUs")
