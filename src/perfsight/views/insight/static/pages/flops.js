/* The FLOPs page (MindSpore Insight's 计算量分析): FLOPs, FLOPS and FLOPS utilisation per operator type,
   per scope level and for the model per step and over the steps, at a chosen precision's peak.
   Draws GET <api>/flops?level&precision. */
"use strict";
(() => {
  const mflops = v => (v === null || v === undefined) ? "–" : (v / 1e6).toLocaleString("en-US", {maximumFractionDigits: 3});
  const gflops = v => (v === null || v === undefined) ? "–" : (v / 1e9).toLocaleString("en-US", {maximumFractionDigits: 3});
  const label = v => PS.el("span", {title: v}, PS.shorten(v, 100));
  const RATE_COLUMNS = [
    {key: "flops", label: "FLOPs (M)", format: mflops, cls: "num"},
    {key: "flops_per_s", label: "FLOPS (G/s)", format: gflops, cls: "num"},
    {key: "utilization_percent", label: "FLOPS utilisation", format: utilisation, cls: "num"}];

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

  function body(data, rank) {
    const of = rows => rows.filter(r => r.rank === rank);
    const ops = of(data.ops), scopes = of(data.scopes), model = of(data.model), total = of(data.total)[0];
    const cards = total ? PS.el("div", {class: "cards", id: "flops-cards"},
      PS.card("FLOPs", PS.fmtSI(total.flops, "FLOP"), `counted in ${total.steps} steps (${PS.fmtNs(total.step_ns)})`),
      PS.card("FLOPS", PS.fmtSI(total.flops_per_s, "FLOP/s"), "the counted FLOPs over the step time"),
      PS.card("FLOPS utilisation", PS.fmtPct(total.utilization_percent),
              total.peak_flops ? `of ${PS.fmtSI(total.peak_flops, "FLOP/s")} (${total.peak_source})` +
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
    ];
  }

  PS.pages.flops = {
    async render(container, ctx) {
      const state = {level: 1, precision: "fp32"};
      const load = () => PS.fetchJson(`${ctx.api}/flops${PS.query(state)}`);
      const show = data => data.ops.length ? PS.perRank(ctx, rank => body(data, rank))
        : PS.message("No FLOPs were counted in this run: profile with with_flops=True (perfsight: task_time l1, " +
                     "the default) so torch records the FLOPs of the operators it can count.");
      const first = await load();
      const holder = PS.el("div", {id: "flops-body"});
      const draw = () => PS.fill(holder, async () => show(await load()));
      const levelInput = PS.el("input", {type: "number", id: "flops-level", min: 1, value: state.level,
        onchange: () => { state.level = Math.max(1, Math.round(Number(levelInput.value)) || 1); draw(); }});
      container.append(PS.el("h1", {}, "FLOPs"),
        PS.el("div", {class: "filters"},
          PS.select("peak precision", first.precisions.map(p => [p, p]), state.precision,
                    p => { state.precision = p; draw(); }, {id: "flops-precision"}),
          PS.el("label", {class: "picker"}, "scope level ", levelInput)),
        holder);
      await PS.fill(holder, () => show(first));
    },
  };
})();
