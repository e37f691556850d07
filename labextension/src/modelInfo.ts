/**
 * What the Models panel and the model view read out of the registry's answers.
 */
import type {
  CanaryRequest,
  DeploymentRequest,
  Job,
  Model,
  ModelFile
} from './api';

/**
 * A name the server accepts (the `pattern` of names in docs/openapi.yaml): 1-100 ASCII letters,
 * digits, `_`, `.`, `-`, not starting with `.`/`-`.
 */
export const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$/;

/**
 * One input of the job that made a version: its key and the NAME:VERSION it used.
 */
export interface ILineageInput {
  key: string;
  name: string;
  version: string;
  /**
   * dataset or model, when the job is still known; '' otherwise.
   */
  kind: string;
}

/**
 * Where a version came from, in reading order; metrics come last.
 */
export interface ILineage {
  jobId: string;
  algorithm: string;
  function: string;
  output: string;
  inputs: ILineageInput[];
  parameters: [string, unknown][];
  metrics: [string, number][];
}

/**
 * NAME:VERSION split at its first colon (versions never hold one, names neither).
 */
export function splitRef(ref: string): { name: string; version: string } {
  const at = ref.indexOf(':');
  return at < 0
    ? { name: ref, version: '' }
    : { name: ref.slice(0, at), version: ref.slice(at + 1) };
}

/**
 * The lineage of a version, null for an uploaded one; `job` gives each input its kind.
 */
export function parseLineage(
  lineage: Record<string, unknown> | null | undefined,
  job?: Pick<Job, 'inputs'> | null
): ILineage | null {
  if (!lineage) {
    return null;
  }
  const text = (value: unknown) =>
    typeof value === 'string' || typeof value === 'number' ? String(value) : '';
  const object = (value: unknown): Record<string, unknown> =>
    value && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  const inputs = Object.entries(object(lineage.inputs)).map(([key, ref]) => ({
    key,
    ...splitRef(text(ref)),
    kind: job?.inputs?.[key]?.kind ?? ''
  }));
  const metrics = Object.entries(object(lineage.metrics))
    .filter((entry): entry is [string, number] => typeof entry[1] === 'number')
    .sort(([a], [b]) => a.localeCompare(b));
  return {
    jobId: text(lineage.job_id),
    algorithm: text(lineage.algorithm),
    function: text(lineage.function),
    output: text(lineage.output),
    inputs,
    parameters: Object.entries(object(lineage.parameters)),
    metrics
  };
}

/**
 * A metric value short enough for a table: 4 significant digits, integers as they are.
 */
export function formatMetric(value: number): string {
  return Number.isInteger(value) ? String(value) : value.toPrecision(4);
}

/**
 * A parameter count as people say it: 1.2M, 34.5k, 812.
 */
export function formatCount(count: number | null | undefined): string {
  if (count === null || count === undefined) {
    return '';
  }
  if (count >= 1e9) {
    return `${(count / 1e9).toFixed(1)}G`;
  }
  if (count >= 1e6) {
    return `${(count / 1e6).toFixed(1)}M`;
  }
  if (count >= 1e3) {
    return `${(count / 1e3).toFixed(1)}k`;
  }
  return String(count);
}

/**
 * A tensor's type and shape: `float[batch×1×16×16]`.
 */
export function formatTensor(tensor: ModelFile['inputs'][number]): string {
  return `${tensor.dtype}[${tensor.shape.join('×')}]`;
}

/**
 * The aliases of a model, sorted, each with the version it points at.
 */
export function aliasList(
  model: Pick<Model, 'aliases'>
): { alias: string; version: string }[] {
  return Object.entries(model.aliases ?? {})
    .map(([alias, version]) => ({ alias, version }))
    .sort((a, b) => a.alias.localeCompare(b.alias));
}

/**
 * A model name from an uploaded file's name: its stem with unsupported characters replaced.
 */
export function modelNameFromFile(fileName: string): string {
  const stem = fileName.replace(
    /(\.(zip|tar|tar\.gz|tgz|tar\.bz2|tar\.xz)|\.[^.]*)$/i,
    ''
  );
  const name = stem.replace(/[^\w.-]+/g, '-').replace(/^[^\w]+/, '');
  return name.slice(0, 100) || 'model';
}

/**
 * The name a single uploaded file is stored under (the server takes names only).
 */
export function storedFileName(fileName: string): string {
  const name = fileName.replace(/[^\w.-]+/g, '_').replace(/^[^\w]+/, '');
  return name.slice(-100) || 'model.bin';
}

/**
 * A deployment request from the Deploy dialog's fields, or the first problem with them.
 */
export function deployRequest(
  model: string,
  fields: { name: string; replicas: string }
): DeploymentRequest | string {
  const name = fields.name.trim();
  if (!NAME_RE.test(name)) {
    return `deployment name "${name}": use 1-100 ASCII letters, digits, _, . or -, starting with a letter, digit or _`;
  }
  const replicas = Number(fields.replicas);
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 64) {
    return `replicas "${fields.replicas}": a whole number from 1 to 64`;
  }
  return { name, model, replicas };
}

/**
 * A canary request from the Canary dialog's fields, or the first problem with them.
 */
export function canaryRequest(
  model: string,
  fields: { deployment: string; weight: string }
): { deployment: string; request: CanaryRequest } | string {
  if (!fields.deployment) {
    return 'pick the deployment that gets the canary (deploy the model first)';
  }
  const weight = Number(fields.weight);
  if (!Number.isInteger(weight) || weight < 0 || weight > 100) {
    return `weight "${fields.weight}": a whole percent from 0 to 100`;
  }
  return { deployment: fields.deployment, request: { model, weight } };
}

/**
 * A deployment name for a model: its name, made to fit the server's pattern.
 */
export function deploymentNameFor(model: string): string {
  return model.replace(/[^\w.-]+/g, '-').replace(/^[^\w]+/, '') || 'model';
}
