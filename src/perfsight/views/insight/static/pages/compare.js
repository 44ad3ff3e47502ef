/* The Compare page, #/compare/<base id>/<new id> (two runs picked in the run list): GET /api/compare/<base>/<new>.
   The verdict on the step time, each side's steps as points (the distributions the verdict weighs), the step
   breakdown of both by category, the operators, kernels and modules that grew and that shrank most per step
   (each row links to both runs' timelines, searching for that operator), two jobs rank by rank, communication,
   memory allocated by operator and the other figures. */
"use strict";
(() => {
  const ms = ns => (ns === null || ns === undefined) ? null : ns / 1e6;
  const signedMs = ns => (ns === null || ns === undefined) ? "–" : (ns >= 0 ? "+" : "−") + PS.fmtNs(Math.abs(ns));
  /* a count per step (a mean: calls, allocations): grouped, with up to one decimal (two under 1) */
  const perStep = n => (n === null || n === undefined) ? "–"
    : n.toLocaleString("en-US", {maximumFractionDigits: Math.abs(n) < 1 ? 2 : 1});
  const signedPct = v => (v === null || v === undefined) ? "–" : (v >= 0 ? "+" : "") + v.toFixed(1) + "%";
  /* "BASE → NEW" of a per-step count: the row's base_<name> and new_<name> */
  const change = name => (v, r) => `${perStep(r["base_" + name])} → ${perStep(r["new_" + name])}`;

  function stepChart(times) {
    const side = (name, values) => ({type: "box", name, y: values.map(ms), boxpoints: "all", jitter: 0.4,
                                     pointpos: 0, hovertemplate: `${name}: %{y:.3f} ms<extra></extra>`});
    return PS.plot([side("BASE", times.base), side("NEW", times.new)],
                   {yaxis: {title: {text: "step time, ms"}}, showlegend: false}, {id: "chart-compare-steps", height: 300});
  }

  function breakdownChart(rows) {
    const shown = rows.filter(r => r.base_ns || r.new_ns);
    const bars = (name, key) => ({type: "bar", name, x: shown.map(r => r.category), y: shown.map(r => ms(r[key])),
                                  hovertemplate: `${name} %{x}: %{y:.3f} ms<extra></extra>`});
    return PS.plot([bars("BASE", "base_ns"), bars("NEW", "new_ns")],
                   {barmode: "group", yaxis: {title: {text: "ms per step"}}}, {id: "chart-compare-breakdown", height: 300});
  }

  /* The timeline of a run, searching for an operator (#/run/<id>/timeline/find/<name>). */
  function timelineLink(runId, name, label) {
    return name ? PS.el("a", {href: PS.runHash(runId, "timeline", "find", name), class: "timeline-link"}, label) : "–";
  }

  function operatorTable(rows, ctx, id) {
    const status = r => r.matched_by === "family" ? "family" : r.status === "both" ? "" : r.status;
    return PS.table(rows, [
      {key: "name", label: "name", format: (v, r) => PS.el("span", {title: [v, ...(r.base_names || []), ...(r.new_names || [])]
        .join("\n")}, PS.shorten(v, 70))},
      {key: "status", label: "", format: (v, r) => status(r)},
      {key: "base_calls_per_step", label: "calls/step", cls: "num",
       format: change("calls_per_step")},
      {key: "base_per_step_ns", label: "BASE per step", format: PS.fmtNs, cls: "num"},
      {key: "new_per_step_ns", label: "NEW per step", format: PS.fmtNs, cls: "num"},
      {key: "difference_per_step_ns", label: "difference", format: signedMs, cls: "num"},
      {key: "share_pct", label: "share of the step difference", format: PS.fmtPct, cls: "num"},
      {key: "name", label: "timelines", format: (v, r) => PS.el("span", {},
        timelineLink(ctx.baseId, r.base_calls ? (r.base_names ? r.base_names[0] : v) : null, "BASE"), " ",
        timelineLink(ctx.newId, r.new_calls ? (r.new_names ? r.new_names[0] : v) : null, "NEW"))},
    ], {id});
  }

  function changes(title, part, ctx, id) {
    const note = `${part.total.toLocaleString("en-US")} in all, aligned by name, then by family across frameworks; ` +
                 "\"family\": operators only one side had, paired by kind (hover a name for its members).";
    return PS.section(title,
      PS.el("h3", {}, "grew most per step"),
      part.grown.length ? operatorTable(part.grown, ctx, id + "-grown") : PS.message("none"),
      PS.el("h3", {}, "shrank most per step"),
      part.shrunk.length ? operatorTable(part.shrunk, ctx, id + "-shrunk") : PS.message("none"),
      PS.message(note));
  }

  function figureValue(value, unit) {
    if (value === null || value === undefined) return "–";
    if (unit === "ns") return PS.fmtNs(value);
    if (unit === "bytes") return PS.fmtBytes(value);
    if (unit === "%") return PS.fmtPct(value);
    return PS.fmtSI(value, unit);
  }

  PS.compare = {
    async render(container, baseId, newId) {
      const data = await PS.fetchJson(`/api/compare/${encodeURIComponent(baseId)}/${encodeURIComponent(newId)}`);
      const ctx = {baseId, newId};
      const runLink = (id, entry) => PS.el("a", {href: PS.runHash(id, "overview")}, entry.path);
      const s = data.steps;
      container.append(...[
        PS.el("h1", {}, "Compare"),
        PS.el("p", {id: "compare-runs"}, "BASE ", runLink(baseId, data.base), ` (${s.base_steps} steps) → NEW `,
              runLink(newId, data.new), ` (${s.new_steps} steps)`),
        PS.el("p", {id: "compare-verdict", class: "verdict " + s.verdict.replace(/ /g, "-")}, s.verdict_text),
        (data.step_times.base.length || data.step_times.new.length) ? stepChart(data.step_times) : null,
        PS.section("Step breakdown (mean per rank and step)", breakdownChart(data.breakdown),
          PS.table(data.breakdown.filter(r => r.base_ns || r.new_ns), [
            {key: "category", label: "category"}, {key: "base_ns", label: "BASE", format: PS.fmtNs, cls: "num"},
            {key: "new_ns", label: "NEW", format: PS.fmtNs, cls: "num"},
            {key: "difference_ns", label: "difference", format: signedMs, cls: "num"},
            {key: "share_pct", label: "share of the step difference", format: PS.fmtPct, cls: "num"}],
            {id: "compare-breakdown"})),
        changes("Operators", data.operators, ctx, "compare-operators"),
        changes("Kernels and device tasks", data.kernels, ctx, "compare-kernels"),
        data.modules.total ? changes("Modules", data.modules, ctx, "compare-modules") : null,
        data.ranks.length > 1 ? PS.section("Mean step by rank", PS.table(data.ranks, [
          {key: "rank", label: "rank", cls: "num"}, {key: "base_step_ns", label: "BASE", format: PS.fmtNs, cls: "num"},
          {key: "new_step_ns", label: "NEW", format: PS.fmtNs, cls: "num"},
          {key: "difference_pct", label: "difference", cls: "num",
           format: signedPct}],
          {id: "compare-ranks"})) : null,
        data.memory.length ? PS.section("Memory allocated by operator (per rank and step)", PS.table(data.memory, [
          {key: "op_type", label: "operator", format: v => v ?? "(no operator)"}, {key: "status", label: ""},
          {key: "base_allocations_per_step", label: "allocations", cls: "num",
           format: change("allocations_per_step")},
          {key: "base_bytes_per_step", label: "BASE", format: PS.fmtBytes, cls: "num"},
          {key: "new_bytes_per_step", label: "NEW", format: PS.fmtBytes, cls: "num"}], {id: "compare-memory"}))
          : null,
        data.communication.length ? PS.section("Communication (per rank and step)", PS.table(data.communication, [
          {key: "collective", label: "collective"}, {key: "group_size", label: "group size", cls: "num"},
          {key: "base_calls_per_step", label: "calls/step", cls: "num",
           format: change("calls_per_step")},
          {key: "base_bytes_per_step", label: "BASE bytes", format: PS.fmtBytes, cls: "num"},
          {key: "new_bytes_per_step", label: "NEW bytes", format: PS.fmtBytes, cls: "num"},
          {key: "base_per_step_ns", label: "BASE time", format: PS.fmtNs, cls: "num"},
          {key: "new_per_step_ns", label: "NEW time", format: PS.fmtNs, cls: "num"}], {id: "compare-communication"}))
          : null,
        data.figures.length ? PS.section("Figures", PS.table(data.figures, [
          {key: "figure", label: "figure"},
          {key: "base", label: "BASE", format: (v, r) => figureValue(v, r.unit), cls: "num"},
          {key: "new", label: "NEW", format: (v, r) => figureValue(v, r.unit), cls: "num"},
          {key: "difference_pct", label: "difference", cls: "num",
           format: signedPct}],
          {id: "compare-figures"})) : null,
      ].filter(Boolean));
    },
  };
})();
