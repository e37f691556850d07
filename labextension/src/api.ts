import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { API_NAMESPACE, requestAPI, ServerError } from './request';

/**
 * A query string from the given values; undefined and empty values are left out.
 */
export function query(
  values: Record<string, string | number | undefined | null>
): string {
  const entries = Object.entries(values).filter(
    ([, value]) => value !== undefined && value !== null && value !== ''
  );
  if (entries.length === 0) {
    return '';
  }
  return (
    '?' +
    entries
      .map(
        ([key, value]) =>
          `${encodeURIComponent(key)}=${encodeURIComponent(String(value))}`
      )
      .join('&')
  );
}

/**
 * Fields shared by dataset, model and algorithm versions.
 */
export interface ICatalogVersion {
  name: string;
  version: string;
  ref: string;
  description?: string;
  size_bytes?: number;
  lineage?: Record<string, unknown> | null;
  created?: string | null;
}

export interface IDatasetVersion extends ICatalogVersion {
  record_count?: number;
  parts?: Record<string, number>;
}

export interface IDatasetVersionDetail extends IDatasetVersion {
  schemas?: Record<string, Record<string, unknown>>;
}

export interface IDataset {
  name: string;
  description?: string;
  created?: string | null;
  versions: IDatasetVersion[];
}

/**
 * A bytes or File value of a record, replaced by where to fetch it.
 */
export interface IBytesRef {
  $bytes: number;
  contentType: string;
  url: string;
  thumbnail?: string | null;
}

export interface IRecord {
  index: number;
  fields: Record<string, unknown>;
}

export interface IRecordsPage {
  dataset: string;
  part: string;
  offset: number;
  limit: number;
  total: number;
  columns: string[];
  schema: Record<string, unknown>;
  records: IRecord[];
}

export interface IFieldStats {
  type: string;
  count: number;
  min?: number | null;
  max?: number | null;
  mean?: number | null;
  distinct?: number | null;
  distinct_capped?: boolean;
  total_bytes?: number | null;
}

export interface IStats {
  dataset: string;
  part: string;
  records: number;
  fields: Record<string, IFieldStats>;
  class_field?: string | null;
  classes: Record<string, number>;
}

/**
 * The dataset formats the server imports.
 */
export const DATASET_FORMATS = [
  'import',
  'imagefolder',
  'voc',
  'coco',
  'labelme'
] as const;
export type DatasetFormat = (typeof DATASET_FORMATS)[number];

export interface IAlgorithmVersion extends ICatalogVersion {
  functions: string[];
  parameters?: Record<string, unknown>;
}

export interface IPort {
  key: string;
  name: string;
}

export interface IResourceSpec {
  limits?: Record<string, number | null>;
  requests?: Record<string, number | null> | null;
}

export interface IFunctionSpec {
  cmd: string;
  resource: IResourceSpec;
  inputs: IPort[];
  outputs: IPort[];
}

/**
 * A JSON schema of parameters, as far as the form reads it.
 */
export interface IJSONSchema {
  type?: string | string[];
  title?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  properties?: Record<string, IJSONSchema>;
  items?: IJSONSchema;
  minimum?: number;
  maximum?: number;
}

export interface IAlgorithmVersionDetail extends IAlgorithmVersion {
  image?: { from_image?: string; runs?: string[] };
  function_specs: Record<string, IFunctionSpec>;
  parameter_descriptions?: Record<string, string>;
  parameter_schema?: IJSONSchema;
}

export interface IAlgorithm {
  name: string;
  description?: string;
  created?: string | null;
  versions: IAlgorithmVersion[];
}

export interface IModelVersion extends ICatalogVersion {
  files?: string[];
}

export interface IModel {
  name: string;
  description?: string;
  created?: string | null;
  versions: IModelVersion[];
}

export type JobState =
  | 'queued'
  | 'running'
  | 'succeeded'
  | 'failed'
  | 'stopped'
  | 'lost';

/**
 * The states after which a job never changes again.
 */
export const ENDED_STATES: ReadonlyArray<JobState> = [
  'succeeded',
  'failed',
  'stopped',
  'lost'
];

export interface IResources {
  cpu?: number | null;
  memory?: number | null;
  shm?: number | null;
  gpu?: number | null;
  npu?: number | null;
}

export interface IJobRequest {
  algorithm: string;
  function?: string;
  inputs?: Record<string, string>;
  parameters?: Record<string, unknown>;
  resources?: IResources;
  priority?: number;
}

export interface IJob {
  id: string;
  project: string;
  algorithm: string;
  function: string;
  state: JobState;
  progress: number;
  eta_seconds: number | null;
  inputs: Record<string, unknown>;
  parameters: Record<string, unknown>;
  outputs: Record<string, { name: string; registered: string | null }>;
  figures: string[];
  limits: Record<string, unknown>;
  requests: Record<string, unknown> | null;
  assigned_devices: Record<string, unknown>;
  executor: string;
  enforcement: string;
  exit_code: number | null;
  reason: string;
  created: string | null;
  started: string | null;
  finished: string | null;
  copied_from: string | null;
  resumed_from: string | null;
}

export interface ILogChunk {
  text: string;
  offset: number;
  next_offset: number;
  size: number;
  done: boolean;
  state: JobState;
}

export interface IFigure {
  title: string;
  x_name?: string;
  y1_name?: string;
  y2_name?: string | null;
}

export interface IMetrics {
  max_points: number;
  series: Record<string, [number, number][]>;
  figures: Record<string, IFigure>;
}

export interface IProgress {
  state: JobState;
  fraction: number;
  eta_seconds: number | null;
}

const path = (...parts: string[]): string =>
  parts.map(part => encodeURIComponent(part)).join('/');

/**
 * Datasets: list, show, records, stats, upload, delete.
 */
export namespace DatasetsAPI {
  export async function list(q = ''): Promise<IDataset[]> {
    return (await requestAPI<{ datasets: IDataset[] }>('datasets' + query({ q })))
      .datasets;
  }

  export function get(name: string): Promise<IDataset> {
    return requestAPI<IDataset>(path('datasets', name));
  }

  export function version(
    name: string,
    version: string
  ): Promise<IDatasetVersionDetail> {
    return requestAPI<IDatasetVersionDetail>(
      path('datasets', name, 'versions', version)
    );
  }

  export function records(
    name: string,
    version: string,
    options: { part?: string; offset: number; limit: number }
  ): Promise<IRecordsPage> {
    return requestAPI<IRecordsPage>(
      path('datasets', name, 'versions', version, 'records') + query(options)
    );
  }

  export function stats(
    name: string,
    version: string,
    part?: string
  ): Promise<IStats> {
    return requestAPI<IStats>(
      path('datasets', name, 'versions', version, 'stats') + query({ part })
    );
  }

  export function remove(name: string): Promise<{ deleted: string[] }> {
    return requestAPI(path('datasets', name), { method: 'DELETE' });
  }

  /**
   * What the upload is to become.
   */
  export interface IUploadOptions {
    name: string;
    format: DatasetFormat;
    description?: string;
  }

  /**
   * Upload an archive as a new dataset version, reporting the fraction sent.
   *
   * XMLHttpRequest, because fetch() reports no upload progress.
   */
  export function upload(
    file: Blob & { name?: string },
    options: IUploadOptions,
    onProgress: (fraction: number) => void,
    settings: ServerConnection.ISettings = ServerConnection.makeSettings()
  ): Promise<IDatasetVersion> {
    const url =
      URLExt.join(settings.baseUrl, API_NAMESPACE, 'datasets') +
      query({ ...options, filename: file.name });
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open('POST', url);
      xhr.setRequestHeader('Content-Type', 'application/octet-stream');
      if (settings.token) {
        xhr.setRequestHeader('Authorization', `token ${settings.token}`);
      }
      const xsrf = document.cookie.match('\\b_xsrf=([^;]*)\\b');
      if (xsrf) {
        xhr.setRequestHeader('X-XSRFToken', xsrf[1]);
      }
      xhr.upload.onprogress = event => {
        if (event.lengthComputable && event.total > 0) {
          onProgress(event.loaded / event.total);
        }
      };
      xhr.onerror = () =>
        reject(new ServerError(`Cannot reach the KPL Lab server at ${url}`, 0));
      xhr.onload = () => {
        let body: any = {};
        try {
          body = JSON.parse(xhr.responseText || '{}');
        } catch {
          body = { message: xhr.responseText };
        }
        if (xhr.status >= 200 && xhr.status < 300) {
          resolve(body as IDatasetVersion);
        } else {
          reject(
            new ServerError(
              body.message || `${xhr.status} ${xhr.statusText}`,
              xhr.status,
              body.error ?? '',
              '',
              body.field ?? null
            )
          );
        }
      };
      xhr.send(file);
    });
  }
}

/**
 * Algorithms: list and show.
 */
export namespace AlgorithmsAPI {
  export async function list(q = ''): Promise<IAlgorithm[]> {
    return (
      await requestAPI<{ algorithms: IAlgorithm[] }>('algorithms' + query({ q }))
    ).algorithms;
  }

  export function version(
    name: string,
    version: string
  ): Promise<IAlgorithmVersionDetail> {
    return requestAPI<IAlgorithmVersionDetail>(
      path('algorithms', name, 'versions', version)
    );
  }
}

/**
 * Models: list.
 */
export namespace ModelsAPI {
  export async function list(): Promise<IModel[]> {
    return (await requestAPI<{ models: IModel[] }>('models')).models;
  }
}

/**
 * Jobs: submit, list, show, stop, re-run, logs, metrics, progress.
 */
export namespace JobsAPI {
  export async function list(state?: JobState): Promise<IJob[]> {
    return (await requestAPI<{ jobs: IJob[] }>('jobs' + query({ state }))).jobs;
  }

  export function get(id: string): Promise<IJob> {
    return requestAPI<IJob>(path('jobs', id));
  }

  export function submit(request: IJobRequest): Promise<IJob> {
    return requestAPI<IJob>('jobs', {
      method: 'POST',
      body: JSON.stringify(request)
    });
  }

  export function stop(id: string): Promise<IJob> {
    return requestAPI<IJob>(path('jobs', id, 'stop'), { method: 'POST' });
  }

  export function rerun(id: string): Promise<IJob> {
    return requestAPI<IJob>(path('jobs', id, 'rerun'), { method: 'POST' });
  }

  export function logs(
    id: string,
    offset: number,
    wait = 0
  ): Promise<ILogChunk> {
    return requestAPI<ILogChunk>(
      path('jobs', id, 'logs') + query({ offset, wait: wait || undefined })
    );
  }

  export function metrics(id: string, maxPoints: number): Promise<IMetrics> {
    return requestAPI<IMetrics>(
      path('jobs', id, 'metrics') + query({ max_points: maxPoints })
    );
  }

  export function progress(id: string): Promise<IProgress> {
    return requestAPI<IProgress>(path('jobs', id, 'progress'));
  }
}

/**
 * The URL of a server path (as the API answers them) that an <img> can load.
 */
export function mediaURL(
  serverPath: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): string {
  const origin = new URL(settings.baseUrl, window.location.href).origin;
  const url = new URL(serverPath, origin);
  if (settings.token) {
    url.searchParams.set('token', settings.token);
  }
  return url.toString();
}
