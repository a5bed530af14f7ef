// tickd console: refreshes the page every few seconds (pausable; the choice
// is kept in this browser), and shows each time in the viewer's zone too.
// The pages work without it.
(function () {
  "use strict";
  var main = document.getElementById("content");
  var button = document.getElementById("refresh-toggle");
  var every = main ? parseInt(main.getAttribute("data-refresh"), 10) : 0;
  var paused = window.localStorage && localStorage.getItem("tickd-refresh-paused") === "1";

  function localTimes(root) {
    var els = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < els.length; i++) {
      var t = new Date(els[i].getAttribute("datetime"));
      if (isNaN(t)) continue;
      var span = els[i].nextElementSibling;
      if (!span || !span.classList.contains("viewer")) {
        span = document.createElement("span");
        span.className = "viewer muted";
        els[i].after(span);
      }
      span.textContent = " (" + t.toLocaleString() + " yours)";
    }
  }

  function label() {
    if (button) button.textContent = paused ? "Resume refresh" : "Pause refresh";
  }

  function refresh() {
    if (paused || !main || document.hidden) return;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content");
        var active = document.activeElement;
        if (fresh && !(active && main.contains(active) && /INPUT|TEXTAREA/.test(active.tagName))) {
          main.innerHTML = fresh.innerHTML;
          localTimes(main);
          // A page with nothing left to change says so (data-refresh 0).
          if (parseInt(fresh.getAttribute("data-refresh"), 10) === 0 && timer) {
            clearInterval(timer);
            timer = null;
          }
          document.dispatchEvent(new Event("tickd:refreshed"));
        }
      })
      .catch(function () {});
  }

  if (button) {
    button.addEventListener("click", function () {
      paused = !paused;
      if (window.localStorage) localStorage.setItem("tickd-refresh-paused", paused ? "1" : "0");
      label();
    });
  }
  label();
  localTimes(document);
  var timer = every > 0 ? setInterval(refresh, every * 1000) : null;
})();
