/* harness site: sorting and filtering of tables, hover values and series toggles on charts, the sample viewer.
   Plain JavaScript, no libraries; every page works without it (tables and figures are in the HTML). */
(function () {
  "use strict";

  function $(sel, el) { return (el || document).querySelector(sel); }
  function $$(sel, el) { return Array.prototype.slice.call((el || document).querySelectorAll(sel)); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }

  /* ---------------------------------------------------------------- sortable tables */

  function mainRows(table) {
    return $$(":scope > tr", table.tBodies[0]).filter(function (r) { return !r.classList.contains("seed-row"); });
  }

  function sortKey(row, col, type) {
    var td = row.children[col];
    if (!td) return type === "num" ? NaN : "";
    if (type === "num") {
      var v = td.getAttribute("data-value");
      return parseFloat(v === null ? td.textContent : v);
    }
    return td.textContent.trim().toLowerCase();
  }

  function sortTable(table, col, type, th) {
    var first = type === "num" ? "descending" : "ascending";
    var current = th.getAttribute("aria-sort");
    var dir = current === "none" || !current ? first : (current === "ascending" ? "descending" : "ascending");
    $$("thead th", table).forEach(function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var rows = mainRows(table).map(function (r, i) { return { row: r, key: sortKey(r, col, type), i: i }; });
    rows.sort(function (a, b) {
      if (type === "num") {
        var an = isNaN(a.key), bn = isNaN(b.key);
        if (an || bn) return an === bn ? a.i - b.i : (an ? 1 : -1);  /* no value: always last */
        if (a.key !== b.key) return sign * (a.key - b.key);
      } else if (a.key !== b.key) {
        return sign * (a.key < b.key ? -1 : 1);
      }
      return a.i - b.i;
    });
    var body = table.tBodies[0];
    rows.forEach(function (r) {
      body.appendChild(r.row);
      var detail = document.getElementById("seeds-" + r.row.getAttribute("data-row"));
      if (detail && detail.parentNode === body) body.appendChild(detail);
    });
  }

  function makeSortable(table) {
    $$("thead th", table).forEach(function (th, col) {
      th.classList.add("sort-header");
      th.setAttribute("tabindex", "0");
      th.setAttribute("aria-sort", "none");
      th.title = "sort by this column";
      var go = function () { sortTable(table, col, th.getAttribute("data-type") || "text", th); };
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); go(); }
      });
    });
  }

  /* ---------------------------------------------------------------- leaderboard filters, metric switch */

  function initLeaderboardFilters(form) {
    var count = $(".count", form);
    function apply() {
      var model = form.elements.model.value, method = form.elements.method.value, suite = form.elements.suite.value;
      var metric = form.elements.metric ? form.elements.metric.value : null;
      /* one table per metric (avg@k, pass@k, maj@k): only the chosen one and its notes are shown */
      $$(".lb-view").forEach(function (v) { v.hidden = metric !== null && v.getAttribute("data-metric") !== metric; });
      var shown = 0, total = 0;
      $$("table.leaderboard").forEach(function (table) {
        var rows = mainRows(table), visible = !table.closest(".lb-view") || !table.closest(".lb-view").hidden;
        rows.forEach(function (tr) {
          var ok = (!model || tr.getAttribute("data-model") === model) &&
            (!method || tr.getAttribute("data-method") === method) &&
            (!suite || (tr.getAttribute("data-suites") || "").split(";").indexOf(suite) >= 0);
          tr.hidden = !ok;
          var detail = document.getElementById("seeds-" + tr.getAttribute("data-row"));
          if (detail) detail.hidden = !ok;
          if (ok && visible) shown++;
        });
        if (visible) total += rows.length;
        $$(".suite-col", table).forEach(function (c) {
          c.hidden = !!suite && c.getAttribute("data-col") !== suite;
        });
      });
      count.textContent = shown + " of " + total + " rows shown";
    }
    form.addEventListener("change", apply);
    apply();
  }

  /* ---------------------------------------------------------------- charts */

  var SVG_NS = "http://www.w3.org/2000/svg";

  function fmt(v) {
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(3);
    return String(Number(v.toPrecision(5)));
  }

  function initChart(fig) {
    var data = JSON.parse($("script.chart-data", fig).textContent);
    var svg = $("svg", fig), tip = $(".tooltip", fig), box = $(".chart-box", fig);
    var off = {};
    var sx = function (x) { return data.left + (x - data.x0) / (data.x1 - data.x0) * data.width; };
    var sy = function (y) { return data.top + (1 - (y - data.y0) / (data.y1 - data.y0)) * data.height; };
    var guide = document.createElementNS(SVG_NS, "line");
    guide.setAttribute("class", "guide");
    guide.setAttribute("y1", data.top);
    guide.setAttribute("y2", data.top + data.height);
    guide.style.visibility = "hidden";
    svg.appendChild(guide);
    var dots = data.series.map(function (s) {
      var c = document.createElementNS(SVG_NS, "circle");
      c.setAttribute("r", "4");
      c.setAttribute("fill", s.color);
      c.style.visibility = "hidden";
      svg.appendChild(c);
      return c;
    });

    function nearest(points, x) {
      var best = null, d = Infinity;
      for (var i = 0; i < points.length; i++) {
        var dd = Math.abs(points[i][0] - x);
        if (dd < d) { d = dd; best = points[i]; }
      }
      return best;
    }

    function hide() {
      tip.hidden = true;
      guide.style.visibility = "hidden";
      dots.forEach(function (c) { c.style.visibility = "hidden"; });
    }

    svg.addEventListener("mousemove", function (ev) {
      var pt = svg.createSVGPoint();
      pt.x = ev.clientX; pt.y = ev.clientY;
      var p = pt.matrixTransform(svg.getScreenCTM().inverse());
      if (p.x < data.left || p.x > data.left + data.width) { hide(); return; }
      var x = data.x0 + (p.x - data.left) / data.width * (data.x1 - data.x0);
      var at = null, dist = Infinity;
      data.series.forEach(function (s, i) {
        if (off[i]) return;
        var q = nearest(s.points, x);
        if (q && Math.abs(q[0] - x) < dist) { dist = Math.abs(q[0] - x); at = q[0]; }
      });
      if (at === null) { hide(); return; }
      tip.textContent = "";
      tip.appendChild(el("div", "tip-x", data.xlabel + " " + fmt(at)));
      data.series.forEach(function (s, i) {
        var q = off[i] ? null : s.points.filter(function (pp) { return pp[0] === at; })[0];
        if (!q) { dots[i].style.visibility = "hidden"; return; }
        dots[i].setAttribute("cx", sx(q[0]));
        dots[i].setAttribute("cy", sy(q[1]));
        dots[i].style.visibility = "visible";
        var line = el("div", "tip-row");
        var sw = el("span", "swatch");
        sw.style.background = s.color;
        line.appendChild(sw);
        line.appendChild(document.createTextNode(s.name + ": " + fmt(q[1])));
        tip.appendChild(line);
      });
      guide.setAttribute("x1", sx(at));
      guide.setAttribute("x2", sx(at));
      guide.style.visibility = "visible";
      tip.hidden = false;
      var r = box.getBoundingClientRect();
      var left = ev.clientX - r.left + 12;
      if (left + tip.offsetWidth > r.width) left = ev.clientX - r.left - tip.offsetWidth - 12;
      tip.style.left = Math.max(0, left) + "px";
      tip.style.top = Math.max(0, ev.clientY - r.top - 10) + "px";
    });
    svg.addEventListener("mouseleave", hide);

    $$(".legend-item", fig).forEach(function (b) {
      b.addEventListener("click", function () {
        var i = +b.getAttribute("data-series");
        off[i] = !off[i];
        b.setAttribute("aria-pressed", off[i] ? "false" : "true");
        var g = $('g.series[data-series="' + i + '"]', svg);
        if (g) g.classList.toggle("off", !!off[i]);
        hide();
      });
    });
  }

  /* ---------------------------------------------------------------- sample viewer */

  function parseHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      if (!kv) return;
      var i = kv.indexOf("=");
      if (i > 0) out[decodeURIComponent(kv.slice(0, i))] = decodeURIComponent(kv.slice(i + 1));
    });
    return out;
  }

  var SINGLE = [["all", "all samples"], ["wrong", "wrong samples"], ["right", "right samples"]];
  var PAIR = [["all", "all problems"], ["a_better", "A right more often"], ["b_better", "B right more often"],
    ["same", "equally often right"], ["both_wrong", "both never right"], ["both_right", "both always right"]];

  function setOptions(select, pairs, keep) {
    select.textContent = "";
    pairs.forEach(function (p) {
      var o = el("option", null, p[1]);
      o.value = p[0];
      select.appendChild(o);
    });
    if (pairs.some(function (p) { return p[0] === keep; })) select.value = keep;
  }

  function byProblem(entry) {
    var data = window.HARNESS_SAMPLES[entry.key], map = {}, order = [];
    data.rows.forEach(function (r) {
      if (!map[r[0]]) { map[r[0]] = []; order.push(r[0]); }
      map[r[0]].push({ sample: r[1], response: r[2], correct: r[3], pred: r[4], reason: r[5] });
    });
    return { problems: data.problems, samples: map, order: order };
  }

  function initSamples() {
    var index = JSON.parse($("#sample-index").textContent);
    var form = $("#sample-controls"), box = $("#samples"), summary = $("p.summary"), more = $("#more");
    var f = form.elements, limit = 50;
    var suites = [];
    index.forEach(function (e) { if (suites.indexOf(e.suite) < 0) suites.push(e.suite); });
    setOptions(f.suite, suites.map(function (s) { return [s, s]; }));
    var state = parseHash();
    if (state.suite && suites.indexOf(state.suite) >= 0) f.suite.value = state.suite;

    function entries() { return index.filter(function (e) { return e.suite === f.suite.value; }); }
    function entry(run) { return entries().filter(function (e) { return e.run === run; })[0]; }

    function fillRuns(a, b) {
      var es = entries();
      setOptions(f.a, es.map(function (e) { return [e.run, e.label]; }), a);
      setOptions(f.b, [["", "(none: one run)"]].concat(es.filter(function (e) { return e.run !== f.a.value; })
        .map(function (e) { return [e.run, e.label]; })), b);
    }
    fillRuns(state.a, state.b);
    setOptions(f.filter, f.b.value ? PAIR : SINGLE, state.filter || "all");
    if (state.q) f.q.value = state.q;

    function load(e, done) {
      if (!e || (window.HARNESS_SAMPLES && window.HARNESS_SAMPLES[e.key])) { done(); return; }
      var s = document.createElement("script");
      s.src = e.file;
      s.onload = done;
      s.onerror = function () { summary.textContent = "Could not load " + e.file + "."; };
      document.head.appendChild(s);
    }

    function writeHash() {
      var parts = ["suite", "a", "b", "filter", "q"].filter(function (k) { return f[k].value; })
        .map(function (k) { return k + "=" + encodeURIComponent(f[k].value); });
      var h = "#" + parts.join("&");
      if (location.hash !== h) location.replace(h);
    }

    function sampleBox(s) {
      var d = el("div", "sample " + (s.correct ? "right" : "wrong"));
      d.setAttribute("data-correct", s.correct ? "true" : "false");
      var head = el("div");
      head.appendChild(el("span", "verdict " + (s.correct ? "right" : "wrong"), s.correct ? "✓ right" : "✗ wrong"));
      head.appendChild(document.createTextNode(" sample " + s.sample));
      d.appendChild(head);
      d.appendChild(el("pre", "response", s.response));
      var why = [];
      if (s.pred !== null && s.pred !== undefined && s.pred !== s.response) why.push("extracted: " + s.pred);
      if (s.reason) why.push("grader: " + s.reason);
      if (why.length) d.appendChild(el("p", "reason", why.join(" · ")));
      return d;
    }

    function column(title, href, samples) {
      var sec = el("section", "run-col");
      var h = el("h4");
      var a = el("a", null, title);
      a.href = href;
      h.appendChild(a);
      sec.appendChild(h);
      if (!samples) { sec.appendChild(el("p", "reason", "not graded for this run")); return sec; }
      samples.forEach(function (s) { sec.appendChild(sampleBox(s)); });
      return sec;
    }

    function frac(samples) {
      if (!samples || !samples.length) return null;
      return samples.filter(function (s) { return s.correct; }).length / samples.length;
    }

    function render() {
      var ea = entry(f.a.value), eb = f.b.value ? entry(f.b.value) : null;
      if (!ea) { summary.textContent = "No graded samples for this suite."; box.textContent = ""; return; }
      var A = byProblem(ea), B = eb ? byProblem(eb) : null, q = f.q.value.trim().toLowerCase(), mode = f.filter.value;
      var ids = A.order.filter(function (id) { return !B || B.samples[id]; });
      var items = [];
      ids.forEach(function (id) {
        var p = A.problems[id] || {}, sa = A.samples[id], sb = B ? B.samples[id] : null;
        if (q) {
          var text = [id, p.prompt || "", p.gold || ""].concat(sa.map(function (s) { return s.response; }))
            .concat(sb ? sb.map(function (s) { return s.response; }) : []).join("\n").toLowerCase();
          if (text.indexOf(q) < 0) return;
        }
        if (!B) {
          var keep = sa.filter(function (s) { return mode === "all" || (mode === "right") === !!s.correct; });
          if (keep.length) items.push({ id: id, p: p, a: keep, all: sa });
          return;
        }
        var fa = frac(sa), fb = frac(sb);
        var ok = mode === "all" || (mode === "a_better" && fa > fb) || (mode === "b_better" && fb > fa) ||
          (mode === "same" && fa === fb) || (mode === "both_wrong" && fa === 0 && fb === 0) ||
          (mode === "both_right" && fa === 1 && fb === 1);
        if (ok) items.push({ id: id, p: p, a: sa, b: sb, all: sa });
      });
      var nSamples = items.reduce(function (n, it) { return n + it.a.length + (it.b ? it.b.length : 0); }, 0);
      summary.textContent = items.length + " of " + ids.length + " problems shown (" + nSamples + " samples)" +
        (ea.rows < ea.total_rows ? "; run A: first " + ea.rows + " of " + ea.total_rows + " graded rows kept" : "") +
        (B ? "; problems graded for both runs only" : "") + ".";
      box.textContent = "";
      items.slice(0, limit).forEach(function (it) {
        var art = el("article", "problem");
        art.setAttribute("data-id", it.id);
        var head = el("header");
        head.appendChild(el("code", "pid", it.id));
        var acc = function (s) { return s.filter(function (x) { return x.correct; }).length + "/" + s.length; };
        head.appendChild(el("span", "acc", "A " + acc(it.all) + " right" + (it.b ? ", B " + acc(it.b) + " right" : "")));
        art.appendChild(head);
        art.appendChild(el("h4", null, "prompt"));
        art.appendChild(el("pre", "prompt", it.p.prompt === null || it.p.prompt === undefined ?
          "(prompt not recorded in the graded file)" : it.p.prompt));
        art.appendChild(el("h4", null, "gold"));
        art.appendChild(el("pre", "gold", it.p.gold || "(none recorded)"));
        var cols = el("div", "cols" + (it.b ? " two" : ""));
        cols.appendChild(column("A: " + ea.label, ea.run_href, it.a));
        if (it.b) cols.appendChild(column("B: " + eb.label, eb.run_href, it.b));
        art.appendChild(cols);
        box.appendChild(art);
      });
      more.hidden = items.length <= limit;
    }

    function update() {
      writeHash();
      var ea = entry(f.a.value), eb = f.b.value ? entry(f.b.value) : null;
      load(ea, function () { load(eb, render); });
    }

    form.addEventListener("change", function (ev) {
      limit = 50;
      if (ev.target === f.suite) fillRuns(f.a.value, "");
      if (ev.target === f.a) fillRuns(f.a.value, f.b.value);
      setOptions(f.filter, f.b.value ? PAIR : SINGLE, f.filter.value);
      update();
    });
    f.q.addEventListener("input", function () { limit = 50; update(); });
    more.addEventListener("click", function () { limit += 50; render(); });
    update();
  }

  /* ---------------------------------------------------------------- start */

  function start() {
    $$("table.sortable").forEach(makeSortable);
    var lb = $("#leaderboard"), form = $("#lb-filters");
    if (lb && form) initLeaderboardFilters(form);
    $$("figure.chart").forEach(initChart);
    if ($("#sample-index")) initSamples();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
