import { refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import {
  AlgorithmsAPI,
  IAlgorithm,
  IAlgorithmVersionDetail,
  IFunctionSpec
} from './api';
import { formatBytes, h } from './dom';
import { algorithmsIcon } from './icons';
import { PollingListModel } from './model';

/**
 * A one-line summary of a function's resources: `cpu 2 · memory 2048 MB · gpu 1`.
 */
export function resourceSummary(spec: IFunctionSpec): string {
  const limits = spec.resource?.limits ?? {};
  const units: Record<string, string> = { memory: ' MB', shm: ' MB' };
  return Object.entries(limits)
    .filter(([, value]) => value !== null && value !== undefined && value !== 0)
    .map(([key, value]) => `${key} ${value}${units[key] ?? ''}`)
    .join(' · ');
}

/**
 * The Algorithms sidebar: each algorithm with its functions, resources, inputs and outputs.
 */
export class AlgorithmsPanel extends Widget {
  constructor(
    readonly model: PollingListModel<IAlgorithm>,
    private readonly openForm: (algorithm: string, version: string, fn: string) => void
  ) {
    super();
    this.id = 'kpl-lab-algorithms';
    this.addClass('kpl-Panel');
    this.addClass('kpl-AlgorithmsPanel');
    this.title.icon = algorithmsIcon;
    this.title.caption = 'KPL Algorithms';

    const search = h('input', {
      class: 'jp-mod-styled kpl-search',
      type: 'search',
      placeholder: 'Search algorithms',
      'aria-label': 'Search algorithms'
    });
    search.addEventListener('input', () => {
      this.model.filter = search.value.trim();
    });
    const refresh = h('button', {
      class: 'jp-mod-styled kpl-icon-button',
      type: 'button',
      title: 'Refresh'
    });
    refreshIcon.element({ container: refresh });
    refresh.addEventListener('click', () => void this.model.refresh());
    this._error = h('div', { class: 'kpl-error' });
    this._list = h('ul', { class: 'kpl-list' });
    this.node.append(
      h('header', { class: 'kpl-Panel-header' }, h('h2', {}, 'Algorithms'), refresh),
      search,
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
      this._list.append(
        h('li', { class: 'kpl-empty' }, 'No algorithms yet: upload one with the REST API or `kpl` CLI.')
      );
    }
    for (const algorithm of this.model.items) {
      const latest = algorithm.versions[algorithm.versions.length - 1];
      const item = h(
        'li',
        { class: 'kpl-algorithm', 'data-name': algorithm.name },
        h(
          'div',
          { class: 'kpl-item-title kpl-item', tabindex: 0 },
          h('span', { class: 'kpl-name' }, algorithm.name),
          h(
            'span',
            { class: 'kpl-meta' },
            latest ? `${latest.version.slice(0, 8)} · ${algorithm.versions.length} version(s)` : ''
          )
        )
      );
      const details = h('div', { class: 'kpl-algorithm-details' });
      item.append(details);
      const title = item.firstElementChild as HTMLElement;
      const toggle = () => {
        if (this._expanded.has(algorithm.name)) {
          this._expanded.delete(algorithm.name);
          details.replaceChildren();
        } else if (latest) {
          this._expanded.add(algorithm.name);
          void this.showDetails(details, algorithm.name, latest.version);
        }
      };
      title.addEventListener('click', toggle);
      title.addEventListener('keydown', event => event.key === 'Enter' && toggle());
      if (this._expanded.has(algorithm.name) && latest) {
        void this.showDetails(details, algorithm.name, latest.version);
      }
      this._list.append(item);
    }
  }

  private async showDetails(
    container: HTMLElement,
    name: string,
    version: string
  ): Promise<void> {
    let detail: IAlgorithmVersionDetail;
    try {
      detail = this._details.get(`${name}:${version}`) ?? (await AlgorithmsAPI.version(name, version));
    } catch (error) {
      container.replaceChildren(h('div', { class: 'kpl-error' }, (error as Error).message));
      return;
    }
    this._details.set(`${name}:${version}`, detail);
    const blocks: HTMLElement[] = [
      h(
        'div',
        { class: 'kpl-meta' },
        `${detail.ref} · ${formatBytes(detail.size_bytes)}` +
          (detail.image?.from_image ? ` · image ${detail.image.from_image}` : '')
      )
    ];
    if (detail.description) {
      blocks.push(h('p', {}, detail.description));
    }
    for (const [fn, spec] of Object.entries(detail.function_specs ?? {})) {
      const submit = h(
        'button',
        { class: 'jp-mod-styled jp-mod-accept kpl-submit-open', type: 'button', 'data-function': fn },
        'Submit job…'
      );
      submit.addEventListener('click', () => this.openForm(name, version, fn));
      const ports = (label: string, list: { key: string; name: string }[]) =>
        list.length
          ? h(
              'div',
              { class: 'kpl-ports' },
              h('strong', {}, `${label}: `),
              list.map(port => `${port.key} (${port.name})`).join(', ')
            )
          : null;
      blocks.push(
        h(
          'div',
          { class: 'kpl-function', 'data-function': fn },
          h('div', { class: 'kpl-item-title' }, h('code', {}, fn), submit),
          h('div', { class: 'kpl-meta' }, resourceSummary(spec) || 'no resource limits'),
          ports('inputs', spec.inputs ?? []),
          ports('outputs', spec.outputs ?? [])
        )
      );
    }
    const parameters = Object.entries(detail.parameters ?? {});
    if (parameters.length) {
      const table = h('table', { class: 'kpl-fields' });
      for (const [key, value] of parameters) {
        table.append(
          h(
            'tr',
            { title: detail.parameter_descriptions?.[key] ?? '' },
            h('th', {}, key),
            h('td', {}, JSON.stringify(value))
          )
        );
      }
      blocks.push(h('details', { class: 'kpl-parameters' }, h('summary', {}, 'parameters'), table));
    }
    container.replaceChildren(...blocks);
  }

  private _expanded = new Set<string>();
  private _details = new Map<string, IAlgorithmVersionDetail>();
  private _error: HTMLDivElement;
  private _list: HTMLUListElement;
}
