// incidentlib web app: progressive enhancement only. Every page works without this file;
// with it, search runs as you type and the SVG pictures pan and zoom.
(function () {
  "use strict";
  var SEARCH_DELAY_MS = 250; // long enough to skip keystrokes in a word, short enough to feel live

  function liveSearch() {
    var form = document.getElementById("search");
    var results = document.getElementById("results");
    if (!form || !results || !window.fetch) return;
    var timer = null, inflight = null;
    function run() {
      var params = new URLSearchParams();
      // empty filters say nothing: left out, so a shared link holds only what was chosen
      new FormData(form).forEach(function (value, key) { if (value !== "") params.append(key, value); });
      var query = params.toString();
      history.replaceState(null, "", "/?" + query);
      followSwitch(params);
      if (inflight) inflight.abort();
      inflight = new AbortController();
      fetch("/ui/results?" + query, { signal: inflight.signal, headers: { "Accept": "text/html" } })
        .then(function (r) { return r.text(); })
        .then(function (html) { results.innerHTML = html; })
        .catch(function (err) { if (err.name !== "AbortError") results.setAttribute("data-error", String(err)); });
    }
    function later() { clearTimeout(timer); timer = setTimeout(run, SEARCH_DELAY_MS); }
    form.addEventListener("input", later);
    form.addEventListener("change", later);
  }

  // The language switch was rendered for the address the page was loaded at; a search typed since is in the
  // address bar now, so the switch follows it and flips only the language.
  function followSwitch(params) {
    var link = document.querySelector("a.lang");
    if (!link) return;
    var other = new URLSearchParams(params);
    other.set("lang", link.getAttribute("hreflang"));
    link.setAttribute("href", location.pathname + "?" + other.toString());
  }

  // A pasted text (or series) not yet sent, or longer than a link holds, is not in the switch's address: switching
  // sends the form again in the other language, so the paste and its answer are kept.
  function switchKeepsPaste() {
    var link = document.querySelector("a.lang");
    var form = document.querySelector("form.seen");
    if (!link || !form) return;
    var box = form.querySelector("textarea");
    link.addEventListener("click", function (e) {
      if (!box || !box.value.trim()) return;
      e.preventDefault();
      form.setAttribute("action", location.pathname + "?lang=" + link.getAttribute("hreflang"));
      form.submit();
    });
  }

  function keyboard() {
    document.addEventListener("keydown", function (e) {
      var tag = (e.target.tagName || "").toLowerCase();
      if (e.key === "/" && tag !== "input" && tag !== "textarea" && tag !== "select") {
        var box = document.getElementById("q") || document.getElementById("text");
        if (box) { e.preventDefault(); box.focus(); }
      }
    });
  }

  function zoomable(root) {
    var svg = root.querySelector("svg");
    var full = { x: 0, y: 0, w: +root.dataset.width, h: +root.dataset.height };
    var view = Object.assign({}, full);
    function apply() { svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" ")); }
    function zoom(factor, cx, cy) {
      var nw = Math.min(full.w * 4, Math.max(full.w / 8, view.w * factor));
      var nh = nw * full.h / full.w;
      cx = cx === undefined ? view.x + view.w / 2 : cx;
      cy = cy === undefined ? view.y + view.h / 2 : cy;
      view.x = cx - (cx - view.x) * nw / view.w; view.y = cy - (cy - view.y) * nh / view.h;
      view.w = nw; view.h = nh; apply();
    }
    function toSvg(e) {
      var box = svg.getBoundingClientRect();
      return { x: view.x + (e.clientX - box.left) / box.width * view.w, y: view.y + (e.clientY - box.top) / box.height * view.h };
    }
    root.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () {
        var how = button.dataset.zoom;
        if (how === "in") zoom(0.8); else if (how === "out") zoom(1.25); else { view = Object.assign({}, full); apply(); }
      });
    });
    svg.addEventListener("wheel", function (e) { e.preventDefault(); var p = toSvg(e); zoom(e.deltaY < 0 ? 0.85 : 1.18, p.x, p.y); }, { passive: false });
    var drag = null, moved = false;
    svg.addEventListener("pointerdown", function (e) { drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y }; moved = false; });
    window.addEventListener("pointermove", function (e) {
      if (!drag) return;
      var box = svg.getBoundingClientRect();
      var dx = (e.clientX - drag.x) / box.width * view.w, dy = (e.clientY - drag.y) / box.height * view.h;
      if (Math.abs(e.clientX - drag.x) + Math.abs(e.clientY - drag.y) > 4) { moved = true; svg.classList.add("dragging"); }
      if (moved) { view.x = drag.vx - dx; view.y = drag.vy - dy; apply(); }
    });
    window.addEventListener("pointerup", function () { drag = null; svg.classList.remove("dragging"); });
    // a drag that ends on a node must not follow its link
    svg.addEventListener("click", function (e) { if (moved) { e.preventDefault(); moved = false; } }, true);
    svg.addEventListener("keydown", function (e) {
      var step = view.w / 10;
      if (e.key === "+" || e.key === "=") zoom(0.8);
      else if (e.key === "-") zoom(1.25);
      else if (e.key === "0") { view = Object.assign({}, full); apply(); }
      else if (e.key === "ArrowLeft") { view.x -= step; apply(); }
      else if (e.key === "ArrowRight") { view.x += step; apply(); }
      else if (e.key === "ArrowUp") { view.y -= step; apply(); }
      else if (e.key === "ArrowDown") { view.y += step; apply(); }
      else return;
      e.preventDefault();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    liveSearch();
    switchKeepsPaste();
    keyboard();
    document.querySelectorAll(".zoomable").forEach(zoomable);
  });
})();
