import { MainAreaWidget, showErrorMessage } from '@jupyterlab/apputils';
import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import React, { useLayoutEffect, useRef, useState } from 'react';

import { canStop, hasEnded, IMetrics, Job, KPLClient } from './api';
import { MetricChart, yTitle } from './charts';
import { formatSeconds, formatTime } from './format';
import { ProgressBar, QueueNote, StateBadge } from './jobs';
import { PollingListModel } from './model';

/**
 * Text kept in the log view; older output is cut (it stays on the server).
 */
const MAX_LOG_CHARS = 2_000_000;

/**
 * Scroll a log to its last line.
 */
export function scrollToEnd(
  element: Pick<HTMLElement, 'scrollTop' | 'scrollHeight' | 'clientHeight'>
): void {
  element.scrollTop = Math.max(0, element.scrollHeight - element.clientHeight);
}

/**
 * The job's output, kept scrolled to the end while `follow` is on.
 *
 * `shown` changes each time the view is shown or resized: text that arrived while the
 * view was hidden had no height to scroll by, so the log scrolls again then.
 */
function LogView(props: {
  text: string;
  done: boolean;
  shown: number;
}): JSX.Element {
  const [follow, setFollow] = useState(true);
  const pre = useRef<HTMLPreElement>(null);
  useLayoutEffect(() => {
    if (follow && pre.current) {
      scrollToEnd(pre.current);
    }
  }, [props.text, follow, props.shown]);
  return (
    <section className="kpl-log-section">
      <div className="kpl-item-title">
        <h3>Log</h3>
        <label>
          <input
            type="checkbox"
            className="kpl-follow"
            checked={follow}
            onChange={event => setFollow(event.target.checked)}
          />{' '}
          follow
        </label>
      </div>
      <pre
        ref={pre}
        className="kpl-log"
        tabIndex={0}
        data-done={props.done ? 'true' : undefined}
      >
        {props.text}
      </pre>
    </section>
  );
}

/**
 * The rows of the details table of a job.
 */
function detailRows(job: Job): [string, unknown][] {
  const end = job.finished ? Date.parse(job.finished) : Date.now();
  const rows: [string, unknown][] = [
    ['inputs', job.inputs],
    ['parameters', job.parameters],
    ['limits', job.limits],
    ['requests', job.requests],
    ['devices', job.assigned_devices],
    ['executor', job.executor],
    ['enforcement', job.enforcement || 'none'],
    ['outputs', job.outputs],
    ['saves', job.saves?.length ? job.saves : null],
    ['results', job.results?.length ? job.results : null],
    ['started', formatTime(job.started)],
    [
      'run time',
      job.started ? formatSeconds((end - Date.parse(job.started)) / 1000) : ''
    ],
    ['copied from', job.copied_from],
    ['resumed from', job.resumed_from]
  ];
  return rows.filter(
    ([, value]) => value !== null && value !== undefined && value !== ''
  );
}

/**
 * A job, its curves and its log, fetched while the view is shown and the job runs.
 */
class JobViewModel {
  constructor(
    readonly client: KPLClient,
    readonly jobId: string,
    interval: number,
    private readonly view: Widget
  ) {
    this.poll = new Poll({
      factory: () => this.fetch(),
      frequency: PollingListModel.frequency(interval || 2),
      name: `kpl-job-${jobId}`,
      standby: () => !view.isVisible || 'when-hidden'
    });
    void this.followLogs();
  }

  readonly changed = new Signal<this, void>(this);
  readonly poll: Poll;
  job: Job | null = null;
  metrics: IMetrics | null = null;
  error = '';
  log = '';
  logDone = false;

  dispose(): void {
    this.poll.dispose();
    Signal.clearData(this);
  }

  /**
   * Fetch the job and its curves; stop after the first answer once it has ended.
   */
  private async fetch(): Promise<void> {
    const wasEnded = this.job !== null && hasEnded(this.job);
    try {
      const job_id = this.jobId;
      const [job, metrics] = await Promise.all([
        this.client.GET('/jobs/{job_id}', { params: { path: { job_id } } }),
        this.client.GET('/jobs/{job_id}/metrics', {
          params: { path: { job_id }, query: { max_points: this.maxPoints() } }
        })
      ]);
      this.job = job;
      // openapi-fetch's answer types widen the [x, y] pairs to arrays
      this.metrics = metrics as IMetrics;
      this.error = '';
    } catch (error) {
      this.error = (error as Error).message;
      this.changed.emit();
      throw error;
    }
    this.changed.emit();
    if (wasEnded && this.job && hasEnded(this.job)) {
      void this.poll.stop();
    }
  }

  /**
   * Points a chart can show: about two per pixel of its width.
   */
  private maxPoints(): number {
    return Math.max(
      200,
      Math.min(10000, 2 * (this.view.node.clientWidth || 1000))
    );
  }

  /**
   * Append the job's output as it is written (long poll), until the job has ended.
   */
  private async followLogs(): Promise<void> {
    let offset = 0;
    let failures = 0;
    while (!this.poll.isDisposed) {
      let chunk;
      try {
        chunk = await this.client.GET('/jobs/{job_id}/logs', {
          params: { path: { job_id: this.jobId }, query: { offset, wait: 10 } }
        });
        failures = 0;
      } catch (error) {
        failures++;
        if (failures > 5) {
          this.log += `\n[log unavailable: ${(error as Error).message}]\n`;
          this.changed.emit();
          return;
        }
        await new Promise(resolve => setTimeout(resolve, 1000 * failures));
        continue;
      }
      if (this.poll.isDisposed) {
        return;
      }
      if (chunk.text) {
        const text = this.log + chunk.text;
        this.log =
          text.length > MAX_LOG_CHARS
            ? text.slice(text.length - MAX_LOG_CHARS)
            : text;
      }
      offset = chunk.next_offset;
      this.logDone = chunk.done;
      this.changed.emit();
      if (chunk.done) {
        return;
      }
    }
  }
}

/**
 * The main-area view of one job: state, progress, resources, curves and live logs.
 */
export class JobView extends ReactWidget {
  constructor(
    client: KPLClient,
    readonly jobId: string,
    interval: number,
    private readonly openJob: (id: string) => void
  ) {
    super();
    this.addClass('kpl-JobView-content');
    this.title.label = `Job ${jobId}`;
    this.model = new JobViewModel(client, jobId, interval, this);
    this.model.changed.connect(() => {
      const job = this.model.job;
      if (job) {
        this.title.label = `Job ${job.id} (${job.state})`;
      }
    });
  }

  readonly model: JobViewModel;

  /**
   * Seconds between refreshes; 0 (panels that never poll) means every 2 seconds here.
   */
  set interval(seconds: number) {
    this.model.poll.frequency = PollingListModel.frequency(seconds || 2);
    void this.model.poll.refresh();
  }

  /**
   * Stop the job.
   */
  async stop(): Promise<void> {
    try {
      this.model.job = await this.model.client.POST('/jobs/{job_id}/stop', {
        params: { path: { job_id: this.jobId } }
      });
      this.model.changed.emit();
    } catch (error) {
      void showErrorMessage('Cannot stop the job', error as Error);
    }
  }

  /**
   * Run the job again, in a view of its own.
   */
  async rerun(): Promise<void> {
    try {
      const job = await this.model.client.POST('/jobs/{job_id}/rerun', {
        params: { path: { job_id: this.jobId } }
      });
      this.openJob(job.id);
    } catch (error) {
      void showErrorMessage('Cannot re-run the job', error as Error);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => this.renderJob()}
      </UseSignal>
    );
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.shown++;
    this.update();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // The poll skipped its fetches while the view was hidden.
    void this.model.poll.refresh();
    this.shown++;
    this.update();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this.shown++;
    this.update();
  }

  /**
   * Times the view was shown or resized: the followed log scrolls to its end again.
   */
  private shown = 0;

  private renderJob(): JSX.Element {
    const { job, metrics, error } = this.model;
    const width = Math.max(
      300,
      Math.min(900, (this.node.clientWidth || 640) - 24)
    );
    return (
      <>
        <div className="kpl-job-header">
          {error && <div className="kpl-error">{error}</div>}
          {job && (
            <>
              <h2>
                {job.algorithm} · {job.function}{' '}
                <StateBadge state={job.state} />
              </h2>
              <div className="kpl-meta">
                {`job ${job.id} · created ${formatTime(job.created)}` +
                  (job.finished
                    ? ` · finished ${formatTime(job.finished)}`
                    : '') +
                  (job.exit_code !== null
                    ? ` · exit code ${job.exit_code}`
                    : '')}
              </div>
              {job.reason && (
                <div className="kpl-error kpl-reason">{job.reason}</div>
              )}
              <QueueNote job={job} />
            </>
          )}
        </div>
        <div className="kpl-job-progress">
          {job && <ProgressBar job={job} />}
        </div>
        <div className="kpl-charts">
          {Object.entries(metrics?.figures ?? {})
            .filter(([, series]) => Object.values(series).some(p => p.length))
            .map(([title, series]) => (
              <MetricChart
                key={title}
                title={title}
                series={series}
                xName={metrics?.labels?.[title]?.x_name || 'x'}
                yName={yTitle(title, [
                  metrics?.labels?.[title]?.y1_name ?? '',
                  metrics?.labels?.[title]?.y2_name ?? ''
                ])}
                width={width}
              />
            ))}
        </div>
        <LogView
          text={this.model.log}
          done={this.model.logDone}
          shown={this.shown}
        />
        <details className="kpl-job-more" open>
          <summary>Resources and details</summary>
          <table className="kpl-fields kpl-job-details">
            <tbody>
              {job &&
                detailRows(job).map(([key, value]) => (
                  <tr key={key} data-key={key}>
                    <th>{key}</th>
                    <td>
                      {typeof value === 'string'
                        ? value
                        : JSON.stringify(value)}
                    </td>
                  </tr>
                ))}
            </tbody>
          </table>
        </details>
      </>
    );
  }
}

/**
 * A job view in the main area, with Stop and Re-run in its toolbar.
 */
export function jobWidget(
  client: KPLClient,
  jobId: string,
  interval: number,
  openJob: (id: string) => void
): MainAreaWidget<JobView> {
  const content = new JobView(client, jobId, interval, openJob);
  const widget = new MainAreaWidget({ content });
  widget.id = `kpl-job-${jobId}`;
  widget.addClass('kpl-JobView');
  widget.title.closable = true;
  widget.toolbar.addItem(
    'stop',
    ReactWidget.create(
      <UseSignal signal={content.model.changed}>
        {() =>
          canStop(content.model.job) ? (
            <Button
              className="jp-mod-styled jp-mod-warn kpl-stop"
              small
              onClick={() => void content.stop()}
            >
              Stop
            </Button>
          ) : null
        }
      </UseSignal>
    )
  );
  widget.toolbar.addItem(
    'rerun',
    ReactWidget.create(
      <Button className="kpl-rerun" small onClick={() => void content.rerun()}>
        Re-run
      </Button>
    )
  );
  return widget;
}
