/* trainmem page behaviour on top of htmx. The page works without it: the server renders the same
   disclosure state, and the form submits as a plain GET. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  function formOf(node) {
    return node && node.closest ? node.closest("form#calc") : null;
  }

  function valueOf(form, name) {
    var control = form.elements.namedItem(name);
    if (!control) return "";
    if (control instanceof RadioNodeList) return control.value;
    if (control.type === "checkbox") return control.checked ? control.value : "";
    return control.value;
  }

  /* Same mini-language as app/web/controls.py condition_holds: "name=a,b" or "name>n". */
  function holds(form, expression) {
    var greater = expression.indexOf(">");
    if (greater > 0) {
      var text = valueOf(form, expression.slice(0, greater)).replace(/[,_\s]/g, "");
      return /^\d+$/.test(text) && Number(text) > Number(expression.slice(greater + 1));
    }
    var equals = expression.indexOf("=");
    return expression.slice(equals + 1).split(",").indexOf(valueOf(form, expression.slice(0, equals))) >= 0;
  }

  /* Show (and submit) only the controls that matter for the current values. */
  function disclose(form) {
    form.querySelectorAll("[data-show-when]").forEach(function (element) {
      var on = holds(form, element.dataset.showWhen);
      element.hidden = !on;
      if ("disabled" in element && element.tagName === "FIELDSET") element.disabled = !on;
    });
    form.querySelectorAll("[data-enable-when]").forEach(function (element) {
      element.disabled = !holds(form, element.dataset.enableWhen);
    });
  }

  /* Keep aria-invalid on each control in step with the message in its error slot, touching only
     the controls whose state changes. */
  function markInvalid(form) {
    form.querySelectorAll("[data-error-for]").forEach(function (slot) {
      var invalid = slot.textContent.trim() !== "";
      form.querySelectorAll('[name="' + slot.dataset.errorFor + '"]').forEach(function (control) {
        if (invalid === control.hasAttribute("aria-invalid")) return;
        if (invalid) control.setAttribute("aria-invalid", "true");
        else control.removeAttribute("aria-invalid");
      });
    });
  }

  /* An answer swaps dozens of parts out of band, one event each: mark the controls once, after all of them. */
  var marking = false;
  function markSoon() {
    if (marking) return;
    marking = true;
    setTimeout(function () {
      marking = false;
      var form = document.getElementById("calc");
      if (form) markInvalid(form);
    }, 0);
  }

  /* Runs in the capture phase, before htmx (listening on the form) reads the values. */
  function onEdit(event) {
    var form = formOf(event.target);
    if (!form) return;
    if (event.target.name === "preset" && valueOf(form, "source") === "custom") {
      /* A new base model refills the architecture fields: the same request as the
         "Fill the fields" button, which is how it works without JavaScript too. */
      event.stopPropagation();
      if (event.type === "change") document.getElementById("fill-from-preset").click();
      return;
    }
    disclose(form);
  }
  document.addEventListener("input", onEdit, true);
  document.addEventListener("change", onEdit, true);

  /* A change event after a debounced input of the same value would repeat the request (and add a
     history entry); skip requests whose query is the one already shown. */
  var shownQuery = location.search.replace(/^\?/, "");
  var showsMessages = false;  /* the page shows an invalid value's messages, not the address's setup */
  function queryOf(detail) {
    return new URLSearchParams(detail.formData).toString();
  }
  document.addEventListener("htmx:configRequest", function (event) {
    /* The make-it-fit panel that an update leaves to a request of its own changes no field. */
    if (event.detail.elt.id === "answers") return;
    if (event.detail.elt.id !== "calc") {
      /* A link that applies an answer brings a new form: whatever it sends next is news. */
      shownQuery = null;
      return;
    }
    var query = queryOf(event.detail);
    if (query === shownQuery) {
      event.preventDefault();
      return;
    }
    shownQuery = query;
    /* Typing replaces the history entry (the server says so); a choice made adds one. */
    var trigger = event.detail.triggeringEvent;
    if (trigger && trigger.type === "input") event.detail.headers["X-Edit"] = "typing";
    /* After an invalid value the address still names the last valid setup, but the page shows its messages:
       the next update is sent whole, not as what differs from that address. */
    if (showsMessages) event.detail.headers["HX-Current-URL"] = "";
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    if (!event.detail.xhr) return;
    if (event.detail.elt.id === "calc") {
      showsMessages = event.detail.xhr.getResponseHeader("HX-Reswap") === "none";
    } else if (event.detail.elt.hasAttribute("data-apply")) {
      showsMessages = false;  /* a link brought a whole new form */
    }
  });

  /* After a link applied an answer (and the form came back with it), focus goes to the new verdict. */
  var applied = false;
  document.addEventListener("htmx:beforeRequest", function (event) {
    applied = event.detail.elt.hasAttribute("data-apply");
  });
  window.addEventListener("popstate", function () {
    shownQuery = location.search.replace(/^\?/, "");
    showsMessages = false;
  });
  document.addEventListener("htmx:historyRestore", function () {
    shownQuery = location.search.replace(/^\?/, "");
    var form = document.getElementById("calc");
    if (form) disclose(form);
  });

  /* The verdict bar comes in while the full verdict is above the viewport. The state is kept on the
     root element, so the bar swapped in by each update keeps it; the new verdict is watched in turn. */
  var verdictWatch = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      var away = !entry.isIntersecting && entry.boundingClientRect.top < 0;
      document.documentElement.classList.toggle("verdict-away", away);
    });
    document.documentElement.classList.add("verdict-watched");
  }) : null;
  var watched = null;
  function watchVerdict() {
    var verdict = document.querySelector("#summary .verdict");
    if (!verdictWatch || verdict === watched) return;
    verdictWatch.disconnect();
    watched = verdict;
    if (verdict) verdictWatch.observe(verdict);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", watchVerdict);
  else watchVerdict();

  document.addEventListener("htmx:afterSettle", function () {
    markSoon();
    watchVerdict();
    if (applied) {
      applied = false;
      var summary = document.getElementById("summary");
      if (summary) summary.focus();
    }
  });
  document.addEventListener("htmx:oobAfterSwap", markSoon);

  /* The help beside a label ("?", templates/macros.html): out of the tab order until opened, since each control is
     described by its help and "?" typed in the control opens it; one open at a time, closed by Escape (focus back
     to its control), by a click elsewhere, and when focus moves to another field. */
  function tipsOutOfTabOrder(root) {
    root.querySelectorAll("details.tip > summary").forEach(function (summary) {
      if (!summary.parentNode.open) summary.tabIndex = -1;
    });
  }
  tipsOutOfTabOrder(document);
  document.addEventListener("htmx:load", function (event) { tipsOutOfTabOrder(event.detail.elt); });

  function fieldOf(node) {
    return node && node.closest ? node.closest(".field, .radios") : null;
  }
  function closeTips(kept) {
    document.querySelectorAll("details.tip[open]").forEach(function (tip) {
      if (tip !== kept) tip.open = false;
    });
  }
  function tipOf(control) {
    var described = control.closest ? control.closest("[aria-describedby]") : null;
    var ids = described ? described.getAttribute("aria-describedby").split(" ") : [];
    for (var i = 0; i < ids.length; i++) {
      var help = ids[i].indexOf("help-") === 0 ? document.getElementById(ids[i]) : null;
      if (help && help.parentNode.matches("details.tip")) return help.parentNode;
    }
    return null;
  }
  document.addEventListener("toggle", function (event) {
    var tip = event.target;
    if (!tip.matches || !tip.matches("details.tip")) return;
    tip.firstElementChild.tabIndex = tip.open ? 0 : -1;
    if (tip.open) closeTips(tip);
  }, true);
  document.addEventListener("click", function (event) {
    closeTips(event.target.closest ? event.target.closest("details.tip") : null);
  });
  document.addEventListener("focusin", function (event) {
    var field = fieldOf(event.target);
    document.querySelectorAll("details.tip[open]").forEach(function (tip) {
      if (fieldOf(tip) !== field) tip.open = false;
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      var open = document.querySelector("details.tip[open]");
      if (!open) return;
      var box = open.contains(document.activeElement) ? fieldOf(open) : null;
      closeTips(null);
      var control = box && (box.querySelector("input:checked") || box.querySelector("input, select, textarea"));
      if (control) control.focus();
      return;
    }
    if (event.key !== "?" || event.ctrlKey || event.metaKey || event.altKey || event.target.tagName === "TEXTAREA") return;
    var tip = tipOf(event.target);
    if (!tip) return;
    event.preventDefault();
    tip.open = !tip.open;
  });

  /* A pasted config over the body limit is refused before the page sees it (a 413 in the API's error
     shape, which htmx does not swap): its message goes where the page's own messages about the text go. */
  document.addEventListener("htmx:responseError", function (event) {
    if (event.detail.elt.id !== "paste-form") return;
    var slot = document.getElementById("error-config_text");
    var text = document.getElementById("f-config_text");
    var message = "The config could not be read (" + event.detail.xhr.status + ").";
    try {
      var detail = JSON.parse(event.detail.xhr.responseText).detail[0];
      if (detail && detail.msg) message = "The config " + detail.msg + ".";
    } catch (ignored) { /* not the API's error shape: keep the status */ }
    if (slot) slot.textContent = message;
    if (text) {
      text.setAttribute("aria-invalid", "true");
      text.focus();
    }
  });
})();
