// Flow console: live pages without reloads. The page names its topic in
// <body data-live>; /live streams what changed (server-sent events). On
// `changed` the page fetches its content again (X-Flow-Fragment: 1) and
// swaps it in; on `progress` it moves a step's bar at once. While the
// stream is down the page polls every few seconds, and fetches once when
// the stream is back, so it is late, never wrong.
(function () {
  "use strict";
  var topic = document.body.dataset.live;
  var main = document.getElementById("main");
  var state = document.getElementById("live-state");
  if (!topic || !main) return;

  var busy = false, again = false, lost = false;
  function show(text, on) {
    if (!state) return;
    state.textContent = text;
    state.className = on ? "live on" : "live";
  }

  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { "X-Flow-Fragment": "1" }, cache: "no-store", credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) { if (html !== null) main.innerHTML = html; })
      .catch(function () { /* the next change or poll tries again */ })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }

  function progress(p) {
    var bar = document.getElementById("bar-" + p.step_index);
    if (!bar || !p.total) return;
    var total = p.total, done = Math.min(p.done, total), failed = Math.min(p.failed, total - done);
    bar.dataset.done = String(done);
    bar.dataset.failed = String(failed);
    bar.dataset.total = String(total);
    bar.dataset.action = p.action;
    bar.querySelector(".done").style.width = (done * 100 / total) + "%";
    bar.querySelector(".failed").style.width = (failed * 100 / total) + "%";
    bar.dataset.held = String(p.held || 0);
    bar.querySelector(".text").textContent =
      p.action + " · " + done + "/" + total + (failed ? " · " + failed + " failed" : "") +
      (p.held && p.waiting ? " · " + p.held + " held: " + p.waiting : "");
  }

  var source = new EventSource("/live?topic=" + encodeURIComponent(topic));
  source.addEventListener("open", function () {
    show("● live", true);
    if (lost) { lost = false; refresh(); }
  });
  source.addEventListener("error", function () {
    lost = true;
    show("○ reconnecting…", false);
  });
  source.addEventListener("changed", refresh);
  source.addEventListener("progress", function (e) {
    try { progress(JSON.parse(e.data)); } catch (err) { /* a malformed record moves nothing */ }
  });
  setInterval(function () { if (lost) refresh(); }, 4000);
})();
