/* The Live page (#/live): every armed job under the base dir (perfsight run --on-demand), each rank's state and
   its recent step times as a curve over the step number, with each capture marked over the steps it took (a
   band, its reason on hover), and the captures listed with their reason, status and a link to the capture's
   run once it lands in the run list. Redrawn every LIVE_REFRESH_MS while shown. Draws GET /api/live
   (api_live.py): every number comes from the live files, formatted here. Registered as PS.live. */
"use strict";
(() => {
  const LIVE_REFRESH_MS = 2000;
  const ms = ns => (ns === null || ns === undefined) ? null : ns / 1e6;
  const BAND = {requested: "rgba(31, 119, 180, 0.18)", trigger: "rgba(214, 39, 40, 0.18)"};

  function stepChart(job, index) {
    const curves = job.ranks.map(r => ({type: "scatter", mode: "lines", name: `rank ${r.rank}`,
      x: r.steps.step, y: r.steps.step_ns.map(ms), hovertemplate: `rank ${r.rank}, step %{x}: %{y:.3f} ms<extra></extra>`}));
    const bands = job.captures.map(c => ({type: "rect", xref: "x", yref: "paper", y0: 0, y1: 1, line: {width: 0},
      x0: c.start_step - 0.5, x1: c.last_step + 0.5, fillcolor: c.trigger ? BAND.trigger : BAND.requested}));
    const labels = job.captures.map(c => ({xref: "x", yref: "paper", x: (c.start_step + c.last_step) / 2, y: 1,
      yanchor: "bottom", showarrow: false, font: {size: 10},
      text: PS.plotText(c.trigger ? `slow step ${c.trigger.step}` : "captured"),
      hovertext: PS.plotText(c.reason || "")}));
    return PS.plot(curves, {xaxis: {title: {text: "step"}}, yaxis: {title: {text: "step time (ms)"}, rangemode: "tozero"},
                            shapes: bands, annotations: labels}, {id: `live-steps-${index}`, height: 300});
  }

  function rankTable(job) {
    return PS.table(job.ranks, [
      {key: "rank", label: "rank", cls: "num"},
      {key: "described", label: "state"},
      {key: "step_ns", label: "recent step (median)", format: PS.fmtNs, cls: "num"},
      {key: "host", label: "host"},
      {key: "pid", label: "pid", cls: "num"},
    ], {id: "live-ranks"});
  }

  function captureTable(job) {
    if (!job.captures.length) {
      return PS.message(`No capture yet: perfsight capture ${job.path} asks for one.`);
    }
    return PS.table(job.captures, [
      {key: "rank", label: "rank", cls: "num"},
      {key: "start_step", label: "steps", format: (v, c) => `${c.start_step}-${c.last_step}`},
      {key: "reason", label: "why"},
      {key: "status", label: "status"},
      {key: "folder", label: "run", format: (v, c) => c.entry && c.status !== "capturing"
        ? PS.el("a", {href: PS.runHash(c.entry, "overview"), class: "capture-link"}, PS.shorten(v, 70))
        : PS.shorten(v || "–", 70)},
    ], {id: "live-captures"});
  }

  async function draw(content) {
    const data = await PS.fetchJson("/api/live");
    const parts = data.jobs.length ? data.jobs.map((job, index) => PS.section(`Armed job in ${job.path}`,
      rankTable(job), stepChart(job, index), PS.el("h3", {}, "Captures"), captureTable(job)))
      : [PS.message("No armed job under this folder: start one with perfsight run --on-demand -o FOLDER -- " +
                    "python train.py (its output folder under the one insight serves).")];
    content.replaceChildren(PS.el("h1", {}, "Live jobs"), ...parts);
  }

  PS.live = {
    async render(content) {
      await draw(content);
      let timer = null;
      const again = () => { timer = setTimeout(() => draw(content).then(again, again), LIVE_REFRESH_MS); };
      again();
      return () => clearTimeout(timer);
    },
  };
})();
