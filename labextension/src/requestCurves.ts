/**
 * One interval of one model version's requests as the REST metrics history answers it.
 */
export interface IMetricsPoint {
  time: string;
  requests: number;
  errors: number;
  p50_ms: number | null;
  p99_ms: number | null;
}

/**
 * The figures of the curves and the metric each one draws.
 */
export const CURVE_FIGURES: ReadonlyArray<
  [string, 'requests' | 'errors' | 'p50_ms' | 'p99_ms']
> = [
  ['requests', 'requests'],
  ['errors', 'errors'],
  ['latency p50 (ms)', 'p50_ms'],
  ['latency p99 (ms)', 'p99_ms']
];

/**
 * Figure -> version -> [[minutes before now, value], ...] from the history's series, for MetricChart.
 *
 * Counts of intervals without requests are zeros between the first and the last interval a
 * version had (the REST leaves them out); a latency there is a gap, not a zero.
 */
export function historyFigures(
  series: Record<string, IMetricsPoint[]>,
  intervalSeconds: number,
  nowMs: number
): Record<string, Record<string, [number, number][]>> {
  const figures: Record<string, Record<string, [number, number][]>> = {};
  for (const [title] of CURVE_FIGURES) {
    figures[title] = {};
  }
  const minutes = (ms: number) => Math.round((ms - nowMs) / 600) / 100;
  for (const [version, points] of Object.entries(series)) {
    const byTime = new Map(points.map(p => [Date.parse(p.time), p]));
    const times = [...byTime.keys()].sort((a, b) => a - b);
    if (times.length === 0) {
      continue;
    }
    for (const [title, key] of CURVE_FIGURES) {
      const drawn: [number, number][] = [];
      const latency = key === 'p50_ms' || key === 'p99_ms';
      for (
        let t = times[0];
        t <= times[times.length - 1];
        t += intervalSeconds * 1000
      ) {
        const point = byTime.get(t);
        const value = point ? point[key] : latency ? null : 0;
        if (typeof value === 'number') {
          drawn.push([minutes(t), value]);
        }
      }
      figures[title][version] = drawn;
    }
  }
  return figures;
}
