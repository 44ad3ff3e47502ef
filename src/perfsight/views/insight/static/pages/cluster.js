/* The Cluster page (MindSpore Insight's cluster pages and msprof-analyze's cluster outputs, for a run of
   several ranks): each rank's mean step breakdown side by side, the slowest rank (or even ranks) and the
   straggler (analysis/waiting.py), every
   rank's step times and what each rank lacks; then communication: the matrix between global ranks (bytes,
   transit time or bandwidth), the collectives per rank, group and kind with their wait, transit and bus
   bandwidth (sortable, longest wait first) and every operation's figures page by page, bandwidth per link
   type with packet sizes, the stragglers by group and the slow links with their rules, the clock offsets and the
   groups. Draws GET <api>/cluster, <api>/cluster/communication and <api>/cluster/operations
   (api_resources.py): every number is an analysis result, formatted here. A job analysed rank by rank (too
   many ranks to merge) gets pages/cluster_job.js's page instead. */
"use strict";

(() => {
  const CATEGORY_COLORS = {compute: "#3f9c5a", communication: "#e0922f", memory: "#7b61c4", runtime: "#2f6fde",
                           dataloader: "#cf4a34", host_ops: "#5fa8c9", python: "#b5a33b", idle: "#a3abb5"};
  const ms = ns => ns / 1e6;

  function slowestCards(slowest) {
    if (!slowest) return PS.message("No steps were recorded, so the ranks cannot be compared step by step.");
    return PS.el("div", {id: "slowest-rank"},
      PS.el("div", {class: "cards"},
        slowest.even
          ? PS.card("ranks are even", `rank ${slowest.slowest_rank} at most ${PS.fmtPct(slowest.gap_pct)} over`,
                    `median step ${PS.fmtNs(slowest.slowest_step_ns)} against rank ${slowest.fastest_rank}'s ` +
                    `${PS.fmtNs(slowest.fastest_step_ns)}: within the noise`)
          : PS.card("slowest rank", `rank ${slowest.slowest_rank}`,
                    `median step ${PS.fmtNs(slowest.slowest_step_ns)}, ${PS.fmtPct(slowest.gap_pct)} over rank ` +
                    `${slowest.fastest_rank} (${PS.fmtNs(slowest.fastest_step_ns)})`),
        slowest.straggler_rank === null
          ? PS.card("straggler", "none", "the ranks arrive at their collectives together, within the noise")
          : PS.card("straggler", `rank ${slowest.straggler_rank}`,
                    `the others wait ${PS.fmtNs(slowest.straggler_wait_ns)} per step for it; last at ` +
                    `${slowest.straggler_last_arrivals} of ${slowest.straggler_instances} collectives`),
        PS.card("compared", `${slowest.ranks} ranks, ${slowest.steps} step${slowest.steps === 1 ? "" : "s"}`,
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
      {key: "boundary_step_ns", label: "median step (end to end)", format: PS.fmtNs, cls: "num"},
      {key: "gap_pct", label: "over fastest", format: PS.fmtPct, cls: "num"},
      {key: "caused_wait_ns", label: "others wait per step", format: PS.fmtNs, cls: "num"},
      {key: "last_arrivals", label: "last at", cls: "num"},
      {key: "step_ns", label: "mean step", format: PS.fmtNs, cls: "num"},
      ...categories.map(c => ({key: `${c}_ns`, label: c.replace("_", " "), format: PS.fmtNs, cls: "num"})),
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

  /* --- what each rank lacks ------------------------------------------------------------------------------ */

  const LACK_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "step_source", label: "steps from", format: v => v ?? "not said"},
    {key: "lacking_files", label: "lacks", format: v => v.length ? v.join(", ") : "nothing"},
    {key: "warnings", label: "read around", format: v => v.length ? PS.el("ul", {}, v.map(w => PS.el("li", {}, w))) : "–"},
  ];

  function lacksSection(lacks) {
    if (!lacks.length) return null;
    return PS.section("What each rank lacks",
      PS.message("The files each rank's folder lacks, where its steps came from, and what its reader read around."),
      PS.table(lacks, LACK_COLUMNS, {id: "rank-lacks"}));
  }

  /* --- communication ------------------------------------------------------------------------------------- */

  const UNKNOWN = "peers not recorded";
  const orNot = fmt => v => v === null || v === undefined ? "not recorded" : fmt(v);
  const gbps = v => v === null || v === undefined ? "–" : v.toFixed(3);
  const ratio = v => v === null || v === undefined ? "–" : PS.fmtPct(100 * v);
  const group = v => v === null ? "(not recorded)" : PS.el("span", {title: v}, PS.shorten(v, 24));
  const MATRIX_COLUMNS = [
    {key: "src_rank", label: "rank", cls: "num"},
    {key: "dst_rank", label: "with", format: v => v === null ? UNKNOWN : `rank ${v}`},
    {key: "transport", label: "transport"},
    {key: "collectives", label: "operations", cls: "num"},
    {key: "transit_bytes", label: "bytes", format: PS.fmtBytes, cls: "num"},
    {key: "transit_ns", label: "transit time", format: orNot(PS.fmtNs), cls: "num"},
    {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: gbps, cls: "num"},
  ];
  const COLLECTIVE_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "collective", label: "collective"},
    {key: "source", label: "recorded by"},
    {key: "count", label: "count", cls: "num"},
    {key: "in_bytes", label: "input bytes", format: PS.fmtBytes, cls: "num"},
    {key: "out_bytes", label: "output bytes", format: PS.fmtBytes, cls: "num"},
    {key: "dur_ns", label: "device time", format: orNot(PS.fmtNs), cls: "num"},
    {key: "with_peers", label: "with peers", cls: "num"},
  ];
  const FIGURE_COLUMNS = [
    {key: "elapse_ns", label: "elapse", format: PS.fmtNs},
    {key: "transit_ns", label: "transit", format: PS.fmtNs},
    {key: "wait_ns", label: "wait", format: PS.fmtNs},
    {key: "sync_ns", label: "sync", format: PS.fmtNs},
    {key: "idle_ns", label: "idle", format: PS.fmtNs},
    {key: "wait_ratio", label: "wait ratio", format: ratio},
    {key: "algbw_gbps", label: "algbw (GB/s)", format: gbps},
    {key: "busbw_gbps", label: "busbw (GB/s)", format: gbps},
  ].map(c => ({...c, sort: c.key, cls: "num"}));
  const TOTAL_COLUMNS = [
    {key: "rank", label: "rank", sort: "rank", cls: "num"},
    {key: "process_group", label: "group", sort: "process_group", format: group},
    {key: "collective", label: "collective", sort: "collective"},
    {key: "operations", label: "count", sort: "operations", cls: "num"},
    {key: "mean_bytes", label: "message size", sort: "mean_bytes", format: PS.fmtBytes, cls: "num"},
    ...FIGURE_COLUMNS,
  ];
  const OPERATION_COLUMNS = [
    {key: "rank", label: "rank", sort: "rank", cls: "num"},
    {key: "op_name", label: "operation", sort: "op_name", format: v => PS.el("span", {title: v}, PS.shorten(v, 40))},
    {key: "collective", label: "collective", sort: "collective"},
    {key: "sequence", label: "#", sort: "sequence", cls: "num"},
    {key: "step", label: "step", sort: "step", cls: "num"},
    {key: "bytes", label: "message size", sort: "bytes", format: PS.fmtBytes, cls: "num"},
    ...FIGURE_COLUMNS,
    {key: "figures_from", label: "figures from", sort: "figures_from"},
  ];
  const LINK_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "link_type", label: "link type"},
    {key: "operations", label: "operations", cls: "num"},
    {key: "transit_bytes", label: "transit bytes", format: PS.fmtBytes, cls: "num"},
    {key: "transit_ns", label: "transit time", format: orNot(PS.fmtNs), cls: "num"},
    {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: gbps, cls: "num"},
    {key: "size_distribution", label: "packets", format: v => v === null ? "not recorded" : PS.fmtNum(v.reduce((n, p) => n + p.count, 0)), cls: "num"},
  ];
  const OFFSET_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    ...[["offset_ns", "offset"], ["estimate_ns", "raw estimate"], ["spread_ns", "spread"]].map(
      ([key, label]) => ({key, label, format: PS.fmtNs, cls: "num"})),
    {key: "collectives_used", label: "instances used", cls: "num"},
    {key: "method", label: "method"},
  ];
  const GROUP_COLUMNS = [
    {key: "process_group", label: "group", format: group},
    {key: "group_name", label: "name", format: v => v ?? "–"},
    {key: "kind", label: "kind"},
    {key: "ranks", label: "ranks", format: v => v.join(", ")},
    {key: "ranks_global", label: "ranks are", format: v => v ? "global" : "group-local (no mapping found)"},
    {key: "source", label: "from"},
  ];
  const SLOW_RANK_COLUMNS = [
    {key: "process_group", label: "group", format: group},
    {key: "rank", label: "rank", cls: "num"},
    {key: "instances", label: "instances", cls: "num"},
    {key: "last_arrivals", label: "last at", cls: "num"},
    {key: "caused_per_step_ns", label: "others wait per step", format: PS.fmtNs, cls: "num"},
    {key: "waited_per_step_ns", label: "it waits per step", format: PS.fmtNs, cls: "num"},
    {key: "slow", label: "verdict", format: v => v ? "straggler: the others wait for it" : "–"},
  ];
  const SLOW_LINK_COLUMNS = [
    {key: "src_rank", label: "from", cls: "num"}, {key: "dst_rank", label: "to", cls: "num"},
    {key: "transport", label: "transport"},
    {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: gbps, cls: "num"},
    {key: "median_gbps", label: "median of its transport", format: gbps, cls: "num"},
    {key: "links", label: "links", cls: "num"},
  ];

  /* the matrix's values: which column, its colour bar and how a cell reads */
  const MATRIX_VALUES = {
    bytes: {label: "bytes", value: c => c.transit_bytes, bar: {title: {text: "bytes"}, tickformat: "~s", ticksuffix: "B"}},
    time: {label: "transit time", value: c => c.transit_ns === null ? null : ms(c.transit_ns), bar: {title: {text: "ms"}}},
    bandwidth: {label: "bandwidth", value: c => c.bandwidth_gbps, bar: {title: {text: "GB/s"}}},
  };

  function matrixChart(cells, metric) {
    const shown = MATRIX_VALUES[metric];
    const rows = [...new Set(cells.map(c => c.src_rank))].sort((a, b) => a - b);
    const peers = [...new Set(cells.filter(c => c.dst_rank !== null).map(c => c.dst_rank))].sort((a, b) => a - b);
    const columns = peers.map(p => `rank ${p}`);
    if (cells.some(c => c.dst_rank === null)) columns.push(UNKNOWN);
    const at = (rank, column) => cells.find(c => c.src_rank === rank &&
      (column === UNKNOWN ? c.dst_rank === null : `rank ${c.dst_rank}` === column));
    const z = rows.map(rank => columns.map(col => { const c = at(rank, col); return c ? shown.value(c) : null; }));
    const text = rows.map(rank => columns.map(col => {
      const c = at(rank, col);
      if (!c) return "";
      const time = c.transit_ns === null ? "transit time not recorded" : `transit ${PS.fmtNs(c.transit_ns)}`;
      const speed = c.bandwidth_gbps === null ? "" : `, ${gbps(c.bandwidth_gbps)} GB/s`;
      return `${PS.fmtBytes(c.transit_bytes)} in ${c.collectives} operations, ${time}${speed} (${PS.plotText(c.transport)})`;
    }));
    return PS.plot([{type: "heatmap", x: columns, y: rows.map(r => `rank ${r}`), z, text, ...PS.AMOUNT_COLORS,
                     hovertemplate: "%{y} to %{x}: %{text}<extra></extra>", colorbar: shown.bar}],
                   {xaxis: {title: {text: "to (peer)"}, type: "category"}, yaxis: {title: {text: "from (recorded by)"},
                    type: "category", autorange: "reversed"}}, {id: "comm-matrix", height: Math.min(640, 140 + 40 * rows.length)});
  }

  function matrixPart(matrix) {
    const holder = PS.el("div", {id: "comm-matrix-holder"});
    const draw = metric => { holder.replaceChildren(matrixChart(matrix, metric)); };
    draw("bytes");
    return [PS.select("show", Object.entries(MATRIX_VALUES).map(([k, v]) => [k, v.label]), "bytes", draw,
                      {id: "matrix-value"}), holder];
  }

  function packetsChart(links) {
    const traces = links.filter(l => l.size_distribution && l.size_distribution.length).map(l => ({
      type: "bar", name: `rank ${l.rank} ${PS.plotText(l.link_type)}`,
      x: l.size_distribution.map(p => PS.fmtBytes(p.packet_bytes)), y: l.size_distribution.map(p => p.count),
      customdata: l.size_distribution.map(p => PS.fmtNs(p.dur_ns)),
      hovertemplate: "%{x} packets: %{y} in %{customdata}<extra>%{fullData.name}</extra>"}));
    if (!traces.length) return null;
    return PS.plot(traces, {barmode: "group", xaxis: {title: {text: "packet size"}, type: "category"},
                            yaxis: {title: {text: "packets"}}}, {id: "link-packets", height: 280});
  }

  function verdict(rows, {slowText, noneText, rule, id}) {
    const slow = rows.filter(r => r.slow);
    return PS.el("div", {class: `verdict ${slow.length ? "verdict-highly" : "verdict-not"}`, id},
      PS.el("p", {}, PS.el("strong", {}, slow.length ? slow.map(slowText).join("; ") : noneText)),
      PS.el("p", {class: "note"}, `Rule: ${rule.rule}. Threshold: ${rule.threshold}.`));
  }

  function verdictSection(comm) {
    const ranks = comm.slow_ranks, links = comm.slow_links;
    const slowLinks = links.filter(l => l.slow);
    return PS.section("Stragglers and slow links",
      verdict(ranks, {id: "slow-rank-verdict", rule: comm.rules.slow_rank,
        slowText: r => `rank ${r.rank} is the straggler of group ${PS.shorten(r.process_group, 24)}: the others ` +
                       `wait ${PS.fmtNs(r.caused_per_step_ns)} per step for it, last at ${r.last_arrivals} of ${r.instances}`,
        noneText: ranks.length ? `No straggler among ${ranks.length} rank verdicts.`
                               : "No verdict: no collective instance was traced on two ranks (no wait figures)."}),
      ranks.length ? PS.table(ranks, SLOW_RANK_COLUMNS, {id: "slow-ranks"}) : null,
      verdict(links, {id: "slow-link-verdict", rule: comm.rules.slow_link,
        slowText: l => `link ${l.src_rank} → ${l.dst_rank} (${l.transport}) is slow: ${gbps(l.bandwidth_gbps)} GB/s ` +
                       `against the median ${gbps(l.median_gbps)} GB/s`,
        noneText: links.length ? `No slow link among ${links.length} links.`
                               : "No verdict: no link between two ranks has a transit time."}),
      slowLinks.length ? PS.table(slowLinks, SLOW_LINK_COLUMNS, {id: "slow-links"}) : null);
  }

  function operationsTable(ctx) {
    return PS.pagedTable(OPERATION_COLUMNS, async view => PS.fetchJson(`${ctx.api}/cluster/operations` +
      PS.query({sort: view.sort, order: view.order, page: view.page, page_size: view.pageSize})),
    {id: "comm-operations", sort: "wait_ns", pageSize: 20});
  }

  async function communicationSections(ctx, comm) {
    if (!comm.matrix.length && !comm.totals.length) {
      return [PS.section("Communication", PS.message("No communication operations were recorded in this run."))];
    }
    const unknown = comm.matrix.some(c => c.dst_rank === null);
    const [totals, operations] = await Promise.all([
      PS.pagedTable(TOTAL_COLUMNS, PS.localPages(comm.totals), {id: "comm-totals", sort: "wait_ns", pageSize: 20}),
      operationsTable(ctx)]);
    return [
      PS.section("Communication matrix",
        PS.message("A cell is the traffic from a rank (row) to a peer (column): as Ascend's communication_matrix.json " +
                   "reports it, or for other traces the volume of the collectives the two share as the sender's trace " +
                   "records them (message bytes, not the bytes crossing that link: NCCL routes data along rings and trees " +
                   "no trace records)."),
        unknown ? PS.message(`"${UNKNOWN}": the trace records the size of these operations but not the global ` +
                             "ranks of their peers: PyTorch before 2.1 and backends without collective metadata " +
                             "record no group; an Ascend group without parallel_group_info names its members only by " +
                             "their positions in the group (the Groups table says which groups).",
                             "note warn") : null,
        matrixPart(comm.matrix),
        PS.table(comm.matrix, MATRIX_COLUMNS, {id: "comm-cells"})),
      PS.section("Collectives",
        PS.message("Per rank, group and collective, the operations' figures summed (longest wait first; click a " +
                   "header to sort): wait is the arrival skew (the time until the last member arrived, on aligned " +
                   "clocks), transit the rest, bus bandwidth nccl-tests' factor times message bytes over transit."),
        totals,
        PS.el("h3", {}, "Every operation"),
        PS.el("div", {class: "wide"}, operations),
        PS.el("h3", {}, "Collectives as recorded"),
        PS.table(comm.collectives, COLLECTIVE_COLUMNS, {id: "comm-collectives"})),
      PS.section("Bandwidth per link type", PS.table(comm.links, LINK_COLUMNS, {id: "comm-links"}), packetsChart(comm.links)),
      verdictSection(comm),
      PS.section("Clock offsets",
        PS.message("Each rank's clock against the reference rank's, from the ends of the collectives both ran; " +
                   "cross-rank figures (wait) use times minus these offsets."),
        PS.table(comm.offsets, OFFSET_COLUMNS, {id: "clock-offsets"})),
      PS.section("Communication groups", PS.table(comm.groups, GROUP_COLUMNS, {id: "comm-groups"})),
    ];
  }

  async function render(container, ctx) {
    if (ctx.run.mode === "cluster") return PS.clusterJob.render(container, ctx);   // analysed rank by rank
    const [steps, comm] = await Promise.all([PS.fetchJson(`${ctx.api}/cluster`),
                                             PS.fetchJson(`${ctx.api}/cluster/communication`)]);
    container.append(PS.el("h1", {}, "Cluster"),
      PS.section("Slowest rank", slowestCards(steps.slowest)));
    if (steps.ranks.length) {
      container.append(PS.section("Mean step per rank", breakdownChart(steps.ranks, steps.categories),
                                  PS.table(steps.ranks, rankColumns(steps.categories), {id: "rank-breakdown"})),
                       PS.section("Step time per rank", stepsChart(steps.steps)));
    }
    const lacks = lacksSection(steps.lacks);
    if (lacks) container.append(lacks);
    container.append(...await communicationSections(ctx, comm));
  }

  PS.pages.cluster = {render};
})();
