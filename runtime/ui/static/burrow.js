// Burrow's UI glue: the CSRF header on htmx requests, confirmations, and live refresh.
// No inline scripts anywhere (the pages' Content-Security-Policy forbids them).
(function () {
  "use strict";
  var body = document.body;

  document.addEventListener("htmx:configRequest", function (event) {
    if (body.dataset.csrf) { event.detail.headers["X-CSRF-Token"] = body.dataset.csrf; }
  });

  // A form with data-confirm asks first (actions that change a run or a schedule).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  // Live refresh: the server sends `changed` when runs change (RabbitMQ run-change wakes,
  // else its poll); parts of the page with hx-trigger="burrow:changed from:body" re-fetch.
  var live = body.dataset.live;
  if (live && window.EventSource) {
    var source = new EventSource(live);
    source.addEventListener("changed", function () {
      if (document.querySelector("details[open].keep-open, dialog[open]")) { return; }
      window.htmx.trigger(body, "burrow:changed");
    });
    window.addEventListener("pagehide", function () { source.close(); });
  }

  // History rows: a button shows the event's payload (kept open across live refreshes).
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-toggle]");
    if (!button) { return; }
    var target = document.getElementById(button.dataset.toggle);
    if (!target) { return; }
    var open = target.hidden;
    target.hidden = !open;
    button.setAttribute("aria-expanded", String(open));
  });
})();
