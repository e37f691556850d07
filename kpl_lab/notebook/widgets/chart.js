// The front end of kpl_lab.notebook.widgets.chart.MetricChart: one uPlot chart, extended in place.
// Python serves this file after uPlot's own script, in one module, so `uPlot` is declared above.

// Tableau 10: distinguishable colours that read on light and dark themes
const COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const DEFAULT_WIDTH = 560;

// canvas strokes cannot read CSS variables: resolve JupyterLab's theme colours once per chart
function themeColour(el, name, fallback) {
  return getComputedStyle(el).getPropertyValue(name).trim() || fallback;
}

function options(model, el, width) {
  const ink = themeColour(el, "--jp-ui-font-color1", "#222");
  const grid = { stroke: themeColour(el, "--jp-border-color2", "#e0e0e0"), width: 1 };
  const axis = { stroke: ink, grid, ticks: grid };
  return {
    title: model.get("title"),
    width,
    height: model.get("height"),
    scales: { x: { time: false } },
    axes: [{ ...axis, label: model.get("x_label") }, axis],
    series: [
      { label: model.get("x_label") },
      ...model.get("series").map((name, i) => ({
        label: name,
        stroke: COLOURS[i % COLOURS.length],
        width: 1.5,
        spanGaps: true, // series logged at different steps leave gaps in the shared x column
      })),
    ],
  };
}

export default {
  initialize({ model }) {
    // once per model, before any view redraws: new rows extend the shared columns in place
    model.on("msg:custom", (message) => {
      if (message.type !== "append") return;
      const columns = model.get("data");
      for (const row of message.rows) row.forEach((value, i) => columns[i].push(value));
    });
  },

  render({ model, el }) {
    el.classList.add("kpl-metric-chart");
    let plot = null;
    const width = () => el.clientWidth || DEFAULT_WIDTH;
    const draw = () => {
      plot?.destroy();
      plot = new uPlot(options(model, el, width()), model.get("data"), el);
    };
    const extend = () => plot.setData(model.get("data"));
    const reset = () => (model.get("data").length === plot.series.length ? extend() : draw());
    const resize = new ResizeObserver(() => plot.setSize({ width: width(), height: model.get("height") }));
    const redrawn = ["change:series", "change:title", "change:x_label", "change:height"];

    draw();
    model.on("msg:custom", extend);
    model.on("change:data", reset);
    for (const event of redrawn) model.on(event, draw);
    resize.observe(el);
    return () => {
      resize.disconnect();
      model.off("msg:custom", extend);
      model.off("change:data", reset);
      for (const event of redrawn) model.off(event, draw);
      plot.destroy();
    };
  },
};
