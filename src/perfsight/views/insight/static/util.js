/* Shared helpers of the insight pages: DOM building (text only: trace strings never become HTML),
   JSON fetching with error reporting, number formatting, tables and Plotly charts.
   Every page registers itself in PS.pages (see pages.js); app.js routes to it. */
"use strict";
window.PS = {
  pages: {},

  /* el("div", {class: "x", onclick: f}, child, "text", ...): children that are strings become text nodes. */
  el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  },

  /* table[key] when the table has it as its own property, else undefined: names from a URL or a trace
     ("__proto__", "constructor") never reach Object.prototype. */
  own(table, key) { return Object.hasOwn(table, key) ? table[key] : undefined; },

  /* GET a JSON API route; throws an Error carrying the server's "detail" message and the status. */
  async fetchJson(url) {
    const response = await fetch(url, {headers: {Accept: "application/json"}});
    let body = null;
    try { body = await response.json(); } catch (e) { /* not JSON */ }
    if (!response.ok) {
      const error = new Error((body && body.detail) ? String(body.detail) : `${response.status} ${response.statusText}`);
      error.status = response.status;
      error.body = body;
      throw error;
    }
    return body;
  },

  /* Durations: ns -> "1.23 ms" (unit chosen by size). */
  fmtNs(ns) {
    if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(2) + " µs";
    return Math.round(ns) + " ns";
  },
  fmtPct(p) { return (p === null || p === undefined) ? "–" : Number(p).toFixed(1) + "%"; },
  /* Bytes in the largest binary unit that keeps them at 1 or more: "8 B", "6.2 MiB"; a mean (bytes per step)
     under 1 KiB with one decimal: "1.3 B". */
  fmtBytes(b) {
    if (b === null || b === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, v = Number(b);
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i || !Number.isInteger(v) ? v.toFixed(1) : String(v)) + " " + units[i];
  },
  fmtNum(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US"); },

  /* A table of row objects. columns: [{key, label, format?, cls?}]; every cell is text. A cell holding a word
     longer than LONG_WORD characters (a kernel signature, a path) is "long": it may be cut anywhere, the
     others are cut between words only. */
  LONG_WORD: 24,
  table(rows, columns, {id, onRowClick} = {}) {
    const head = PS.el("tr", {}, columns.map(c => PS.el("th", {class: c.cls}, c.label)));
    const long = new RegExp(`\\S{${PS.LONG_WORD + 1}}`);
    const cell = (c, row) => {
      const td = PS.el("td", {class: c.cls}, c.format ? c.format(row[c.key], row) : (row[c.key] ?? "–"));
      if (long.test(td.textContent)) td.classList.add("long");
      return td;
    };
    const body = rows.map(row => PS.el("tr", {class: onRowClick ? "clickable" : null,
                                             onclick: onRowClick ? () => onRowClick(row) : null},
      columns.map(c => cell(c, row))));
    return PS.el("table", {class: "data", id}, PS.el("thead", {}, head), PS.el("tbody", {}, body));
  },

  /* A Plotly chart in a new div (trace strings are escaped for Plotly's pseudo-HTML labels), drawn once
     the div is in the document (pages build their content before attaching it), so it gets its width.
     onClick(event) gets Plotly's click events (event.points). The div's data-state is "ready" once drawn. */
  plot(data, layout = {}, {id, height = 320, onClick} = {}) {
    const div = PS.el("div", {class: "chart", id, dataset: {state: "loading"}});
    div.style.height = height + "px";
    const base = {margin: {l: 60, r: 20, t: 30, b: 50}, font: {size: 12}, paper_bgcolor: "rgba(0,0,0,0)",
                  plot_bgcolor: "rgba(0,0,0,0)", legend: {orientation: "h"}};
    let frames = 0;
    const draw = () => {
      if (!div.isConnected) {                 // not attached yet: try again next frame (for up to ~2 minutes)
        if (++frames < 7200) requestAnimationFrame(draw);
        return;
      }
      Plotly.newPlot(div, data, Object.assign(base, layout), {displaylogo: false, responsive: true}).then(() => {
        if (onClick) div.on("plotly_click", onClick);
        div.dataset.state = "ready";
      });
    };
    requestAnimationFrame(draw);
    return div;
  },

  /* The colours of the heatmaps of amounts between ranks or nodes (bytes, time, bandwidth): Plotly's "Blues"
     runs from dark blue to light grey; reversed, the largest amounts are the darkest (not light grey on white). */
  AMOUNT_COLORS: {colorscale: "Blues", reversescale: true},

  /* A legend on the right of its chart, top-aligned: clear of the x axis's labels however many are rotated. */
  SIDE_LEGEND: {orientation: "v", x: 1.02, y: 1},

  /* The layout of the pages' pies: shares written inside the slices (hidden where they do not fit at a
     readable size, never outside over a title or a neighbour), names in a legend on the right. */
  pieLayout() {
    return {uniformtext: {minsize: 10, mode: "hide"}, showlegend: true, legend: {...PS.SIDE_LEGEND}};
  },

  /* Fill `node` with what `build()` returns (a node or a list of nodes), marking node.dataset.state
     "loading" then "ready", or "error" with the message shown in its place. Returns the state. */
  async fill(node, build) {
    node.dataset.state = "loading";
    try {
      const content = await build();
      node.replaceChildren(...[content].flat().filter(c => c !== null && c !== undefined));
      node.dataset.state = "ready";
    } catch (error) {
      node.replaceChildren(PS.message(error.message, "error"));
      node.dataset.state = "error";
    }
    return node.dataset.state;
  },

  /* A labelled <select>: options [[value, label], ...]; onChange(value) on change. */
  select(label, options, value, onChange, {id} = {}) {
    const select = PS.el("select", {id, onchange: () => onChange(select.value)},
      options.map(([v, text]) => PS.el("option", {value: v, selected: String(v) === String(value)}, text)));
    return PS.el("label", {class: "picker"}, label + " ", select);
  },

  /* Query string from an object (null/undefined values left out). */
  query(params) {
    const kept = Object.entries(params).filter(([, v]) => v !== null && v !== undefined);
    return kept.length ? "?" + new URLSearchParams(kept).toString() : "";
  },
  /* "#/run/<id>/<page>/<param>/...": a link to a page of a run, every part URI-encoded (null params: ""). */
  runHash(runId, page, ...params) {
    return "#/" + ["run", runId, page, ...params].map(p => encodeURIComponent(p ?? "")).join("/");
  },
  /* Put `hash` in the address bar without routing (a page that updated itself in place). */
  replaceHash(hash) { history.replaceState(null, "", hash); },

  /* Long names (kernel signatures) cut to `n` characters for labels; the full name goes in the title. */
  shorten(s, n = 60) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; },
  /* 1.23e9 -> "1.23 G" + unit (SI prefixes). */
  fmtSI(n, unit = "") {
    if (n === null || n === undefined || Number.isNaN(n)) return "–";
    const prefixes = ["", "k", "M", "G", "T", "P", "E"];
    let i = 0, v = Number(n);
    while (Math.abs(v) >= 1000 && i < prefixes.length - 1) { v /= 1000; i++; }
    return (i ? v.toFixed(2) : String(Math.round(v * 100) / 100)) + " " + prefixes[i] + unit;
  },

  /* A part of a page drawn per rank: build(rank) returns its content (as PS.fill); runs of several ranks
     get a rank picker above it that redraws it. Resolves to the element once drawn. */
  async perRank(ctx, build, {id} = {}) {
    const ranks = ctx.run.ranks && ctx.run.ranks.length ? ctx.run.ranks : [0];
    const body = PS.el("div", {class: "rank-body", id});
    const picker = ranks.length > 1
      ? PS.select("rank", ranks.map(r => [r, String(r)]), ranks[0], r => PS.fill(body, () => build(Number(r)))) : null;
    await PS.fill(body, () => build(ranks[0]));
    return PS.el("div", {}, picker, body);
  },

  /* A server-paged, sortable table. load({sort, order, page, pageSize}) resolves to {rows, total};
     columns as PS.table's, plus `sort`: the server column a click on the header sorts by. data-state is
     "loading" while a page loads, then "ready" (or "error"); element.reload() shows page 1 again and
     element.pending() marks it loading ahead of a reload. Resolves once the first page is shown. */
  async pagedTable(columns, load, {id, sort, order = "desc", pageSize = 50, onRowClick} = {}) {
    const view = {sort, order, page: 1, pageSize};
    const box = PS.el("div", {class: "paged", id});
    let token = 0;
    const show = async () => {
      const mine = ++token;
      box.dataset.state = "loading";
      let data;
      try {
        data = await load(view);
      } catch (error) {
        if (mine === token) { box.replaceChildren(PS.message(error.message, "error")); box.dataset.state = "error"; }
        return;
      }
      if (mine !== token) return;
      const pages = Math.max(1, Math.ceil(data.total / view.pageSize));
      const table = PS.table(data.rows, columns, {onRowClick});
      table.querySelectorAll("thead th").forEach((th, i) => {
        const key = columns[i].sort;
        if (!key) return;
        th.classList.add("sortable");
        th.dataset.sort = key;
        if (key === view.sort) th.append(view.order === "desc" ? " ▼" : " ▲");
        th.addEventListener("click", () => {
          view.order = key === view.sort && view.order === "desc" ? "asc" : "desc";
          view.sort = key;
          view.page = 1;
          show();
        });
      });
      const go = page => () => { view.page = page; show(); };
      box.replaceChildren(PS.el("div", {class: "pager"},
        PS.el("button", {class: "prev", disabled: view.page <= 1, onclick: go(view.page - 1)}, "‹ previous"),
        PS.el("span", {class: "page-info"}, `page ${PS.fmtNum(view.page)} of ${PS.fmtNum(pages)} (${PS.fmtNum(data.total)} rows)`),
        PS.el("button", {class: "next", disabled: view.page >= pages, onclick: go(view.page + 1)}, "next ›")),
        table);
      box.dataset.state = "ready";
    };
    box.reload = () => { view.page = 1; return show(); };
    box.pending = () => { token++; box.dataset.state = "loading"; };
    await show();
    return box;
  },

  /* A PS.pagedTable loader over rows the page already holds: sorted on the clicked column (nulls last,
     numbers as numbers, text as text), the page cut out. */
  localPages(rows) {
    return async ({sort, order, page, pageSize}) => {
      const sign = order === "desc" ? -1 : 1;
      const sorted = sort ? [...rows].sort((a, b) => {
        const x = a[sort], y = b[sort];
        if (x === null || x === undefined) return (y === null || y === undefined) ? 0 : 1;
        if (y === null || y === undefined) return -1;
        return sign * (x < y ? -1 : x > y ? 1 : 0);
      }) : rows;
      return {rows: sorted.slice((page - 1) * pageSize, page * pageSize), total: rows.length};
    };
  },

  /* Plotly renders label text as pseudo-HTML: escape trace strings before giving them to it. */
  plotText(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); },

  card(label, value, note) {
    return PS.el("div", {class: "card"}, PS.el("div", {class: "card-value"}, value),
                 PS.el("div", {class: "card-label"}, label), note ? PS.el("div", {class: "card-note"}, note) : null);
  },
  section(title, ...children) { return PS.el("section", {}, PS.el("h2", {}, title), ...children); },
  message(text, cls = "note") { return PS.el("p", {class: cls}, text); },
  /* an analysis' lower-case phrase as a sentence: capital first letter, full stop */
  sentence(text) { return text.charAt(0).toUpperCase() + text.slice(1) + (/[.!?]$/.test(text) ? "" : "."); },
};
