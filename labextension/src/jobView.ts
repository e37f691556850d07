import { showErrorMessage } from '@jupyterlab/apputils';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import uPlot from 'uplot';

import { ENDED_STATES, IFigure, IJob, IMetrics, JobsAPI } from './api';
import { formatSeconds, formatTime, h, palette } from './dom';
import { progressBar, stateBadge } from './jobs';

/**
 * Text kept in the log view; older output is cut (it stays on the server).
 */
const MAX_LOG_CHARS = 2_000_000;

/**
 * The series of a figure in a metrics answer, keyed as the server keys them.
 */
export function figureSeries(
  metrics: IMetrics,
  title: string,
  figure: IFigure
): { name: string; points: [number, number][] }[] {
  const names = [figure.y1_name, figure.y2_name].filter((n): n is string => !!n);
  return names
    .map(name => ({
      name,
      points: metrics.series[`${title}/${name}`] ?? metrics.series[name] ?? []
    }))
    .filter(series => series.points.length > 0);
}

/**
 * A uPlot axis in the theme's colors (a canvas cannot read CSS variables).
 */
function axis(): uPlot.Axis {
  const style = getComputedStyle(document.body);
  const color = (name: string, fallback: string) =>
    style.getPropertyValue(name).trim() || fallback;
  return {
    stroke: color('--jp-ui-font-color1', '#333'),
    grid: { stroke: color('--jp-border-color2', '#e0e0e0'), width: 1 },
    ticks: { stroke: color('--jp-border-color1', '#bdbdbd'), width: 1 }
  };
}

/**
 * Line charts of a job's metric figures, one uPlot per figure.
 */
class MetricCharts {
  readonly node = h('div', { class: 'kpl-charts' });

  /**
   * Draw the metrics; charts are created once and then only get new data.
   */
  update(metrics: IMetrics): void {
    for (const [title, figure] of Object.entries(metrics.figures ?? {})) {
      const series = figureSeries(metrics, title, figure);
      if (series.length === 0) {
        continue;
      }
      const data = uPlot.join(
        series.map(s => [s.points.map(p => p[0]), s.points.map(p => p[1])] as uPlot.AlignedData)
      );
      const key = `${title}\u0000${series.map(s => s.name).join('\u0000')}`;
      let chart = this._charts.get(title);
      if (chart && chart.key !== key) {
        chart.plot.destroy();
        chart.box.remove();
        chart = undefined;
      }
      if (!chart) {
        const box = h('div', { class: 'kpl-chart', 'data-figure': title }, h('h3', {}, title));
        this.node.append(box);
        const plot = new uPlot(
          {
            width: this.width(),
            height: 220,
            scales: { x: { time: false } },
            legend: { live: true },
            cursor: { drag: { x: true, y: false } },
            series: [
              { label: figure.x_name || 'x' },
              ...series.map((s, i) => ({
                label: s.name,
                stroke: palette(i),
                width: 1.5,
                spanGaps: true,
                points: { show: false }
              }))
            ],
            axes: [axis(), axis()]
          },
          data,
          box
        );
        chart = { key, box, plot };
        this._charts.set(title, chart);
      } else {
        chart.plot.setData(data);
      }
      chart.box.dataset.points = String(data[0].length);
    }
  }

  resize(): void {
    for (const chart of this._charts.values()) {
      chart.plot.setSize({ width: this.width(), height: 220 });
    }
  }

  dispose(): void {
    for (const chart of this._charts.values()) {
      chart.plot.destroy();
    }
    this._charts.clear();
  }

  private width(): number {
    return Math.max(300, Math.min(900, (this.node.clientWidth || 640) - 8));
  }

  private _charts = new Map<string, { key: string; box: HTMLElement; plot: uPlot }>();
}

/**
 * The main-area view of one job: state, progress, resources, curves and live logs.
 */
export class JobView extends Widget {
  constructor(
    readonly jobId: string,
    private intervalSeconds: number,
    private readonly openJob: (id: string) => void
  ) {
    super();
    this.id = `kpl-job-${jobId}`;
    this.addClass('kpl-JobView');
    this.title.label = `Job ${jobId}`;
    this.title.closable = true;

    this._stop = h('button', { class: 'jp-mod-styled jp-mod-warn kpl-stop', type: 'button' }, 'Stop');
    this._rerun = h('button', { class: 'jp-mod-styled kpl-rerun', type: 'button' }, 'Re-run');
    this._stop.addEventListener('click', () => void this.stop());
    this._rerun.addEventListener('click', () => void this.rerun());
    this._follow = h('input', { type: 'checkbox', class: 'kpl-follow', checked: true });
    this._header = h('div', { class: 'kpl-job-header' });
    this._progress = h('div', { class: 'kpl-job-progress' });
    this._details = h('table', { class: 'kpl-fields kpl-job-details' });
    this._log = h('pre', { class: 'kpl-log', tabindex: 0 });
    this.node.append(
      this._header,
      h('div', { class: 'kpl-toolbar' }, this._stop, this._rerun),
      this._progress,
      this._charts.node,
      h(
        'section',
        { class: 'kpl-log-section' },
        h('div', { class: 'kpl-item-title' }, h('h3', {}, 'Log'), h('label', {}, this._follow, ' follow')),
        this._log
      ),
      h('details', { class: 'kpl-job-more', open: true }, h('summary', {}, 'Resources and details'), this._details)
    );
    void this.poll();
    void this.followLogs();
  }

  /**
   * The job as last fetched.
   */
  get job(): IJob | null {
    return this._job;
  }

  set interval(seconds: number) {
    this.intervalSeconds = seconds;
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    window.clearTimeout(this._timer);
    this._charts.dispose();
    super.dispose();
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    this._charts.resize();
  }

  protected onAfterShow(msg: Message): void {
    this._charts.resize();
  }

  private ended(): boolean {
    return !!this._job && ENDED_STATES.includes(this._job.state);
  }

  /**
   * Fetch the job and its curves until it has ended, then once more.
   */
  private async poll(): Promise<void> {
    if (this.isDisposed) {
      return;
    }
    const wasEnded = this.ended();
    try {
      const [job, metrics] = await Promise.all([
        JobsAPI.get(this.jobId),
        JobsAPI.metrics(this.jobId, this.maxPoints())
      ]);
      if (this.isDisposed) {
        return;
      }
      this._job = job;
      this.renderJob(job);
      this._charts.update(metrics);
    } catch (error) {
      this._header.replaceChildren(h('div', { class: 'kpl-error' }, (error as Error).message));
    }
    if (!(wasEnded && this.ended())) {
      this._timer = window.setTimeout(() => void this.poll(), Math.max(0.5, this.intervalSeconds || 2) * 1000);
    }
  }

  /**
   * Points a chart can show: about two per pixel of its width.
   */
  private maxPoints(): number {
    return Math.max(200, Math.min(10000, 2 * (this.node.clientWidth || 1000)));
  }

  private renderJob(job: IJob): void {
    this.title.label = `Job ${job.id} (${job.state})`;
    this._header.replaceChildren(
      h(
        'h2',
        {},
        `${job.algorithm} · ${job.function} `,
        stateBadge(job.state)
      ),
      h(
        'div',
        { class: 'kpl-meta' },
        `job ${job.id} · created ${formatTime(job.created)}` +
          (job.finished ? ` · finished ${formatTime(job.finished)}` : '') +
          (job.exit_code !== null ? ` · exit code ${job.exit_code}` : '')
      ),
      job.reason ? h('div', { class: 'kpl-error kpl-reason' }, job.reason) : ''
    );
    this._progress.replaceChildren(progressBar(job));
    this._stop.disabled = ENDED_STATES.includes(job.state);
    const rows: [string, unknown][] = [
      ['inputs', job.inputs],
      ['parameters', job.parameters],
      ['limits', job.limits],
      ['requests', job.requests],
      ['devices', job.assigned_devices],
      ['executor', job.executor],
      ['enforcement', job.enforcement || 'none'],
      ['outputs', job.outputs],
      ['started', formatTime(job.started)],
      ['run time', job.started ? formatSeconds(((job.finished ? Date.parse(job.finished) : Date.now()) - Date.parse(job.started)) / 1000) : ''],
      ['copied from', job.copied_from],
      ['resumed from', job.resumed_from]
    ];
    this._details.replaceChildren(
      ...rows
        .filter(([, value]) => value !== null && value !== undefined && value !== '')
        .map(([key, value]) =>
          h(
            'tr',
            { 'data-key': key },
            h('th', {}, key),
            h('td', {}, typeof value === 'string' ? value : JSON.stringify(value))
          )
        )
    );
  }

  /**
   * Append the job's output as it is written (long poll), until the job has ended.
   */
  private async followLogs(): Promise<void> {
    let offset = 0;
    let failures = 0;
    while (!this.isDisposed) {
      let chunk;
      try {
        chunk = await JobsAPI.logs(this.jobId, offset, 10);
        failures = 0;
      } catch (error) {
        failures++;
        if (failures > 5) {
          this._log.append(`\n[log unavailable: ${(error as Error).message}]\n`);
          return;
        }
        await new Promise(resolve => window.setTimeout(resolve, 1000 * failures));
        continue;
      }
      if (this.isDisposed) {
        return;
      }
      if (chunk.text) {
        const text = (this._log.textContent ?? '') + chunk.text;
        this._log.textContent = text.length > MAX_LOG_CHARS ? text.slice(text.length - MAX_LOG_CHARS) : text;
        if (this._follow.checked) {
          this._log.scrollTop = this._log.scrollHeight;
        }
      }
      offset = chunk.next_offset;
      if (chunk.done) {
        this._log.dataset.done = 'true';
        return;
      }
    }
  }

  private async stop(): Promise<void> {
    this._stop.disabled = true;
    try {
      this._job = await JobsAPI.stop(this.jobId);
      this.renderJob(this._job);
    } catch (error) {
      void showErrorMessage('Cannot stop the job', error as Error);
    }
  }

  private async rerun(): Promise<void> {
    try {
      const job = await JobsAPI.rerun(this.jobId);
      this.openJob(job.id);
    } catch (error) {
      void showErrorMessage('Cannot re-run the job', error as Error);
    }
  }

  private _job: IJob | null = null;
  private _timer = 0;
  private _charts = new MetricCharts();
  private _stop: HTMLButtonElement;
  private _rerun: HTMLButtonElement;
  private _follow: HTMLInputElement;
  private _header: HTMLDivElement;
  private _progress: HTMLDivElement;
  private _details: HTMLTableElement;
  private _log: HTMLPreElement;
}
