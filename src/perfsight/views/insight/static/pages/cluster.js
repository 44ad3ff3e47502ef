/* The Cluster page (MindSpore Insight's cluster pages, for a run of several ranks): each rank's mean step
   breakdown side by side, the slowest rank and the straggler, every rank's step times, and the
   communication matrix between ranks with the collectives behind it, saying plainly where the trace does
   not record the peers. Draws GET <api>/cluster and <api>/cluster/communication (api_resources.py). */
"use strict";

(() => {
  const CATEGORY_COLORS = {compute: "#3f9c5a", communication: "#e0922f", memory: "#7b61c4", runtime: "#2f6fde",
                           dataloader: "#cf4a34", host_ops: "#5fa8c9", python: "#b5a33b", idle: "#a3abb5"};
  const ms = ns => ns / 1e6;

  function slowestCards(slowest) {
    if (!slowest) return PS.message("No steps were recorded, so the ranks cannot be compared step by step.");
    return PS.el("div", {id: "slowest-rank"},
      PS.el("div", {class: "cards"},
        PS.card("slowest rank", `rank ${slowest.slowest_rank}`, `mean step ${PS.fmtNs(slowest.slowest_step_ns)}`),
        PS.card("gap to the fastest", PS.fmtNs(slowest.gap_ns),
                `${PS.fmtPct(slowest.gap_pct)} over rank ${slowest.fastest_rank} (${PS.fmtNs(slowest.fastest_step_ns)})`),
        PS.card("straggler", `rank ${slowest.straggler_rank}`,
                `${PS.fmtNs(slowest.straggler_non_communication_ns)} per step outside exposed communication`),
        PS.card("compared", `${slowest.ranks} ranks, ${slowest.steps} steps`,
                slowest.common_steps ? "the steps every rank has" : "no step in common: each rank's own")),
      PS.el("p", {}, slowest.reason));
  }

  function breakdownChart(ranks, categories) {
    const x = ranks.map(r => `rank ${r.rank}`);
    const traces = categories.map(c => ({type: "bar", name: c.replace("_", " "), x, y: ranks.map(r => ms(r[`${c}_ns`])),
      marker: {color: CATEGORY_COLORS[c]}, hovertemplate: `%{x}: %{y:.3f} ms ${c}<extra></extra>`}));
    return PS.plot(traces, {barmode: "stack", yaxis: {title: {text: "mean step (ms)"}}}, {id: "rank-breakdown-chart"});
  }

  function rankColumns(categories) {
    return [
      {key: "rank", label: "rank", format: (v, r) => `${v}${r.slowest ? " (slowest)" : ""}${r.straggler ? " (straggler)" : ""}`},
      {key: "steps", label: "steps", cls: "num"},
      {key: "step_ns", label: "mean step", format: PS.fmtNs, cls: "num"},
      {key: "gap_pct", label: "over fastest", format: PS.fmtPct, cls: "num"},
      ...categories.map(c => ({key: `${c}_ns`, label: c.replace("_", " "), format: PS.fmtNs, cls: "num"})),
      {key: "non_communication_ns", label: "outside exposed comm.", format: PS.fmtNs, cls: "num"},
    ];
  }

  function stepsChart(steps) {
    const ranks = [...new Set(steps.rank)];
    const traces = ranks.map(rank => {
      const idx = steps.rank.map((r, i) => r === rank ? i : -1).filter(i => i >= 0);
      return {type: "scatter", mode: "lines+markers", name: `rank ${rank}`, x: idx.map(i => steps.step[i]),
              y: idx.map(i => ms(steps.step_ns[i])), hovertemplate: `rank ${rank}, step %{x}: %{y:.3f} ms<extra></extra>`};
    });
    return PS.plot(traces, {xaxis: {title: {text: "step"}, type: "category"}, yaxis: {title: {text: "step time (ms)"}}},
                   {id: "rank-steps-chart", height: 280});
  }

  /* --- communication ------------------------------------------------------------------------------------- */

  const UNKNOWN = "peers not recorded";
  const MATRIX_COLUMNS = [
    {key: "src_rank", label: "rank", cls: "num"},
    {key: "dst_rank", label: "with", format: v => v === null ? UNKNOWN : `rank ${v}`},
    {key: "transport", label: "transport"},
    {key: "collectives", label: "operations", cls: "num"},
    {key: "transit_bytes", label: "bytes", format: PS.fmtBytes, cls: "num"},
    {key: "transit_ns", label: "transit time", format: v => v === null ? "not recorded" : PS.fmtNs(v), cls: "num"},
    {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: v => v === null ? "" : v.toFixed(3), cls: "num"},
  ];
  const COLLECTIVE_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "collective", label: "collective"},
    {key: "source", label: "recorded by"},
    {key: "count", label: "count", cls: "num"},
    {key: "in_bytes", label: "input bytes", format: PS.fmtBytes, cls: "num"},
    {key: "out_bytes", label: "output bytes", format: PS.fmtBytes, cls: "num"},
    {key: "dur_ns", label: "device time", format: v => v === null ? "not recorded" : PS.fmtNs(v), cls: "num"},
    {key: "with_peers", label: "with peers", cls: "num"},
  ];

  function matrixChart(cells) {
    const rows = [...new Set(cells.map(c => c.src_rank))].sort((a, b) => a - b);
    const peers = [...new Set(cells.filter(c => c.dst_rank !== null).map(c => c.dst_rank))].sort((a, b) => a - b);
    const columns = peers.map(p => `rank ${p}`);
    if (cells.some(c => c.dst_rank === null)) columns.push(UNKNOWN);
    const at = (rank, column) => cells.find(c => c.src_rank === rank &&
      (column === UNKNOWN ? c.dst_rank === null : `rank ${c.dst_rank}` === column));
    const z = rows.map(rank => columns.map(col => { const c = at(rank, col); return c ? c.transit_bytes : null; }));
    const text = rows.map(rank => columns.map(col => {
      const c = at(rank, col);
      if (!c) return "";
      const speed = c.bandwidth_gbps === null ? "" : `, ${c.bandwidth_gbps.toFixed(3)} GB/s`;
      return `${PS.fmtBytes(c.transit_bytes)} in ${c.collectives} operations${speed}`;
    }));
    return PS.plot([{type: "heatmap", x: columns, y: rows.map(r => `rank ${r}`), z, text, colorscale: "Blues", reversescale: true,
                     hovertemplate: "%{y} with %{x}: %{text}<extra></extra>",
                     colorbar: {title: {text: "bytes"}, tickformat: "~s", ticksuffix: "B"}}],
                   {xaxis: {title: {text: "peer"}, type: "category"}, yaxis: {title: {text: "recorded by"}, type: "category",
                    autorange: "reversed"}}, {id: "comm-matrix", height: Math.min(640, 140 + 40 * rows.length)});
  }

  function communicationSection(comm) {
    if (!comm.matrix.length) {
      return PS.section("Communication", PS.message("No communication operations were recorded in this run."));
    }
    const unknown = comm.matrix.some(c => c.dst_rank === null);
    return PS.section("Communication",
      PS.message("A cell is the volume of the collectives a rank (row) ran with a peer (column), as that rank's " +
                 "trace records it: the operations the two share and their message bytes, not the bytes crossing " +
                 "that link (NCCL routes data along rings and trees no trace records)."),
      unknown ? PS.message(`"${UNKNOWN}": this trace records the size of these operations but not their group ` +
                           "(PyTorch before 2.1 and backends without collective metadata), so who took part is unknown.",
                           "note warn") : null,
      matrixChart(comm.matrix),
      PS.table(comm.matrix, MATRIX_COLUMNS, {id: "comm-cells"}),
      PS.el("h3", {}, "Collectives per rank"),
      PS.table(comm.collectives, COLLECTIVE_COLUMNS, {id: "comm-collectives"}));
  }

  async function render(container, ctx) {
    const [steps, comm] = await Promise.all([PS.fetchJson(`${ctx.api}/cluster`),
                                             PS.fetchJson(`${ctx.api}/cluster/communication`)]);
    container.append(PS.el("h1", {}, "Cluster"),
      PS.section("Slowest rank", slowestCards(steps.slowest)));
    if (steps.ranks.length) {
      container.append(PS.section("Mean step per rank", breakdownChart(steps.ranks, steps.categories),
                                  PS.table(steps.ranks, rankColumns(steps.categories), {id: "rank-breakdown"})),
                       PS.section("Step time per rank", stepsChart(steps.steps)));
    }
    container.append(communicationSection(comm));
  }

  PS.pages.cluster = {render};
})();
