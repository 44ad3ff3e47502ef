/* The Timeline page: perfsight's canvas timeline (timeline.js) over the run, fed window by window by the
   server. #/run/<id>/timeline/<t0>/<t1> opens at that window (ns from the run's start), as the advice's
   evidence links do; #/run/<id>/timeline/find/<name> opens at the first slice whose name holds <name>, as
   the Compare page's links do; #/run/<id>/timeline/critical/<step> outlines the critical path and opens at
   that step (critical/ alone: every step's path, the view unchanged). */
"use strict";
PS.pages.timeline = {
  async render(container, ctx) {
    const host = PS.el("div", {class: "timeline-host"});
    container.append(host);
    const timeline = new PerfsightTimeline(host, {apiBase: ctx.api});
    await timeline.idle();
    if (ctx.params[0] === "find" && ctx.params[1]) {
      await timeline.find(ctx.params[1]);
      return () => timeline.destroy();
    }
    if (ctx.params[0] === "critical") {
      const step = Number.parseInt(ctx.params[1], 10);
      await timeline.showCriticalPath(true, Number.isFinite(step) ? step : null);
      await timeline.idle();
      return () => timeline.destroy();
    }
    const [t0, t1] = ctx.params.map(Number);
    if (Number.isFinite(t0) && Number.isFinite(t1) && t1 > t0) {
      timeline.setView(t0, t1);
      await timeline.idle();
    }
    return () => timeline.destroy();
  },
};
