/* The Dynamic shape page (MindSpore Insight's 动态shape迭代分析): operator time per step by type (the
   average per execution) and by instance (the k-th execution of a type in each step; click a point for
   its input shapes), and the input shapes each type saw per step. #/run/<id>/dynamic/<op type>/<view>
   opens with that type's instances. Draws GET <api>/dynamic and <api>/dynamic/instances. */
"use strict";
(() => {
  const DEFAULT_TYPES = 5, DEFAULT_INSTANCES = 5, MAX_INSTANCE_CHOICES = 200;
  const ms = ns => ns / 1e6;
  const typeOptions = types => types.map(t => [t, PS.shorten(t, 90)]);

  function multiSelect(id, options, chosen, onChange) {
    const select = PS.el("select", {id, multiple: true, size: Math.min(8, Math.max(2, options.length)),
                                    onchange: () => onChange([...select.selectedOptions].map(o => o.value))},
      options.map(([value, text]) => PS.el("option", {value, selected: chosen.includes(value), title: value}, text)));
    return select;
  }

  function typeChart(rows, chosen) {
    return PS.plot(chosen.map(type => {
      const mine = rows.filter(r => r.op_type === type);
      return {type: "scatter", mode: "lines+markers", name: PS.plotText(PS.shorten(type, 50)), x: mine.map(r => r.step),
              y: mine.map(r => ms(r.avg_ns)), hovertext: mine.map(r => PS.plotText(`${type}: ${r.count} executions`)),
              hovertemplate: "%{hovertext}<br>step %{x}: %{y:.4f} ms on average<extra></extra>"};
    }), {xaxis: {title: {text: "step"}, dtick: 1}, yaxis: {title: {text: "average time (ms)"}}, legend: {orientation: "h", y: -0.25}},
    {id: "chart-dyn-types", height: 380});
  }

  function instanceChart(rows, point) {
    const instances = [...new Set(rows.map(r => r.instance))];
    return PS.plot(instances.map(k => {
      const mine = rows.filter(r => r.instance === k);
      return {type: "scatter", mode: "lines+markers", name: PS.plotText(PS.shorten(mine[0].instance_name, 50)),
              x: mine.map(r => r.step), y: mine.map(r => ms(r.dur_ns)), customdata: mine.map(r => rows.indexOf(r)),
              hovertemplate: "step %{x}: %{y:.4f} ms<extra>%{fullData.name}</extra>"};
    }), {xaxis: {title: {text: "step"}, dtick: 1}, yaxis: {title: {text: "time (ms)"}}, legend: {orientation: "h", y: -0.25}},
    {id: "chart-dyn-instances", height: 380, onClick: event => point(rows[event.points[0].customdata])});
  }

  function pointDetail(row) {
    return PS.el("p", {}, PS.el("strong", {}, row.instance_name), ` in step ${row.step}: ${PS.fmtNs(row.dur_ns)}, input shapes `,
                 PS.el("code", {}, row.input_shapes ?? "(not recorded)"));
  }

  function shapesTable(rows, dynamicOnly) {
    const shown = dynamicOnly ? rows.filter(r => r.dynamic) : rows;
    if (!shown.length) {
      return PS.message(rows.length ? "No op type changed shapes between steps." : "No input shapes were recorded (record_shapes).");
    }
    return PS.el("div", {class: "scroll"}, PS.table(shown, [
      {key: "op_type", label: "type", format: v => PS.el("span", {title: v}, PS.shorten(v, 90))}, {key: "step", label: "step", cls: "num"},
      {key: "shapes", label: "input shapes", format: v => v.join("; ")}, {key: "shape_count", label: "distinct", cls: "num"},
      {key: "dynamic", label: "changes between steps", format: v => v ? "yes" : "no"}], {id: "dyn-shapes"}));
  }

  async function rankPart(ctx, data, rank, initialType) {
    const view = data.view;
    const timeRows = data.time_by_step.filter(r => r.rank === rank);
    const inSteps = new Set(timeRows.map(r => r.op_type));
    const types = [...new Set(data.types.filter(r => r.rank === rank).map(r => r.op_type))].filter(t => inSteps.has(t));
    if (!timeRows.length) return PS.message("No executions inside steps: per-step analysis needs ProfilerStep ranges.");

    const typeHolder = PS.el("div", {id: "dyn-types-chart"});
    const drawTypes = chosen => PS.fill(typeHolder, () => chosen.length ? typeChart(timeRows, chosen) : PS.message("Pick op types."));
    const typeSelect = multiSelect("dyn-types", typeOptions(types), types.slice(0, DEFAULT_TYPES), drawTypes);

    const instanceHolder = PS.el("div", {id: "dyn-instances-chart"});
    const point = PS.el("div", {id: "dyn-point"}, PS.message("Click a point to see the instance's input shapes in that step."));
    const instancePicker = PS.el("span");
    let opType = initialType && types.includes(initialType) ? initialType : types[0];
    const drawInstances = chosen => PS.fill(instanceHolder, async () => {
      const query = PS.query({view, op_type: opType, instances: chosen.join(",")});
      const rows = (await PS.fetchJson(`${ctx.api}/dynamic/instances${query}`)).rows.filter(r => r.rank === rank);
      point.replaceChildren(PS.message("Click a point to see the instance's input shapes in that step."));
      return rows.length ? instanceChart(rows, row => point.replaceChildren(pointDetail(row))) : PS.message("No executions.");
    });
    const pickType = (type, initial) => {
      opType = type;
      if (!initial) PS.replaceHash(PS.runHash(ctx.runId, "dynamic", type, view));
      const count = Math.max(...timeRows.filter(r => r.op_type === type).map(r => r.count));
      const ordinals = [...Array(Math.min(count, MAX_INSTANCE_CHOICES)).keys()].map(String);
      const chosen = ordinals.slice(0, DEFAULT_INSTANCES);
      instancePicker.replaceChildren(PS.el("label", {class: "picker"}, `instances (${count} per step at most) `,
        multiSelect("dyn-instances", ordinals.map(k => [k, `${PS.shorten(type, 40)}#${k}`]), chosen, drawInstances)));
      return drawInstances(chosen);
    };

    let dynamicOnly = false;
    const shapesHolder = PS.el("div", {id: "dyn-shapes-holder"});
    const shapes = data.shapes.filter(r => r.rank === rank);
    const drawShapes = () => PS.fill(shapesHolder, () => shapesTable(shapes, dynamicOnly));
    const onlyBox = PS.el("input", {type: "checkbox", id: "dyn-only", onchange: () => { dynamicOnly = onlyBox.checked; drawShapes(); }});

    await Promise.all([drawTypes(types.slice(0, DEFAULT_TYPES)), pickType(opType, true), drawShapes()]);
    return [
      PS.section("Time per step by op type (average per execution)",
                 PS.el("label", {class: "picker"}, "op types ", typeSelect), typeHolder),
      PS.section("Time per step by instance",
        PS.select("op type", typeOptions(types), opType, pickType, {id: "dyn-op"}), instancePicker, instanceHolder, point),
      PS.section("Input shapes per step", PS.el("label", {class: "picker"}, onlyBox, " only op types whose shapes change"), shapesHolder),
    ];
  }

  PS.pages.dynamic = {
    async render(container, ctx) {
      const [opType, wantedView] = ctx.params;
      const data = await PS.fetchJson(`${ctx.api}/dynamic${PS.query({view: wantedView || null})}`);
      container.append(...[PS.el("h1", {}, "Dynamic shape"), PS.pages.operators.viewPicker(ctx, data, "dynamic", "dyn-view"),
                       await PS.perRank(ctx, rank => rankPart(ctx, data, rank, opType || null))].filter(Boolean));
    },
  };
})();
