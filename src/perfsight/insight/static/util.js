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
  fmtBytes(b) {
    if (b === null || b === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0, v = Number(b);
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(v)) + " " + units[i];
  },
  fmtNum(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en-US"); },

  /* A table of row objects. columns: [{key, label, format?, cls?}]; every cell is text. */
  table(rows, columns, {id, onRowClick} = {}) {
    const head = PS.el("tr", {}, columns.map(c => PS.el("th", {class: c.cls}, c.label)));
    const body = rows.map(row => PS.el("tr", {class: onRowClick ? "clickable" : null,
                                             onclick: onRowClick ? () => onRowClick(row) : null},
      columns.map(c => PS.el("td", {class: c.cls}, c.format ? c.format(row[c.key], row) : (row[c.key] ?? "–")))));
    return PS.el("table", {class: "data", id}, PS.el("thead", {}, head), PS.el("tbody", {}, body));
  },

  /* A Plotly chart in a new div (trace strings are escaped for Plotly's pseudo-HTML labels). */
  plot(data, layout = {}, {id, height = 320} = {}) {
    const div = PS.el("div", {class: "chart", id});
    div.style.height = height + "px";
    const base = {margin: {l: 60, r: 20, t: 30, b: 50}, font: {size: 12}, paper_bgcolor: "rgba(0,0,0,0)",
                  plot_bgcolor: "rgba(0,0,0,0)", legend: {orientation: "h"}};
    requestAnimationFrame(() => Plotly.newPlot(div, data, Object.assign(base, layout),
                                               {displaylogo: false, responsive: true}));
    return div;
  },
  /* Plotly renders label text as pseudo-HTML: escape trace strings before giving them to it. */
  plotText(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); },

  card(label, value, note) {
    return PS.el("div", {class: "card"}, PS.el("div", {class: "card-value"}, value),
                 PS.el("div", {class: "card-label"}, label), note ? PS.el("div", {class: "card-note"}, note) : null);
  },
  section(title, ...children) { return PS.el("section", {}, PS.el("h2", {}, title), ...children); },
  message(text, cls = "note") { return PS.el("p", {class: cls}, text); },
};
