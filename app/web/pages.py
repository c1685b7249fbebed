"""The calculator page: one GET form whose URL is the state, enhanced with htmx.

``GET /`` renders the whole page. The same URL requested by htmx (``HX-Request``) renders only
what changes: the summary, plus out-of-band updates for the rest of the result, the per-field
messages and the fields a preset fills, and of those only the ones that differ from what the page
shows (the setup in ``HX-Current-URL``; app/web/update.py). A history-restore request gets the whole
page, and so does a link that applies an answer (htmx targets the form, ``HX-Target: calc``): it
changes fields the person did not touch, so the form comes back with them.

When the input is invalid the htmx answer is still a 200 (htmx does not swap error statuses by
default) with ``HX-Reswap: none``: the last good result is left in place, and out-of-band swaps
put each message next to its field and mark that result as out of date. A full page with invalid
input is a 422 that shows the same messages. Nothing here lets an exception become a 500.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Annotated, Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Header, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from starlette.datastructures import QueryParams

from app import core
from app.api.schemas import ARCHITECTURE_FIELDS, to_parallelism
from app.core.finetuning import ALL_LINEAR, module_names
from app.core.job import Job
from app.middleware import GZIP_LEVEL, GZIP_MINIMUM_BYTES
from app.web import controls, imports, links, update
from app.web.accuracy import accuracy
from app.web.answers import fit_answers
from app.web.compare import pin
from app.web.form import (
    ALL_CONTROLS,
    CUSTOM_PRECISION,
    DEFAULT_PRESET,
    DTYPE_FIELDS,
    EXTRA_CONTROLS,
    HOST_RAM,
    ParsedForm,
    parse_form,
)
from app.web.links import EXPORT_LABELS, TEMPLATES_DIR
from app.web.recompute import recompute_choices
from app.web.sweeps import sweeps
from app.web.view import UNIT_BYTES, format_bytes, format_size_input, result_view

VARY: Final = "HX-Request, HX-History-Restore-Request, HX-Target, HX-Current-URL"
EDIT_HEADER: Final = "X-Edit"  # "typing" when static/app.js sends an update for text typed, not a choice made
FORM_ID: Final = "calc"  # an htmx request that targets the whole form gets the whole page
PASTE_ID: Final = "paste"  # the paste box, which alone changes when a pasted config cannot be read
UPDATES_KEPT: Final = 32  # rendered updates kept, by query: the setup shown is usually one just rendered
STATE_NAMES: Final = ALL_CONTROLS | {links.PIN}

templates = Jinja2Templates(directory=TEMPLATES_DIR)
router = APIRouter(include_in_schema=False)


def _architecture(form: ParsedForm, job: Job | None) -> core.Architecture | None:
    """The model's architecture, for the module names: the job's, else the chosen preset's."""
    if job is not None:
        return job.architecture
    if form.source in ("preset", "custom"):
        preset = form.values.get("preset", "")
        return core.get_preset(preset if preset in core.model_presets() else DEFAULT_PRESET).architecture
    return None


def finetuning_presets(form: ParsedForm, params: Mapping[str, str],
                       arch: core.Architecture | None) -> list[tuple[str, str]]:
    """Common adapter setups, one click away: (label, link to this page with them set)."""
    names = module_names(arch) if arch is not None else {}
    q, v = names.get("attn.q"), names.get("attn.v")
    qv = f"{q},{v}" if q and v else names.get("attn.qkv", "q_proj,v_proj")
    setups = [
        ("QLoRA r=16 all-linear", {"finetuning.method": "qlora", "finetuning.rank": 16,
                                   "finetuning.target_modules": ALL_LINEAR}),
        ("LoRA r=8 q,v", {"finetuning.method": "lora", "finetuning.rank": 8, "finetuning.target_modules": qv}),
        ("LoRA r=16 all-linear", {"finetuning.method": "lora", "finetuning.rank": 16,
                                  "finetuning.target_modules": ALL_LINEAR}),
    ]
    state = links.state_of(params, names=STATE_NAMES)
    out = []
    for label, change in setups:
        if form.values.get("precision", "").startswith("autocast"):
            change = change | {"training.precision": "bf16"}  # adapters need the base in its own dtype
        out.append((label, links.href(links.changed(state, change))))
    return out


def page_context(form: ParsedForm, params: Mapping[str, str], *, later_answers: bool = False) -> dict[str, Any]:
    """What the templates need for `form`; `params` is the query, whose state the answers' links carry on.

    With `later_answers` (htmx's update) the make-it-fit panel is left to a request of its own (GET /answers, which
    the panel's placeholder sends when it lands): the solver and its fixes replay the allocator a dozen times, and
    the verdict should not wait for them. A whole page (without JavaScript too) has the panel filled in."""
    values = _shown_values(form)
    job = form.job
    view, answers, charts, recompute = _results(form, params, later_answers=later_answers)
    return {
        "form": form,
        "values": values,
        "errors": form.errors,
        "waiting": form.waiting,
        "view": view,
        "answers": answers,
        "answers_later": _answers_later(params) if later_answers and view is not None and _has_gpu(job) else None,
        "sweeps": charts,
        "recompute": recompute,
        "pinned": pin(params, form, form.unit),
        "accuracy": accuracy(),
        "options": controls.options(),
        "labels": controls.LABELS,
        "help": controls.help_text,
        "arch_main": controls.ARCH_MAIN,
        "arch_more": controls.ARCH_MORE,
        "loop_shown": controls.LOOP_SHOWN,
        "extra_controls": EXTRA_CONTROLS,
        "dtype_fields": DTYPE_FIELDS,
        "module_names": _module_hint(_architecture(form, job)),
        "finetuning_presets": finetuning_presets(form, params, _architecture(form, job)),
        "exports": _export_links(params) if view is not None and form.source != "hub" else (),  # export does not fetch
        "when": lambda expression: controls.condition_holds(expression, values),
        "paste": paste_box(params),
        "imported": None,
        "marks": None,
    }


def _results(form: ParsedForm, params: Mapping[str, str], *, later_answers: bool) -> tuple[Any, Any, Any, Any]:
    """The result's view, the make-it-fit answers (unless they come later), the sweeps and the recomputation
    choices; None for each the form gives no estimate (or job) for."""
    view = answers = charts = recompute = None
    job = form.job
    if form.ok and form.request is not None and form.estimate is not None:
        unit = form.unit
        view = result_view(form.estimate, to_parallelism(form.request.parallelism), unit,
                           attention=form.request.training.attention, host_ram=form.host_ram_bytes)
        if job is not None:
            if not later_answers:
                answers = fit_answers(job, form.estimate, links.state_of(params, names=STATE_NAMES), unit)
            charts = sweeps(job, form.estimate, size=lambda value: format_bytes(value, unit), unit=unit,
                            unit_bytes=UNIT_BYTES[unit])
            recompute = recompute_choices(job, form.estimate, unit)
    return view, answers, charts, recompute


def _shown_values(form: ParsedForm) -> dict[str, str]:
    """The controls' values, the sizes the estimate read written back in the page's own form (unless in error)."""
    values = dict(form.values)
    if not form.errors.get("framework_overhead_bytes") and form.request is not None:
        values["framework_overhead_bytes"] = format_size_input(form.request.training.framework_overhead_bytes)
    if not form.errors.get(HOST_RAM) and form.host_ram_bytes is not None:
        values[HOST_RAM] = format_size_input(form.host_ram_bytes)
    return values


def _has_gpu(job: Job | None) -> bool:
    return job is not None and job.gpu is not None


def _answers_later(params: Mapping[str, str]) -> str:
    """Where the make-it-fit panel asks for its answers once it lands."""
    return f"/answers?{urlencode(list(params.items()))}"


def paste_box(params: Mapping[str, str], *, text: str = "", kind: str = imports.AUTO,
              error: imports.PasteError | None = None) -> dict[str, Any]:
    """The paste form: what it shows, and the page's state it posts without JavaScript."""
    return {"text": text, "kind": kind, "error": error, "open": bool(text or error),
            "kinds": tuple(imports.KIND_LABELS.items()),
            "state": urlencode(links.state_of(params, names=STATE_NAMES))}


def _export_links(params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Links that download this setup as each framework's config (app.web.docs.export_file)."""
    query = urlencode([(key, value) for key, value in params.items() if key not in ("pin",)])
    return tuple((label, f"/export/{kind}?{query}") for kind, label in EXPORT_LABELS.items())


def _module_hint(arch: core.Architecture | None) -> str:
    if arch is None:
        return ""
    return ", ".join(dict.fromkeys(module_names(arch).values())) + f", or {ALL_LINEAR}"


def _swaps(form: ParsedForm) -> dict[str, Any]:
    """What an htmx answer refreshes out of band besides the summary, breakdown and explanation.

    The architecture fields are refreshed whenever they show a preset's values (any source but
    custom, or a refill), the dtype fields whenever they show a precision preset's; the person's
    own edits are never overwritten. Error slots inside a refreshed fieldset come with it.
    """
    arch = form.source != "custom" or form.refilled
    dtypes = form.values["precision"] != CUSTOM_PRECISION
    inside = (set(ARCHITECTURE_FIELDS) if arch else set()) | (set(DTYPE_FIELDS) if dtypes else set())
    slots = (ALL_CONTROLS | {"form"}) - inside - {"unit"}  # the unit switch never errs and has no slot
    return {"swap_arch": arch, "swap_dtypes": dtypes, "oob_error_slots": sorted(slots)}


class _Kept:
    """The answers of a function for its last `size` argument tuples, as `functools.lru_cache` keeps them, and
    whether one is kept, asked without computing it (`args in kept`)."""

    def __init__(self, function: Callable[..., Any], size: int) -> None:
        self._function, self._size = function, size
        self._answers: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, args: tuple) -> bool:
        return args in self._answers

    def __call__(self, *args: Any) -> Any:
        with self._lock:
            if args in self._answers:
                self._answers.move_to_end(args)
                return self._answers[args]
        answer = self._function(*args)
        with self._lock:
            self._answers[args] = answer
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)
        return answer


def _sent_update(query: str, shown: str | None) -> tuple[str, bytes | None, bool]:
    """What goes to a page showing the setup `shown` (a query string; None: unknown) for the setup in `query`, the
    same gzipped (None where it is too short to gain), and whether htmx swaps it in. Kept for the last few pairs
    (`sent_update`): a setup asked again from the same one (the way back, a repeated keystroke, many pages showing
    one setup) is neither diffed nor compressed again."""
    current = rendered_update(query)
    before = rendered_update(shown) if shown is not None else None
    body = update.changes(current, before)
    encoded = body.encode()
    packed = gzip.compress(encoded, compresslevel=GZIP_LEVEL, mtime=0) if len(encoded) >= GZIP_MINIMUM_BYTES else None
    return body, packed, current.swapped


sent_update = _Kept(_sent_update, UPDATES_KEPT)


@lru_cache(maxsize=UPDATES_KEPT)
def rendered_update(query: str) -> update.Update:
    """The htmx update for the setup in `query` (a query string), split into its fragments."""
    params = QueryParams(query)
    form = parse_form(params)
    context = page_context(form, params, later_answers=True) | _swaps(form) | {"marks": update.MARKS}
    swapped = form.ok and context["view"] is not None
    return update.split(templates.get_template("update.html").render(context), swapped=swapped)


def _update_key(request: Request, hx_current_url: str | None) -> tuple[str, str | None]:
    """The setup asked for and the setup the page shows (None: unknown), as `sent_update` keeps them."""
    shown = update.shown_query(hx_current_url, path=request.url.path, host=request.headers.get("host"))
    return str(request.query_params), str(QueryParams(shown)) if shown is not None else None


def _update_response(request: Request, key: tuple[str, str | None]) -> HTMLResponse:
    """htmx's update: what changed since the setup the page shows, gzipped once per pair of setups where the
    client takes gzip (the compression middleware passes a response that has its Content-Encoding through)."""
    body, packed, swapped = sent_update(*key)
    if packed is not None and "gzip" in request.headers.get("accept-encoding", ""):
        response = HTMLResponse(packed, headers={"Content-Encoding": "gzip"})
    else:
        response = HTMLResponse(body)
    if not swapped:
        response.headers["HX-Reswap"] = "none"
        response.headers["HX-Push-Url"] = "false"  # the address keeps the last setup that gave an answer
    elif request.headers.get(EDIT_HEADER) == "typing":
        # Typing replaces the history entry rather than adding one per pause; a choice made (a select, a
        # checkbox) adds one, so the way back steps through choices, not keystrokes.
        response.headers["HX-Replace-Url"] = f"{request.url.path}?{request.url.query}"
    response.headers["Vary"] = f"{VARY}, {EDIT_HEADER}, Accept-Encoding"
    return response


@router.get("/", response_class=HTMLResponse)
async def calculator(
    request: Request,
    hx_request: Annotated[str | None, Header()] = None,
    hx_history_restore_request: Annotated[str | None, Header()] = None,
    hx_target: Annotated[str | None, Header()] = None,
    hx_current_url: Annotated[str | None, Header()] = None,
) -> HTMLResponse:
    """The calculator; htmx gets the changed fragments, everyone else (history restores, applied answers) the page.

    An update already kept (a repeated keystroke, the way back, many pages on one setup) is answered on the event
    loop; rendering, which takes milliseconds, runs in a worker thread so that it holds up no other request."""
    from_htmx = hx_request == "true"
    if from_htmx and hx_history_restore_request != "true" and hx_target != FORM_ID:
        key = _update_key(request, hx_current_url)
        if key in sent_update:
            return _update_response(request, key)
        return await run_in_threadpool(_update_response, request, key)
    return await run_in_threadpool(_page, request, from_htmx)


def _page(request: Request, from_htmx: bool) -> HTMLResponse:
    form = parse_form(request.query_params)
    status = 200 if form.ok or from_htmx else 422
    response = templates.TemplateResponse(request, "page.html", page_context(form, request.query_params),
                                          status_code=status)
    response.headers["Vary"] = VARY
    return response


@router.get("/answers", response_class=HTMLResponse)
async def answers_panel(request: Request) -> HTMLResponse:
    """The make-it-fit panel for the setup in the query, alone: what an htmx update's placeholder asks for."""
    return await run_in_threadpool(_answers_panel, request)


def _answers_panel(request: Request) -> HTMLResponse:
    params = request.query_params
    form = parse_form(params)
    job = form.job
    answers = None
    if form.ok and form.estimate is not None and job is not None:
        answers = fit_answers(job, form.estimate, links.state_of(params, names=STATE_NAMES), form.unit)
    response = templates.TemplateResponse(request, "answers-panel.html", {"answers": answers, "answers_later": None})
    response.headers["Vary"] = VARY
    return response


@router.post("/import", response_class=HTMLResponse)
async def import_config(
    request: Request,
    hx_request: Annotated[str | None, Header()] = None,
) -> HTMLResponse:
    """A pasted training config: the page with the form filled from it and what it said beside the result.

    htmx gets the page too (it swaps the part holding the paste box and the form) and ``HX-Push-Url`` with
    the new state; without JavaScript the page answers the POST and links the new state. A text that cannot
    be read leaves the state as it was, with the message at the paste box (a 422 without JavaScript); htmx
    then swaps only the paste box, so that the rest of the page stays the rendering of its address, as the
    next update relies on (the live fields may have moved on from that address).
    """
    fields = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    return await run_in_threadpool(_import_page, request, fields, hx_request == "true")


def _import_page(request: Request, fields: Mapping[str, str], from_htmx: bool) -> HTMLResponse:
    state = imports.page_state(fields)
    text, kind = fields.get(imports.TEXT, ""), fields.get(imports.KIND, imports.AUTO)
    result = imports.read_paste(kind, text, state)
    imported = result if isinstance(result, imports.Imported) else None
    error = result if isinstance(result, imports.PasteError) else None
    if imported is not None:
        state = imported.state
    form = parse_form(state)
    context = page_context(form, state) | {
        "paste": paste_box(state, text=text, kind=kind, error=error),
        "imported": imported,
    }
    ok = imported is not None and form.ok
    status = 200 if ok or from_htmx else 422
    response = templates.TemplateResponse(request, "page.html", context, status_code=status)
    if imported is not None and from_htmx:
        response.headers["HX-Push-Url"] = imported.href
    elif from_htmx:  # only the paste box changes: the rest stays what the address says it is
        response.headers["HX-Retarget"] = response.headers["HX-Reselect"] = f"#{PASTE_ID}"
    response.headers["Vary"] = VARY
    return response


@router.get("/import")
def import_address() -> RedirectResponse:
    """The paste box answers a POST; its address opened directly is the calculator."""
    return RedirectResponse("/", status_code=303)
