/* The Overview page (MindSpore Insight's 性能数据总览): step time breakdown per step and on average,
   utilisation cards, the top operator types, the data-preparation verdict, the timeline summary and
   the advisor's advice with links to the pages that show its evidence, and the trace health findings.
   Draws GET <api>/overview. */
"use strict";
(() => {
  const CATEGORY_LABELS = {compute: "compute", communication: "communication", memory: "memory copies",
    runtime: "runtime API", dataloader: "data loading", host_ops: "host operators", python: "Python", idle: "idle"};
  /* where each advisor rule's evidence is shown */
  const RULE_PAGES = {data_loader_bound: "data", low_device_utilisation: "timeline", launch_bound: "operators",
    host_bound_gaps: "timeline", communication_not_overlapped: "timeline", uneven_ranks: "cluster",
    memory_near_capacity: "resources", amp_unused: "operators", channels_last: "operators",
    excessive_sync: "timeline", recompilations: "timeline"};
  const PAGE_LABELS = {data: "Data preparation", timeline: "Timeline", operators: "Operators", cluster: "Cluster",
    resources: "Resources", steps: "Step trace"};
  const ms = ns => ns / 1e6;

  function cards(data, rank) {
    const of = rows => rows.filter(r => r.rank === rank);
    const out = [];
    for (const a of of(data.step_breakdown_average)) {
      out.push(PS.card("median step", PS.fmtNs(a.median_step_ns),
                       `median of ${a.steps} profiled steps (mean ${PS.fmtNs(a.step_ns)})`));
    }
    for (const t of of(data.temporal)) {
      out.push(PS.card("device compute", PS.fmtPct(t.compute_pct), `of the device's active span (${PS.fmtNs(t.kernel_time_ns)})`));
      out.push(PS.card("device idle", PS.fmtPct(t.idle_pct), `${PS.fmtNs(t.idle_ns)} with no device task`));
    }
    for (const o of of(data.overlap)) {
      if (o.communication_ns) out.push(PS.card("communication overlapped", PS.fmtPct(o.comm_comp_overlap_pct),
                                               `${PS.fmtNs(o.pure_communication_ns)} not hidden behind compute`));
    }
    for (const f of of(data.flops)) {
      out.push(PS.card("FLOPS utilisation", PS.fmtPct(f.utilization_percent),
                       `${PS.fmtSI(f.flops_per_s, "FLOP/s")} over ${f.steps} steps (peak: ${f.peak_source})` +
                       (f.peak_note ? `; ${f.peak_note}` : "")));
    }
    for (const m of of(data.memory_peak)) {
      out.push(PS.card(`memory peak ${m.device}`, PS.fmtBytes(m.peak_allocated_bytes),
                       `reserved ${PS.fmtBytes(m.peak_reserved_bytes)}`));
    }
    for (const h of of(data.host_usage)) {
      if (h.series === "host.cpu_percent.process") out.push(PS.card("host CPU (process)", PS.fmtPct(h.mean), `max ${PS.fmtPct(h.max)}`));
    }
    return out.length ? PS.el("div", {class: "cards", id: "overview-cards"}, out) : null;
  }

  function breakdownCharts(data, rank) {
    const steps = data.step_breakdown.filter(r => r.rank === rank);
    const average = data.step_breakdown_average.find(r => r.rank === rank);
    if (!steps.length || !average) return PS.message(PS.sentence(data.no_steps_reason || "no profiled steps"));
    const used = data.categories.filter(c => steps.some(r => r[c + "_ns"]));
    const x = steps.map(r => "step " + r.step);
    const perStep = PS.plot(used.map(c => ({type: "bar", name: CATEGORY_LABELS[c] || c, x, y: steps.map(r => ms(r[c + "_ns"])),
                                            hovertemplate: "%{x}: %{y:.3f} ms<extra>%{fullData.name}</extra>"})),
      {barmode: "stack", yaxis: {title: {text: "ms"}}, title: {text: "per step"},
       legend: {...PS.SIDE_LEGEND}}, {id: "chart-step-breakdown"});
    const averageChart = PS.plot([{type: "pie", hole: 0.45, sort: false, labels: used.map(c => CATEGORY_LABELS[c] || c),
                                   values: used.map(c => average[c + "_ns"]), textinfo: "percent",
                                   textposition: "inside",
                                   hovertemplate: "%{label}: %{value:,} ns<extra></extra>"}],
      {title: {text: `average step ${PS.fmtNs(average.step_ns)}`}, ...PS.pieLayout()}, {id: "chart-step-average"});
    const table = PS.table(used.map(c => ({category: CATEGORY_LABELS[c] || c, ns: average[c + "_ns"], pct: average[c + "_pct"]})),
      [{key: "category", label: "category"}, {key: "ns", label: "mean per step", format: PS.fmtNs, cls: "num"},
       {key: "pct", label: "share", format: PS.fmtPct, cls: "num"}], {id: "step-average-table"});
    return [PS.el("div", {class: "row"}, perStep, averageChart), table];
  }

  function topOps(data, rank, ctx) {
    const rows = data.top_ops.filter(r => r.rank === rank);
    if (!rows.length) return PS.message("No operators recorded.");
    const chart = PS.pages.operators.typeChart(rows, "pie", {id: "chart-top-ops", height: 340,
      onPick: type => { location.hash = PS.runHash(ctx.runId, "operators", type, data.ops_view); }});
    const link = PS.el("a", {href: PS.runHash(ctx.runId, "operators", "", data.ops_view)}, "all operators");
    const what = data.ops_view === "device" ? "Device tasks" : "Host operators";
    return [PS.el("p", {class: "note"}, `${what} by self time (`, link, ")"), chart];
  }

  function dataVerdict(data, rank, ctx) {
    const rows = data.data.filter(r => r.rank === rank);
    return [rows.length ? PS.table(rows, [
      {key: "verdict", label: "input-bound"}, {key: "wait_percent", label: "data wait", format: PS.fmtPct, cls: "num"},
      {key: "bottleneck_steps", label: "bottleneck steps", cls: "num", format: (v, r) => `${v} of ${r.steps}`},
      {key: "reason", label: "why"}], {id: "overview-data"}) : PS.message("No data-preparation figures."),
      PS.el("a", {href: PS.runHash(ctx.runId, "data")}, "data preparation details")];
  }

  function timelineSummary(data, rank, ctx) {
    const rows = data.timeline.filter(r => r.rank === rank);
    return [PS.table(rows, [
      {key: "device", label: "device"}, {key: "kind", label: "rows", format: (v, r) => `${r.tracks} ${v}${r.tracks === 1 ? "" : "s"}`},
      {key: "executions", label: "executions", format: PS.fmtNum, cls: "num"},
      {key: "names", label: "distinct names", format: PS.fmtNum, cls: "num"},
      {key: "busy_ns", label: "busy", format: PS.fmtNs, cls: "num"},
      {key: "start_ns", label: "from", format: PS.fmtNs, cls: "num"},
      {key: "end_ns", label: "to", format: PS.fmtNs, cls: "num"}], {id: "overview-timeline"}),
      PS.el("a", {href: PS.runHash(ctx.runId, "timeline")}, "open the timeline")];
  }

  function evidenceLinks(rule, refs, data, ctx) {
    const links = [];
    const page = RULE_PAGES[rule];
    if (page && (page !== "cluster" || ctx.run.ranks.length > 1)) {
      links.push(PS.el("a", {href: PS.runHash(ctx.runId, page)}, PAGE_LABELS[page]));
    }
    for (const ref of refs) {
      if (ref.kind === "host_op") {
        links.push(PS.el("a", {href: PS.runHash(ctx.runId, "operators", ref.value, "host")}, ref.value));
      } else if (ref.kind === "step") {
        links.push(PS.el("a", {href: PS.runHash(ctx.runId, "steps", ref.value)}, "step " + ref.value));
        const span = data.step_breakdown.find(r => String(r.step) === ref.value);
        if (span) links.push(PS.el("a", {href: PS.runHash(ctx.runId, "timeline", span.start_ns, span.end_ns)},
                                   `step ${ref.value} on the timeline`));
      } else if (ref.kind === "device") {
        links.push(PS.el("a", {href: PS.runHash(ctx.runId, "resources")}, ref.value + " memory"));
      } else if (ref.kind === "rank" && ctx.run.ranks.length > 1) {
        links.push(PS.el("a", {href: PS.runHash(ctx.runId, "cluster")}, "rank " + ref.value));
      }
    }
    return links.length ? PS.el("p", {class: "evidence"}, "Evidence: ", links.flatMap((a, i) => i ? [", ", a] : [a])) : null;
  }

  function advice(data, ctx) {
    if (!data.advice.length) return PS.message("No advice: no rule's threshold was reached.");
    return PS.el("div", {id: "overview-advice"}, data.advice.map(a => PS.el("div", {class: `advice severity-${a.severity}`},
      PS.el("h3", {}, PS.el("span", {class: "badge"}, a.severity), " ", a.title),
      PS.el("p", {}, a.finding),
      PS.el("p", {class: "note"}, "Threshold: ", a.threshold),
      PS.el("p", {}, a.suggestion),
      a.what_if === null ? null : PS.el("p", {class: "gain"}, a.gain_ns === null
        ? `Estimated gain unknown (no steps to replay), if ${a.what_if}.`
        : `Estimated gain: ${PS.fmtNs(a.gain_ns)} per step (${PS.fmtPct(a.gain_pct)}), if ${a.what_if} (critical-path what-if). `,
        PS.el("a", {href: PS.runHash(ctx.runId, "timeline", "critical")}, "The critical path on the timeline")),
      evidenceLinks(a.rule, data.evidence.filter(e => e.rule === a.rule), data, ctx))));
  }

  /* the trace health findings of one rank: what is damaged in its data and which analyses it touches */
  function health(data, rank) {
    const rows = data.health.filter(r => r.rank === rank);
    if (!rows.length) return PS.message("Trace health: no problems found.");
    return PS.table(rows, [
      {key: "check", label: "finding", format: v => data.health_checks[v] || v},
      {key: "count", label: "count", format: PS.fmtNum, cls: "num"},
      {key: "affected_ns", label: "time", format: v => v ? PS.fmtNs(v) : "", cls: "num"},
      {key: "example", label: "first", format: v => v || ""},
      {key: "affects", label: "affects", format: v => v.join(", ")},
      {key: "detail", label: "detail", format: v => v || ""}], {id: "overview-health"});
  }

  PS.pages.overview = {
    async render(container, ctx) {
      const data = await PS.fetchJson(ctx.api + "/overview");
      const warnings = data.warnings.length
        ? PS.el("details", {class: "warnings"}, PS.el("summary", {}, `${data.warnings.length} reader warnings`),
                PS.el("ul", {}, data.warnings.map(w => PS.el("li", {}, w)))) : null;
      const body = await PS.perRank(ctx, rank => [
        cards(data, rank),
        PS.section("Advice", advice(data, ctx)),
        PS.section("Trace health", health(data, rank)),
        PS.section("Step time breakdown", breakdownCharts(data, rank)),
        PS.el("div", {class: "row"},
          PS.section("Top operator types", topOps(data, rank, ctx)),
          PS.el("div", {}, PS.section("Data preparation", dataVerdict(data, rank, ctx)),
                PS.section("Timeline", timelineSummary(data, rank, ctx)))),
      ], {id: "overview-body"});
      container.append(...[PS.el("h1", {}, "Overview"), warnings, body].filter(Boolean));
    },
  };
})();
