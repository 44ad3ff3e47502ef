/* The insight shell: hash routes (#/ the run list, #/run/<id>/<page> a run's page, #/compare/<base>/<new>
   two runs side by side, #/live the armed jobs and their captures), the run list with parse progress and the choice of two runs to compare, and the
   run navigation. A job analysed rank by rank (mode "cluster") has the Cluster page
   only (its ranks are never merged), its progress the ranks mapped; a rank of it opened alone links back. Pages live in PS.pages (pages/*.js). When a view has finished
   rendering, document.body.dataset.state is "ready" (or "error"): the browser tests wait on it. */
"use strict";

const RUN_PAGES = [
  ["overview", "Overview"], ["steps", "Step trace"], ["operators", "Operators"], ["flops", "FLOPs"],
  ["data", "Data preparation"], ["timeline", "Timeline"], ["dynamic", "Dynamic shape"],
  ["resources", "Resources"], ["cluster", "Cluster"],
];
let pollTimer = null;
let renderToken = 0;
let leavePage = null;   // what the page on screen returned from render(): called when it is left
const picked = {base: null, new: null};   // the runs chosen in the run list for the Compare page (their ids)

function setState(state) { document.body.dataset.state = state; }

function schedule(fn, ms) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(fn, ms);
}

/* The parts of the address's hash, each URI-decoded; null when one is not valid %-encoding (an address cut
   or typed by hand: "%zz", half of a UTF-8 character). */
function hashParts() {
  try {
    return location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  } catch (error) {
    if (error instanceof URIError) return null;
    throw error;
  }
}

/* What a malformed address shows, instead of the page it replaces: what is wrong, and the way back. */
function showMalformed() {
  document.getElementById("run-title").textContent = "";
  document.getElementById("run-nav").replaceChildren(PS.el("a", {href: "#/"}, "← runs"));
  document.getElementById("page").replaceChildren(PS.message(
    `This address is malformed: its %-escapes do not decode (each "%" takes two hexadecimal digits, and together ` +
    `they must spell UTF-8 characters): ${location.hash}. Open the page from the run list.`, "error"));
}

async function route() {
  clearTimeout(pollTimer);
  if (leavePage) { leavePage(); leavePage = null; }
  const token = ++renderToken;
  const parts = hashParts();
  if (parts === null) {
    showMalformed();
    setState("error");
    return;
  }
  setState("loading");
  try {
    if (parts[0] === "run" && parts[1]) await showRun(token, parts[1], parts[2] || "overview", parts.slice(3));
    else if (parts[0] === "compare" && parts[1] && parts[2]) await showCompare(token, parts[1], parts[2]);
    else if (parts[0] === "live") await showLive(token);
    else await showList(token);
    if (token === renderToken) setState("ready");
  } catch (error) {
    if (token !== renderToken) return;
    const main = document.getElementById("page");
    main.replaceChildren(PS.message(error.message, "error"));
    setState("error");
  }
}

/* --- the run list ------------------------------------------------------------------------------- */

function statusCell(run) {
  if (run.status === "error") return PS.el("span", {class: "status error"}, "error: " + run.error);
  if (run.status === "ready") {
    const warn = run.parse_warnings ? ` (${run.parse_warnings} parse warnings)` : "";
    return PS.el("span", {class: "status ready"}, "ready" + warn);
  }
  const bar = PS.el("progress", {max: 1, value: run.progress});
  if (run.mode === "cluster" && run.phase) {
    const done = run.phase === "mapping ranks" ? ` ${PS.fmtNum(run.ranks_done)} / ${PS.fmtNum(run.ranks_total)}` : "";
    return PS.el("span", {class: "status busy"}, bar, ` ${run.phase}${done}`);
  }
  return PS.el("span", {class: "status busy"}, bar, ` ${run.status} ${Math.round(run.progress * 100)}%`);
}

async function showList(token) {
  document.getElementById("run-title").textContent = "";
  document.getElementById("run-nav").replaceChildren();
  const data = await PS.fetchJson("/api/runs");
  if (token !== renderToken) return;
  const main = document.getElementById("page");
  const columns = [
    {key: "path", label: "run", format: (v, r) => r.status === "ready"
      ? PS.el("a", {href: `#/run/${encodeURIComponent(r.id)}/${r.mode === "cluster" ? "cluster" : "overview"}`}, v) : v},
    {key: "kind", label: "kind"},
    {key: "size_bytes", label: "size", format: PS.fmtBytes, cls: "num"},
    {key: "ranks_as_ranges", label: "ranks"},
    {key: "steps", label: "steps", format: v => (v && v.length) ? String(v.length) : "–", cls: "num"},
    {key: "slices", label: "slices", format: PS.fmtNum, cls: "num"},
    {key: "status", label: "parse status", format: (v, r) => statusCell(r)},
    {key: "id", label: "compare", format: (v, r) => comparable(r) ? PS.el("span", {class: "pick"},
      pickButton(r, "base", "BASE"), pickButton(r, "new", "NEW")) : ""},
  ];
  main.replaceChildren(
    PS.el("h1", {}, `Runs under ${data.base}`),
    PS.el("p", {}, PS.el("a", {href: "#/live", id: "live-link"}, "Live jobs"),
          PS.el("span", {class: "note"}, " armed jobs (perfsight run --on-demand), their step times and captures")),
    compareBar(data.runs),
    data.runs.length ? PS.table(data.runs, columns, {id: "run-list"})
      : PS.message("No runs found yet: perfsight looks for PROF_ directories and torch.profiler traces " +
                   "(*.pt.trace.json[.gz]) under this folder, and keeps looking."));
  const busy = data.runs.some(r => r.status === "queued" || r.status === "parsing");
  schedule(() => { if (token === renderToken) showList(token).catch(() => {}); }, busy ? 1000 : 5000);
}

/* --- comparing two runs ---------------------------------------------------------------------------- */

function comparable(run) { return run.status === "ready" && run.mode !== "cluster"; }

/* A radio button choosing `run` as the comparison's BASE or NEW (kept across the list's refreshes). */
function pickButton(run, side, label) {
  return PS.el("label", {}, PS.el("input", {type: "radio", name: "pick-" + side, value: run.id,
    checked: picked[side] === run.id, "data-side": side,
    onchange: () => { picked[side] = run.id; updateCompareBar(); }}), label);
}

function compareHash() {
  return `#/compare/${encodeURIComponent(picked.base)}/${encodeURIComponent(picked.new)}`;
}

function compareBar(runs) {
  const ids = new Set(runs.filter(comparable).map(r => r.id));
  for (const side of ["base", "new"]) if (!ids.has(picked[side])) picked[side] = null;
  const bar = PS.el("p", {id: "compare-bar"},
    PS.el("a", {id: "compare-link", class: "button"}, "Compare BASE → NEW"),
    PS.el("span", {class: "note"}, " pick a BASE and a NEW run in the list (the same run twice compares it with itself)"));
  setTimeout(updateCompareBar);
  return bar;
}

function updateCompareBar() {
  const link = document.getElementById("compare-link");
  if (!link) return;
  const ready = picked.base && picked.new;
  if (ready) link.setAttribute("href", compareHash()); else link.removeAttribute("href");
  link.classList.toggle("disabled", !ready);
}

async function showCompare(token, baseId, newId) {
  document.getElementById("run-title").textContent = "";
  document.getElementById("run-nav").replaceChildren(PS.el("a", {href: "#/"}, "← runs"));
  picked.base = baseId;
  picked.new = newId;
  const main = document.getElementById("page");
  main.replaceChildren(PS.message("Comparing…"));
  const content = PS.el("div", {class: "page-compare"});
  main.append(content);
  await PS.compare.render(content, baseId, newId);
  if (token === renderToken) main.replaceChildren(content);
}

/* --- the armed jobs ------------------------------------------------------------------------------------ */

async function showLive(token) {
  document.getElementById("run-title").textContent = "";
  document.getElementById("run-nav").replaceChildren(PS.el("a", {href: "#/"}, "← runs"));
  const content = PS.el("div", {class: "page-live"});
  const leave = await PS.live.render(content);
  if (token !== renderToken) { leave(); return; }
  leavePage = leave;
  document.getElementById("page").replaceChildren(content);
}

/* --- a run ----------------------------------------------------------------------------------------- */

async function showRun(token, runId, page, params) {
  const api = `/api/runs/${encodeURIComponent(runId)}`;
  const run = await PS.fetchJson(api);
  if (token !== renderToken) return;
  document.getElementById("run-title").textContent = run.path;
  const main = document.getElementById("page");
  if (run.status !== "ready") {
    document.getElementById("run-nav").replaceChildren();
    main.replaceChildren(run.status === "error"
      ? PS.message(`This run could not be read: ${run.error}`, "error")
      : PS.el("p", {}, `Parsing ${run.path}: `, statusCell(run)));
    if (run.status !== "error") schedule(() => route(), 1000);
    return;
  }
  if (run.mode === "cluster") page = "cluster";               // its ranks are never merged: no other page
  const pages = RUN_PAGES.filter(([name]) => run.mode === "cluster" ? name === "cluster"
                                                                    : name !== "cluster" || run.ranks.length > 1);
  const back = run.job ? [PS.el("a", {href: `#/run/${encodeURIComponent(run.job)}/cluster`, id: "back-to-job"},
                                  "← the job")] : [];
  document.getElementById("run-nav").replaceChildren(...back, ...pages.map(([name, label]) =>
    PS.el("a", {href: `#/run/${encodeURIComponent(runId)}/${name}`, class: name === page ? "active" : null}, label)));
  const renderer = PS.own(PS.pages, page);
  if (!renderer) {
    main.replaceChildren(PS.message(`No page named "${page}".`, "error"));
    return;
  }
  main.replaceChildren(PS.message("Loading…"));
  const content = PS.el("div", {class: "page-" + page});
  main.append(content);          // in the document while it renders, so charts and canvases get a size
  const leave = await renderer.render(content, {runId, run, api, params});
  if (token !== renderToken) { if (typeof leave === "function") leave(); return; }
  leavePage = typeof leave === "function" ? leave : null;
  main.replaceChildren(content);
}

window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);
