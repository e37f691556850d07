/**
 * Request metrics of one model version as the REST answers them (totals since its replicas started).
 */
export interface IVersionTotals {
  requests: number;
  errors: number;
  p50_ms: number | null;
  p99_ms: number | null;
}

/**
 * The figures of the curves and the metric each one draws.
 */
export const CURVE_FIGURES: ReadonlyArray<[string, keyof IVersionTotals]> = [
  ['requests', 'requests'],
  ['errors', 'errors'],
  ['latency p50 (ms)', 'p50_ms'],
  ['latency p99 (ms)', 'p99_ms']
];

/**
 * Curves per version built from polled totals: the REST gives only the current values,
 * so each poll adds one point at its time (seconds since the first poll).
 */
export class RequestCurves {
  constructor(readonly maxPoints = 600) {}

  /**
   * Add the totals of every version seen at `timeMs`; versions not answered get no point.
   */
  add(metrics: Record<string, IVersionTotals>, timeMs: number): void {
    if (this.start === null) {
      this.start = timeMs;
    }
    const x = (timeMs - this.start) / 1000;
    for (const [version, totals] of Object.entries(metrics)) {
      const points = this.points.get(version) ?? [];
      const last = points[points.length - 1];
      if (last && last[0] >= x) {
        continue; // an answer older than one already drawn
      }
      points.push([x, totals]);
      if (points.length > this.maxPoints) {
        points.splice(0, points.length - this.maxPoints);
      }
      this.points.set(version, points);
    }
  }

  /**
   * Figure -> version -> [[seconds, value], ...], for MetricChart; null latencies are gaps left out.
   */
  figures(): Record<string, Record<string, [number, number][]>> {
    const figures: Record<string, Record<string, [number, number][]>> = {};
    for (const [title, key] of CURVE_FIGURES) {
      const series: Record<string, [number, number][]> = {};
      for (const [version, points] of this.points) {
        series[version] = points
          .filter(([, totals]) => typeof totals[key] === 'number')
          .map(([x, totals]) => [x, totals[key] as number]);
      }
      figures[title] = series;
    }
    return figures;
  }

  private start: number | null = null;
  private readonly points = new Map<string, [number, IVersionTotals][]>();
}
