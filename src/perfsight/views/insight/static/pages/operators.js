/* The Operators page (MindSpore Insight's 算子性能分析): time by operator type (pie or bar of the top 20,
   and the statistics of every type), every execution in a server-paged table (fuzzy search on name and
   type, sort on any column; click a row for its call stack), a type's executions and their grouping by
   input shape when a type is clicked. #/run/<id>/operators/<op type>/<view> opens with that type selected
   in that view (device tasks or host operators). Draws GET <api>/operators[/instances|/shapes|/stack]. */
"use strict";
(() => {
  const VIEW_LABELS = {device: "device tasks", host: "host operators"};
  const ms = ns => ns / 1e6;

  /* a chart of type_shares rows (the top types and "other"): a pie, or a bar of self time; onPick(op_type)
     when a type (not "other") is clicked. Shared with the overview. */
  function typeChart(rows, kind, {id, height = 360, onPick} = {}) {
    const label = (r, i) => r.op_type === null ? `other (${r.types} types)` : `${i + 1}. ${PS.shorten(r.op_type, 40)}`;
    const labels = rows.map((r, i) => PS.plotText(label(r, i)));
    const full = rows.map(r => PS.plotText(r.op_type ?? `${r.types} other types`));
    const onClick = onPick ? event => {
      const row = rows[event.points[0].pointNumber];
      if (row && row.op_type !== null) onPick(row.op_type);
    } : undefined;
    if (kind === "bar") {
      return PS.plot([{type: "bar", orientation: "h", y: labels, x: rows.map(r => ms(r.self_ns)), hovertext: full,
                       customdata: rows.map(r => r.share_percent),
                       hovertemplate: "%{hovertext}<br>%{x:.3f} ms self time (%{customdata:.1f}%)<extra></extra>"}],
        {yaxis: {autorange: "reversed", automargin: true}, xaxis: {title: {text: "self time (ms)"}}, margin: {l: 20, r: 20, t: 20, b: 50}},
        {id, height: Math.max(height, 24 * rows.length + 80), onClick});
    }
    return PS.plot([{type: "pie", sort: false, labels, values: rows.map(r => r.self_ns), textinfo: "percent",
                     textposition: "inside", hovertext: full,
                     hovertemplate: "%{hovertext}<br>%{value:,} ns self time<extra></extra>"}],
      {...PS.pieLayout(), margin: {l: 20, r: 20, t: 20, b: 20}}, {id, height, onClick});
  }

  const name = v => v === null || v === undefined ? "–" : PS.el("span", {title: v}, PS.shorten(v, 100));

  function instanceColumns(view) {
    return [
      {key: "name", label: "name", sort: "name", format: name},
      {key: "op_type", label: "type", sort: "op_type", format: name},
      view === "device" ? {key: "task_type", label: "task type", sort: "task_type"} : null,
      {key: "step", label: "step", sort: "step", cls: "num"},
      {key: "start_ns", label: "starts at", sort: "start_ns", format: PS.fmtNs, cls: "num"},
      {key: "dur_ns", label: "duration", sort: "dur_ns", format: PS.fmtNs, cls: "num"},
      {key: "self_ns", label: "self", sort: "self_ns", format: PS.fmtNs, cls: "num"},
      {key: "wait_ns", label: "wait before", sort: "wait_ns", format: PS.fmtNs, cls: "num"},
      {key: "input_shapes", label: "input shapes", sort: "input_shapes"},
      view === "device" ? {key: "launch_op", label: "launched by", sort: "launch_op", format: name}
                        : {key: "track", label: "thread", sort: "track"},
    ].filter(Boolean);
  }

  const TYPE_COLUMNS = [
    {key: "op_type", label: "type", format: name}, {key: "task_type", label: "task type"},
    {key: "count", label: "count", format: PS.fmtNum, cls: "num"}, {key: "total_ns", label: "total", format: PS.fmtNs, cls: "num"},
    {key: "self_ns", label: "self", format: PS.fmtNs, cls: "num"}, {key: "avg_ns", label: "average", format: PS.fmtNs, cls: "num"},
    {key: "min_ns", label: "min", format: PS.fmtNs, cls: "num"}, {key: "max_ns", label: "max", format: PS.fmtNs, cls: "num"},
    {key: "ratio", label: "share of total", format: PS.fmtPct, cls: "num"}];

  const SHAPE_COLUMNS = [
    {key: "input_shapes", label: "input shapes", format: v => v ?? "(not recorded)"}, {key: "task_type", label: "task type"},
    {key: "count", label: "count", format: PS.fmtNum, cls: "num"}, {key: "total_ns", label: "total", format: PS.fmtNs, cls: "num"},
    {key: "avg_ns", label: "average", format: PS.fmtNs, cls: "num"}, {key: "min_ns", label: "min", format: PS.fmtNs, cls: "num"},
    {key: "max_ns", label: "max", format: PS.fmtNs, cls: "num"}, {key: "ratio", label: "share of total", format: PS.fmtPct, cls: "num"}];

  const STACK_COLUMNS = [
    {key: "level", label: "#", cls: "num"}, {key: "kind", label: "kind"}, {key: "name", label: "name"},
    {key: "track", label: "track"}, {key: "start_ns", label: "starts at", format: PS.fmtNs, cls: "num"},
    {key: "dur_ns", label: "duration", format: PS.fmtNs, cls: "num"}];

  async function rankPart(ctx, data, rank, initialType) {
    const view = data.view;
    const state = {opType: initialType || null, search: ""};
    const shares = data.shares.filter(r => r.rank === rank);
    const types = data.types.filter(r => r.rank === rank);

    const chartHolder = PS.el("div", {id: "op-chart"});
    let chartKind = "pie";
    const drawChart = () => PS.fill(chartHolder, () => shares.length
      ? typeChart(shares, chartKind, {id: "chart-op-types", onPick: type => selectType(type)})
      : PS.message("No operators recorded."));
    const chartPicker = PS.select("chart", [["pie", "pie"], ["bar", "bar"]], chartKind,
                                  kind => { chartKind = kind; drawChart(); }, {id: "op-chart-kind"});

    const typeFilter = PS.el("span", {id: "op-type-filter"});
    const shapes = PS.el("div", {id: "op-shapes-holder"});
    const stack = PS.el("div", {id: "op-stack"}, PS.message("Click an execution to see its call stack."));
    const instances = await PS.pagedTable(instanceColumns(view), async v => {
      const query = PS.query({view, rank, op_type: state.opType, search: state.search || null, sort: v.sort, order: v.order,
                              page: v.page, page_size: v.pageSize});
      return PS.fetchJson(`${ctx.api}/operators/instances${query}`);
    }, {id: "op-instances", sort: "dur_ns", pageSize: 20, onRowClick: row => showStack(row)});

    function showStack(row) {
      return PS.fill(stack, async () => {
        const data = await PS.fetchJson(`${ctx.api}/operators/stack/${row.id}`);
        return [PS.el("h3", {}, "Call stack of ", PS.el("span", {title: row.name}, PS.shorten(row.name, 100))),
                data.frames.length > 1 ? null : PS.message("Nothing encloses it: record with with_stack for Python frames."),
                PS.table(data.frames, STACK_COLUMNS, {id: "op-stack-table"})];
      });
    }

    function drawTypeFilter() {
      typeFilter.replaceChildren(...(state.opType === null ? [] : [
        "type ", PS.el("strong", {title: state.opType}, PS.shorten(state.opType, 80)), " ",
        PS.el("button", {id: "op-type-clear", onclick: () => selectType(null)}, "show all types")]));
    }

    function drawShapes() {
      if (state.opType === null) {
        shapes.replaceChildren(PS.message("Click a type to group its executions by input shape."));
        shapes.dataset.state = "ready";
        return Promise.resolve();
      }
      return PS.fill(shapes, async () => {
        const data = await PS.fetchJson(`${ctx.api}/operators/shapes${PS.query({view, op_type: state.opType})}`);
        return PS.table(data.rows.filter(r => r.rank === rank), SHAPE_COLUMNS, {id: "op-shapes"});
      });
    }

    function selectType(type) {
      state.opType = type;
      PS.replaceHash(PS.runHash(ctx.runId, "operators", type, view));
      drawTypeFilter();
      instances.pending();
      return Promise.all([instances.reload(), drawShapes()]);
    }

    let typing = null;
    const search = PS.el("input", {type: "search", id: "op-search", placeholder: "search name or type (fuzzy)",
      oninput: () => {
        instances.pending();
        clearTimeout(typing);
        typing = setTimeout(() => { state.search = search.value.trim(); instances.reload(); }, 250);
      }});

    drawTypeFilter();
    await Promise.all([drawChart(), drawShapes()]);
    return [
      PS.section("Operator types", chartPicker, chartHolder,
                 PS.el("div", {class: "scroll"},
                       PS.table(types, TYPE_COLUMNS, {id: "op-types", onRowClick: row => selectType(row.op_type)}))),
      PS.section("Executions", PS.el("div", {class: "filters"}, search, " ", typeFilter), instances, stack),
      PS.section("By input shape", shapes),
    ];
  }

  /* the device tasks / host operators picker of the operator pages (none when the run has one view):
     picking re-opens `page` in that view */
  function viewPicker(ctx, data, page, id) {
    return data.views.length < 2 ? null : PS.select("show", data.views.map(v => [v, VIEW_LABELS[v] || v]), data.view,
                                                   v => { location.hash = PS.runHash(ctx.runId, page, "", v); }, {id});
  }

  PS.pages.operators = {
    typeChart,
    viewPicker,
    async render(container, ctx) {
      const [opType, wantedView] = ctx.params;
      const data = await PS.fetchJson(`${ctx.api}/operators${PS.query({view: wantedView || null})}`);
      container.append(...[PS.el("h1", {}, "Operators"), viewPicker(ctx, data, "operators", "op-view"),
                       await PS.perRank(ctx, rank => rankPart(ctx, data, rank, opType || null))].filter(Boolean));
    },
  };
})();
