/* The Cluster page of a job analysed rank by rank (any rank count; insight maps a job of more ranks than it
   merges): how it was mapped and a rank opened alone (each rank has its own pages); every rank's step time per
   step as a rank x step heatmap (or a category of the step breakdown); the communication between nodes as a
   node x node heatmap, a click on a cell listing that node pair's rank pairs; the slowest ranks and links with
   their evidence (the verdicts' figures, rule and threshold); every rank's clock offset. Draws GET
   <api>/cluster/job, heatmap, nodes, nodes/links, top and offsets (api_cluster.py): every number is an
   analysis result, formatted here. Registered as PS.clusterJob; pages/cluster.js renders it for such a job. */
"use strict";

(() => {
  const ms = ns => ns === null || ns === undefined ? null : ns / 1e6;
  const gbps = v => v === null || v === undefined ? "–" : v.toFixed(3);
  const UNKNOWN = "peers not recorded";

  /* a link to a rank's own pages (its entry), or its number when it has none */
  function ranker(job) {
    const ids = new Map(job.rank_runs.map(r => [r.rank, r.id]));
    const link = rank => ids.has(rank)
      ? PS.el("a", {href: PS.runHash(ids.get(rank), "overview"), class: "rank-link", dataset: {rank}}, `rank ${rank}`)
      : `rank ${rank}`;
    link.open = rank => { if (ids.has(rank)) location.hash = PS.runHash(ids.get(rank), "overview"); };
    return link;
  }

  /* --- the job: how it was mapped, a rank opened alone --------------------------------------------------- */

  function jobSection(job, rank) {
    const counts = job.mapped ? job.mapped.counts : null;
    const slowest = job.slowest;
    const input = PS.el("input", {type: "number", id: "open-rank-number", min: 0, value: job.ranks[0] ?? 0});
    const go = () => rank.open(Number(input.value));
    return PS.section("Job",
      PS.el("div", {class: "cards"},
        PS.card("ranks", PS.fmtNum(job.ranks.length), counts
          ? `${PS.fmtNum(counts.done)} read, ${PS.fmtNum(counts.cached)} found stored, ${PS.fmtNum(counts.failed)} failed`
          : null),
        slowest ? (slowest.even
          ? PS.card("ranks are even", `at most ${PS.fmtPct(slowest.gap_pct)} apart`,
                    `median step ${PS.fmtNs(slowest.fastest_step_ns)} to ${PS.fmtNs(slowest.slowest_step_ns)}: within the noise`)
          : PS.card("slowest rank", rank(slowest.slowest_rank),
                    `median step ${PS.fmtNs(slowest.slowest_step_ns)}, ${PS.fmtPct(slowest.gap_pct)} over rank ${slowest.fastest_rank}`))
                : null,
        slowest ? (slowest.straggler_rank === null
          ? PS.card("straggler", "none", "the ranks arrive at their collectives together, within the noise")
          : PS.card("straggler", rank(slowest.straggler_rank),
                    `the others wait ${PS.fmtNs(slowest.straggler_wait_ns)} per step for it`))
                : null,
        job.mapped ? PS.card("mapped by", job.mapped.engine, `in ${job.mapped.seconds.toFixed(1)} s`) : null),
      PS.message("This job is analysed rank by rank: each rank is read alone and reduced to its summaries (stored " +
                 "beside the job), and the figures below are computed from those; a rank's own pages (timeline, " +
                 "operators...) open from any rank link."),
      job.failed.length ? PS.el("div", {id: "failed-ranks"}, PS.message(`${job.failed.length} rank(s) could not be read ` +
                                "and are left out:", "note warn"),
                                PS.el("ul", {}, job.failed.map(f => PS.el("li", {}, `${f.name}: ${f.error}`)))) : null,
      PS.el("div", {class: "picker"}, PS.el("label", {for: "open-rank-number"}, "open rank"), input,
            PS.el("button", {id: "open-rank", onclick: go}, "open")));
  }

  /* --- rank x step heatmap -------------------------------------------------------------------------------- */

  function heatmapChart(data, rank) {
    return PS.plot([{type: "heatmap", x: data.steps.map(String), y: data.ranks, z: data.z.map(row => row.map(ms)),
                     colorscale: "YlOrRd", colorbar: {title: {text: "ms"}},
                     hovertemplate: `rank %{y}, step %{x}: %{z:.3f} ms ${data.value}<extra></extra>`}],
                   {xaxis: {title: {text: "step"}, type: "category"},
                    yaxis: {title: {text: "rank"}, autorange: "reversed"}},
                   {id: "rank-step-heatmap", height: Math.min(720, 200 + 4 * data.ranks.length),
                    onClick: event => rank.open(event.points[0].y)});
  }

  async function heatmapSection(ctx, job, rank) {
    const holder = PS.el("div", {id: "rank-step-holder"});
    const draw = value => PS.fill(holder, async () =>
      heatmapChart(await PS.fetchJson(`${ctx.api}/cluster/heatmap` + PS.query({value})), rank));
    await draw("step");
    const values = [["step", "step time"], ...job.categories.map(c => [c, c.replace("_", " ")])];
    return PS.section("Step time per rank",
      PS.message("Each rank's time in each step (a click opens that rank's own pages); choose a category of the " +
                 "step breakdown to see where the time went."),
      PS.select("show", values, "step", draw, {id: "heatmap-value"}), holder);
  }

  /* --- communication between nodes ------------------------------------------------------------------------ */

  const NODE_VALUES = {
    bytes: {label: "bytes", value: (m, i) => m.transit_bytes[i], bar: {title: {text: "bytes"}, tickformat: "~s", ticksuffix: "B"}},
    time: {label: "transit time", value: (m, i) => ms(m.transit_ns[i]), bar: {title: {text: "ms"}}},
    bandwidth: {label: "bandwidth", value: (m, i) => m.bandwidth_gbps[i], bar: {title: {text: "GB/s"}}},
  };

  function nodeNames(nodes) {
    const names = [];
    nodes.node.forEach((name, i) => { names[nodes.node_index[i]] = name; });
    return names;
  }

  function nodeChart(data, metric, onPick) {
    const shown = NODE_VALUES[metric], m = data.matrix, names = nodeNames(data.nodes);
    const columns = [...names];
    if (m.dst_node.some(d => d === null)) columns.push(UNKNOWN);
    const z = names.map(() => columns.map(() => null));
    const text = names.map(() => columns.map(() => ""));
    m.src_index.forEach((src, i) => {
      const col = m.dst_index[i] === null ? columns.length - 1 : m.dst_index[i];
      z[src][col] = shown.value(m, i);
      text[src][col] = `${PS.fmtBytes(m.transit_bytes[i])} over ${PS.fmtNum(m.links[i])} rank pairs, ` +
        `${m.transit_ns[i] === null ? "transit time not recorded" : "transit " + PS.fmtNs(m.transit_ns[i])}` +
        `${m.bandwidth_gbps[i] === null ? "" : ", " + gbps(m.bandwidth_gbps[i]) + " GB/s"} (${PS.plotText(m.transport[i])})`;
    });
    return PS.plot([{type: "heatmap", x: columns.map(PS.plotText), y: names.map(PS.plotText), z, text,
                     ...PS.AMOUNT_COLORS, colorbar: shown.bar,
                     hovertemplate: "%{y} to %{x}: %{text}<extra></extra>"}],
                   {xaxis: {title: {text: "to node"}, type: "category"},
                    yaxis: {title: {text: "from node (recorded by its ranks)"}, type: "category", autorange: "reversed"},
                    margin: {l: 140, r: 20, t: 30, b: 120}},
                   {id: "node-matrix", height: Math.min(760, 260 + 12 * names.length),
                    onClick: event => {
                      const p = event.points[0];
                      onPick(names[p.pointIndex[0]], columns[p.pointIndex[1]] === UNKNOWN ? null : columns[p.pointIndex[1]]);
                    }});
  }

  const PAIR_COLUMNS = rank => [
    {key: "src_rank", label: "from", format: rank},
    {key: "dst_rank", label: "to", format: v => v === null ? UNKNOWN : rank(v)},
    {key: "transport", label: "transport"},
    {key: "collectives", label: "operations", cls: "num"},
    {key: "transit_bytes", label: "bytes", format: PS.fmtBytes, cls: "num"},
    {key: "transit_ns", label: "transit time", format: v => v === null ? "not recorded" : PS.fmtNs(v), cls: "num"},
    {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: gbps, cls: "num"},
  ];

  function pairChart(links) {
    const known = links.filter(l => l.dst_rank !== null);
    if (!known.length) return null;
    const rows = [...new Set(known.map(l => l.src_rank))].sort((a, b) => a - b);
    const cols = [...new Set(known.map(l => l.dst_rank))].sort((a, b) => a - b);
    const z = rows.map(() => cols.map(() => null));
    known.forEach(l => { z[rows.indexOf(l.src_rank)][cols.indexOf(l.dst_rank)] = l.transit_bytes; });
    return PS.plot([{type: "heatmap", x: cols.map(r => `rank ${r}`), y: rows.map(r => `rank ${r}`), z,
                     ...PS.AMOUNT_COLORS, colorbar: {title: {text: "bytes"}, tickformat: "~s", ticksuffix: "B"},
                     hovertemplate: "%{y} to %{x}: %{z} bytes<extra></extra>"}],
                   {xaxis: {type: "category"}, yaxis: {type: "category", autorange: "reversed"}},
                   {id: "node-pair-matrix", height: Math.min(520, 160 + 24 * rows.length)});
  }

  async function nodeSection(ctx, rank) {
    const data = await PS.fetchJson(`${ctx.api}/cluster/nodes`);
    if (!data.matrix.src_node.length) {
      return PS.section("Communication between nodes", PS.message("No communication operations were recorded in this job."));
    }
    const assumed = data.nodes.assumed.some(Boolean);
    const pair = PS.el("div", {id: "node-pair"});
    const pick = (src, dst) => PS.fill(pair, async () => {
      const found = await PS.fetchJson(`${ctx.api}/cluster/nodes/links` + PS.query({src, dst: dst ?? ""}));
      return [PS.el("h3", {}, `${src} to ${dst ?? UNKNOWN}: ${found.links.length} rank pairs`), pairChart(found.links),
              PS.table(found.links, PAIR_COLUMNS(rank), {id: "node-pair-links"})];
    });
    const holder = PS.el("div", {id: "node-matrix-holder"});
    const draw = metric => { holder.replaceChildren(nodeChart(data, metric, pick)); };
    draw("bytes");
    const names = nodeNames(data.nodes);
    return PS.section("Communication between nodes",
      PS.message("A cell sums the traffic the ranks of a node (row) recorded to the ranks of a node (column), as the " +
                 "communication matrix gives it rank by rank; click a cell for its rank pairs."),
      assumed ? PS.message(`Some ranks name no host: they are assumed to run ${data.ranks_per_node} to a node ` +
                           "(their nodes say \"assumed\").", "note warn") : null,
      PS.el("p", {class: "note", id: "node-count"}, `${names.length} nodes, ${PS.fmtNum(data.nodes.rank.length)} ranks.`),
      PS.select("show", Object.entries(NODE_VALUES).map(([k, v]) => [k, v.label]), "bytes", draw, {id: "node-matrix-value"}),
      holder, pair);
  }

  /* --- the slowest ranks and links, with their evidence --------------------------------------------------- */

  function topSection(top, rank) {
    const stepColumns = [
      {key: "rank", label: "rank", format: rank},
      {key: "boundary_step_ns", label: "median step (end to end)", format: PS.fmtNs, cls: "num"},
      {key: "gap_pct", label: "over fastest", format: PS.fmtPct, cls: "num"},
      {key: "caused_wait_ns", label: "others wait per step", format: PS.fmtNs, cls: "num"},
      {key: "compute_ns", label: "compute", format: PS.fmtNs, cls: "num"},
      {key: "communication_ns", label: "communication", format: PS.fmtNs, cls: "num"},
    ];
    const waitColumns = [
      {key: "rank", label: "rank", format: rank},
      {key: "process_group", label: "group", format: v => PS.el("span", {title: v}, PS.shorten(v, 24))},
      {key: "instances", label: "instances", cls: "num"},
      {key: "last_arrivals", label: "last at", cls: "num"},
      {key: "caused_per_step_ns", label: "others wait per step", format: PS.fmtNs, cls: "num"},
      {key: "waited_per_step_ns", label: "it waits per step", format: PS.fmtNs, cls: "num"},
      {key: "slow", label: "verdict", format: v => v ? "straggler: the others wait for it" : "–"},
    ];
    const linkColumns = [
      {key: "src_rank", label: "from", format: rank}, {key: "dst_rank", label: "to", format: rank},
      {key: "transport", label: "transport"},
      {key: "bandwidth_gbps", label: "bandwidth (GB/s)", format: gbps, cls: "num"},
      {key: "median_gbps", label: "median of its transport", format: gbps, cls: "num"},
      {key: "links", label: "links", cls: "num"},
      {key: "slow", label: "verdict", format: v => v ? "slow" : "–"},
    ];
    const rule = r => PS.el("p", {class: "note"}, `Rule: ${r.rule}. Threshold: ${r.threshold}.`);
    const count = (part, what) => PS.message(`${PS.fmtNum(part.slow)} slow of ${PS.fmtNum(part.total)} ${what}; the ` +
                                             `first ${part.rows.length} shown.`);
    return PS.section("Slowest ranks and links",
      PS.el("h3", {}, "Ranks that hold the others up (the wait they cause per step, then the longest step)"),
      PS.table(top.ranks.rows, stepColumns, {id: "top-ranks"}),
      PS.el("h3", {}, "Stragglers by group (the wait their late arrival causes)"),
      count(top.slow_ranks, "rank verdicts"), rule(top.rules.slow_rank),
      PS.table(top.slow_ranks.rows, waitColumns, {id: "top-slow-ranks"}),
      PS.el("h3", {}, "Slowest links"),
      count(top.slow_links, "links"), rule(top.rules.slow_link),
      PS.table(top.slow_links.rows, linkColumns, {id: "top-slow-links"}));
  }

  /* --- clock offsets ------------------------------------------------------------------------------------- */

  function offsetSection(offsets, rank, top) {
    const rows = offsets.rank.map((r, i) => ({rank: r, offset_ns: offsets.offset_ns[i], spread_ns: offsets.spread_ns[i],
                                             collectives_used: offsets.collectives_used[i], method: offsets.method[i]}));
    const largest = [...rows].sort((a, b) => Math.abs(b.offset_ns) - Math.abs(a.offset_ns) || a.rank - b.rank).slice(0, top);
    return PS.section("Clock offsets",
      PS.message("Each rank's clock against the reference rank's, from the ends of the collectives both ran; " +
                 "cross-rank figures use times minus these offsets."),
      PS.plot([{type: "scatter", mode: "markers", x: offsets.rank, y: offsets.offset_ns.map(ms), marker: {size: 4},
                hovertemplate: "rank %{x}: %{y:.6f} ms<extra></extra>"}],
              {xaxis: {title: {text: "rank"}}, yaxis: {title: {text: "offset (ms)"}}},
              {id: "offsets-chart", height: 260, onClick: event => rank.open(event.points[0].x)}),
      PS.el("h3", {}, `The ${largest.length} largest offsets`),
      PS.table(largest, [
        {key: "rank", label: "rank", format: rank},
        {key: "offset_ns", label: "offset", format: PS.fmtNs, cls: "num"},
        {key: "spread_ns", label: "spread", format: PS.fmtNs, cls: "num"},
        {key: "collectives_used", label: "instances used", cls: "num"},
        {key: "method", label: "method"}], {id: "offsets-top"}));
  }

  async function render(container, ctx) {
    const job = await PS.fetchJson(`${ctx.api}/cluster/job`);
    const rank = ranker(job);
    const [heatmap, nodes, top, offsets] = await Promise.all([
      heatmapSection(ctx, job, rank), nodeSection(ctx, rank),
      PS.fetchJson(`${ctx.api}/cluster/top` + PS.query({n: job.top})), PS.fetchJson(`${ctx.api}/cluster/offsets`)]);
    container.append(PS.el("h1", {}, "Cluster"), jobSection(job, rank), heatmap, nodes, topSection(top, rank),
                     offsetSection(offsets, rank, job.top));
  }

  PS.clusterJob = {render};
})();
