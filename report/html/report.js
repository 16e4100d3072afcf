(function () {
  // report.html's one script: its hash is in the page's CSP. It marks on
  // <html> that the page rendered (data-rendered, data-charts) and any error
  // or blocked load (data-error), so that a headless browser's DOM says
  // whether the page worked; then it makes the icicles (click to zoom,
  // search) and the timelines (drag to zoom) explorable.
  var d = document.documentElement;
  function fail(m) { d.setAttribute("data-error", String(m)); }
  window.addEventListener("error", function (e) {
    fail(e.message || ("load failed: " + (e.target && (e.target.src || e.target.href))));
  }, true);
  document.addEventListener("securitypolicyviolation", function (e) {
    fail("blocked by CSP: " + e.violatedDirective + " " + e.blockedURI);
  });

  // bytes renders a byte count as the page does: "960.00 MiB".
  function bytes(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return i ? n.toFixed(2) + " " + u[i] : n + " B";
  }
  function $$(root, sel) { return Array.prototype.slice.call(root.querySelectorAll(sel)); }
  function num(el, name) { return Number(el.getAttribute(name)); }

  // An icicle: its frames are <g data-l data-o data-b data-n> in depth-first
  // order, so a frame's descendants follow it until a frame at its level or
  // above. Zooming into a frame draws it and them across the full width.
  var ROW = 18, W = 1000, CHAR = 6.6;
  function fit(name, w) {
    var n = Math.floor(w / CHAR);
    if (n < 3) return "";
    return name.length <= n ? name : name.slice(0, n - 1).trim() + "\u2026";
  }
  function icicle(svg) {
    var tools = svg.previousElementSibling, total = num(svg, "data-total");
    var search = tools.querySelector(".flame-search"), reset = tools.querySelector(".flame-reset");
    var crumbs = tools.querySelector(".flame-crumbs"), match = tools.querySelector(".flame-match");
    var nodes = $$(svg, "g").map(function (g) {
      return { g: g, l: num(g, "data-l"), o: num(g, "data-o"), b: num(g, "data-b"), n: g.getAttribute("data-n") };
    });
    function zoom(i) {
      var z = i < 0 ? { l: 0, o: 0, b: total } : nodes[i], top = i < 0 ? 0 : z.l, rows = 1;
      nodes.forEach(function (n, j) {
        var inside = i < 0 || j === i || (j > i && n.l > z.l && n.o >= z.o && n.o + n.b <= z.o + z.b);
        if (i >= 0 && j > i && n.l <= z.l) inside = false;
        n.g.style.display = inside ? "" : "none";
        if (!inside) return;
        var x = (n.o - z.o) / z.b * W, w = n.b / z.b * W, y = (n.l - top) * ROW;
        var r = n.g.querySelector("rect"), t = n.g.querySelector("text");
        r.setAttribute("x", x.toFixed(1)); r.setAttribute("y", y);
        r.setAttribute("width", Math.max(w - 0.5, 0.5).toFixed(1));
        t.setAttribute("x", (x + 3).toFixed(1)); t.setAttribute("y", y + 12.5);
        t.textContent = fit(n.n, w - 6);
        rows = Math.max(rows, n.l - top + 1);
      });
      svg.setAttribute("viewBox", "0 0 " + W + " " + rows * ROW);
      svg.setAttribute("height", rows * ROW);
      reset.hidden = i < 0;
      crumbs.textContent = "";
      if (i < 0) return;
      // The frames above it, outermost first, each a way back up.
      var path = [i];
      for (var j = i - 1; j >= 0 && nodes[path[0]].l > 0; j--) if (nodes[j].l < nodes[path[0]].l) path.unshift(j);
      path.forEach(function (k) {
        var a = document.createElement("a");
        a.href = "#"; a.textContent = nodes[k].n; a.title = nodes[k].n;
        a.addEventListener("click", function (e) { e.preventDefault(); zoom(k); });
        crumbs.appendChild(document.createTextNode(" \u203a "));
        crumbs.appendChild(a);
      });
    }
    nodes.forEach(function (n, i) { n.g.addEventListener("click", function () { zoom(i); }); });
    reset.addEventListener("click", function () { zoom(-1); });
    search.addEventListener("input", function () {
      var q = search.value.trim().toLowerCase(), hits = 0, sum = 0, path = [];
      nodes.forEach(function (n) {
        // Bytes under a match inside another match count once.
        path.length = n.l;
        var hit = q !== "" && n.n.toLowerCase().indexOf(q) >= 0;
        n.g.classList.toggle("hit", hit);
        if (hit) { hits++; if (path.indexOf(true) < 0) sum += n.b; }
        path.push(hit);
      });
      match.textContent = q === "" ? "" : hits + " frames match: " + bytes(sum) + " (" +
        (100 * sum / total).toFixed(1) + "% of the peak)";
      svg.setAttribute("data-hits", hits);
      svg.classList.toggle("searching", q !== "");
    });
  }

  // A timeline: drag across the plot to zoom into that span of time; the
  // charts that share its axis (a device's, its leaks') follow. The plot's
  // contents sit in a nested <svg class="data"> whose viewBox narrows;
  // marks (data-x) move along, hidden outside the span, and a label that
  // would overlap one drawn already is hidden; the time axis is drawn again
  // as the page's Go code draws it (timeTicks).
  function niceStep(span, n) {
    var raw = span / n;
    if (raw <= 0) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var ms = [1, 2, 5, 10];
    for (var i = 0; i < ms.length; i++) if (ms[i] * p >= raw) return ms[i] * p;
    return 10 * p;
  }
  var timelines = [];
  function zoomAll(svg, a, b) {
    timelines.forEach(function (t) { if (t.t0 === num(svg, "data-t0") && t.t1 === num(svg, "data-t1")) t.show(a, b); });
  }
  function timeline(svg) {
    var T0 = num(svg, "data-t0"), T1 = num(svg, "data-t1"), L = num(svg, "data-px"), PW = num(svg, "data-pw");
    var data = svg.querySelector("svg.data"), axis = svg.querySelector("g.xaxis"), sel = svg.querySelector("rect.select");
    var unzoom = svg.parentNode.querySelector("button.unzoom");
    var vb = svg.viewBox.baseVal, y0 = data.getAttribute("y"), h = data.getAttribute("height");
    var a = T0, b = T1, from = null;
    var at = function (t) { return L + (t - T0) / (T1 - T0) * PW; }; // x of time t, unzoomed
    function ticks() {
      axis.textContent = "";
      var s0 = a / 1e9, s1 = b / 1e9, step = niceStep(s1 - s0, 10);
      var dec = step < 1 ? Math.ceil(-Math.log10(step) - 1e-9) : 0;
      for (var i = Math.ceil(s0 / step - 1e-9); i * step <= s1 * 1.0000001; i++) {
        var t = document.createElementNS(svg.namespaceURI, "text");
        t.setAttribute("class", "axis"); t.setAttribute("text-anchor", "middle");
        t.setAttribute("x", (L + (i * step * 1e9 - a) / (b - a) * PW).toFixed(1));
        t.setAttribute("y", vb.height); t.setAttribute("dy", "-8");
        t.textContent = (i * step + 0).toFixed(dec) + " s"; // + 0: never "-0"
        axis.appendChild(t);
      }
    }
    function show(na, nb) {
      a = na; b = nb;
      var xa = at(a), xb = at(b), k = PW / (xb - xa), drawn = [];
      data.setAttribute("viewBox", xa + " " + y0 + " " + (xb - xa) + " " + h);
      $$(svg, "[data-x]").forEach(function (el) {
        var x = num(el, "data-x"), nx = L + (x - xa) * k;
        el.setAttribute("transform", "translate(" + (nx - x).toFixed(1) + " 0)");
        var out = nx < L - 0.5 || nx > L + PW + 0.5, label = el.matches("text") ? el : el.querySelector("text");
        el.style.display = out ? "none" : "";
        if (out || !label) return;
        label.style.display = "";
        var r = label.getBoundingClientRect();
        var clash = drawn.some(function (o) { return r.left < o.right && o.left < r.right && r.top < o.bottom && o.top < r.bottom; });
        if (clash) label.style.display = "none"; else drawn.push(r);
      });
      ticks();
      unzoom.hidden = a === T0 && b === T1;
      svg.setAttribute("data-range", Math.round(a) + " " + Math.round(b));
    }
    function px(e) { // the pointer's x in the chart's units
      var r = svg.getBoundingClientRect();
      return Math.min(Math.max((e.clientX - r.left) / r.width * vb.width, L), L + PW);
    }
    function time(x) { return a + (x - L) / PW * (b - a); }
    svg.addEventListener("mousedown", function (e) {
      if (e.button !== 0) return;
      from = px(e); e.preventDefault();
      sel.setAttribute("x", from); sel.setAttribute("width", 0); sel.style.display = "block";
    });
    window.addEventListener("mousemove", function (e) {
      if (from === null) return;
      var x = px(e);
      sel.setAttribute("x", Math.min(x, from)); sel.setAttribute("width", Math.abs(x - from));
    });
    window.addEventListener("mouseup", function (e) {
      if (from === null) return;
      var x = px(e), lo = Math.min(x, from), hi = Math.max(x, from);
      from = null; sel.style.display = "none";
      if (hi - lo >= 4) zoomAll(svg, time(lo), time(hi));
    });
    svg.addEventListener("dblclick", function () { zoomAll(svg, T0, T1); });
    unzoom.addEventListener("click", function () { zoomAll(svg, T0, T1); });
    timelines.push({ t0: T0, t1: T1, show: show });
  }

  document.addEventListener("DOMContentLoaded", function () {
    try {
      $$(document, "svg.flame").forEach(icicle);
      $$(document, "svg.chart").forEach(timeline);
    } catch (e) { fail(e); }
    d.setAttribute("data-charts", String(document.querySelectorAll("svg.chart").length));
    d.setAttribute("data-rendered", "ok");
  });
})();
