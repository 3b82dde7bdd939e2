// notifyonce console: the live campaign page polls its JSON every 2 seconds and redraws
// its numbers, state, bar and chart; the overview asks for itself every few seconds
// and swaps in its tables (the search box, outside them, keeps what is typed); the
// problems page's "all shown" box ticks every row; a copy button copies its command.
// No framework, no build step, nothing from the server run as code.
(function () {
  "use strict";
  var EVERY = 2000;
  var fmt = function (n) { return n === null || n === undefined ? "unknown" : Number(n).toLocaleString("en-US"); };

  // The chart of sends per minute with its axes, scale and time, as the server draws it
  // (web/_svg.py: chart): the same margins, labels and line.
  function chart(values, width, height) {
    var L = 46, R = 10, T = 8, B = 18;
    var W = L + width + R, H = T + height + B, base = T + height;
    var top = Math.max.apply(null, values.concat([0])) || 1;
    var step = width / Math.max(values.length - 1, 1);
    var ns = "http://www.w3.org/2000/svg";
    var el = function (name, attrs, text) {
      var node = document.createElementNS(ns, name);
      Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
      if (text !== undefined) { node.textContent = text; }
      return node;
    };
    var svg = el("svg", { "class": "chart", width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img" });
    var total = values.reduce(function (a, b) { return a + b; }, 0);
    svg.setAttribute("aria-label", fmt(total) + " sends in the last " + values.length + " minutes, at most " + fmt(top) + " a minute");
    var axes = el("g", { stroke: "#9aa3ad", "stroke-width": "1" });
    axes.appendChild(el("line", { x1: L, y1: T, x2: L, y2: base }));
    axes.appendChild(el("line", { x1: L, y1: base, x2: L + width, y2: base }));
    svg.appendChild(axes);
    var labels = el("g", { "font-size": "10", fill: "#5b6570", "font-family": "system-ui, sans-serif" });
    labels.appendChild(el("text", { x: L - 4, y: T + 8, "text-anchor": "end", "data-axis": "top" }, fmt(top) + "/min"));
    labels.appendChild(el("text", { x: L - 4, y: base, "text-anchor": "end" }, "0"));
    labels.appendChild(el("text", { x: L, y: H - 4, "data-axis": "start" }, "-" + values.length + " min"));
    labels.appendChild(el("text", { x: Math.round(L + width / 2), y: H - 4, "text-anchor": "middle" }, "sends per minute"));
    labels.appendChild(el("text", { x: L + width, y: H - 4, "text-anchor": "end" }, "now"));
    svg.appendChild(labels);
    var pts = values.map(function (v, i) {
      return (L + i * step).toFixed(1) + "," + (base - (v / top) * height).toFixed(1);
    }).join(" ");
    svg.appendChild(el("polyline", { fill: "none", stroke: "#1d5fa8", "stroke-width": "1.5", points: pts }));
    return svg;
  }

  // One time format on every page: UTC, 24-hour, as the server writes its times (never the
  // browser's locale, which may say 2:15:33 AM beside 02:15:30 UTC).
  function utc() { return new Date().toISOString().slice(11, 19) + " UTC"; }

  function set(root, name, text) {
    var el = root.querySelector('[data-field="' + name + '"]');
    if (el) { el.textContent = text; }
  }

  var ENDED = ["cancelled", "finished"];

  function state(name, done, total) {
    var badge = document.querySelector('[data-field="state-badge"] .badge');
    if (badge) {
      badge.textContent = name;
      badge.setAttribute("data-state", name);
      badge.className = "badge state-" + name.replace(/ /g, "-");
    }
    var bar = document.querySelector('[data-field="bar"] progress');
    if (bar && total) {
      var shown = Math.min(done, total);
      bar.value = shown;
      var pct = bar.parentNode.querySelector(".pct");
      if (pct) { pct.textContent = Math.round(100 * shown / total) + "%"; }
    }
    if (ENDED.indexOf(name) >= 0) {
      document.querySelectorAll("[data-while-live], #cancel").forEach(function (el) { el.hidden = true; });
    }
  }

  function refresh(root) {
    // The page's own HTML, parsed, not run: its tables replace these ones.
    var every = Number(root.getAttribute("data-refresh-every")) * 1000;
    function again() {
      fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.text(); })
        .then(function (html) {
          var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(root.id);
          if (!fresh) { throw new Error("no " + root.id + " in the page"); }
          root.replaceChildren.apply(root, Array.prototype.slice.call(fresh.childNodes));
          set(root, "updated", "updated " + utc());
        })
        .catch(function (e) { set(root, "updated", "not updated: " + e.message); })
        .then(function () { window.setTimeout(again, every); });
    }
    window.setTimeout(again, every);
  }

  function copy(button) {
    button.addEventListener("click", function () {
      var text = document.getElementById(button.getAttribute("data-copy")).textContent;
      var done = function () { button.textContent = "Copied"; };
      var select = function () {
        // No clipboard (a page not served over https nor from this machine): select it.
        var range = document.createRange();
        range.selectNodeContents(document.getElementById(button.getAttribute("data-copy")));
        window.getSelection().removeAllRanges();
        window.getSelection().addRange(range);
        button.textContent = "Selected: press Ctrl+C";
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, select);
      } else {
        select();
      }
    });
  }

  function live(root) {
    var url = root.getAttribute("data-live-url");
    function poll() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
        .then(function (d) {
          set(root, "done", fmt(d.done));
          set(root, "total", fmt(d.total));
          set(root, "rate", d.rate.toFixed(2));
          set(root, "remaining", fmt(d.remaining));
          set(root, "eta", d.eta || "unknown");
          set(root, "unknown", fmt(d.unknown));
          set(root, "cancel_state", d.cancel_state || "not requested");
          set(root, "state", d.state);
          state(d.state, d.done, d.total);
          set(root, "last_sent_at", d.last_sent_at ? d.last_sent_at.replace("T", " ").slice(0, 19) : "none yet");
          Object.keys(d.counts).forEach(function (s) {
            var cell = root.querySelector('[data-count="' + s + '"]');
            if (cell) { cell.textContent = fmt(d.counts[s]); }
          });
          var box = root.querySelector('[data-field="sparkline"]');
          if (box) { box.replaceChildren(chart(d.per_minute, 480, 60)); }
          set(root, "updated", "updated " + utc());
        })
        .catch(function (e) { set(root, "updated", "not updated: " + e.message); })
        .then(function () { window.setTimeout(poll, EVERY); });
    }
    window.setTimeout(poll, EVERY);
  }

  document.querySelectorAll("[data-live-url]").forEach(live);
  document.querySelectorAll("[data-refresh-every]").forEach(refresh);
  document.querySelectorAll("[data-copy]").forEach(copy);
  document.querySelectorAll("[data-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      all.form.querySelectorAll('input[name="slot"]').forEach(function (b) { b.checked = all.checked; });
    });
  });
})();
