// rewind ui: the grid's live updates and cell details, a backfill's
// progress. Served from the binary; no inline script anywhere (the pages'
// Content-Security-Policy forbids it). Text from the state goes into the
// page through textContent only.
"use strict";

(function () {
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function duration(s) {
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(1) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
    return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  }

  function bytes(n) {
    if (!n || n <= 0) return "–";
    if (n < 1024) return n + " B";
    var units = "KMGTPE", i = -1;
    do { n /= 1024; i++; } while (n >= 1024 && i < units.length - 1);
    return n.toFixed(1) + " " + units[i] + "iB";
  }

  function when(s) {
    if (!s) return "–";
    return s.replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  // A poller that sends the last ETag: a grid that did not change costs a 304.
  function poller(url, onData, interval) {
    var etag = null, timer = null, stopped = false;
    function tick() {
      timer = null;
      if (stopped) return;
      if (document.hidden) { schedule(); return; }
      var headers = {};
      if (etag) headers["If-None-Match"] = etag;
      fetch(url, { headers: headers, credentials: "same-origin", cache: "no-store" }).then(function (res) {
        if (res.status === 304) return null;
        if (!res.ok) throw new Error(res.status + " " + res.statusText);
        etag = res.headers.get("ETag");
        return res.json();
      }).then(function (data) {
        if (data) onData(data);
      }).catch(function (err) {
        var s = document.getElementById("summary");
        if (s) s.dataset.error = String(err);
      }).then(schedule);
    }
    function schedule() { if (!stopped && !timer) timer = setTimeout(tick, interval()); }
    function now() { if (timer) { clearTimeout(timer); timer = null; tick(); } }
    return { start: tick, now: now, stop: function () { stopped = true; } };
  }

  // ---- actions ----
  // A write sends the session's CSRF token (from the page's meta tag) in a
  // header; the server also checks the request's Origin.
  function csrf() {
    var m = document.querySelector('meta[name="csrf-token"]');
    return m ? m.content : "";
  }

  function post(url, params) {
    return fetch(url, {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "X-CSRF-Token": csrf(), "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams(params || {}).toString()
    }).then(function (res) {
      return res.text().then(function (t) {
        var msg = t;
        try { var j = JSON.parse(t); msg = j.message || j.error || t; } catch (e) { /* not JSON */ }
        return { ok: res.ok, status: res.status, msg: msg };
      });
    }, function (err) { return { ok: false, status: 0, msg: String(err) }; });
  }

  function showResult(r) {
    var p = document.getElementById("action-result");
    if (!p) return;
    p.textContent = r.msg;
    p.className = "result " + (r.ok ? "ok" : "error");
    p.dataset.status = String(r.status);
  }

  // A message to show once the page reloads after an action.
  function flash(r) { try { sessionStorage.setItem("rewind-flash:" + location.pathname, JSON.stringify(r)); } catch (e) { /* none */ } }
  function showFlash() {
    try {
      var k = "rewind-flash:" + location.pathname, v = sessionStorage.getItem(k);
      if (v) { sessionStorage.removeItem(k); showResult(JSON.parse(v)); }
    } catch (e) { /* none */ }
  }

  // ---- the grid ----
  function cellTitle(task, ds, c) {
    var t = task + " " + ds + ": " + (c.state || "–");
    if (c.pool) t += ", pool " + c.pool;
    if (c.try > 1) t += ", try " + c.try;
    if (c.reason) t += " (" + c.reason + ")";
    return t;
  }

  function renderGrid(root, g, selected) {
    var table = el("table", "grid");
    var thead = el("thead"), dates = el("tr", "dates"), states = el("tr", "runstate");
    dates.appendChild(el("th", "corner", "task \\ run"));
    states.appendChild(el("th", null, "run"));
    g.runs.forEach(function (r) {
      dates.appendChild(runHead(g, r));
      states.appendChild(el("td", "r s-" + r.state));
    });
    thead.appendChild(durationRow(g));
    thead.appendChild(dates);
    thead.appendChild(states);
    table.appendChild(thead);
    var tbody = el("tbody");
    g.tasks.forEach(function (task, i) {
      var tr = el("tr");
      tr.dataset.task = task;
      tr.appendChild(el("th", "task", task));
      g.runs.forEach(function (r) {
        var c = r.cells[i] || { state: "" };
        var td = el("td", "c s-" + (c.state || "none") + (c.reason ? " hot" : "") + (c.try > 1 ? " retry" : "") + (r.batch_of ? " covered" : ""));
        if (c.reason) {
          td.dataset.pool = c.pool;
          td.appendChild(el("span", "mark", c.pool.charAt(0).toUpperCase()));
        }
        td.title = cellTitle(task, r.at || r.ds, c) + coveredNote(r);
        if (selected && selected.run === String(r.id) && selected.task === task) td.classList.add("selected");
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    table.appendChild(tbody);
    var old = root.querySelector("table.grid");
    var wrapAtEnd = root.scrollLeft + root.clientWidth >= root.scrollWidth - 4;
    root.replaceChild(table, old);
    var empty = document.getElementById("empty");
    if (empty && g.runs.length) empty.remove();
    if (wrapAtEnd) root.scrollLeft = root.scrollWidth;
    root.dataset.active = String(g.active);
  }

  // ---- the grid's columns: names, kinds, batches, durations, pages ----
  var kindMarks = { scheduled: "\u25F7", manual: "\u25B6", backfill: "\u21BA" };

  function duration0(s) { return s > 0 ? duration(s) : ""; }

  function coveredNote(r) {
    return r.batch_of ? " · covered by batch run " + r.batch_of + " (run " + r.batch_run + ")" : "";
  }

  // runHead is a run's column header, as the page renders it (grid.html).
  function runHead(g, r) {
    var th = el("th", "run s-" + r.state + (r.reason ? " hot" : "") + (r.batch_of ? " covered" : ""));
    th.dataset.run = r.id;
    th.dataset.ds = r.ds;
    th.dataset.logical = r.logical_date;
    th.dataset.kind = r.kind;
    var name = r.at || r.ds;
    th.title = name + ": " + r.state + " (" + r.kind + (r.backfill_id ? " " + r.backfill_id : "") + ")" +
      (r.duration_seconds > 0 ? ", ran " + duration0(r.duration_seconds) : "") +
      (r.reason ? " · pool " + r.pool + ": " + r.reason : "") + coveredNote(r);
    th.appendChild(el("span", "kind k-" + r.kind, kindMarks[r.kind] || ""));
    if (r.batch_of) th.appendChild(el("span", "batch", "\u2282"));
    var a = el("a");
    a.href = "/pipelines/" + encodeURIComponent(g.pipeline) + "/runs/" + r.id;
    if (r.day) {
      a.appendChild(el("span", "day", r.day));
      a.appendChild(document.createTextNode(" "));
    }
    a.appendChild(document.createTextNode(r.label || r.ds));
    th.appendChild(a);
    if (r.reason) th.appendChild(el("span", "pool", r.pool));
    return th;
  }

  // durationRow: a bar per run, its height the run's share of the page's
  // longest run (twentieths: classes h0..h20).
  function durationRow(g) {
    var tr = el("tr", "durations"), longest = 0;
    tr.appendChild(el("th", "corner", "duration"));
    g.runs.forEach(function (r) { longest = Math.max(longest, r.duration_seconds || 0); });
    g.runs.forEach(function (r) {
      var s = r.duration_seconds || 0;
      var level = s > 0 && longest > 0 ? Math.max(1, Math.ceil(s / longest * 20)) : 0;
      var td = el("td", "dur");
      td.appendChild(el("span", "bar s-" + r.state + " h" + level));
      tr.appendChild(td);
    });
    return tr;
  }

  function renderPager(g) {
    if (g.limit === undefined) return;
    var base = "/pipelines/" + encodeURIComponent(g.pipeline);
    var older = document.getElementById("pg-older"), newer = document.getElementById("pg-newer");
    var latest = document.getElementById("pg-latest"), range = document.getElementById("pg-range");
    if (older) {
      older.hidden = !g.older;
      older.href = base + "?before=" + encodeURIComponent(g.older) + "&limit=" + g.limit;
    }
    if (newer) {
      newer.hidden = !g.newer;
      newer.href = base + "?after=" + encodeURIComponent(g.newer) + "&limit=" + g.limit;
    }
    if (latest) latest.hidden = !g.newer;
    if (range) {
      var n = g.runs.length;
      range.textContent = (n ? (g.runs[0].at || g.runs[0].ds) + " .. " + (g.runs[n - 1].at || g.runs[n - 1].ds) + " · " : "") +
        n + " of " + g.total + " runs, " + g.limit + " a page";
    }
  }

  function renderSummary(g) {
    var s = document.getElementById("summary");
    if (!s) return;
    s.textContent = (g.total === undefined ? g.runs.length : g.total) + " runs";
    Object.keys(g.counts).sort().forEach(function (state) {
      s.appendChild(document.createTextNode(" · "));
      s.appendChild(el("span", "badge s-" + state, g.counts[state] + " " + state));
    });
  }

  function showCell(pipeline, run, task, td) {
    var q = "pipeline=" + encodeURIComponent(pipeline) + "&run=" + encodeURIComponent(run) + "&task=" + encodeURIComponent(task);
    return fetch("/api/cell?" + q, { credentials: "same-origin", cache: "no-store" }).then(function (res) {
      if (!res.ok) throw new Error(res.status + " " + res.statusText);
      return res.json();
    }).then(function (c) {
      var aside = document.getElementById("detail");
      aside.hidden = false;
      aside.dataset.run = String(c.run_id);
      aside.dataset.task = c.task;
      aside.dataset.state = c.state;
      aside.dataset.logical = c.logical_date;
      document.getElementById("detail-title").textContent = c.task + " · " + (c.at || c.ds) + " · " + c.state;
      var retry = document.getElementById("retry-now");
      if (retry) retry.hidden = c.state !== "up_for_retry";
      var links = document.getElementById("detail-links");
      links.textContent = "run " + c.run_state + " (" + c.kind + "), pool " + c.pool + (c.reason ? " (" + c.reason + ")" : "") +
        (c.batch_of ? ", covered by batch run " + c.batch_of : "") + " · ";
      var g = el("a", null, "Gantt chart of the run");
      g.href = c.gantt;
      links.appendChild(g);
      var body = document.getElementById("detail-attempts");
      body.textContent = "";
      var logs = document.getElementById("detail-logs");
      logs.textContent = "";
      if (!c.attempts.length) logs.appendChild(el("p", "note", "No attempt yet."));
      c.attempts.forEach(function (a) {
        var tr = el("tr");
        tr.dataset.attempt = a.id;
        var exit = a.exit_code === null ? (a.signal ? "signal " + a.signal : "–") : String(a.exit_code);
        [String(a.try_number), a.pool, null, exit, when(a.started_at), duration(a.duration_seconds) + (a.ended_at ? "" : " (running)"),
          bytes(a.peak_rss_bytes), a.reason || ""].forEach(function (v, i) {
          var td = el("td", null, v);
          if (i === 2) td.appendChild(el("span", "badge s-" + a.state, a.state));
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
      c.attempts.slice().reverse().forEach(function (a) {
        var box = el("section", "logtail");
        box.appendChild(el("h3", null, "Log of try " + a.try_number));
        var pre = el("pre", "log", "…");
        pre.dataset.attempt = a.id;
        box.appendChild(pre);
        logs.appendChild(box);
        fetch(a.log + "&tail=16384", { credentials: "same-origin", cache: "no-store" }).then(function (res) {
          var cut = res.headers.get("X-Rewind-Log-Truncated") === "true";
          return res.text().then(function (t) { return { ok: res.ok, text: t, cut: cut }; });
        }).then(function (r) {
          if (!r.ok) {
            var msg = r.text;
            try { msg = JSON.parse(r.text).error; } catch (e) { /* not JSON */ }
            pre.textContent = "(" + msg + ")";
            return;
          }
          pre.textContent = (r.cut ? "… (the last 16 KiB)\n" : "") + (r.text || "(empty)");
          pre.scrollTop = pre.scrollHeight;
        });
      });
    });
  }

  function initGrid(root) {
    var pipeline = root.dataset.pipeline;
    var selected = null;
    root.scrollLeft = root.scrollWidth;
    // When the grid is laid out and its first frame drawn: what the
    // browser test times.
    requestAnimationFrame(function () { requestAnimationFrame(function () { performance.mark("rewind:grid-ready"); }); });
    root.addEventListener("click", function (ev) {
      var td = ev.target.closest("td.c");
      if (!td || td.classList.contains("s-none")) return;
      var tr = td.parentElement;
      var th = root.querySelectorAll("tr.dates th.run")[td.cellIndex - 1];
      if (!th) return;
      root.querySelectorAll("td.c.selected").forEach(function (x) { x.classList.remove("selected"); });
      td.classList.add("selected");
      selected = { run: th.dataset.run, task: tr.dataset.task };
      showCell(pipeline, selected.run, selected.task, td);
    });
    document.getElementById("detail-close").addEventListener("click", function () {
      document.getElementById("detail").hidden = true;
      root.querySelectorAll("td.c.selected").forEach(function (x) { x.classList.remove("selected"); });
      selected = null;
    });
    var base = "/api/pipelines/" + encodeURIComponent(pipeline) + "/";
    function act(btn, params) {
      if (btn.dataset.onlyFailed) params.only_failed = "true";
      if (btn.dataset.downstream) params.downstream = "true";
      btn.disabled = true;
      return post(base + btn.dataset.act, params).then(function (r) {
        btn.disabled = false;
        showResult(r);
        p.now();
        return r;
      });
    }
    var menu = document.getElementById("detail-actions");
    if (menu) menu.addEventListener("click", function (ev) {
      var btn = ev.target.closest("button.act");
      if (!btn) return;
      var aside = document.getElementById("detail");
      var params = { start: aside.dataset.logical, end: aside.dataset.logical };
      if (btn.dataset.scope === "task") params.task = aside.dataset.task;
      act(btn, params).then(function () { if (selected) showCell(pipeline, selected.run, selected.task); });
    });
    var dates = document.getElementById("select-dates");
    if (dates) dates.addEventListener("click", function (ev) {
      var btn = ev.target.closest("button.act");
      if (!btn) return;
      var params = { start: dates.elements.start.value, end: dates.elements.end.value };
      if (dates.elements.task.value) params.task = dates.elements.task.value;
      if (dates.elements.downstream.checked) params.downstream = "true";
      act(btn, params);
    });
    var pa = document.getElementById("pipeline-actions");
    if (pa) pa.querySelectorAll(":scope > button.act").forEach(function (btn) {
      btn.addEventListener("click", function () {
        post(base + btn.dataset.act, {}).then(function (r) {
          if (r.ok) { flash(r); location.reload(); } else showResult(r);
        });
      });
    });
    var p = poller("/api/grid?pipeline=" + encodeURIComponent(pipeline) + (root.dataset.window || ""), function (g) {
      renderGrid(root, g, selected);
      renderSummary(g);
      renderPager(g);
      var aside = document.getElementById("detail");
      if (selected && !aside.hidden) {
        var i = g.tasks.indexOf(selected.task);
        var run = g.runs.find(function (r) { return String(r.id) === selected.run; });
        if (run && i >= 0 && run.cells[i] && run.cells[i].state !== aside.dataset.state) showCell(pipeline, selected.run, selected.task);
      }
    }, function () { return root.dataset.active === "true" ? 1000 : 2000; });
    p.start();
  }

  // ---- a backfill's heatmap and progress bar, from its status ----
  var barKeys = { "s-success": "succeeded", "s-failed": "failed", "s-running": "in_progress", "s-queued": "in_progress",
    "s-none": "pending", "s-skip": "skipped", "s-elsewhere": "elsewhere" };
  var barOrder = [["succeeded", "s-success"], ["failed", "s-failed"], ["in_progress", "s-running"], ["pending", "s-queued"],
    ["skipped", "s-skip"], ["elsewhere", "s-elsewhere"]];

  function updateBackfillDates(root, st) {
    var map = root.querySelector("svg.heatmap");
    if (!map) return;
    st.dates.forEach(function (d) {
      var rect = map.querySelector('rect.hd[data-logical="' + d.logical_date + '"]');
      if (!rect || rect.getAttribute("class") === "hd s-" + d.state) return;
      rect.setAttribute("class", "hd s-" + d.state);
      var title = rect.querySelector("title");
      if (title) title.textContent = title.textContent.replace(/: [a-z_]+( ·|$)/, ": " + d.state + "$1");
    });
    // The backfill's own bar, counted again from the heatmap.
    var row = root.querySelector('.pbarrow[data-role="backfill"]');
    if (!row) return;
    var counts = { succeeded: 0, failed: 0, in_progress: 0, pending: 0, skipped: 0, elsewhere: 0 }, total = 0;
    map.querySelectorAll("rect.hd").forEach(function (r) {
      var key = barKeys[(r.getAttribute("class") || "").replace("hd ", "")];
      if (key) { counts[key]++; total++; }
    });
    var bar = row.querySelector("svg.pbar");
    var width = Number(bar.getAttribute("width")), x = 0;
    barOrder.forEach(function (k) {
      var seg = bar.querySelector('rect.seg[data-key="' + k[0] + '"]');
      var w = total ? width * counts[k[0]] / total : 0;
      if (!seg && w > 0) {
        seg = document.createElementNS("http://www.w3.org/2000/svg", "rect");
        seg.setAttribute("class", "seg " + k[1]);
        seg.setAttribute("data-key", k[0]);
        seg.setAttribute("y", "0");
        seg.setAttribute("height", bar.getAttribute("height"));
        bar.appendChild(seg);
      }
      if (seg) {
        seg.setAttribute("x", x.toFixed(2));
        seg.setAttribute("width", w.toFixed(2));
      }
      x += w;
      var pc = row.querySelector('.pc[data-key="' + k[0] + '"]');
      if (pc) {
        var pct = total ? (Math.round(1000 * counts[k[0]] / total) / 10).toFixed(1) : "0.0";
        pc.lastChild.textContent = counts[k[0]] + " " + pc.lastChild.textContent.replace(/^\d+ /, "").replace(/\([\d.]+%\)$/, "(" + pct + "%)");
      }
    });
  }

  // ---- a backfill ----
  function initBackfill(root) {
    var id = root.dataset.id;
    var base = "/api/backfills/" + encodeURIComponent(id);
    var controls = document.getElementById("backfill-actions");
    if (controls) controls.addEventListener("click", function (ev) {
      var btn = ev.target.closest("button.act");
      if (!btn) return;
      btn.disabled = true;
      post(base + "/" + btn.dataset.act, {}).then(function (r) {
        btn.disabled = false;
        if (r.ok) { flash(r); location.reload(); } else showResult(r);
      });
    });
    var job = document.getElementById("job");
    if (job && job.dataset.running === "true") {
      var jp = poller(base + "/job", function (j) {
        var ph = document.getElementById("job-phase");
        if (ph) ph.textContent = j.phase || "";
        var pr = document.getElementById("job-progress");
        if (pr && j.progress) pr.textContent = " · runs " + j.progress.succeeded + " succeeded, " + j.progress.failed + " failed, " +
          j.progress.running + " running, " + j.progress.queued + " queued of " + j.progress.total;
        if (!j.running) { jp.stop(); location.reload(); }
      }, function () { return 1000; });
      jp.start();
    }
    // A backfill that ended is polled too, more slowly: a rollback, a
    // resume or a cancel from elsewhere (or a job of this view that ended
    // as its page reloaded) changes it.
    var ended = root.dataset.state !== "running";
    var p = poller("/api/backfills/" + encodeURIComponent(id) + "/status", function (st) {
      document.getElementById("bf-state").textContent = st.state;
      document.getElementById("bf-state").className = "badge s-" + st.state;
      document.getElementById("bf-phase").textContent = st.phase;
      st.dates.forEach(function (d) {
        var day = root.querySelector('.day[data-ds="' + d.ds + '"]');
        if (day) { day.className = "day s-" + d.state; day.title = d.ds + ": " + d.state; }
      });
      updateBackfillDates(root, st);
      if (st.state !== root.dataset.state || st.phase !== root.dataset.phase || String(st.on_hold) !== root.dataset.hold) {
        p.stop();
        window.location.reload(); // phases, validation and report come with the page
      }
    }, function () { return ended ? 5000 : 2000; });
    p.start();
  }

  // ---- the scheduler's banner, on every page: polled, so that it comes
  // and goes without a reload ----
  function initBanner(banner) {
    var p = poller("/api/scheduler", function (sch) {
      banner.textContent = sch.warning || "";
      banner.hidden = !sch.warning;
    }, function () { return 5000; });
    setTimeout(p.start, 5000); // the page came with the banner of its time

  }

  // ---- the pipelines page: its table follows /api/pipelines ----
  function runAt(logical) {
    var m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d):(\d\d)/.exec(logical || "");
    if (!m) return logical || "";
    return m[2] === "00:00" && m[3] === "00" ? m[1] : m[1] + " " + m[2];
  }

  function whenZ(s) {
    var d = new Date(s);
    if (isNaN(d)) return s;
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function runLink(name, r) {
    var a = el("a", null, runAt(r.logical_date));
    a.href = "/pipelines/" + encodeURIComponent(name) + "/runs/" + r.id;
    return a;
  }

  function pipelineRow(p) {
    var tr = el("tr");
    tr.dataset.pipeline = p.name;
    var td = el("td"), a = el("a", null, p.name);
    a.href = "/pipelines/" + encodeURIComponent(p.name);
    td.appendChild(a);
    if (!p.in_workspace) { td.appendChild(document.createTextNode(" ")); td.appendChild(el("span", "note", "(not in the workspace)")); }
    tr.appendChild(td);
    td = el("td");
    td.appendChild(el("code", null, p.schedule));
    td.appendChild(document.createTextNode(" " + p.timezone));
    tr.appendChild(td);
    td = el("td");
    if (p.next_due) {
      td.appendChild(document.createTextNode(runAt(p.next_due.logical_date) + " "));
      td.appendChild(el("span", "note", "due " + whenZ(p.next_due.due_at)));
    } else td.textContent = "–";
    tr.appendChild(td);
    td = el("td");
    if (p.paused) td.appendChild(el("span", "badge paused", "paused")); else td.textContent = "no";
    tr.appendChild(td);
    [p.last_run, p.last_failure].forEach(function (r, i) {
      var c = el("td");
      if (!r) { c.textContent = "–"; tr.appendChild(c); return; }
      if (i === 0) { c.appendChild(el("span", "badge s-" + r.state, r.state)); c.appendChild(document.createTextNode(" ")); }
      c.appendChild(runLink(p.name, r));
      c.appendChild(document.createTextNode(" "));
      var k = el("span", "kind k-" + r.kind, kindMarks[r.kind] || "");
      k.title = r.kind;
      c.appendChild(k);
      tr.appendChild(c);
    });
    tr.appendChild(el("td", null, p.watermark ? whenZ(p.watermark) : "–"));
    td = el("td", "counts");
    Object.keys(p.runs).sort().forEach(function (state) {
      td.appendChild(el("span", "badge s-" + state, p.runs[state] + " " + state));
      td.appendChild(document.createTextNode(" "));
    });
    tr.appendChild(td);
    return tr;
  }

  function initPipelines(table) {
    poller("/api/pipelines", function (ps) {
      var tbody = el("tbody");
      ps.forEach(function (p) { tbody.appendChild(pipelineRow(p)); });
      table.replaceChild(tbody, table.querySelector("tbody"));
      table.dataset.updated = String(Date.now());
    }, function () { return 3000; }).start();
  }

  document.addEventListener("DOMContentLoaded", function () {
    showFlash();
    var pipelines = document.getElementById("pipelines");
    if (pipelines && pipelines.dataset.live === "true") initPipelines(pipelines);
    var banner = document.getElementById("banner");
    if (banner) initBanner(banner);
    var grid = document.getElementById("grid");
    if (grid) initGrid(grid);
    var bf = document.getElementById("backfill");
    if (bf) initBackfill(bf);
  });
})();
