/* perfsight's canvas timeline: the track tree (collapsible groups per rank), slices coloured by name,
   per-pixel buckets of the slices too short to draw (hatched), counters in their units, flow arrows, a time
   axis; it opens on the profiled steps (the whole run when there are none);
   W/S zoom and A/D pan, wheel zoom, drag to pan, shift-drag to sum an area, click for a slice's details,
   search with next/previous. The server sends only the visible window at screen resolution
   (api_timeline.py; times are integer ns from the run's origin); this file only draws and asks.
   Needs util.js (PS.el, PS.fmtBytes, PS.fmtPct) only. Every trace string reaches the page through
   textContent or canvas fillText, never as markup.
   Usage: new PerfsightTimeline(container, {apiBase: "/api/runs/<id>"}). */
"use strict";

(() => {
  const AXIS_H = 26, GROUP_H = 22, LANE_H = 18, TRACK_GAP = 4, COUNTER_H = 36, LABEL_W = 220;
  const MIN_SPAN = 50;                        // ns: the deepest zoom
  const MARGIN = 0.25;                        // share of the view fetched beyond each side (smooth panning)
  const DEBOUNCE_MS = 40;
  const OVERLAP_COLORS = {"merged computation": "#3f9c5a", "merged communication": "#e0922f",
                          "pure communication": "#cf4a34", "free time": "#a3abb5"};

  const el = PS.el;                           // util.js: string children become text nodes, never markup

  function hue(name) {                        // FNV-1a of the name -> a stable hue
    let h = 2166136261;
    for (let i = 0; i < name.length; i++) { h ^= name.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) % 360;
  }
  const colorCache = new Map();
  function colorOf(name, kind) {
    if (kind === "overlap" && OVERLAP_COLORS[name]) return OVERLAP_COLORS[name];
    let c = colorCache.get(name);
    if (!c) { c = `hsl(${hue(name)}, 55%, 62%)`; colorCache.set(name, c); }
    return c;
  }

  function addRect(fills, style, x, w) {
    let list = fills.get(style);
    if (!list) fills.set(style, list = []);
    list.push(x, w);
  }

  function fmtTime(ns) {                       // a duration or an offset from the run's start
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(a >= 1e11 ? 1 : 3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(3) + " µs";
    return Math.round(ns) + " ns";
  }

  function fmtValue(v, unit) {                // a counter's value in its unit (timeline_index.counter_unit)
    if (unit === "bytes") return PS.fmtBytes(v);
    if (unit === "percent") return PS.fmtPct(v);
    if (unit === "ns") return fmtTime(v);
    return String(Number(v.toPrecision(4)));
  }

  function fmtTick(t, step) {                 // an axis label: the unit of t, as many decimals as the step needs
    const a = Math.abs(t);
    const [scale, unit] = a >= 1e9 ? [1e9, "s"] : a >= 1e6 ? [1e6, "ms"] : a >= 1e3 ? [1e3, "µs"] : [1, "ns"];
    const decimals = Math.min(9, Math.max(0, Math.ceil(-Math.log10(step / scale) - 1e-9)));
    return (t / scale).toFixed(decimals) + " " + unit;
  }

  function tickStep(span, px) {               // a 1-2-5 step giving ticks about 100 px apart
    const raw = span / Math.max(1, px / 100);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }

  function fit(ctx, text, width) {            // the text cut to fit width px (with an ellipsis)
    if (ctx.measureText(text).width <= width) return text;
    let lo = 0, hi = text.length;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (ctx.measureText(text.slice(0, mid) + "…").width <= width) lo = mid; else hi = mid - 1;
    }
    return lo ? text.slice(0, lo) + "…" : "";
  }

  class PerfsightTimeline {
    constructor(container, {apiBase}) {
      this.api = String(apiBase).replace(/\/$/, "") + "/timeline";
      this.container = container;
      this.view = {t0: 0, t1: 1};
      this.extent = {start: 0, end: 1};
      this.profiled = null;                    // the span of the steps: the view a run opens on
      this.tree = null;
      this.rows = [];
      this.collapsed = new Set();
      this.data = null;
      this.showFlows = true;
      this.selected = null;
      this.detail = null;
      this.pathIds = null;                     // the slices on the critical path, when shown (a Set of ids)
      this.pathWindows = [];
      this.search = {text: "", total: 0, index: -1, match: null, wrapped: false};
      this.area = null;
      this.areaRange = null;
      this.mouse = null;
      this.drag = null;
      this.seq = 0;
      this.timer = null;
      this.pending = 0;
      this.waiters = [];
      this.stats = {requests: 0, dropped: 0, drawn: {slices: 0, buckets: 0, flows: 0, counters: 0}};
      this.error = null;
      this.build();
      this.bind();
      window.__perfsightTimelineTest = this.testHook();
      this.track(this.loadTracks());
    }

    /* --- DOM ------------------------------------------------------------------------------------------- */

    build() {
      this.searchBox = el("input", {type: "search", class: "pst-search", placeholder: "Search names (Enter: next)",
                                    "aria-label": "Search slice names"});
      this.countLabel = el("span", {class: "pst-count"});
      this.flowBox = el("input", {type: "checkbox", class: "pst-flows", checked: true});
      this.pathBox = el("input", {type: "checkbox", class: "pst-critical"});
      this.status = el("span", {class: "pst-status"});
      this.canvas = el("canvas", {class: "pst-canvas"});
      this.inner = el("div", {class: "pst-inner"}, this.canvas);
      this.wrap = el("div", {class: "pst-wrap"}, this.inner);
      this.tooltip = el("div", {class: "pst-tooltip", hidden: true});
      this.details = el("div", {class: "pst-details"}, el("p", {class: "pst-note"}, "Click a slice for its details."));
      this.areaPanel = el("div", {class: "pst-area"},
                          el("p", {class: "pst-note"}, "Shift-drag across tracks to sum the durations per name."));
      this.root = el("div", {class: "pst", tabindex: "0"},
        el("div", {class: "pst-toolbar"},
          this.searchBox,
          el("button", {type: "button", class: "pst-prev", title: "Previous match",
                        onclick: () => this.track(this.step("prev"))}, "◀"),
          el("button", {type: "button", class: "pst-next", title: "Next match",
                        onclick: () => this.track(this.step("next"))}, "▶"),
          this.countLabel,
          el("label", {class: "pst-toggle"}, this.flowBox, " flow arrows"),
          el("label", {class: "pst-toggle", title: "Outline the slices on each step's critical path"},
             this.pathBox, " critical path"),
          this.stepsButton = el("button", {type: "button", class: "pst-steps", hidden: true,
                                           onclick: () => this.showProfiled()}, "Profiled steps"),
          el("button", {type: "button", class: "pst-reset",
                        onclick: () => this.setView(this.extent.start, this.extent.end)}, "Whole run"),
          el("a", {class: "pst-download", href: this.api + "/download", download: ""},
             "Download timeline JSON (Perfetto, chrome://tracing)"),
          el("span", {class: "pst-help"},
             "W/S zoom · A/D pan · wheel zoom · drag pan · shift-drag sum · click details"),
          this.status),
        this.wrap, this.tooltip,
        el("div", {class: "pst-panels"}, this.details, this.areaPanel));
      this.container.replaceChildren(this.root);
      this.ctx = this.canvas.getContext("2d");
      this.resize();
    }

    bind() {
      this.searchBox.addEventListener("keydown", (e) => {
        if (e.key === "Enter") { e.preventDefault(); this.track(this.step(e.shiftKey ? "prev" : "next")); }
        e.stopPropagation();
      });
      this.searchBox.addEventListener("input", () => {
        this.search = {text: this.searchBox.value, total: 0, index: -1, match: null, wrapped: false};
        this.showCount();
      });
      this.flowBox.addEventListener("change", () => { this.showFlows = this.flowBox.checked; this.draw(); });
      this.pathBox.addEventListener("change", () => this.track(this.showCriticalPath(this.pathBox.checked)));
      this.root.addEventListener("keydown", (e) => this.onKey(e));
      this.wrap.addEventListener("scroll", () => this.draw());
      this.canvas.addEventListener("wheel", (e) => this.onWheel(e), {passive: false});
      this.canvas.addEventListener("mousedown", (e) => this.onDown(e));
      this.canvas.addEventListener("mousemove", (e) => this.onHover(e));
      this.canvas.addEventListener("mouseleave", () => { this.mouse = null; this.tooltip.hidden = true; });
      this.canvas.addEventListener("mouseenter", () => {    // keys work under the mouse, unless typing elsewhere
        const active = document.activeElement;
        if (!active || active === document.body) this.root.focus({preventScroll: true});
      });
      this.onWindowMove = (e) => this.onDrag(e);
      this.onWindowUp = (e) => this.onUp(e);
      window.addEventListener("mousemove", this.onWindowMove);
      window.addEventListener("mouseup", this.onWindowUp);
      this.observer = new ResizeObserver(() => { if (this.resize()) { this.draw(); this.schedule(); } });
      this.observer.observe(this.wrap);
    }

    /* Stop listening and drop pending requests (the page is leaving the timeline). */
    destroy() {
      window.removeEventListener("mousemove", this.onWindowMove);
      window.removeEventListener("mouseup", this.onWindowUp);
      this.observer.disconnect();
      clearTimeout(this.timer);
      this.timer = null;
      this.seq++;                              // answers still on their way are dropped
      this.ctx = null;
      this.settle();
    }

    resize() {                                // true if the size changed
      const w = Math.max(LABEL_W + 50, this.wrap.clientWidth), h = Math.max(100, this.wrap.clientHeight);
      if (w === this.width && h === this.height) return false;
      const dpr = window.devicePixelRatio || 1;
      this.width = w; this.height = h;
      this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(h * dpr);
      this.canvas.style.width = w + "px"; this.canvas.style.height = h + "px";
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      return true;
    }

    get plotWidth() { return this.width - LABEL_W; }
    timeAt(x) { return this.view.t0 + (x - LABEL_W) * (this.view.t1 - this.view.t0) / this.plotWidth; }
    xAt(t) { return LABEL_W + (t - this.view.t0) * this.plotWidth / (this.view.t1 - this.view.t0); }

    /* --- requests ------------------------------------------------------------------------------------------ */

    track(promise) {                           // count a request until it settles (ready() waits for none)
      this.pending++;
      return Promise.resolve(promise).catch((error) => this.fail(error)).finally(() => {
        this.pending--;
        this.settle();
      });
    }

    settle() {
      if (this.pending || this.timer) return;
      const waiters = this.waiters;
      this.waiters = [];
      waiters.forEach((resolve) => resolve());
    }

    idle() { return new Promise((resolve) => { this.waiters.push(resolve); this.settle(); }); }

    fail(error) {
      this.error = String(error && error.message || error);
      this.status.textContent = this.error;
      this.status.classList.add("pst-error");
    }

    async get(path, params) {
      const query = params ? "?" + new URLSearchParams(params).toString() : "";
      const response = await fetch(this.api + path + query, {headers: {Accept: "application/json"}});
      let body = null;
      try { body = await response.json(); } catch (e) { /* not JSON */ }
      if (!response.ok) {
        const detail = body && body.detail;
        throw new Error(typeof detail === "string" ? detail : `${response.status} ${JSON.stringify(detail || "")}`);
      }
      return body;
    }

    async loadTracks() {
      this.tree = await this.get("/tracks");
      this.extent = {start: this.tree.start_ns, end: Math.max(this.tree.end_ns, this.tree.start_ns + MIN_SPAN)};
      this.profiled = this.tree.profiled ? {start: this.tree.profiled.start_ns, end: this.tree.profiled.end_ns} : null;
      this.stepsButton.hidden = !this.profiled;
      this.layout();
      this.showProfiled();
    }

    showProfiled() {                          // the profiled steps (the whole run when it has none)
      const {start, end} = this.profiled || this.extent;
      this.setView(start, end);
    }

    schedule() {                              // fetch the view's window soon (debounced)
      if (!this.tree) return;
      clearTimeout(this.timer);
      this.timer = setTimeout(() => {
        this.timer = null;
        this.track(this.fetchWindow());
      }, DEBOUNCE_MS);
    }

    async fetchWindow() {
      const seq = ++this.seq;
      const span = this.view.t1 - this.view.t0;
      const t0 = Math.floor(this.view.t0 - span * MARGIN), t1 = Math.ceil(this.view.t1 + span * MARGIN);
      const width = Math.min(10000, Math.max(1, Math.round(this.plotWidth * (1 + 2 * MARGIN))));
      const tracks = this.visibleTracks();
      if (!tracks.length) { this.data = null; this.draw(); return; }     // every group collapsed
      this.stats.requests++;
      this.status.textContent = "loading…";
      const body = await this.get("/window", {t0, t1: Math.max(t1, t0 + 1), width, tracks: tracks.join(",")});
      if (seq !== this.seq) { this.stats.dropped++; return; }    // a newer request went out: drop this one
      this.data = this.unpack(body);
      this.status.textContent = "";
      this.status.classList.remove("pst-error");
      this.draw();
    }

    unpack(body) {                            // index the window answer: lanes by track:depth, slices by id
      const lanes = new Map(), byId = new Map(), counters = new Map();
      for (const lane of body.lanes) {
        lanes.set(lane.track + ":" + lane.depth, lane);
        const s = lane.slices;
        if (s) for (let i = 0; i < s.id.length; i++) {
          if (s.id[i] >= 0) byId.set(s.id[i], {track: lane.track, depth: lane.depth, start: s.start[i], dur: s.dur[i]});
        }
      }
      for (const c of body.counters) counters.set(c.track, c);
      return {body, lanes, byId, counters, names: body.names, kinds: body.kinds};
    }

    /* --- view ------------------------------------------------------------------------------------------------ */

    setView(t0, t1) {
      const whole = this.extent.end - this.extent.start;
      let span = Math.min(Math.max(t1 - t0, MIN_SPAN), whole * 4);
      let mid = (t0 + t1) / 2;
      mid = Math.min(Math.max(mid, this.extent.start - whole), this.extent.end + whole);
      this.view = {t0: mid - span / 2, t1: mid + span / 2};
      this.draw();
      this.schedule();
    }

    zoom(factor, x) {                          // factor < 1 zooms in, around the time under x
      const anchor = this.timeAt(x === undefined ? LABEL_W + this.plotWidth / 2 : x);
      const {t0, t1} = this.view;
      this.setView(anchor - (anchor - t0) * factor, anchor + (t1 - anchor) * factor);
    }

    pan(fraction) {
      const span = this.view.t1 - this.view.t0;
      this.setView(this.view.t0 + span * fraction, this.view.t1 + span * fraction);
    }

    reveal(start, dur) {                       // bring a slice into view, large enough to see
      let span = this.view.t1 - this.view.t0;
      if (dur * 1.2 > span) span = dur * 3;
      else if (span > dur * 2000) span = Math.max(dur * 200, MIN_SPAN * 4);
      const inside = start >= this.view.t0 && start + dur <= this.view.t1 && span === this.view.t1 - this.view.t0;
      if (!inside) this.setView(start + dur / 2 - span / 2, start + dur / 2 + span / 2);
    }

    /* --- the track tree -------------------------------------------------------------------------------------- */

    layout() {
      const rows = [];
      let y = 0;
      const ranks = new Set(this.tree.groups.map((g) => g.rank));
      for (const group of this.tree.groups) {
        const title = (ranks.size > 1 ? `rank ${group.rank} · ` : "") + group.name;
        rows.push({kind: "group", id: group.id, name: title, y, h: GROUP_H, group});
        y += GROUP_H;
        if (this.collapsed.has(group.id)) continue;
        for (const t of group.tracks) {
          const h = t.kind === "counter" ? COUNTER_H : Math.max(1, t.depth) * LANE_H + TRACK_GAP;
          rows.push({kind: "track", id: t.id, name: t.name, y, h, track: t});
          y += h;
        }
      }
      this.rows = rows;
      this.contentHeight = y;
      this.inner.style.height = Math.max(y + AXIS_H, this.height) + "px";
    }

    visibleTracks() { return this.rows.filter((r) => r.kind === "track").map((r) => r.id); }

    toggleGroup(id) {
      if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
      this.layout();
      this.draw();
      this.schedule();
    }

    rowAt(y) {                                 // the row under canvas y (or null)
      const cy = y - AXIS_H + this.wrap.scrollTop;
      if (y < AXIS_H) return null;
      for (const r of this.rows) if (cy >= r.y && cy < r.y + r.h) return {row: r, dy: cy - r.y};
      return null;
    }

    /* --- drawing ------------------------------------------------------------------------------------------------ */

    draw() {
      if (!this.ctx) return;
      const ctx = this.ctx, W = this.width, H = this.height;
      ctx.clearRect(0, 0, W, H);
      ctx.font = "11px system-ui, sans-serif";
      ctx.textBaseline = "middle";
      const drawn = {slices: 0, buckets: 0, flows: 0, counters: 0, onPath: 0};
      const top = this.wrap.scrollTop;
      const positions = new Map();           // slice id -> [x, y, w] as drawn (flow ends)
      ctx.save();
      ctx.beginPath(); ctx.rect(0, AXIS_H, W, H - AXIS_H); ctx.clip();
      for (const r of this.rows) {
        const y = AXIS_H + r.y - top;
        if (y + r.h < AXIS_H || y > H) continue;
        if (r.kind === "group") this.drawGroup(r, y);
        else this.drawTrack(r, y, drawn, positions);
      }
      if (this.showFlows && this.data) this.drawFlows(positions, drawn);
      this.drawSelections(top);
      ctx.restore();
      this.drawAxis();
      this.stats.drawn = drawn;
    }

    drawGroup(r, y) {
      const ctx = this.ctx;
      ctx.fillStyle = "#e9edf3";
      ctx.fillRect(0, y, this.width, r.h);
      ctx.fillStyle = "#1d2433";
      ctx.font = "600 12px system-ui, sans-serif";
      ctx.fillText((this.collapsed.has(r.id) ? "▸ " : "▾ ") + fit(ctx, r.name, LABEL_W * 2), 6, y + r.h / 2);
      ctx.font = "11px system-ui, sans-serif";
    }

    drawTrack(r, y, drawn, positions) {
      const ctx = this.ctx, t = r.track;
      ctx.fillStyle = "#fbfcfd";
      ctx.fillRect(LABEL_W, y, this.plotWidth, r.h);
      ctx.strokeStyle = "#e4e7ec";
      ctx.beginPath(); ctx.moveTo(0, y + r.h - 0.5); ctx.lineTo(this.width, y + r.h - 0.5); ctx.stroke();
      ctx.fillStyle = "#344054";
      ctx.fillText(fit(ctx, t.name, LABEL_W - 18), 14, y + Math.min(r.h, LANE_H) / 2);
      if (!this.data) return;
      ctx.save();
      ctx.beginPath(); ctx.rect(LABEL_W, y, this.plotWidth, r.h); ctx.clip();
      if (t.kind === "counter") this.drawCounter(t, y, r.h, drawn);
      else for (let d = 0; d < Math.max(1, t.depth); d++) {
        const lane = this.data.lanes.get(t.id + ":" + d);
        if (lane) this.drawLane(lane, y + d * LANE_H, t.kind, drawn, positions);
      }
      ctx.restore();
    }

    drawLane(lane, y, kind, drawn, positions) {
      const ctx = this.ctx, names = this.data.names, kinds = this.data.kinds;
      const scale = this.plotWidth / (this.view.t1 - this.view.t0), t0 = this.view.t0;
      const h = LANE_H - 2, b = lane.buckets, s = lane.slices;
      if (b) {                                 // faded colour of the longest name, then one hatched path
        const fills = new Map(), hatched = [];
        for (let i = 0; i < b.start.length; i++) {
          const x = LABEL_W + (b.start[i] - t0) * scale;
          const w = Math.max(1, (b.end[i] - b.start[i]) * scale);
          if (x + w < LABEL_W || x > this.width) continue;
          addRect(fills, colorOf(names[b.name[i]], kind), x, w);
          hatched.push(x, w);
          drawn.buckets++;
        }
        ctx.globalAlpha = 0.45;
        this.fillRects(fills, y + 1, h);
        ctx.globalAlpha = 1;
        this.fillRects(new Map([[this.hatch(), hatched]]), y + 1, h);
      }
      if (!s) return;
      const fills = new Map(), labels = [];
      for (let i = 0; i < s.id.length; i++) {
        const x = LABEL_W + (s.start[i] - t0) * scale;
        const w = Math.max(1, s.dur[i] * scale);
        if (x + w < LABEL_W || x > this.width) continue;
        addRect(fills, colorOf(names[s.name[i]], kinds[s.kind[i]]), x, w);
        if (s.id[i] >= 0) positions.set(s.id[i], [x, y, w]);
        if (w > 28 || s.id[i] === this.selected) labels.push(i, x, w);
        drawn.slices++;
      }
      this.fillRects(fills, y + 1, h);
      if (this.pathIds) {                      // the critical path: an orange outline on its slices
        ctx.lineWidth = 2; ctx.strokeStyle = "#f97316";
        for (let i = 0; i < s.id.length; i++) {
          if (!this.pathIds.has(s.id[i])) continue;
          const x = LABEL_W + (s.start[i] - t0) * scale, w = Math.max(2, s.dur[i] * scale);
          if (x + w < LABEL_W || x > this.width) continue;
          ctx.strokeRect(x + 1, y + 2, Math.max(1, w - 2), h - 2);
          drawn.onPath++;
        }
        ctx.lineWidth = 1;
      }
      ctx.fillStyle = "#101828";
      for (let k = 0; k < labels.length; k += 3) {
        const i = labels[k], x = labels[k + 1], w = labels[k + 2];
        if (s.id[i] === this.selected) {
          ctx.lineWidth = 2; ctx.strokeStyle = "#101828";
          ctx.strokeRect(x + 1, y + 2, Math.max(1, w - 2), h - 2);
          ctx.lineWidth = 1;
        }
        const left = Math.max(x, LABEL_W), room = Math.min(x + w, this.width) - left - 6;
        if (w > 28 && room > 12) ctx.fillText(fit(ctx, names[s.name[i]], room), left + 3, y + 1 + h / 2);
      }
    }

    /* The critical path (server: analysis/critical_path.py) outlined, or not; ``step`` also zooms to that step. */
    async showCriticalPath(on, step = null) {
      this.pathBox.checked = on;
      if (!on) { this.pathIds = null; this.pathWindows = []; this.draw(); return; }
      const body = await this.get("/critical_path" + (step === null ? "" : "?step=" + step));
      this.pathIds = new Set(body.slice_ids);
      this.pathWindows = body.windows;
      if (step !== null && body.windows.length) this.setView(body.windows[0].start_ns, body.windows[0].end_ns);
      this.draw();
    }

    fillRects(fills, y, h) {                   // fills: style -> [x0, w0, x1, w1, ...]: one path per style
      const ctx = this.ctx;
      for (const [style, xs] of fills) {
        if (!xs.length) continue;
        ctx.fillStyle = style;
        ctx.beginPath();
        for (let i = 0; i < xs.length; i += 2) ctx.rect(xs[i], y, xs[i + 1], h);
        ctx.fill();
      }
    }

    hatch() {                                  // the pattern of the per-pixel buckets
      if (!this.hatchPattern) {
        const tile = document.createElement("canvas");
        tile.width = tile.height = 6;
        const c = tile.getContext("2d");
        c.strokeStyle = "rgba(16, 24, 40, 0.35)";
        c.beginPath(); c.moveTo(0, 6); c.lineTo(6, 0); c.stroke();
        this.hatchPattern = this.ctx.createPattern(tile, "repeat");
      }
      return this.hatchPattern;
    }

    /* What counter `track` shows in the view: its window answer `c`, its scale from `lo` (0, or the least value
       below it) to `hi`, the largest value in view (the one it holds at the view's start and the samples inside),
       and `label`, that value in the counter's unit; null when the view holds none of its values. */
    counterView(track) {
      const c = this.data && this.data.counters.get(track.id);
      if (!c) return null;
      let held = c.before, lo = 0, hi = -Infinity;
      for (let i = 0; i < c.ts.length && c.ts[i] < this.view.t1; i++) {
        if (c.ts[i] <= this.view.t0) { held = c.last[i]; continue; }
        lo = Math.min(lo, c.min[i]);
        hi = Math.max(hi, c.max[i]);
      }
      if (held !== null) { lo = Math.min(lo, held); hi = Math.max(hi, held); }
      return hi === -Infinity ? null : {c, lo, hi, label: fmtValue(hi, track.unit)};
    }

    drawCounter(track, y, h, drawn) {
      const shown = this.counterView(track);
      if (!shown) return;
      const ctx = this.ctx, {c, lo, hi} = shown;
      const level = (v) => y + h - 4 - (hi > lo ? (v - lo) / (hi - lo) : 0.5) * (h - 8);
      ctx.strokeStyle = "#2f6fde";
      ctx.beginPath();
      let x = LABEL_W, v = c.before;
      const path = [];
      for (let i = 0; i < c.ts.length; i++) {
        const xi = this.xAt(c.ts[i]);
        if (v !== null) path.push([x, level(v)], [xi, level(v)]);
        path.push([xi, level(c.max[i])], [xi, level(c.min[i])], [xi, level(c.last[i])]);
        x = xi; v = c.last[i];
        drawn.counters++;
      }
      const end = c.continues ? this.width : Math.max(x + 1, Math.min(this.width, this.xAt(this.extent.end)));
      if (v !== null) path.push([x, level(v)], [end, level(v)]);   // a value holds until the next sample
      path.forEach(([px, py], i) => (i ? ctx.lineTo(px, py) : ctx.moveTo(px, py)));
      ctx.stroke();
      ctx.fillStyle = "#667085";
      ctx.fillText(shown.label, LABEL_W + 4, y + 8);
    }

    drawFlows(positions, drawn) {
      const f = this.data.body.flows, ctx = this.ctx;
      ctx.strokeStyle = "rgba(16, 24, 40, 0.7)";
      ctx.fillStyle = "rgba(16, 24, 40, 0.7)";
      for (let i = 0; i < f.src.length; i++) {
        const a = positions.get(f.src[i]), b = positions.get(f.dst[i]);
        if (!a || !b) continue;
        const x0 = a[0] + Math.min(a[2], 4), y0 = a[1] + LANE_H / 2, x1 = b[0], y1 = b[1] + LANE_H / 2;
        ctx.beginPath();
        ctx.moveTo(x0, y0);
        const bend = Math.max(20, Math.abs(x1 - x0) / 2);
        ctx.bezierCurveTo(x0 + bend, y0, x1 - bend, y1, x1, y1);
        ctx.stroke();
        ctx.beginPath();
        ctx.moveTo(x1, y1); ctx.lineTo(x1 - 6, y1 - 3); ctx.lineTo(x1 - 6, y1 + 3); ctx.fill();
        drawn.flows++;
      }
    }

    drawSelections(top) {
      const ctx = this.ctx;
      const box = this.drag && this.drag.mode === "area" ? this.drag : null;
      const range = box ? [this.timeAt(Math.min(box.x0, box.x1)), this.timeAt(Math.max(box.x0, box.x1))]
                        : this.areaRange && [this.areaRange.t0, this.areaRange.t1];
      if (!range) return;
      const x0 = Math.max(LABEL_W, this.xAt(range[0])), x1 = Math.min(this.width, this.xAt(range[1]));
      ctx.fillStyle = "rgba(47, 111, 222, 0.12)";
      ctx.strokeStyle = "rgba(47, 111, 222, 0.8)";
      if (box) {
        const y0 = Math.min(box.y0, box.y1), y1 = Math.max(box.y0, box.y1);
        ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
        ctx.strokeRect(x0, y0, x1 - x0, y1 - y0);
      } else {
        ctx.fillRect(x0, AXIS_H, x1 - x0, this.height - AXIS_H);
        ctx.beginPath();
        ctx.moveTo(x0, AXIS_H); ctx.lineTo(x0, this.height); ctx.moveTo(x1, AXIS_H); ctx.lineTo(x1, this.height);
        ctx.stroke();
      }
    }

    drawAxis() {
      const ctx = this.ctx, {t0, t1} = this.view;
      ctx.fillStyle = "#ffffff";
      ctx.fillRect(0, 0, this.width, AXIS_H);
      ctx.strokeStyle = "#d0d5dd";
      ctx.beginPath(); ctx.moveTo(0, AXIS_H - 0.5); ctx.lineTo(this.width, AXIS_H - 0.5); ctx.stroke();
      ctx.fillStyle = "#667085";
      ctx.fillText("time from start", 6, AXIS_H / 2);
      const step = tickStep(t1 - t0, this.plotWidth);
      ctx.fillStyle = "#344054";
      for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
        const x = this.xAt(t);
        ctx.beginPath(); ctx.moveTo(x, AXIS_H - 6); ctx.lineTo(x, AXIS_H); ctx.stroke();
        ctx.fillText(fmtTick(t, step), x + 3, AXIS_H / 2);
      }
    }

    /* --- pointer and keys --------------------------------------------------------------------------------------- */

    local(e) {
      const r = this.canvas.getBoundingClientRect();
      return {x: e.clientX - r.left, y: e.clientY - r.top};
    }

    hit(x, y) {                                // what is under (x, y): a slice, a bucket, or nothing
      const at = this.rowAt(y);
      if (!at || at.row.kind !== "track" || x < LABEL_W || !this.data) return at && {row: at.row};
      const t = at.row.track, px = (this.view.t1 - this.view.t0) / this.plotWidth, time = this.timeAt(x);
      if (t.kind === "counter") {
        const c = this.data.counters.get(t.id);
        let value = c ? c.before : null;
        if (c) for (let i = 0; i < c.ts.length && c.ts[i] <= time; i++) value = c.last[i];
        return {row: at.row, counter: value};
      }
      const lane = this.data.lanes.get(t.id + ":" + Math.floor(at.dy / LANE_H));
      if (!lane) return {row: at.row};
      const s = lane.slices;
      if (s) for (let i = s.id.length - 1; i >= 0; i--) {
        if (time >= s.start[i] && time <= s.start[i] + Math.max(s.dur[i], px)) {
          const name = this.data.names[s.name[i]];
          return {row: at.row, slice: {id: s.id[i], start: s.start[i], dur: s.dur[i], name}};
        }
      }
      const b = lane.buckets;
      if (b) for (let i = 0; i < b.start.length; i++) {
        if (time >= b.start[i] && time <= Math.max(b.end[i], b.start[i] + px)) {
          return {row: at.row, bucket: {start: b.start[i], end: b.end[i], count: b.count[i],
                                        name: this.data.names[b.name[i]]}};
        }
      }
      return {row: at.row};
    }

    onHover(e) {
      const {x, y} = this.local(e);
      this.mouse = {x, y};
      if (this.drag) return;
      const h = this.hit(x, y);
      let text = null;
      if (h && h.slice) text = `${h.slice.name}\n${fmtTime(h.slice.dur)} at ${fmtTime(h.slice.start)}`;
      else if (h && h.bucket) text = `${h.bucket.count} slice${h.bucket.count > 1 ? "s" : ""} under a pixel, ` +
        `longest: ${h.bucket.name}\n${fmtTime(h.bucket.start)} to ${fmtTime(h.bucket.end)} (click to zoom in)`;
      else if (h && h.counter !== undefined && h.counter !== null) {
        text = `${h.row.name}: ${fmtValue(h.counter, h.row.track.unit)}`;
      }
      if (text === null) { this.tooltip.hidden = true; return; }
      this.tooltip.textContent = text;
      this.tooltip.hidden = false;
      this.tooltip.style.left = Math.min(x + 14, this.width - 260) + "px";
      this.tooltip.style.top = (this.wrap.offsetTop + y + 14) + "px";
    }

    onDown(e) {
      if (e.button !== 0) return;
      this.root.focus({preventScroll: true});
      const {x, y} = this.local(e);
      e.preventDefault();
      this.drag = {mode: e.shiftKey && x >= LABEL_W ? "area" : "pan", x0: x, y0: y, x1: x, y1: y, moved: false,
                   view: {...this.view}, scroll: this.wrap.scrollTop};
    }

    onDrag(e) {
      if (!this.drag) return;
      const {x, y} = this.local(e), d = this.drag;
      d.x1 = x; d.y1 = y;
      if (Math.abs(x - d.x0) + Math.abs(y - d.y0) > 3) d.moved = true;
      if (!d.moved) return;
      if (d.mode === "pan") {
        const shift = (x - d.x0) * (d.view.t1 - d.view.t0) / this.plotWidth;
        this.wrap.scrollTop = d.scroll - (y - d.y0);
        this.setView(d.view.t0 - shift, d.view.t1 - shift);
      } else {
        this.draw();
      }
    }

    onUp(e) {
      const d = this.drag;
      if (!d) return;
      this.drag = null;
      if (d.mode === "area" && d.moved) {
        const t0 = this.timeAt(Math.max(LABEL_W, Math.min(d.x0, d.x1))), t1 = this.timeAt(Math.max(d.x0, d.x1));
        const top = Math.min(d.y0, d.y1), bottom = Math.max(d.y0, d.y1);
        const ids = this.rows.filter((r) => r.kind === "track" && r.track.kind !== "counter").filter((r) => {
          const y = AXIS_H + r.y - this.wrap.scrollTop;
          return y < bottom && y + r.h > top;
        }).map((r) => r.id);
        if (ids.length && t1 > t0) this.track(this.areaSelect(t0, t1, ids));
        else this.draw();
        return;
      }
      if (d.moved) return;
      const h = this.hit(d.x0, d.y0);
      if (!h) return;
      if (h.row && h.row.kind === "group") this.toggleGroup(h.row.id);
      else if (h.slice && h.slice.id >= 0) this.track(this.select(h.slice.id));
      else if (h.bucket) this.setView(h.bucket.start, Math.max(h.bucket.end, h.bucket.start + MIN_SPAN));
    }

    onWheel(e) {
      const {x} = this.local(e);
      if (x < LABEL_W) return;                 // over the labels: scroll the tracks
      e.preventDefault();
      if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) this.pan(e.deltaX / this.plotWidth);
      else this.zoom(Math.exp(e.deltaY * 0.002), x);
    }

    onKey(e) {
      if (e.target !== this.root || e.ctrlKey || e.metaKey || e.altKey) return;
      const x = this.mouse && this.mouse.x >= LABEL_W ? this.mouse.x : undefined;
      const key = e.key.toLowerCase();
      if (key === "w") this.zoom(0.8, x);
      else if (key === "s") this.zoom(1.25, x);
      else if (key === "a") this.pan(-0.1);
      else if (key === "d") this.pan(0.1);
      else if (key === "escape") { this.areaRange = null; this.draw(); }
      else return;
      e.preventDefault();
    }

    /* --- details, search, area ---------------------------------------------------------------------------------- */

    async select(id) {
      this.selected = id;
      this.draw();
      const detail = await this.get("/slice/" + encodeURIComponent(id));
      if (this.selected !== id) return detail;
      this.detail = detail;
      this.showDetail(detail);
      return detail;
    }

    showDetail(d) {
      const exact = (ns) => `${fmtTime(ns)} (${ns.toLocaleString("en-US")} ns)`;
      const rows = [["kind", d.kind], ["track", d.track.name], ["start", exact(d.start_ns)],
                    ["duration", exact(d.dur_ns)], ["end", exact(d.end_ns)], ["depth", d.depth]];
      const scope = el("div", {class: "pst-scope"});
      for (const p of d.parents) {
        scope.append(el("a", {href: "#", onclick: (e) => { e.preventDefault(); this.track(this.jump(p.id)); }}, p.name),
                     " › ");
      }
      scope.append(el("b", {}, d.name));
      const flows = d.flows.map((f) => el("li", {},
        `${f.direction === "out" ? "→" : "←"} ${f.kind}: `,
        f.name === undefined ? `slice ${f.id}` : el("a", {href: "#", onclick: (e) => {
          e.preventDefault(); this.track(this.jump(f.id));
        }}, f.name),
        f.track_name ? ` (${f.track_name})` : ""));
      const columns = Object.entries(d.columns).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) =>
        el("tr", {}, el("th", {}, k), el("td", {}, k === "args" ? el("pre", {}, pretty(v)) : String(v))));
      const parts = [
        el("h3", {class: "pst-title"}, d.name),
        el("table", {class: "pst-facts"}, rows.map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, String(v))))),
        el("div", {class: "pst-label"}, "scope"), scope];
      if (flows.length) parts.push(el("div", {class: "pst-label"}, "flows"), el("ul", {}, flows));
      parts.push(el("details", {}, el("summary", {}, "all columns"), el("table", {class: "pst-facts"}, columns)));
      this.details.replaceChildren(...parts);
    }

    async jump(id) {                          // select a slice and bring it into view
      const d = await this.select(id);
      this.reveal(d.start_ns, d.dur_ns);
    }

    async find(text) {                        // search for text from the start: its first match selected
      this.searchBox.value = text;
      await this.step("next");
    }

    async step(direction) {
      const text = this.searchBox.value;
      if (!text) return;
      if (text !== this.search.text || !this.search.match) {
        this.search = {text, total: 0, index: -1, match: null, wrapped: false, done: false};
      }
      const m = this.search.match;
      const params = {q: text, direction, limit: 1};
      if (m) { params.after = m.start_ns; params.after_id = m.id; }
      else params.after = Math.max(0, Math.floor(direction === "next" ? this.view.t0 : this.view.t1));
      const found = await this.get("/search", params);
      if (this.searchBox.value !== text) return;
      const match = found.matches[0] || null;
      this.search = {text, total: found.total, index: match ? match.index : -1, match, wrapped: found.wrapped,
                     done: true};
      this.showCount();
      if (match) {
        this.reveal(match.start_ns, match.dur_ns);
        await this.select(match.id);
      }
    }

    showCount() {
      const s = this.search;
      this.countLabel.textContent = s.match ? `${s.index + 1} of ${s.total}${s.wrapped ? " (wrapped)" : ""}`
        : s.done ? "no match" : "";
    }

    async areaSelect(t0, t1, trackIds) {
      t0 = Math.floor(t0); t1 = Math.max(Math.ceil(t1), t0 + 1);
      this.areaRange = {t0, t1, tracks: trackIds};
      this.draw();
      const area = await this.get("/area", {t0, t1, tracks: trackIds.join(",")});
      this.area = area;
      const rows = area.rows.map((r) => el("tr", {}, el("td", {}, r.name), el("td", {class: "pst-num"}, r.count),
                                          el("td", {class: "pst-num"}, fmtTime(r.dur_ns)),
                                          el("td", {class: "pst-num"}, (100 * r.dur_ns / (t1 - t0)).toFixed(1) + "%")));
      this.areaPanel.replaceChildren(
        el("h3", {class: "pst-title"}, `Selection: ${fmtTime(t1 - t0)} on ${trackIds.length} track` +
           (trackIds.length > 1 ? "s" : "")),
        el("p", {class: "pst-note"}, `${area.count} slices, ${area.names} names` +
           (area.names > area.rows.length ? ` (the ${area.rows.length} longest shown)` : "") +
           "; durations clipped to the selection; share = of the selection's length. Esc clears."),
        el("table", {class: "pst-facts pst-sums"},
           el("tr", {}, el("th", {}, "name"), el("th", {}, "count"), el("th", {}, "total"), el("th", {}, "share")),
           rows));
      return area;
    }

    /* --- test hook ----------------------------------------------------------------------------------------------- */

    snapshot() {
      const d = this.data;
      return {
        t0: this.view.t0, t1: this.view.t1, plotWidth: this.plotWidth, extent: {...this.extent},
        profiled: this.profiled && {...this.profiled},
        rows: this.rows.map((r) => ({kind: r.kind, id: r.id, name: r.name, y: AXIS_H + r.y - this.wrap.scrollTop,
                                     h: r.h, scale: r.track && r.track.kind === "counter"
                                       ? this.counterView(r.track)?.label : undefined})),
        labelWidth: LABEL_W, collapsed: [...this.collapsed], selected: this.selected, detail: this.detail,
        search: {text: this.search.text, total: this.search.total, index: this.search.index,
                 id: this.search.match && this.search.match.id, wrapped: this.search.wrapped,
                 label: this.countLabel.textContent},
        area: this.area, areaRange: this.areaRange, showFlows: this.showFlows,
        criticalPath: this.pathIds && {slices: this.pathIds.size, windows: this.pathWindows.length},
        window: d && {t0: d.body.t0, t1: d.body.t1, width: d.body.width, lanes: d.body.lanes.length,
                      names: d.names.length, flows: d.body.flows.src.length},
        requests: this.stats.requests, dropped: this.stats.dropped, drawn: {...this.stats.drawn}, error: this.error,
      };
    }

    testHook() {
      const after = (promise) => this.track(promise).then(() => this.idle()).then(() => this.snapshot());
      return {
        state: () => this.snapshot(),
        ready: () => this.idle().then(() => this.snapshot()),
        zoomTo: (t0, t1) => { this.setView(t0, t1); return this.idle().then(() => this.snapshot()); },
        search: (text) => after(this.find(text)),
        next: () => after(this.step("next")),
        prev: () => after(this.step("prev")),
        select: (id) => after(this.select(id)),
        areaSelect: (t0, t1, trackIds) => after(this.areaSelect(t0, t1, trackIds)),
        criticalPath: (on, step = null) => after(this.showCriticalPath(on, step)),
      };
    }
  }

  function pretty(text) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (e) { return String(text); }
  }

  window.PerfsightTimeline = PerfsightTimeline;
})();
