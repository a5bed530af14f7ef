// tickd console: refreshes the page every few seconds (pausable; the choice
// is kept in this browser; a form being filled in is left as it is), and
// shows each time in the viewer's zone too.
// The pages work without it.
(function () {
  "use strict";
  var main = document.getElementById("content");
  var button = document.getElementById("refresh-toggle");
  var every = main ? parseInt(main.getAttribute("data-refresh"), 10) : 0;
  var paused = window.localStorage && localStorage.getItem("tickd-refresh-paused") === "1";

  // shown is t in the viewer's zone, in the form the pages use:
  // 2026-11-27 00:03:44.
  function shown(t) {
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return t.getFullYear() + "-" + two(t.getMonth() + 1) + "-" + two(t.getDate()) + " " +
      two(t.getHours()) + ":" + two(t.getMinutes()) + ":" + two(t.getSeconds());
  }

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
      span.textContent = " (" + shown(t) + " yours)";
    }
  }

  function label() {
    if (button) button.textContent = paused ? "Resume refresh" : "Pause refresh";
  }

  // touched: whether a part of the page holds the focus or a field the
  // user has changed, so that a refresh must leave it as it is.
  function touched(el) {
    if (el.nodeType !== 1) return false;
    var active = document.activeElement;
    if (active && active !== document.body && el.contains(active) && /INPUT|TEXTAREA|SELECT/.test(active.tagName)) return true;
    var fields = el.querySelectorAll("input, textarea, option");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.tagName === "OPTION" ? f.selected !== f.defaultSelected
        : /checkbox|radio/.test(f.type) ? f.checked !== f.defaultChecked
        : f.value !== f.defaultValue) return true;
    }
    return false;
  }

  // patch replaces the parts of main that changed, and only those: a form
  // that did not change stays the same element, with what the user typed.
  function patch(fresh) {
    localTimes(fresh);
    var now = main.childNodes, next = fresh.childNodes;
    if (now.length !== next.length) {
      for (var i = 0; i < now.length; i++) if (touched(now[i])) return false;
      main.innerHTML = fresh.innerHTML;
      localTimes(main);
      return true;
    }
    var parts = [];
    for (var j = 0; j < now.length; j++) {
      if (!now[j].isEqualNode(next[j]) && !touched(now[j])) parts.push([now[j], next[j]]);
    }
    parts.forEach(function (p) { p[0].replaceWith(document.importNode(p[1], true)); });
    return true;
  }

  function refresh() {
    if (paused || !main || document.hidden) return;
    fetch(window.location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("content");
        if (fresh && patch(fresh)) {
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
