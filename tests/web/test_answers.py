"""The make-it-fit panel: the solver's answers and fixes as links that, followed, give the setup they promise."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlparse

from app import core
from app.api.schemas import to_job
from app.core.solver import solve
from app.web.answers import fit_answers, in_unit
from app.web.form import parse_form
from app.web.view import format_bytes

OVER = {"preset": "llama-3-8b", "seq_len": "4096", "gpu": "h100-80gb"}  # 16 bytes a parameter do not fit 80 GB
FITS = OVER | {"precision": "bf16"}


def _answers(params: dict[str, str]):
    form = parse_form(params)
    assert form.ok and form.request is not None and form.estimate is not None, form.errors
    job = to_job(form.request)
    return job, form.estimate, fit_answers(job, form.estimate, params, form.unit)


def _followed(href: str):
    """The estimate the page shows after following `href`."""
    form = parse_form(dict(parse_qsl(urlparse(href).query)))
    assert form.ok and form.estimate is not None, (href, form.errors)
    return form.estimate


def test_no_gpu_no_panel():
    form = parse_form({"gpu": ""})
    assert form.request is not None and form.estimate is not None
    assert fit_answers(to_job(form.request), form.estimate, {"gpu": ""}, "GiB") is None


def test_every_fix_link_gives_the_setup_the_fix_promises_and_it_fits():
    job, given, answers = _answers(OVER)
    assert not answers.fits and given.peak.bytes > job.gpu.capacity_bytes
    shown = answers.fixes + answers.more_fixes
    assert shown, "a setup that does not fit gets at least one way out"
    for fix in shown:
        result = _followed(fix.href)
        assert result.gpu.fits, fix.summary
        assert format_bytes(result.peak.bytes, "GiB") == fix.peak, fix.summary
        assert fix.href.startswith("/?") and "seq_len=4096" in fix.href  # the rest of the setup is kept


def test_the_largest_micro_batch_and_longest_sequence_are_links_to_setups_that_fit():
    # The fused step leaves room for more than one sequence (foreach's scratch and the allocator's reserve do not).
    job, _, answers = _answers(FITS | {"seq_len": "1024", "optimizer_implementation": "fused"})
    by_question = {answer.question: answer for answer in answers.answers}
    batch = by_question["Largest micro-batch that fits"]
    solved = solve(job, "micro_batch_size").value
    assert solved is not None and solved > 1 and batch.value == f"{solved:,}" and batch.action == f"Use micro-batch {solved:,}"
    assert _followed(batch.href).gpu.fits
    assert not _followed(batch.href.replace(f"micro_batch_size={solved}", f"micro_batch_size={solved + 1}")).gpu.fits
    sequence = by_question["Longest sequence that fits"]
    longest = solve(job, "seq_len").value
    assert sequence.value == f"{longest:,} tokens" and _followed(sequence.href).gpu.fits
    # One data-parallel GPU is enough, and that is what the form says already: no link, "as now".
    data = by_question["Fewest data-parallel GPUs with ZeRO stage 0"]
    assert data.value == "1 GPU" and data.current and data.href is None


def test_the_fewest_gpus_keep_the_zero_stage_and_say_why_there_is_none_without_one():
    _, _, answers = _answers(OVER | {"data": "2", "zero_stage": "3"})
    data = answers.answers[2]
    assert data.question == "Fewest data-parallel GPUs with ZeRO stage 3"
    query = dict(parse_qsl(urlparse(data.href).query))
    assert query["zero_stage"] == "3" and int(query["data"]) > 2
    assert _followed(data.href).gpu.fits
    _, _, stage0 = _answers(OVER)
    none = stage0.answers[2]
    assert none.value is None and none.href is None and none.note.startswith("ZeRO stage 0 keeps every model state")


def test_a_bare_parameter_count_gets_the_data_answer_and_a_reason_for_the_others():
    _, _, answers = _answers({"source": "params", "num_params": "7B", "gpu": "h100-80gb", "data": "4", "zero_stage": "1"})
    batch, sequence, data = answers.answers
    assert batch.value is None and "architecture" in batch.note
    assert sequence.value is None and "architecture" in sequence.note
    assert data.value is not None


def test_notes_give_sizes_in_the_page_unit():
    capacity = core.get_gpu("h100-80gb").capacity_bytes
    text = f"its peak, 162,204,303,360 B at 'optimizer.step', exceeds the GPU's {capacity:,} B"
    assert in_unit(text, "GiB") == (f"its peak, {format_bytes(162_204_303_360, 'GiB')} at 'optimizer.step', exceeds the GPU's "
                                    f"{format_bytes(capacity, 'GiB')}")
    _, _, answers = _answers({"preset": "llama-3-8b", "seq_len": "4096", "gpu": "rtx-4090-24gb"})
    assert " B " not in answers.answers[0].note and "GiB" in answers.answers[0].note


def test_the_panel_follows_the_verdict_not_the_tensors_alone():
    # Llama-3-8B LoRA with recomputation at 30,720 tokens on an H100: the tensors' peak (74 GiB) is under the
    # capacity, but the allocator's reserve with the CUDA context is not: the panel says how to make it fit.
    params = {"preset": "llama-3-8b", "seq_len": "30720", "gpu": "h100-80gb", "method": "lora",
              "activation_checkpointing": "full", "precision": "bf16"}
    job, given, answers = _answers(params)
    assert given.peak.bytes < job.gpu.capacity_bytes and given.gpu is not None and not given.gpu.fits
    assert answers is not None and not answers.fits
    assert answers.fixes and "expandable" in answers.fixes[0].summary.lower()


def test_the_bitsandbytes_upgrade_leaves_the_version_blank_and_fits():
    # Llama-2-7B under QLoRA at 3,072 tokens on an RTX 4090 passes 24 GB with bitsandbytes 0.41.1 only.
    params = {"preset": "llama-2-7b", "precision": "bf16", "seq_len": "3072", "method": "qlora",
              "bitsandbytes_version": "0.41.1", "gpu": "rtx-4090-24gb"}
    _, given, answers = _answers(params)
    assert not answers.fits
    upgrade = next(fix for fix in answers.fixes if "bitsandbytes" in fix.summary)
    query = dict(parse_qsl(urlparse(upgrade.href).query))
    assert "bitsandbytes_version" not in query and query["method"] == "qlora"
    followed = _followed(upgrade.href)
    assert followed.gpu.fits and followed.peak.bytes < given.peak.bytes
