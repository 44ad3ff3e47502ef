/* The FLOPs page (MindSpore Insight's 计算量分析): FLOPs, FLOPS and FLOPS utilisation per operator type,
   per scope level and for the model per step and over the steps (the MFU), each operator against its own
   precision's peak (or all against a chosen precision's); and the roofline: the operators' achieved FLOP/s
   against their arithmetic intensity under the device's ceilings, and how far each is below its roof.
   Draws GET <api>/flops?level&precision. */
"use strict";
(() => {
  const mflops = v => (v === null || v === undefined) ? "–" : (v / 1e6).toLocaleString("en-US", {maximumFractionDigits: 3});
  const gflops = v => (v === null || v === undefined) ? "–" : (v / 1e9).toLocaleString("en-US", {maximumFractionDigits: 3});
  const label = v => PS.el("span", {title: v}, PS.shorten(v, 100));
  const RATE_COLUMNS = [
    {key: "flops", label: "FLOPs (M)", format: mflops, cls: "num"},
    {key: "flops_per_s", label: "FLOPS (G/s)", format: gflops, cls: "num"},
    {key: "utilization_percent", label: "FLOPS utilisation", format: utilisation, cls: "num"},
    {key: "precision", label: "precision"}];
  const PRECISION_LABELS = {auto: "each operator's own"};
  const NO_FLOPS = "No FLOPs were counted in this run: profile with with_flops=True (perfsight: task_time l1, " +
                   "the default) or record_shapes=True so the FLOPs of the operators can be counted.";

  /* a utilisation, with the analysis' note when the peak figure cannot be right (above 100%) */
  function utilisation(value, row) {
    return row.peak_note ? PS.el("span", {title: row.peak_note, class: "over-peak"}, `${PS.fmtPct(value)} (peak too low)`)
                         : PS.fmtPct(value);
  }

  /* a bar per row of `rows` (already ordered by the analysis), FLOPs in M */
  function flopsBar(rows, key, id) {
    return PS.plot([{type: "bar", x: rows.map((r, i) => PS.plotText(`${i + 1}. ${PS.shorten(r[key], 40)}`)), y: rows.map(r => r.flops / 1e6),
                     hovertext: rows.map(r => PS.plotText(r[key])), hovertemplate: "%{hovertext}<br>%{y:,.3f} MFLOPs<extra></extra>"}],
      {yaxis: {title: {text: "FLOPs (M)"}}, xaxis: {automargin: true}}, {id});
  }

  /* The roofline, log-log: each precision's ceiling (the bandwidth's slope up to the ridge, then the peak) and
     the operator types doing FLOPs as points, achieved FLOP/s at their intensity, one trace per bound. */
  function rooflineChart(rows) {
    const points = rows.filter(r => r.intensity > 0 && r.flops_per_s > 0);
    if (!points.length) return null;
    const ceilings = new Map(rows.filter(r => r.peak_flops && r.peak_bandwidth)
                                 .map(r => [r.precision, [r.peak_flops, r.peak_bandwidth]]));
    const xs = [...points.map(r => r.intensity), ...[...ceilings.values()].map(([peak, bw]) => peak / bw)];
    const lo = Math.min(...xs) / 4, hi = Math.max(...xs) * 4;
    const roofs = [...ceilings].map(([precision, [peak, bw]]) => ({
      type: "scatter", mode: "lines", name: `${precision} roof`, line: {dash: "dot"},
      x: [lo, peak / bw, hi], y: [lo * bw, peak, peak],
      hovertemplate: `${precision}: %{y:.3s}FLOP/s at %{x:.3g} FLOP/byte<extra></extra>`}));
    const bounds = [...new Set(points.map(r => r.bound ?? "unknown"))];
    const traces = bounds.map(bound => {
      const mine = points.filter(r => (r.bound ?? "unknown") === bound);
      return {type: "scatter", mode: "markers", name: `${bound}-bound`, x: mine.map(r => r.intensity),
              y: mine.map(r => r.flops_per_s), marker: {size: 9},
              hovertext: mine.map(r => PS.plotText(`${r.op_type} (${r.precision}): ${PS.fmtPct(r.roof_percent)} of its roof`)),
              hovertemplate: "%{hovertext}<br>%{x:.3g} FLOP/byte, %{y:.3s}FLOP/s<extra></extra>"};
    });
    return PS.plot([...roofs, ...traces], {xaxis: {type: "log", title: {text: "arithmetic intensity (FLOP/byte)"}},
                                          yaxis: {type: "log", title: {text: "FLOP/s"}}},
                   {id: "chart-roofline", height: 380});
  }

  /* a share of the roof, with the analysis' note when it cannot be right (above 100%) */
  function roofShare(value, row) {
    return row.peak_note ? PS.el("span", {title: row.peak_note, class: "over-peak"}, `${PS.fmtPct(value)} (roof too low)`)
                         : PS.fmtPct(value);
  }

  function rooflineSection(rows) {
    if (!rows.length) return null;
    const ceilings = [...new Map(rows.filter(r => r.peak_flops).map(r => [r.precision, r])).values()];
    const sources = rows[0].peak_bandwidth
      ? `bandwidth ${PS.fmtSI(rows[0].peak_bandwidth, "B/s")} (${rows[0].bandwidth_source}); ` +
        ceilings.map(r => `${r.precision} ${PS.fmtSI(r.peak_flops, "FLOP/s")}`).join(", ")
      : "the device's memory bandwidth is unknown: no roof";
    return PS.section("Roofline", PS.message(sources), rooflineChart(rows),
      PS.el("div", {class: "scroll"}, PS.table(rows, [
        {key: "op_type", label: "type", format: label}, {key: "family", label: "family"},
        {key: "precision", label: "precision"}, {key: "count", label: "count", format: PS.fmtNum, cls: "num"},
        {key: "op_ns", label: "time", format: PS.fmtNs, cls: "num"},
        {key: "flops", label: "FLOPs (M)", format: mflops, cls: "num"},
        {key: "bytes", label: "bytes", format: PS.fmtBytes, cls: "num"},
        {key: "intensity", label: "FLOP/byte", format: v => v === null ? "–" : Number(v).toPrecision(3), cls: "num"},
        {key: "bound", label: "bound", format: v => v ?? "–"},
        {key: "flops_per_s", label: "FLOPS (G/s)", format: gflops, cls: "num"},
        {key: "attainable_flops_per_s", label: "attainable (G/s)", format: gflops, cls: "num"},
        {key: "roof_percent", label: "share of roof", format: roofShare, cls: "num"},
        {key: "below_roof_ns", label: "beyond the roof", format: PS.fmtNs, cls: "num"}], {id: "flops-roofline"})));
  }

  function body(data, rank) {
    const of = rows => rows.filter(r => r.rank === rank);
    const ops = of(data.ops), scopes = of(data.scopes), model = of(data.model), total = of(data.total)[0];
    const roofline = rooflineSection(of(data.roofline));
    if (!ops.length) return [PS.message(NO_FLOPS), roofline];
    const cards = total ? PS.el("div", {class: "cards", id: "flops-cards"},
      PS.card("FLOPs", PS.fmtSI(total.flops, "FLOP"), `counted in ${total.steps} steps (${PS.fmtNs(total.step_ns)})`),
      PS.card("FLOPS", PS.fmtSI(total.flops_per_s, "FLOP/s"), "the counted FLOPs over the step time"),
      PS.card("FLOPS utilisation (MFU)", PS.fmtPct(total.utilization_percent),
              total.peak_flops ? `of ${PS.fmtSI(total.peak_flops, "FLOP/s")}, the ${total.precision} peak (${total.peak_source})` +
                                 (total.peak_note ? `; ${total.peak_note}` : "") : "peak unknown")) : null;
    const stepped = model.filter(r => r.step !== null);
    return [
      cards,
      PS.section("Model per step",
        stepped.length ? PS.plot([{type: "bar", x: stepped.map(r => "step " + r.step), y: stepped.map(r => r.flops_per_s / 1e9),
                                   hovertemplate: "%{x}: %{y:,.3f} GFLOP/s<extra></extra>"}],
                                 {yaxis: {title: {text: "FLOPS (G/s)"}}}, {id: "chart-flops-model", height: 260}) : null,
        PS.table(model, [{key: "step", label: "step", format: v => v ?? "outside steps"},
                         {key: "op_count", label: "operators", format: PS.fmtNum, cls: "num"},
                         {key: "step_ns", label: "step time", format: PS.fmtNs, cls: "num"}, ...RATE_COLUMNS], {id: "flops-model"})),
      PS.section("Per operator type", flopsBar(ops.slice(0, 20), "op_type", "chart-flops-ops"),
        PS.el("div", {class: "scroll"}, PS.table(ops, [
                       {key: "op_type", label: "type", format: label}, {key: "count", label: "count", format: PS.fmtNum, cls: "num"},
                       {key: "op_ns", label: "time", format: PS.fmtNs, cls: "num"}, {key: "time_source", label: "timed on"},
                       ...RATE_COLUMNS], {id: "flops-ops"}))),
      PS.section(`Per scope, level ${data.level}`, flopsBar(scopes.slice(0, 20), "scope", "chart-flops-scopes"),
        PS.el("div", {class: "scroll"}, PS.table(scopes, [{key: "scope", label: "scope", format: label},
                          {key: "op_count", label: "operators", format: PS.fmtNum, cls: "num"},
                          {key: "op_ns", label: "operator time", format: PS.fmtNs, cls: "num"},
                          {key: "scope_ns", label: "scope time", format: PS.fmtNs, cls: "num"}, ...RATE_COLUMNS], {id: "flops-scopes"}))),
      roofline,
    ];
  }

  PS.pages.flops = {
    async render(container, ctx) {
      const state = {level: 1, precision: "auto"};
      const load = () => PS.fetchJson(`${ctx.api}/flops${PS.query(state)}`);
      const show = data => data.ops.length || data.roofline.length ? PS.perRank(ctx, rank => body(data, rank))
        : PS.message(NO_FLOPS);
      const first = await load();
      const holder = PS.el("div", {id: "flops-body"});
      const draw = () => PS.fill(holder, async () => show(await load()));
      const levelInput = PS.el("input", {type: "number", id: "flops-level", min: 1, value: state.level,
        onchange: () => { state.level = Math.max(1, Math.round(Number(levelInput.value)) || 1); draw(); }});
      container.append(PS.el("h1", {}, "FLOPs"),
        PS.el("div", {class: "filters"},
          PS.select("peak precision", first.precisions.map(p => [p, PRECISION_LABELS[p] ?? p]), state.precision,
                    p => { state.precision = p; draw(); }, {id: "flops-precision"}),
          PS.el("label", {class: "picker"}, "scope level ", levelInput)),
        holder);
      await PS.fill(holder, () => show(first));
    },
  };
})();
