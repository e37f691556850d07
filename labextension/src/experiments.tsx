import { MainAreaWidget, showErrorMessage } from '@jupyterlab/apputils';
import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import React from 'react';

import { Experiment, Job, KPLClient } from './api';
import { MetricChart } from './charts';
import {
  formatParams,
  historySeries,
  trialRows,
  trialsDone
} from './experiment';
import { formatTime } from './format';
import { experimentsIcon } from './icons';
import { StateBadge } from './jobs';
import { PollingListModel } from './model';
import { KPLSidePanel } from './sidePanel';

function formatBest(value: number | null): string {
  return value === null ? '-' : value.toPrecision(4);
}

/**
 * The experiments of the project, newest first, with their trials done and best value.
 */
function ExperimentsList(props: {
  model: PollingListModel<Experiment>;
  openExperiment: (name: string) => void;
  newSearch: () => void;
}): JSX.Element {
  const { model, openExperiment, newSearch } = props;
  return (
    <>
      <div className="kpl-ExperimentsPanel-actions">
        <Button
          className="jp-mod-styled jp-mod-accept kpl-ExperimentsPanel-new"
          onClick={newSearch}
        >
          New search
        </Button>
      </div>
      <div className="kpl-error">{model.error?.message ?? ''}</div>
      <ul className="kpl-list">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">
            No experiments yet: start one with New search, %kpl_tune or `kpl-lab
            experiment create`.
          </li>
        )}
        {model.items.map(experiment => (
          <li
            key={experiment.name}
            className="kpl-experiment kpl-item"
            data-name={experiment.name}
            data-state={experiment.state}
            tabIndex={0}
            title={`Open experiment ${experiment.name}`}
            onClick={() => openExperiment(experiment.name)}
            onKeyDown={event =>
              event.key === 'Enter' && openExperiment(experiment.name)
            }
          >
            <div className="kpl-item-title">
              <span className="kpl-name">{experiment.name}</span>
              <StateBadge state={experiment.state} />
            </div>
            <div className="kpl-meta">
              {`${trialsDone(experiment)}/${experiment.budget.trials ?? '?'} trials · best ${formatBest(experiment.best_value)}`}
            </div>
            <div className="kpl-meta">
              {experiment.algorithm} · {formatTime(experiment.created)}
            </div>
          </li>
        ))}
      </ul>
    </>
  );
}

/**
 * The Experiments sidebar: every hyperparameter search of the project.
 */
export class ExperimentsPanel extends KPLSidePanel<Experiment> {
  constructor(
    client: KPLClient,
    interval: number,
    openExperiment: (name: string) => void,
    newSearch: () => void
  ) {
    super({
      id: 'kpl-lab-experiments',
      label: 'Experiments',
      caption: 'KPL Experiments',
      icon: experimentsIcon,
      fetcher: async () => (await client.GET('/experiments')).experiments,
      interval
    });
    this.addClass('kpl-ExperimentsPanel');
    this.addContent(
      <UseSignal signal={this.model.changed}>
        {() => (
          <ExperimentsList
            model={this.model}
            openExperiment={openExperiment}
            newSearch={newSearch}
          />
        )}
      </UseSignal>
    );
  }
}

/**
 * The main-area view of one experiment: its trials table and optimisation history, kept live.
 */
export class ExperimentView extends ReactWidget {
  constructor(
    readonly client: KPLClient,
    readonly experimentName: string,
    interval: number,
    private readonly openJob: (id: string) => void
  ) {
    super();
    this.addClass('kpl-ExperimentView-content');
    this.title.label = `Experiment ${experimentName}`;
    this.poll = new Poll({
      factory: () => this.fetch(),
      frequency: PollingListModel.frequency(interval || 2),
      name: `kpl-experiment-${experimentName}`,
      standby: () => !this.isVisible || 'when-hidden'
    });
  }

  readonly changed = new Signal<this, void>(this);
  readonly poll: Poll;
  experiment: Experiment | null = null;
  // the queued jobs of the project: a running trial whose job waits says why
  queued: Job[] = [];
  error = '';

  /**
   * Seconds between refreshes; 0 (panels that never poll) means every 2 seconds here.
   */
  set interval(seconds: number) {
    this.poll.frequency = PollingListModel.frequency(seconds || 2);
    void this.poll.refresh();
  }

  /**
   * Stop the experiment and its running trials.
   */
  async stop(): Promise<void> {
    try {
      this.experiment = await this.client.POST('/experiments/{name}/stop', {
        params: { path: { name: this.experimentName } }
      });
      this.changed.emit();
    } catch (error) {
      void showErrorMessage('Cannot stop the experiment', error as Error);
    }
  }

  /**
   * Resume a stopped experiment where it left off.
   */
  async resume(): Promise<void> {
    try {
      this.experiment = await this.client.POST('/experiments/{name}/resume', {
        params: { path: { name: this.experimentName } },
        body: {}
      });
      this.changed.emit();
      void this.poll.refresh();
    } catch (error) {
      void showErrorMessage('Cannot resume the experiment', error as Error);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.poll.dispose();
    Signal.clearData(this);
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.changed}>
        {() => this.renderExperiment()}
      </UseSignal>
    );
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.update();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // The poll skipped its fetches while the view was hidden.
    void this.poll.refresh();
  }

  /**
   * Fetch the experiment with its trials; stop after the first answer once it has ended.
   */
  private async fetch(): Promise<void> {
    const wasRunning = this.experiment?.state === 'running';
    try {
      this.experiment = await this.client.GET('/experiments/{name}', {
        params: { path: { name: this.experimentName } }
      });
      this.queued = this.experiment.trials.some(t => t.state === 'running')
        ? (
            await this.client.GET('/jobs', {
              params: { query: { state: 'queued' } }
            })
          ).jobs
        : [];
      this.error = '';
    } catch (error) {
      this.error = (error as Error).message;
      this.changed.emit();
      throw error;
    }
    this.title.label = `Experiment ${this.experimentName} (${this.experiment.state})`;
    this.changed.emit();
    if (!wasRunning && this.experiment.state !== 'running') {
      // Nothing changes until Resume, which refreshes the view itself.
      void this.poll.stop();
    }
  }

  private renderExperiment(): JSX.Element {
    const { experiment, error } = this;
    const width = Math.max(
      300,
      Math.min(900, (this.node.clientWidth || 640) - 24)
    );
    if (!experiment) {
      return error ? (
        <div className="kpl-error">{error}</div>
      ) : (
        <div className="kpl-empty">Loading…</div>
      );
    }
    const history = historySeries(experiment);
    return (
      <>
        <div className="kpl-job-header">
          {error && <div className="kpl-error">{error}</div>}
          <h2>
            {experiment.name} <StateBadge state={experiment.state} />
          </h2>
          <div className="kpl-meta">
            {`${experiment.algorithm} · ${experiment.function} · ${String(experiment.objective.direction)} ${String(experiment.objective.metric)} · ${trialsDone(experiment)}/${experiment.budget.trials ?? '?'} trials`}
          </div>
          <div className="kpl-meta kpl-experiment-best">
            {experiment.best_trial === null
              ? 'no complete trial yet'
              : `best: trial ${experiment.best_trial} · ${formatBest(experiment.best_value)} · ${formatParams(experiment.best_params ?? {})}` +
                (experiment.best_model ? ` · ${experiment.best_model}` : '')}
          </div>
          {experiment.reason && (
            <div className="kpl-error kpl-reason">{experiment.reason}</div>
          )}
        </div>
        <div className="kpl-charts">
          {history.objective.length > 0 && (
            <MetricChart
              title="optimisation history"
              series={history}
              xName="trial"
              yName={String(experiment.objective.metric)}
              width={width}
              dots={['objective']}
              steps={['best so far']}
              integerX
            />
          )}
        </div>
        <table className="kpl-compare-table kpl-trials">
          <thead>
            <tr>
              <th>trial</th>
              <th>state</th>
              <th>parameters</th>
              <th>{String(experiment.objective.metric)}</th>
              <th>job</th>
            </tr>
          </thead>
          <tbody>
            {trialRows(experiment, this.queued).map(row => (
              <tr
                key={row.number}
                data-trial={row.number}
                className={row.best ? 'kpl-best' : undefined}
              >
                <td>{row.number}</td>
                <td>
                  <StateBadge state={row.state} />
                  {row.queue && (
                    <div className="kpl-queue" role="status">
                      {row.queue}
                    </div>
                  )}
                </td>
                <td>{row.params}</td>
                <td>{row.value}</td>
                <td>
                  <a
                    href="#"
                    className="kpl-trial-job"
                    onClick={event => {
                      event.preventDefault();
                      this.openJob(row.jobId);
                    }}
                  >
                    {row.jobId}
                  </a>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </>
    );
  }
}

/**
 * An experiment view in the main area, with Stop and Resume in its toolbar.
 */
export function experimentWidget(
  client: KPLClient,
  name: string,
  interval: number,
  openJob: (id: string) => void
): MainAreaWidget<ExperimentView> {
  const content = new ExperimentView(client, name, interval, openJob);
  const widget = new MainAreaWidget({ content });
  widget.id = `kpl-experiment-${name}`;
  widget.addClass('kpl-ExperimentView');
  widget.title.closable = true;
  widget.title.icon = experimentsIcon;
  widget.toolbar.addItem(
    'stop',
    ReactWidget.create(
      <UseSignal signal={content.changed}>
        {() => (
          <Button
            className="jp-mod-styled jp-mod-warn kpl-stop"
            small
            disabled={content.experiment?.state !== 'running'}
            onClick={() => void content.stop()}
          >
            Stop
          </Button>
        )}
      </UseSignal>
    )
  );
  widget.toolbar.addItem(
    'resume',
    ReactWidget.create(
      <UseSignal signal={content.changed}>
        {() => (
          <Button
            className="jp-mod-styled kpl-resume"
            small
            disabled={content.experiment?.state !== 'stopped'}
            onClick={() => void content.resume()}
          >
            Resume
          </Button>
        )}
      </UseSignal>
    )
  );
  return widget;
}
