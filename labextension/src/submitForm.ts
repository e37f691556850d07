import { Widget } from '@lumino/widgets';

import {
  AlgorithmsAPI,
  DatasetsAPI,
  IAlgorithmVersionDetail,
  IJob,
  IJSONSchema,
  IResources,
  JobsAPI,
  ModelsAPI
} from './api';
import { h } from './dom';
import { resourceSummary } from './algorithms';
import { ServerError } from './request';

const RESOURCES: [keyof IResources, string][] = [
  ['cpu', 'CPU cores'],
  ['memory', 'memory (MB)'],
  ['shm', 'shared memory (MB)'],
  ['gpu', 'GPUs'],
  ['npu', 'NPUs']
];

/**
 * The form rows that an API error's `field` may name, most precise first.
 *
 * The server names `parameters` and puts the parameter first in the message
 * (`steps: expected an integer`), and names resources bare (`cpu`) or dotted.
 */
export function errorFields(error: ServerError): string[] {
  const fields: string[] = [];
  const field = error.field ?? '';
  const named = error.message.match(/^([\w.-]+):/);
  if (field && named) {
    fields.push(`${field}.${named[1]}`);
  }
  if (field) {
    fields.push(field);
    if (!field.includes('.')) {
      fields.push(`resources.${field}`, `inputs.${field}`, `parameters.${field}`);
    }
  }
  return fields;
}

/**
 * One row of the form: label, control, description and the place for its error.
 */
function row(field: string, label: string, control: HTMLElement, help = ''): HTMLElement {
  return h(
    'div',
    { class: 'kpl-form-row', 'data-field': field },
    h('label', {}, label),
    control,
    help ? h('div', { class: 'kpl-help' }, help) : null,
    h('div', { class: 'kpl-field-error', role: 'alert' })
  );
}

/**
 * A control for one parameter from its JSON schema.
 */
function parameterControl(name: string, schema: IJSONSchema): HTMLElement {
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  const value = schema.default;
  const attrs = { class: 'jp-mod-styled', name: `parameters.${name}`, 'data-type': type ?? 'json' };
  if (schema.enum) {
    const select = h('select', attrs);
    for (const option of schema.enum) {
      select.append(h('option', { value: JSON.stringify(option), selected: option === value }, String(option)));
    }
    select.dataset.type = 'enum';
    return select;
  }
  if (type === 'boolean') {
    return h('input', { ...attrs, type: 'checkbox', checked: value === true });
  }
  if (type === 'integer' || type === 'number') {
    return h('input', {
      ...attrs,
      type: 'number',
      step: type === 'integer' ? 1 : 'any',
      min: schema.minimum,
      max: schema.maximum,
      value: value === undefined || value === null ? '' : String(value)
    });
  }
  if (type === 'string') {
    return h('input', { ...attrs, type: 'text', value: value === undefined ? '' : String(value) });
  }
  const area = h('textarea', { ...attrs, rows: 2 });
  area.value = JSON.stringify(value ?? null);
  return area;
}

/**
 * Read a parameter control back; a bad value is reported on its row.
 */
function readParameter(control: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement): unknown {
  const type = control.dataset.type;
  if (type === 'boolean') {
    return (control as HTMLInputElement).checked;
  }
  if (type === 'enum' || type === 'json') {
    return JSON.parse(control.value);
  }
  if (type === 'integer' || type === 'number') {
    return control.value.trim() === '' ? null : Number(control.value);
  }
  return control.value;
}

/**
 * The main-area form that submits a job of one algorithm function.
 */
export class SubmitJobForm extends Widget {
  constructor(
    readonly algorithm: string,
    readonly version: string,
    readonly fn: string,
    private readonly onSubmitted: (job: IJob) => void
  ) {
    super();
    this.id = `kpl-submit-${algorithm}-${version}-${fn}`;
    this.addClass('kpl-SubmitJobForm');
    this.title.label = `Submit ${algorithm}/${fn}`;
    this.title.closable = true;
    this._form = h('form', { class: 'kpl-form', novalidate: true });
    this._form.addEventListener('submit', event => {
      event.preventDefault();
      void this.submit();
    });
    this.node.append(this._form);
    void this.load();
  }

  private async load(): Promise<void> {
    let detail: IAlgorithmVersionDetail;
    let datasets: string[] = [];
    let models: string[] = [];
    try {
      [detail, datasets, models] = await Promise.all([
        AlgorithmsAPI.version(this.algorithm, this.version),
        DatasetsAPI.list().then(list =>
          list.flatMap(d => d.versions.slice().reverse().map(v => `dataset:${v.ref}`))
        ),
        ModelsAPI.list().then(list =>
          list.flatMap(m => m.versions.slice().reverse().map(v => `model:${v.ref}`))
        )
      ]);
    } catch (error) {
      this._form.replaceChildren(h('div', { class: 'kpl-error' }, (error as Error).message));
      return;
    }
    const spec = detail.function_specs[this.fn];
    if (!spec) {
      this._form.replaceChildren(
        h('div', { class: 'kpl-error' }, `${detail.ref} has no function ${this.fn}`)
      );
      return;
    }
    this._general = h('div', { class: 'kpl-error kpl-form-error', role: 'alert' });
    const sections: HTMLElement[] = [
      h('h2', {}, `Submit ${detail.ref} · ${this.fn}`),
      h('div', { class: 'kpl-meta' }, `${spec.cmd} · ${resourceSummary(spec)}`)
    ];

    const inputs = h('fieldset', { class: 'kpl-inputs' }, h('legend', {}, 'Inputs'));
    for (const port of spec.inputs ?? []) {
      const select = h('select', { class: 'jp-mod-styled', name: `inputs.${port.key}` });
      select.append(h('option', { value: '' }, '(none)'));
      for (const ref of [...datasets, ...models]) {
        select.append(h('option', { value: ref }, ref));
      }
      // The first dataset for a data input, else nothing: optional inputs stay empty.
      if (/data/i.test(port.key) && datasets.length) {
        select.value = datasets[0];
      }
      inputs.append(row(`inputs.${port.key}`, port.key, select, port.name));
    }
    if ((spec.inputs ?? []).length === 0) {
      inputs.append(h('div', { class: 'kpl-meta' }, 'This function takes no inputs.'));
    }
    sections.push(inputs);

    const parameters = h('fieldset', { class: 'kpl-parameters' }, h('legend', {}, 'Parameters'));
    for (const [name, schema] of Object.entries(detail.parameter_schema?.properties ?? {})) {
      parameters.append(
        row(`parameters.${name}`, schema.title ?? name, parameterControl(name, schema), schema.description ?? '')
      );
    }
    sections.push(parameters);

    const resources = h('fieldset', { class: 'kpl-resources' }, h('legend', {}, 'Resources'));
    const limits = spec.resource?.limits ?? {};
    for (const [key, label] of RESOURCES) {
      const value = limits[key];
      resources.append(
        row(
          `resources.${key}`,
          label,
          h('input', {
            class: 'jp-mod-styled',
            type: 'number',
            min: 0,
            step: key === 'cpu' ? 'any' : 1,
            name: `resources.${key}`,
            value: value === null || value === undefined ? '' : String(value)
          })
        )
      );
    }
    sections.push(resources);

    this._button = h('button', { class: 'jp-mod-styled jp-mod-accept kpl-submit', type: 'submit' }, 'Submit');
    sections.push(this._general, h('div', { class: 'kpl-form-actions' }, this._button));
    this._form.replaceChildren(...sections);
  }

  private clearErrors(): void {
    for (const node of Array.from(this._form.querySelectorAll('.kpl-field-error'))) {
      node.textContent = '';
    }
    for (const node of Array.from(this._form.querySelectorAll('.kpl-mod-invalid'))) {
      node.classList.remove('kpl-mod-invalid');
    }
    this._general.textContent = '';
  }

  private showError(field: string | null, message: string): void {
    const candidates = field ? [field] : [];
    for (const name of candidates) {
      const target = this._form.querySelector(`.kpl-form-row[data-field="${CSS.escape(name)}"]`);
      if (target) {
        target.classList.add('kpl-mod-invalid');
        target.querySelector('.kpl-field-error')!.textContent = message;
        return;
      }
    }
    this._general.textContent = message;
  }

  /**
   * Read the form and submit the job; errors go next to the field they name.
   */
  async submit(): Promise<IJob | null> {
    this.clearErrors();
    const inputs: Record<string, string> = {};
    const parameters: Record<string, unknown> = {};
    const resources: IResources = {};
    let valid = true;
    for (const control of Array.from(
      this._form.querySelectorAll<HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement>('[name]')
    )) {
      const [kind, key] = [control.name.split('.')[0], control.name.slice(control.name.indexOf('.') + 1)];
      if (kind === 'inputs' && control.value) {
        inputs[key] = control.value;
      } else if (kind === 'parameters') {
        try {
          parameters[key] = readParameter(control);
        } catch {
          this.showError(control.name, `${key}: not valid JSON`);
          valid = false;
        }
      } else if (kind === 'resources' && control.value.trim() !== '') {
        resources[key as keyof IResources] = Number(control.value);
      }
    }
    if (!valid) {
      return null;
    }
    this._button.disabled = true;
    try {
      const job = await JobsAPI.submit({
        algorithm: `${this.algorithm}:${this.version}`,
        function: this.fn,
        inputs,
        parameters,
        resources
      });
      this.onSubmitted(job);
      return job;
    } catch (error) {
      if (!(error instanceof ServerError)) {
        throw error;
      }
      const target = errorFields(error).find(name =>
        this._form.querySelector(`.kpl-form-row[data-field="${CSS.escape(name)}"]`)
      );
      this.showError(target ?? null, error.message);
      return null;
    } finally {
      this._button.disabled = false;
    }
  }

  private _form: HTMLFormElement;
  private _general: HTMLDivElement = h('div');
  private _button: HTMLButtonElement = h('button');
}
