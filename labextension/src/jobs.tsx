import { HTMLSelect, UseSignal } from '@jupyterlab/ui-components';
import React from 'react';

import { Job, JOB_STATES, KPLClient } from './api';
import { formatSeconds, formatTime } from './format';
import { jobsIcon } from './icons';
import { PollingListModel } from './model';
import { KPLSidePanel } from './sidePanel';

/**
 * A progress bar with the fraction done and the time left.
 */
export function ProgressBar(props: {
  job: Pick<Job, 'state' | 'progress' | 'eta_seconds'>;
}): JSX.Element {
  const { job } = props;
  const percent = Math.round(100 * Math.max(0, Math.min(1, job.progress || 0)));
  const left =
    job.state === 'running' && job.eta_seconds
      ? ` · ${formatSeconds(job.eta_seconds)} left`
      : '';
  return (
    <div
      className={`kpl-progress kpl-state-${job.state}`}
      role="progressbar"
      aria-valuemin={0}
      aria-valuemax={100}
      aria-valuenow={percent}
    >
      <div className="kpl-progress-track">
        <div className="kpl-progress-fill" style={{ width: `${percent}%` }} />
      </div>
      <span className="kpl-progress-text">{`${percent}%${left}`}</span>
    </div>
  );
}

/**
 * Why a queued job waits: what it lacks, what holds it and its place in the queue.
 */
export function QueueNote(props: {
  job: Pick<Job, 'state' | 'queue'>;
}): JSX.Element | null {
  const { job } = props;
  if (job.state !== 'queued' || !job.queue) {
    return null;
  }
  return (
    <div className="kpl-queue" role="status" data-limit={job.queue.limit}>
      {job.queue.message}
    </div>
  );
}

/**
 * The state of a job as a colored badge.
 */
export function StateBadge(props: { state: string }): JSX.Element {
  return (
    <span
      className={`kpl-badge kpl-state-${props.state}`}
      data-state={props.state}
    >
      {props.state}
    </span>
  );
}

/**
 * The jobs of the project, newest first, with their live state and progress.
 */
function JobsList(props: {
  model: PollingListModel<Job>;
  openJob: (id: string) => void;
  compareJobs: (ids: string[]) => void;
}): JSX.Element {
  const { model, openJob, compareJobs } = props;
  // jobs ticked for a comparison, in the order they were ticked
  const [picked, setPicked] = React.useState<string[]>([]);
  const shown = picked.filter(id => model.items.some(job => job.id === id));
  const toggle = (id: string) =>
    setPicked(
      shown.includes(id) ? shown.filter(other => other !== id) : [...shown, id]
    );
  return (
    <>
      <button
        className="jp-Button jp-mod-styled jp-mod-accept kpl-compare-button"
        disabled={shown.length < 2}
        title="Tick two or more jobs to compare them side by side"
        onClick={() => compareJobs(shown)}
      >
        {`Compare ${shown.length} jobs`}
      </button>
      <HTMLSelect
        className="kpl-state-filter"
        aria-label="State"
        defaultValue={model.filter}
        onChange={event => {
          model.filter = event.target.value;
        }}
        options={[
          { value: '', label: 'all states' },
          ...JOB_STATES.map(state => ({ value: state, label: state }))
        ]}
      />
      <div className="kpl-error">{model.error?.message ?? ''}</div>
      <ul className="kpl-list">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">
            No jobs yet: submit one from the Algorithms panel.
          </li>
        )}
        {model.items.map(job => (
          <li
            key={job.id}
            className="kpl-job kpl-item"
            data-id={job.id}
            data-state={job.state}
            tabIndex={0}
            title={`Open job ${job.id}`}
            onClick={() => openJob(job.id)}
            onKeyDown={event => event.key === 'Enter' && openJob(job.id)}
          >
            <div className="kpl-item-title">
              <input
                type="checkbox"
                className="kpl-compare-pick"
                aria-label={`Compare job ${job.id}`}
                checked={shown.includes(job.id)}
                onClick={event => event.stopPropagation()}
                onKeyDown={event => event.stopPropagation()}
                onChange={() => toggle(job.id)}
              />
              <span className="kpl-name">
                {job.algorithm.split(':')[0]} · {job.function}
              </span>
              <StateBadge state={job.state} />
            </div>
            <div className="kpl-meta">
              {job.id} · {formatTime(job.created)}
            </div>
            {(job.state === 'running' || job.state === 'queued') && (
              <ProgressBar job={job} />
            )}
            <QueueNote job={job} />
          </li>
        ))}
      </ul>
    </>
  );
}

/**
 * The Jobs sidebar: every job of the project with its live state and progress.
 */
export class JobsPanel extends KPLSidePanel<Job> {
  constructor(
    client: KPLClient,
    interval: number,
    openJob: (id: string) => void,
    compareJobs: (ids: string[]) => void
  ) {
    super({
      id: 'kpl-lab-jobs',
      label: 'Jobs',
      caption: 'KPL Jobs',
      icon: jobsIcon,
      fetcher: async state =>
        (
          await client.GET('/jobs', {
            params: {
              query: {
                state: (JOB_STATES as ReadonlyArray<string>).includes(state)
                  ? (state as Job['state'])
                  : undefined
              }
            }
          })
        ).jobs,
      interval
    });
    this.addClass('kpl-JobsPanel');
    this.addContent(
      <UseSignal signal={this.model.changed}>
        {() => (
          <JobsList
            model={this.model}
            openJob={openJob}
            compareJobs={compareJobs}
          />
        )}
      </UseSignal>
    );
  }
}
