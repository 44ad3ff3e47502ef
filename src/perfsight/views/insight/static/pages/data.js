/* The Data preparation page (MindSpore Insight's 数据准备性能分析): per rank, the input-bound verdict with
   its reason and suggestions, each step's data wait against its step time, and the input queues' sizes
   over time with their summary. Draws GET <api>/data (api_resources.py). */
"use strict";

(() => {
  const VERDICT_TEXT = {highly: "highly input-bound", moderately: "moderately input-bound",
                        not: "not input-bound", unknown: "unknown: nothing recorded"};

  function verdictBlock(v, multiRank) {
    const cards = PS.el("div", {class: "cards"},
      PS.card("verdict", VERDICT_TEXT[v.verdict] || v.verdict),
      PS.card("data wait, share of step time", PS.fmtPct(v.wait_percent), `over ${v.steps} steps`),
      PS.card(`steps waiting ≥ ${v.moderately_threshold_percent}%`, `${v.bottleneck_steps} of ${v.steps}`,
              v.max_step_wait_percent === null ? null : `worst step ${PS.fmtPct(v.max_step_wait_percent)}`),
      v.data_queue_empty_percent === null ? null : PS.card("data queue empty", PS.fmtPct(v.data_queue_empty_percent)),
      v.host_queue_empty_percent === null ? null : PS.card("host queue empty", PS.fmtPct(v.host_queue_empty_percent)));
    return PS.el("div", {class: `verdict verdict-${v.verdict}`, dataset: {rank: v.rank}},
      multiRank ? PS.el("h3", {}, `Rank ${v.rank}`) : null, cards,
      PS.el("p", {}, PS.el("strong", {}, "Why: "), v.reason),
      PS.el("p", {}, PS.el("strong", {}, "Suggestions: "), v.suggestions),
      PS.message(`Thresholds: highly input-bound at ≥ ${v.highly_threshold_percent}% of step time (or of ` +
                 `queue samples empty), moderately at ≥ ${v.moderately_threshold_percent}%.`));
  }

  function stepsChart(steps, multiRank) {
    const ranks = [...new Set(steps.map(s => s.rank))];
    const traces = [];
    for (const rank of ranks) {
      const mine = steps.filter(s => s.rank === rank);
      const suffix = multiRank ? ` (rank ${rank})` : "";
      traces.push({type: "bar", name: "data wait" + suffix, x: mine.map(s => s.step),
                   y: mine.map(s => s.data_wait_ns / 1e6), hovertemplate: "step %{x}: %{y:.3f} ms<extra></extra>"});
      traces.push({type: "scatter", mode: "lines+markers", name: "step time" + suffix, x: mine.map(s => s.step),
                   y: mine.map(s => s.step_ns / 1e6), hovertemplate: "step %{x}: %{y:.3f} ms<extra></extra>"});
    }
    return PS.plot(traces, {barmode: "group", xaxis: {title: {text: "step"}, type: "category"},
                            yaxis: {title: {text: "ms"}}}, {id: "data-wait-chart"});
  }

  const STEP_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "step", label: "step", cls: "num"},
    {key: "step_ns", label: "step time", format: PS.fmtNs, cls: "num"},
    {key: "data_wait_ns", label: "data wait", format: PS.fmtNs, cls: "num"},
    {key: "wait_percent", label: "share", format: PS.fmtPct, cls: "num"},
    {key: "dataloader_count", label: "loader calls", cls: "num"},
    {key: "source", label: "measured from"},
  ];

  const QUEUE_COLUMNS = [
    {key: "rank", label: "rank", cls: "num"},
    {key: "series", label: "series"},
    {key: "queue", label: "queue"},
    {key: "samples", label: "samples", cls: "num"},
    {key: "mean", label: "mean size", format: v => v === null ? "–" : v.toFixed(2), cls: "num"},
    {key: "min", label: "min", cls: "num"},
    {key: "max", label: "max", cls: "num"},
    {key: "empty_percent", label: "empty", format: PS.fmtPct, cls: "num"},
  ];

  function queuesSection(body) {
    if (!body.queues.length) {
      return PS.section("Queues", PS.message("No input-queue series were recorded. PyTorch's DataLoader does " +
        "not expose its queues; sources that do (counter series named *queue*) are drawn here."));
    }
    const traces = body.queues.map(q => ({
      type: "scatter", mode: "lines", line: {shape: "hv"}, name: PS.plotText(`${q.series} (rank ${q.rank}, ${q.queue})`),
      x: q.t_ns.map(t => t / 1e9), y: q.value}));
    return PS.section("Queues",
      PS.message("A data queue at 0 means the device waited for input; a host queue at 0 means the data " +
                 "pipeline is slower than sending; a full host queue with an empty data queue points at sending."),
      PS.plot(traces, {xaxis: {title: {text: "time since the run started (s)"}}, yaxis: {title: {text: "size"}}},
              {id: "queue-chart"}),
      PS.table(body.queue_summary, QUEUE_COLUMNS, {id: "queue-summary"}));
  }

  async function render(container, ctx) {
    const body = await PS.fetchJson(`${ctx.api}/data`);
    const multiRank = new Set(body.verdict.map(v => v.rank)).size > 1;
    container.append(PS.el("h1", {}, "Data preparation"));
    if (!body.verdict.length) {
      container.append(PS.message("No steps and no input queues were recorded in this run: profile with steps " +
                                  "(prof.step()) and a DataLoader to see how long each step waits for its input."));
      return;
    }
    container.append(PS.section("Verdict", ...body.verdict.map(v => verdictBlock(v, multiRank))));
    if (body.steps.length) {
      container.append(PS.section("Data wait per step", stepsChart(body.steps, multiRank),
                                  PS.table(body.steps, STEP_COLUMNS, {id: "data-steps"})));
    }
    container.append(queuesSection(body));
  }

  PS.pages.data = {render};
})();
