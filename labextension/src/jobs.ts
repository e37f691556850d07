import { refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { IJob } from './api';
import { formatSeconds, formatTime, h } from './dom';
import { jobsIcon } from './icons';
import { PollingListModel } from './model';

/**
 * A progress bar with the fraction done and the time left.
 */
export function progressBar(job: Pick<IJob, 'state' | 'progress' | 'eta_seconds'>): HTMLElement {
  const fraction = Math.max(0, Math.min(1, job.progress || 0));
  const fill = h('div', { class: 'kpl-progress-fill' });
  fill.style.width = `${(100 * fraction).toFixed(1)}%`;
  const left = job.state === 'running' && job.eta_seconds ? ` · ${formatSeconds(job.eta_seconds)} left` : '';
  return h(
    'div',
    {
      class: `kpl-progress kpl-state-${job.state}`,
      role: 'progressbar',
      'aria-valuemin': 0,
      'aria-valuemax': 100,
      'aria-valuenow': Math.round(100 * fraction)
    },
    h('div', { class: 'kpl-progress-track' }, fill),
    h('span', { class: 'kpl-progress-text' }, `${Math.round(100 * fraction)}%${left}`)
  );
}

/**
 * The state of a job as a colored badge.
 */
export function stateBadge(state: string): HTMLElement {
  return h('span', { class: `kpl-badge kpl-state-${state}`, 'data-state': state }, state);
}

/**
 * The Jobs sidebar: every job of the project with its live state and progress.
 */
export class JobsPanel extends Widget {
  constructor(
    readonly model: PollingListModel<IJob>,
    private readonly openJob: (id: string) => void
  ) {
    super();
    this.id = 'kpl-lab-jobs';
    this.addClass('kpl-Panel');
    this.addClass('kpl-JobsPanel');
    this.title.icon = jobsIcon;
    this.title.caption = 'KPL Jobs';
    this._state = h('select', { class: 'jp-mod-styled kpl-state-filter', 'aria-label': 'State' });
    for (const state of ['', 'queued', 'running', 'succeeded', 'failed', 'stopped', 'lost']) {
      this._state.append(h('option', { value: state }, state || 'all states'));
    }
    this._state.addEventListener('change', () => {
      this.model.filter = this._state.value;
    });
    const refresh = h('button', { class: 'jp-mod-styled kpl-icon-button', type: 'button', title: 'Refresh' });
    refreshIcon.element({ container: refresh });
    refresh.addEventListener('click', () => void this.model.refresh());
    this._error = h('div', { class: 'kpl-error' });
    this._list = h('ul', { class: 'kpl-list' });
    this.node.append(
      h('header', { class: 'kpl-Panel-header' }, h('h2', {}, 'Jobs'), refresh),
      this._state,
      this._error,
      this._list
    );
    model.changed.connect(this.render, this);
    this.render();
  }

  private render(): void {
    this._error.textContent = this.model.error?.message ?? '';
    this._list.replaceChildren();
    if (this.model.items.length === 0 && !this.model.error) {
      this._list.append(h('li', { class: 'kpl-empty' }, 'No jobs yet: submit one from the Algorithms panel.'));
    }
    for (const job of this.model.items) {
      const item = h(
        'li',
        { class: 'kpl-job kpl-item', 'data-id': job.id, 'data-state': job.state, tabindex: 0, title: `Open job ${job.id}` },
        h(
          'div',
          { class: 'kpl-item-title' },
          h('span', { class: 'kpl-name' }, `${job.algorithm.split(':')[0]} · ${job.function}`),
          stateBadge(job.state)
        ),
        h('div', { class: 'kpl-meta' }, `${job.id} · ${formatTime(job.created)}`),
        job.state === 'running' || job.state === 'queued' ? progressBar(job) : null
      );
      item.addEventListener('click', () => this.openJob(job.id));
      item.addEventListener('keydown', event => event.key === 'Enter' && this.openJob(job.id));
      this._list.append(item);
    }
  }

  private _state: HTMLSelectElement;
  private _error: HTMLDivElement;
  private _list: HTMLUListElement;
}
