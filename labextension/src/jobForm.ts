import type { ReadonlyJSONObject } from '@lumino/coreutils';
import type { ErrorSchema, RJSFSchema, UiSchema } from '@rjsf/utils';

import type {
  AlgorithmVersionDetail,
  Devices,
  FunctionSpec,
  IFieldError,
  JobRequest,
  Resources
} from './api';

/**
 * What the submit form edits: one object per part of the job request.
 */
export interface IJobFormData {
  inputs: Record<string, string | undefined>;
  parameters: Record<string, unknown>;
  resources: Partial<Record<keyof Resources, number>>;
}

/**
 * The resources a job may ask for, with their labels.
 */
const RESOURCES: [keyof Resources, string, 'number' | 'integer'][] = [
  ['cpu', 'CPU cores', 'number'],
  ['memory', 'memory (MB)', 'integer'],
  ['shm', 'shared memory (MB)', 'integer'],
  ['gpu', 'GPUs', 'integer'],
  ['npu', 'NPUs', 'integer']
];

/**
 * A one-line summary of a function's resources: `cpu 2 · memory 2048 MB · gpu 1`.
 */
export function resourceSummary(spec: FunctionSpec): string {
  const limits = (spec.resource?.limits ?? {}) as Record<string, unknown>;
  const units: Record<string, string> = { memory: ' MB', shm: ' MB' };
  return Object.entries(limits)
    .filter(([, value]) => value !== null && value !== undefined && value !== 0)
    .map(([key, value]) => `${key} ${value}${units[key] ?? ''}`)
    .join(' · ');
}

/**
 * The dataset and model refs a form may offer (`dataset:NAME:VERSION`, `model:NAME:VERSION`).
 */
export interface IRefs {
  datasets: string[];
  models: string[];
}

/**
 * Words that name a model input (`checkpoint`, `init` as "starting model", `weights` ...).
 */
const MODEL_PORT = /model|checkpoint|ckpt|weight|pretrain|resume/i;

/**
 * The refs an input offers: models for a model or checkpoint input, datasets for the
 * others; both when its key and name say neither.
 */
export function inputChoices(
  port: { key?: string; name?: string },
  refs: IRefs
): string[] {
  const words = `${port.key ?? ''} ${port.name ?? ''}`;
  if (MODEL_PORT.test(words)) {
    return refs.models;
  }
  if (/data|set|image|corpus|sample/i.test(words)) {
    return refs.datasets;
  }
  return [...refs.datasets, ...refs.models];
}

/**
 * The JSON schema of the submit form of one function: its inputs (a choice of the
 * dataset or model refs each takes), the algorithm's parameter schema and the resources.
 */
export function jobFormSchema(
  detail: AlgorithmVersionDetail,
  fn: string,
  available: IRefs
): { schema: RJSFSchema; uiSchema: UiSchema<ReadonlyJSONObject> } {
  const spec = detail.function_specs[fn];
  const inputs: Record<string, RJSFSchema> = {};
  const inputsUi: UiSchema<ReadonlyJSONObject> = {};
  for (const port of spec?.inputs ?? []) {
    const key = port.key ?? '';
    const refs = inputChoices(port, available);
    inputs[key] = {
      type: 'string',
      // environment.yml's `optional: true`: the one rule pipelines check inputs by too
      title: port.optional ? `${key} (optional)` : key,
      description: port.name,
      enum: ['', ...refs]
    };
    inputsUi[key] = { 'ui:enumNames': ['(none)', ...refs] };
  }
  const resources: Record<string, RJSFSchema> = {};
  for (const [key, title, type] of RESOURCES) {
    resources[key] = { type, title, minimum: 0 };
  }
  const parameters = (detail.parameter_schema ?? {}) as RJSFSchema;
  return {
    schema: {
      type: 'object',
      properties: {
        inputs: {
          type: 'object',
          title: 'Inputs',
          description:
            Object.keys(inputs).length === 0
              ? 'This function takes no inputs.'
              : undefined,
          properties: inputs
        },
        parameters: {
          ...parameters,
          type: 'object',
          title: 'Parameters',
          properties: parameters.properties ?? {}
        },
        resources: { type: 'object', title: 'Resources', properties: resources }
      }
    },
    uiSchema: { inputs: inputsUi }
  };
}

/**
 * The first values of the form: a dataset for each data input, the parameters'
 * defaults and the function's resource limits.
 */
export function jobFormData(
  detail: AlgorithmVersionDetail,
  fn: string,
  datasets: string[]
): IJobFormData {
  const spec = detail.function_specs[fn];
  const inputs: IJobFormData['inputs'] = {};
  for (const port of spec?.inputs ?? []) {
    // The first dataset for a data input; optional inputs stay empty.
    if (/data/i.test(port.key ?? '') && datasets.length) {
      inputs[port.key ?? ''] = datasets[0];
    }
  }
  const parameters: Record<string, unknown> = {};
  const properties = ((detail.parameter_schema ?? {}) as RJSFSchema).properties;
  for (const [name, schema] of Object.entries(properties ?? {})) {
    if (typeof schema === 'object' && schema.default !== undefined) {
      parameters[name] = schema.default;
    }
  }
  const resources: IJobFormData['resources'] = {};
  const limits = (spec?.resource?.limits ?? {}) as Record<string, unknown>;
  for (const [key] of RESOURCES) {
    if (typeof limits[key] === 'number') {
      resources[key] = limits[key] as number;
    }
  }
  return { inputs, parameters, resources };
}

/**
 * The kinds of resources the form caps, with their words.
 */
const CAPPED: [keyof Resources, string][] = [
  ['cpu', 'CPU'],
  ['memory', 'MB of memory'],
  ['gpu', 'GPU'],
  ['npu', 'NPU']
];

function held(amounts: Devices['used'], kind: string): number {
  if (kind === 'cpu' || kind === 'memory') {
    return amounts[kind] ?? 0;
  }
  return (amounts.devices?.[kind] ?? []).length;
}

function words(kind: string, word: string, amount: number): string {
  const plural = kind !== 'memory' && amount !== 1 ? 's' : '';
  return `${amount} ${word}${plural}`;
}

/**
 * What may be had of each resource: free now, and the most ever (machine and quota).
 */
export function room(devices: Devices): Record<string, [number, number]> {
  const quota = devices.quota ?? {};
  const found: Record<string, [number, number]> = {};
  for (const [kind] of CAPPED) {
    let most = held(devices.capacity, kind);
    let free = most - held(devices.used, kind);
    if (typeof quota[kind] === 'number') {
      most = Math.min(most, quota[kind]);
      free = Math.min(free, quota[kind] - held(devices.project_used, kind));
    }
    found[kind] = [Math.max(0, free), most];
  }
  return found;
}

/**
 * The form's resources capped at what is free now, with a note for each one capped
 * (kpl_lab/fit.py does the same for the magics).
 *
 * Nothing free at all: the amount stays, and the job waits in the queue saying why.
 * None ever (no GPU here): 0.
 */
export function fitNow(
  resources: IJobFormData['resources'],
  devices: Devices,
  workers = 1
): { resources: IJobFormData['resources']; notes: string[] } {
  const fitted = { ...resources };
  const notes: string[] = [];
  const each = Math.max(1, workers);
  const free = room(devices);
  for (const [kind, word] of CAPPED) {
    const asked = resources[kind] ?? 0;
    const [now, most] = free[kind];
    if (asked <= 0 || asked * each <= now + 1e-9) {
      continue;
    }
    if (most <= 0) {
      fitted[kind] = 0;
      notes.push(
        `${kind} 0: environment.yml asks ${words(kind, word, asked)}; none can be had here`
      );
      continue;
    }
    const share = now / each;
    const capped =
      kind === 'cpu'
        ? Math.floor(share * 10 + 1e-9) / 10
        : Math.floor(share + 1e-9);
    if (capped <= 0) {
      continue;
    }
    fitted[kind] = capped;
    notes.push(
      `${kind} capped at ${capped}: environment.yml asks ${words(kind, word, asked)}, ` +
        `${now} free now` +
        (each > 1 ? ` for ${each} workers` : '')
    );
  }
  return { resources: fitted, notes };
}

/**
 * The job request of the form's values; empty inputs and resources are left out.
 */
export function jobRequest(
  algorithm: string,
  fn: string,
  data: IJobFormData
): JobRequest {
  const inputs: Record<string, string> = {};
  for (const [key, value] of Object.entries(data.inputs ?? {})) {
    if (value) {
      inputs[key] = value;
    }
  }
  const resources: Resources = {};
  for (const [key, value] of Object.entries(data.resources ?? {})) {
    if (typeof value === 'number') {
      resources[key as keyof Resources] = value;
    }
  }
  return {
    algorithm,
    function: fn,
    inputs,
    parameters: data.parameters ?? {},
    resources
  };
}

/**
 * The path of a dotted field in a schema, as property names; null when the form has
 * no such field.
 *
 * A parameter name may itself hold dots (`optimizer.lr`): the longest property name
 * that matches wins.
 */
export function schemaPath(schema: RJSFSchema, field: string): string[] | null {
  const parts = field.split('.');
  const path: string[] = [];
  let node: RJSFSchema = schema;
  let i = 0;
  while (i < parts.length) {
    const properties = node.properties ?? {};
    let matched = 0;
    for (let j = parts.length; j > i; j--) {
      const name = parts.slice(i, j).join('.');
      if (typeof properties[name] === 'object') {
        path.push(name);
        node = properties[name] as RJSFSchema;
        matched = j - i;
        break;
      }
    }
    if (matched === 0) {
      return null;
    }
    i += matched;
  }
  return path;
}

/**
 * The server's field errors as rjsf's error schema, for the fields the form has;
 * the others (and errors naming no field) as messages for the whole form.
 */
export function fieldErrors(
  schema: RJSFSchema,
  errors: ReadonlyArray<IFieldError>
): { errorSchema: ErrorSchema; general: string[] } {
  const errorSchema: Record<string, any> = {};
  const general: string[] = [];
  for (const { field, message } of errors) {
    const path = field ? schemaPath(schema, field) : null;
    if (!path) {
      general.push(field ? `${field}: ${message}` : message);
      continue;
    }
    let node = errorSchema;
    for (const name of path) {
      node = node[name] ??= {};
    }
    (node.__errors ??= []).push(message);
  }
  return { errorSchema: errorSchema as ErrorSchema, general };
}
