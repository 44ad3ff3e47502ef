/* The Step trace page (MindSpore Insight's 迭代轨迹): each step's iteration gap, forward+backward and tail,
   drawn inside the step for the selected step (the average of the steps by default; #/run/<id>/steps/<n>
   selects step n) and as curves across the steps. Draws GET <api>/steps. */
"use strict";
(() => {
  const PHASES = [["gap_ns", "iteration gap"], ["fp_bp_ns", "forward+backward"], ["tail_ns", "tail"]];
  const ms = ns => (ns === null || ns === undefined) ? null : ns / 1e6;

  /* the phases as bars placed in the step: the gap ends where forward starts, the tail starts where
     backward ends (offsets from the step start) */
  function phaseChart(p) {
    const bases = {gap_ns: p.fp_offset_ns === null ? null : p.fp_offset_ns - p.gap_ns,
                   fp_bp_ns: p.fp_offset_ns, tail_ns: p.bp_offset_ns};
    return PS.plot(PHASES.map(([key, label]) => ({
      type: "bar", orientation: "h", name: label, y: [label], x: [ms(p[key])], base: [ms(bases[key])],
      hovertemplate: `${label}: %{x:.3f} ms<extra></extra>`})),
      {xaxis: {title: {text: "ms from the step start"}}, yaxis: {autorange: "reversed"}, showlegend: false,
       margin: {l: 130, r: 20, t: 20, b: 50}}, {id: "chart-step-phases", height: 200});
  }

  function detail(p, steps, ctx) {
    const title = p.step === null ? `Average of ${p.steps} steps` : `Step ${p.step}`;
    const span = p.step === null ? null : steps.find(s => s.step === p.step && s.rank === p.rank);
    return [
      PS.el("h2", {}, title),
      PS.el("div", {class: "cards", id: "step-cards"},
        PS.card("step", PS.fmtNs(p.iteration_ns)), PS.card("iteration gap", PS.fmtNs(p.gap_ns), "data wait " + PS.fmtNs(p.data_wait_ns)),
        PS.card("forward+backward", PS.fmtNs(p.fp_bp_ns)), PS.card("tail", PS.fmtNs(p.tail_ns))),
      phaseChart(p),
      span ? PS.el("a", {href: PS.runHash(ctx.runId, "timeline", span.start_ns, span.end_ns)}, `step ${p.step} on the timeline`) : null,
      PS.el("ul", {class: "note"},
        PS.el("li", {}, "A long iteration gap is time spent reading data: see ",
              PS.el("a", {href: PS.runHash(ctx.runId, "data")}, "Data preparation"), "."),
        PS.el("li", {}, "Forward+backward carries the step's computation: see ",
              PS.el("a", {href: PS.runHash(ctx.runId, "operators")}, "Operators"), " and the ",
              PS.el("a", {href: PS.runHash(ctx.runId, "timeline")}, "Timeline"), "."),
        PS.el("li", {}, "The tail is gradient all-reduce and the parameter update.")),
    ];
  }

  function curves(steps) {
    const x = steps.map(s => s.step);
    const series = [["iteration_ns", "step"], ...PHASES];
    return PS.plot(series.map(([key, label]) => ({type: "scatter", mode: "lines+markers", name: label, x,
                                                 y: steps.map(s => ms(s[key]))})),
      {xaxis: {title: {text: "step"}, dtick: 1}, yaxis: {title: {text: "ms"}}}, {id: "chart-step-curves"});
  }

  function stepTable(steps, select) {
    return PS.table(steps, [
      {key: "step", label: "step", cls: "num"}, {key: "start_ns", label: "starts at", format: PS.fmtNs, cls: "num"},
      {key: "iteration_ns", label: "step time", format: PS.fmtNs, cls: "num"},
      {key: "gap_ns", label: "iteration gap", format: PS.fmtNs, cls: "num"},
      {key: "fp_bp_ns", label: "forward+backward", format: PS.fmtNs, cls: "num"},
      {key: "tail_ns", label: "tail", format: PS.fmtNs, cls: "num"},
      {key: "data_wait_ns", label: "data wait", format: PS.fmtNs, cls: "num"}],
      {id: "step-table", onRowClick: row => select(String(row.step))});
  }

  PS.pages.steps = {
    async render(container, ctx) {
      const data = await PS.fetchJson(ctx.api + "/steps");
      container.append(PS.el("h1", {}, "Step trace"));
      if (!data.steps.length) {
        container.append(PS.message(PS.sentence(data.no_steps_reason || "no profiled steps")));
        return;
      }
      container.append(await PS.perRank(ctx, async rank => {
        const steps = data.steps.filter(s => s.rank === rank);
        const phases = data.phases.filter(p => p.rank === rank);
        const holder = PS.el("div", {id: "step-detail"});
        const options = phases.map(p => [p.step === null ? "" : String(p.step),
                                         p.step === null ? `average of ${p.steps} steps` : `step ${p.step}`]);
        const picker = PS.select("step", options, "", value => select(value), {id: "step-select"});
        const show = value => PS.fill(holder, () => detail(phases.find(p => String(p.step ?? "") === value) || phases[0], steps, ctx));
        const select = value => {
          picker.querySelector("select").value = value;
          PS.replaceHash(PS.runHash(ctx.runId, "steps", ...(value ? [value] : [])));
          return show(value);
        };
        const wanted = ctx.params[0] && phases.some(p => String(p.step) === ctx.params[0]) ? ctx.params[0] : "";
        picker.querySelector("select").value = wanted;
        await show(wanted);
        return [picker, holder, PS.section("Across steps", curves(steps), stepTable(steps, select))];
      }));
    },
  };
})();
