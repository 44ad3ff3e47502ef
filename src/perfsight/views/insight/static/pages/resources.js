/* The Resources page (MindSpore Insight's 资源利用): host CPU utilisation of the machine and of the training
   process, host memory, and the allocator's memory: its curve over time with the peak, what is allocated
   at a clicked point of the curve (by operator and tensor; the peak until a click), allocations per
   operator type and every allocation, page by page. Draws GET <api>/resources/host and <api>/memory*
   (api_resources.py); times arrive as ns since the run's first instant. */
"use strict";

(() => {
  const SERIES_LABELS = {
    "host.cpu_percent.process": "process CPU", "host.cpu_percent.system": "machine CPU",
    "host.memory_rss_bytes.process": "process RSS", "host.memory_used_bytes.system": "machine memory used",
    "host.memory_percent.system": "machine memory %",
  };
  const PAGE = 50;
  const seconds = ns => ns / 1e9;
  const label = name => PS.own(SERIES_LABELS, name) || name;

  /* --- host CPU and memory ---------------------------------------------------------------------------- */

  const BYTES_AXIS = {title: {text: "bytes"}, tickformat: "~s", ticksuffix: "B"};

  function hostChart(series, filter, yaxis, id, multiRank) {
    const picked = series.filter(filter);
    if (!picked.length) return null;
    const traces = picked.map(s => ({type: "scatter", mode: "lines+markers", x: s.t_ns.map(seconds), y: s.value,
      name: PS.plotText(label(s.series) + (multiRank ? ` (rank ${s.rank})` : ""))}));
    return PS.plot(traces, {xaxis: {title: {text: "time since the run started (s)"}}, yaxis}, {id, height: 280});
  }

  const SUMMARY_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "series", label: "series", format: label},
    {key: "samples", label: "samples", cls: "num"},
    {key: "mean", label: "mean", cls: "num"}, {key: "p95", label: "p95", cls: "num"},
    {key: "min", label: "min", cls: "num"}, {key: "max", label: "max", cls: "num"},
  ].map(c => ["mean", "p95", "min", "max"].includes(c.key)
    ? {...c, format: (v, r) => r.unit === "bytes" ? PS.fmtBytes(v) : (r.unit === "percent" ? PS.fmtPct(v) : v)} : c);

  function hostSection(host) {
    if (!host.series.length) {
      return PS.section("Host CPU and memory", PS.message("No host usage samples in this run: perfsight runs " +
        "record them with the option host_sys=cpu,mem (torch.profiler traces have none)."));
    }
    const multiRank = new Set(host.series.map(s => s.rank)).size > 1;
    const isCpu = s => s.series.includes("cpu_percent");
    const isBytes = s => PS.own(host.units, s.series) === "bytes";
    return PS.section("Host CPU and memory",
      PS.message("CPU percent is of one core (as psutil): a process busy on two cores shows 200%. The process " +
                 "against the machine tells whether other processes compete with training; low process CPU with " +
                 "an input-bound verdict suggests more loader workers, high machine CPU suggests fewer."),
      PS.el("div", {class: "row"},
        hostChart(host.series, isCpu, {title: {text: "CPU %"}}, "cpu-chart", multiRank),
        hostChart(host.series, isBytes, BYTES_AXIS, "host-memory-chart", multiRank)),
      PS.table(host.summary, SUMMARY_COLUMNS, {id: "host-summary"}));
  }

  /* --- the allocator's memory ---------------------------------------------------------------------------- */

  const TENSOR_COLUMNS = [
    {key: "bytes", label: "size", format: PS.fmtBytes, cls: "num"},
    {key: "share", label: "share", format: v => PS.fmtPct(v === null ? null : 100 * v), cls: "num"},
    {key: "op_type", label: "allocated by", format: v => v ?? "(no operator)"},
    {key: "step", label: "step", cls: "num"},
    {key: "alloc_ts_ns", label: "allocated at", format: PS.fmtNs, cls: "num"},
    {key: "age_ns", label: "alive for", format: PS.fmtNs, cls: "num"},
    {key: "free_ts_ns", label: "freed at", format: v => v === null ? "never (in the trace)" : PS.fmtNs(v), cls: "num"},
  ];
  const BY_OP_COLUMNS = [
    {key: "op_type", label: "operator type", format: v => v ?? "(no operator)"},
    {key: "alloc_count", label: "allocations", cls: "num"},
    {key: "alloc_bytes", label: "allocated", format: PS.fmtBytes, cls: "num"},
    {key: "free_count", label: "frees", cls: "num"},
    {key: "freed_bytes", label: "freed", format: PS.fmtBytes, cls: "num"},
    {key: "net_bytes", label: "net", format: PS.fmtBytes, cls: "num"},
  ];
  const ALLOCATION_COLUMNS = [
    {key: "alloc_seq", label: "event", cls: "num"},
    {key: "bytes", label: "size", format: PS.fmtBytes, cls: "num"},
    {key: "op_type", label: "allocated by", format: v => v ?? "(no operator)"},
    {key: "step", label: "step", cls: "num"},
    {key: "alloc_ts_ns", label: "allocated at", format: PS.fmtNs, cls: "num"},
    {key: "lifetime_ns", label: "lifetime", format: (v, r) => r.free_ts_ns === null ? "not freed" : PS.fmtNs(v), cls: "num"},
  ];

  async function breakdownAt(ctx, device, tNs, what) {
    const alive = await PS.fetchJson(`${ctx.api}/memory/alive` +
      PS.query({rank: device.rank, device: device.device, t_ns: tNs, limit: 100}));
    const bars = alive.by_op.slice(0, 20).reverse();
    return [
      PS.el("h3", {}, `Allocated at ${PS.fmtNs(alive.t_ns)} (${what}): ${PS.fmtNum(alive.tensor_count)} tensors`),
      bars.length ? PS.plot([{type: "bar", orientation: "h", x: bars.map(r => r.bytes),
        y: bars.map(r => PS.plotText(r.op_type ?? "(no operator)")), text: bars.map(r => PS.fmtBytes(r.bytes)),
        hovertemplate: "%{y}: %{text}<extra></extra>"}],
        {margin: {l: 220, r: 20, t: 10, b: 40}, xaxis: {...BYTES_AXIS, title: {text: "bytes alive"}}},
        {id: "alive-by-op-chart", height: 60 + 22 * bars.length}) : PS.message("Nothing the trace saw allocated is alive here."),
      alive.tensors.length ? PS.table(alive.tensors, TENSOR_COLUMNS, {id: "alive-tensors"}) : null,
      alive.tensor_count > alive.tensors.length ? PS.message(`The ${alive.tensors.length} largest of ` +
        `${PS.fmtNum(alive.tensor_count)} tensors.`) : null,
    ];
  }

  function curveChart(curve, device, onPoint) {
    const p = curve.points;
    const x = p.t_ns.map(seconds);
    const custom = p.t_ns.map((t, i) => [t, PS.plotText(p.op_type[i] ?? "(no operator)"), p.step[i] ?? "–", p.seq[i]]);
    const hover = "%{y:,} B at %{x:.6f} s<br>event %{customdata[3]}, %{customdata[1]}, step %{customdata[2]}<extra>%{fullData.name}</extra>";
    const peakX = seconds(device.peak_ts_ns);
    return PS.plot([
      {type: "scatter", mode: "lines", name: "allocated", x, y: p.allocated_bytes, customdata: custom, hovertemplate: hover,
       line: {shape: "hv"}},
      {type: "scatter", mode: "lines", name: "reserved", x, y: p.reserved_bytes, customdata: custom, hovertemplate: hover,
       line: {shape: "hv", dash: "dot"}},
      {type: "scatter", mode: "markers+text", name: "peak", x: [peakX], y: [device.peak_allocated_bytes],
       text: ["peak"], textposition: "top center", marker: {size: 10, color: "#b42318"}, hoverinfo: "skip"},
    ], {hovermode: "x", hoverdistance: -1, xaxis: {title: {text: "time since the run started (s)"}}, yaxis: BYTES_AXIS},
    {id: "memory-curve", height: 340, onClick: event => {
      const point = (event.points || []).find(pt => Array.isArray(pt.customdata));
      if (point) onPoint(point.customdata[0], `event ${point.customdata[3]}`);
    }});
  }

  function allocationsTable(ctx, device) {
    return PS.pagedTable(ALLOCATION_COLUMNS, async view => PS.fetchJson(`${ctx.api}/memory/allocations` +
      PS.query({rank: device.rank, device: device.device, offset: (view.page - 1) * view.pageSize, limit: view.pageSize})),
    {id: "memory-allocations", pageSize: PAGE});
  }

  async function deviceView(ctx, memory, device) {
    const breakdown = PS.el("div", {id: "memory-breakdown"});
    const showAt = (tNs, what) => PS.fill(breakdown, () => breakdownAt(ctx, device, tNs, what));
    const view = PS.el("div", {id: "memory-device"});
    await PS.fill(view, async () => {
      const curve = await PS.fetchJson(`${ctx.api}/memory/curve` + PS.query({rank: device.rank, device: device.device}));
      const [allocations] = await Promise.all([allocationsTable(ctx, device), showAt(device.peak_ts_ns, "the peak")]);
      const byOp = memory.by_op.filter(r => r.rank === device.rank && r.device === device.device);
      return [
        PS.el("div", {class: "cards"},
          PS.card("peak allocated", PS.fmtBytes(device.peak_allocated_bytes),
                  `at ${PS.fmtNs(device.peak_ts_ns)}` + (device.step === null ? "" : `, step ${device.step}`)),
          PS.card("operator at the peak", device.op_type ?? "(none)"),
          PS.card("peak reserved", PS.fmtBytes(device.peak_reserved_bytes)),
          PS.card("tracked allocations alive at the peak", PS.fmtBytes(device.alive_tracked_bytes),
                  "less than the peak by what was allocated before the trace began"),
          PS.card("memory events", PS.fmtNum(device.events))),
        curveChart(curve, device, showAt),
        curve.sampled ? PS.message(`${PS.fmtNum(curve.points.seq.length)} of ${PS.fmtNum(curve.events)} events ` +
          "drawn: each stretch keeps its highest and lowest point, so the peak and every swing remain.") : null,
        PS.message("Click the curve to see what is allocated at that point."),
        breakdown,
        PS.section("Allocations per operator type", PS.table(byOp, BY_OP_COLUMNS, {id: "memory-by-op"})),
        PS.section("Allocations", allocations),
      ];
    });
    return view;
  }

  async function memorySection(ctx, memory) {
    if (!memory.devices.length) {
      return PS.section("Memory", PS.message("No memory events in this run: profile with profile_memory=True " +
                                             "to see the allocator's curve, its peak and what is allocated."));
    }
    const holder = PS.el("div");
    const show = async key => {
      const device = memory.devices.find(d => `${d.rank}/${d.device}` === key) || memory.devices[0];
      holder.replaceChildren(await deviceView(ctx, memory, device));
    };
    const options = memory.devices.map(d => [`${d.rank}/${d.device}`, `rank ${d.rank}, ${d.device}`]);
    await show(options[0][0]);
    return PS.section("Memory",
      options.length > 1 ? PS.select("device", options, options[0][0], show, {id: "memory-select"}) : null,
      holder);
  }

  async function render(container, ctx) {
    const [host, memory] = await Promise.all([PS.fetchJson(`${ctx.api}/resources/host`),
                                              PS.fetchJson(`${ctx.api}/memory`)]);
    container.append(PS.el("h1", {}, "Resources"), hostSection(host), await memorySection(ctx, memory));
  }

  PS.pages.resources = {render};
})();
