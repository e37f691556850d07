import React, { useEffect, useRef } from 'react';
import uPlot from 'uplot';

import { palette } from './format';

const CHART_HEIGHT = 220;

/**
 * A figure's series as uPlot data: one x column shared by every series.
 */
export function chartData(series: Record<string, [number, number][]>): {
  names: string[];
  data: uPlot.AlignedData;
} {
  const names = Object.keys(series).filter(name => series[name].length > 0);
  const data = uPlot.join(
    names.map(
      name =>
        [
          series[name].map(point => point[0]),
          series[name].map(point => point[1])
        ] as uPlot.AlignedData
    )
  );
  return { names, data };
}

/**
 * Tick steps of an axis whose values are whole numbers (epochs, trials): never 1.1, 1.2.
 */
export const WHOLE_STEPS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000
];

/**
 * Whether every x of the data is a whole number.
 */
export function wholeX(data: uPlot.AlignedData): boolean {
  return data[0].length > 0 && data[0].every(x => Number.isInteger(x));
}

/**
 * The y axis title: the figure's one series name (`train_loss`), else its title (`accuracy`
 * for `train_accuracy` and `eval_accuracy`, which the legend names).
 */
export function yTitle(title: string, yNames: ReadonlyArray<string>): string {
  const names = yNames.filter(name => name);
  return names.length === 1 ? names[0] : title;
}

/**
 * Tick labels with the decimals the step between ticks needs: uPlot's own keep three, and
 * ticks 0.0005 apart read 0.998, 0.998, 0.998.
 */
export function tickLabels(
  splits: ReadonlyArray<number | null>,
  step: number
): string[] {
  let decimals = 0;
  while (
    decimals < 12 &&
    Math.abs(Number(step.toFixed(decimals)) - step) > Math.abs(step) * 1e-6
  ) {
    decimals++;
  }
  return splits.map(value =>
    value === null || value === undefined ? '' : value.toFixed(decimals)
  );
}

/**
 * A uPlot axis in the theme's colors (a canvas cannot read CSS variables), with its title.
 */
function axis(label: string, whole = false, vertical = false): uPlot.Axis {
  const style = getComputedStyle(document.body);
  const color = (name: string, fallback: string) =>
    style.getPropertyValue(name).trim() || fallback;
  return {
    label,
    labelSize: 20,
    stroke: color('--jp-ui-font-color1', '#333'),
    grid: { stroke: color('--jp-border-color2', '#e0e0e0'), width: 1 },
    ticks: { stroke: color('--jp-border-color1', '#bdbdbd'), width: 1 },
    values: (_plot, splits, _axis, _space, step) => tickLabels(splits, step),
    ...(whole ? { incrs: WHOLE_STEPS } : {}),
    ...(vertical ? { size: fitLabels } : {})
  };
}

/**
 * A y axis as wide as its longest tick label (uPlot's fixed 50 px put long labels under the title).
 */
function fitLabels(
  plot: uPlot,
  values: string[],
  index: number,
  cycle: number
): number {
  const axis = plot.axes[index] as uPlot.Axis & { _size?: number };
  if (cycle > 1 && axis._size) {
    return axis._size; // uPlot measures again until the sizes settle: keep the first
  }
  const longest = (values ?? []).reduce(
    (a, b) => (b.length > a.length ? b : a),
    ''
  );
  plot.ctx.font = (axis.font as unknown as string[] | undefined)?.[0] ?? '';
  const width = longest
    ? plot.ctx.measureText(longest).width / devicePixelRatio
    : 0;
  return Math.ceil(width + (axis.ticks?.size ?? 10) + (axis.gap ?? 5) + 8);
}

/**
 * A line chart of one figure: created once per set of series, then only given new data.
 */
export function MetricChart(props: {
  title: string;
  series: Record<string, [number, number][]>;
  xName: string;
  /** the y axis title (default: the chart's title) */
  yName?: string;
  width: number;
  /** series drawn as dots, not lines (one value per x, e.g. per trial) */
  dots?: string[];
  /** series drawn as steps (a running best holds its value until the next improves on it) */
  steps?: string[];
  /** x ticks on whole numbers only (trial numbers); otherwise so when every x is whole */
  integerX?: boolean;
}): JSX.Element {
  const box = useRef<HTMLDivElement>(null);
  const chart = useRef<{ key: string; plot: uPlot } | null>(null);
  const { names, data } = chartData(props.series);
  const whole = props.integerX || wholeX(data);
  // a new chart when the series or the x axis's kind of ticks change
  const key = names.join('\u0000') + (whole ? '\u0000whole' : '');
  useEffect(() => {
    if (chart.current && chart.current.key === key) {
      chart.current.plot.setData(data);
      return;
    }
    chart.current?.plot.destroy();
    chart.current = {
      key,
      plot: new uPlot(
        {
          width: props.width,
          height: CHART_HEIGHT,
          scales: { x: { time: false } },
          legend: { live: true },
          cursor: { drag: { x: true, y: false } },
          series: [
            { label: props.xName },
            ...names.map((name, i) =>
              props.dots?.includes(name)
                ? {
                    label: name,
                    stroke: palette(i),
                    paths: () => null,
                    points: { show: true, size: 7, fill: palette(i) }
                  }
                : {
                    label: name,
                    stroke: palette(i),
                    width: 1.5,
                    spanGaps: true,
                    points: { show: false },
                    ...(props.steps?.includes(name)
                      ? { paths: uPlot.paths.stepped?.({ align: 1 }) }
                      : {})
                  }
            )
          ],
          axes: [
            axis(props.xName, whole),
            axis(props.yName ?? props.title, false, true)
          ]
        },
        data,
        box.current!
      )
    };
  }, [props.series]);
  useEffect(() => {
    chart.current?.plot.setSize({ width: props.width, height: CHART_HEIGHT });
  }, [props.width]);
  useEffect(() => () => chart.current?.plot.destroy(), []);
  return (
    <div
      className="kpl-chart"
      data-figure={props.title}
      data-points={data[0].length}
    >
      <h3>{props.title}</h3>
      <div ref={box} />
    </div>
  );
}
