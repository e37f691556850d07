import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  components,
  jobStateValues,
  paths,
  pathsDatasetsPostParametersQueryFormatValues
} from './generated/api';
import { storedFileName } from './modelInfo';
import { API_NAMESPACE, KPLApiError, requestAPI } from './request';

/**
 * The schemas of docs/openapi.yaml, as `jlpm gen:types` generates them.
 */
type Schemas = components['schemas'];

// The server answers every field of its objects: the generated optional fields are required.
export type Dataset = Required<Schemas['Dataset']>;
export type DatasetVersion = Required<Schemas['DatasetVersion']>;
export type DatasetVersionDetail = Required<Schemas['DatasetVersionDetail']>;
export type BytesRef = Schemas['BytesRef'];
export type RecordsPage = Required<Schemas['RecordsPage']>;
export type DatasetRecord = RecordsPage['records'][number];
export type Stats = Required<Schemas['Stats']>;
export type Algorithm = Required<Schemas['Algorithm']>;
export type AlgorithmVersionDetail = Required<
  Schemas['AlgorithmVersionDetail']
>;
export type FunctionSpec = AlgorithmVersionDetail['function_specs'][string];
export type Model = Required<Schemas['Model']>;
export type ModelVersion = Required<Schemas['ModelVersion']>;
export type ModelStructure = Required<Schemas['ModelStructure']>;
export type ModelFile = Required<Schemas['ModelFile']>;
export type DeploymentRequest = Schemas['DeploymentRequest'];
export type CanaryRequest = Schemas['CanaryRequest'];
export type Job = Required<Schemas['Job']>;
export type Comparison = Required<Schemas['Comparison']>;
export type Experiment = Required<Schemas['Experiment']>;
export type Trial = Required<Schemas['Trial']>;
export type ResumeExperimentRequest = Schemas['ResumeExperimentRequest'];
export type ComparedJob = Comparison['jobs'][number];
export type JobRequest = Schemas['JobRequest'];
export type Resources = NonNullable<JobRequest['resources']>;
export type LogChunk = Required<Schemas['LogChunk']>;
export type Version = Required<
  paths['/version']['get']['responses']['200']['content']['application/json']
>;
export type Deleted = Required<Schemas['Deleted']>;
export type Devices = Required<Schemas['Devices']>;
export type PipelineNodeType = Required<Schemas['PipelineNodeType']>;
export type PipelineValidation = Required<Schemas['PipelineValidation']>;
export type PipelineRun = Required<Schemas['PipelineRun']>;
export type PipelineRecords = Required<Schemas['PipelineRecords']>;
export type PipelineTemplate = Required<Schemas['PipelineTemplate']>;
export type Deployment = Required<Schemas['Deployment']>;
export type DeploymentLogs = Required<Schemas['DeploymentLogs']>;
export type DeploymentMetricsHistory = Required<
  Schemas['DeploymentMetricsHistory']
>;

/**
 * A gateway answer: the model's JSON and the NAME:VERSION that served it.
 */
export interface IPrediction {
  response: unknown;
  modelVersion: string;
}

/**
 * The states of a job, in the order the server declares them.
 */
export type JobState = Job['state'];
export const JOB_STATES: ReadonlyArray<JobState> = jobStateValues;

/**
 * The dataset formats the server imports.
 */
export type DatasetFormat =
  (typeof pathsDatasetsPostParametersQueryFormatValues)[number];
export const DATASET_FORMATS: ReadonlyArray<DatasetFormat> =
  pathsDatasetsPostParametersQueryFormatValues;

/**
 * One problem of a request, named by its dotted field path (`parameters.steps`).
 */
export type IFieldError = Schemas['FieldError'];

/**
 * The body of every error answer.
 */
export type IErrorBody = Schemas['Error'];

/**
 * A job's metric series grouped by figure: figure -> series -> [[x, y], ...].
 */
export type IMetrics = Schemas['Metrics'];

/**
 * Whether a job has ended: only ended jobs have a finish time.
 */
export function hasEnded(job: Pick<Job, 'finished'>): boolean {
  return job.finished !== null && job.finished !== undefined;
}

/**
 * Whether a job can be stopped: it is known and has not ended (ended jobs show no Stop).
 */
export function canStop(job: Pick<Job, 'finished'> | null): boolean {
  return job !== null && !hasEnded(job);
}

/**
 * A query string from the given values; undefined, null and empty values are left out.
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

const path = (...parts: string[]): string =>
  parts.map(part => encodeURIComponent(part)).join('/');

/**
 * What an uploaded archive is to become.
 */
export interface IUploadOptions {
  name: string;
  format: DatasetFormat;
  description?: string;
}

/**
 * The KPL Lab REST API, called with the server settings of the app.
 */
export class KPLClient {
  constructor(readonly serverSettings: ServerConnection.ISettings) {}

  /**
   * The server's name and version.
   */
  version(): Promise<Version> {
    return this.request<Version>('version');
  }

  /**
   * Datasets: list, show, records, stats, upload, delete.
   */
  readonly datasets = {
    list: async (q = ''): Promise<Dataset[]> =>
      (await this.request<{ datasets: Dataset[] }>('datasets' + query({ q })))
        .datasets,
    version: (name: string, version: string): Promise<DatasetVersionDetail> =>
      this.request(path('datasets', name, 'versions', version)),
    records: (
      name: string,
      version: string,
      options: { part?: string; offset: number; limit: number }
    ): Promise<RecordsPage> =>
      this.request(
        path('datasets', name, 'versions', version, 'records') + query(options)
      ),
    stats: (name: string, version: string, part?: string): Promise<Stats> =>
      this.request(
        path('datasets', name, 'versions', version, 'stats') + query({ part })
      ),
    delete: (name: string): Promise<Deleted> =>
      this.request(path('datasets', name), { method: 'DELETE' }),
    upload: (
      file: Blob & { name?: string },
      options: IUploadOptions,
      onProgress: (fraction: number) => void
    ): Promise<DatasetVersion> => this.upload(file, options, onProgress)
  };

  /**
   * Algorithms: list and show a version.
   */
  readonly algorithms = {
    list: async (q = ''): Promise<Algorithm[]> =>
      (
        await this.request<{ algorithms: Algorithm[] }>(
          'algorithms' + query({ q })
        )
      ).algorithms,
    version: (name: string, version: string): Promise<AlgorithmVersionDetail> =>
      this.request(path('algorithms', name, 'versions', version))
  };

  /**
   * Models: list, show, structure, aliases, upload, download, delete.
   */
  readonly models = {
    list: async (q = ''): Promise<Model[]> =>
      (await this.request<{ models: Model[] }>('models' + query({ q }))).models,
    get: (name: string): Promise<Model> => this.request(path('models', name)),
    version: (name: string, version: string): Promise<ModelVersion> =>
      this.request(path('models', name, 'versions', version)),
    structure: (name: string, version: string): Promise<ModelStructure> =>
      this.request(path('models', name, 'versions', version, 'structure')),
    setAlias: (name: string, alias: string, version: string): Promise<Model> =>
      this.request(path('models', name, 'aliases', alias), {
        method: 'PUT',
        body: JSON.stringify({ version })
      }),
    removeAlias: (name: string, alias: string): Promise<Model> =>
      this.request(path('models', name, 'aliases', alias), {
        method: 'DELETE'
      }),
    delete: (name: string, version?: string): Promise<Deleted> =>
      this.request(
        version
          ? path('models', name, 'versions', version)
          : path('models', name),
        { method: 'DELETE' }
      ),
    /**
     * The URL of a version's zip: a plain link, the browser's cookie authenticates it.
     */
    downloadURL: (name: string, version: string): string =>
      this.mediaURL(
        URLExt.join(
          this.serverSettings.baseUrl,
          API_NAMESPACE,
          path('models', name, 'versions', version, 'download')
        )
      ),
    upload: (
      file: Blob & { name?: string },
      name: string,
      onProgress: (fraction: number) => void
    ): Promise<ModelVersion> =>
      this.send(
        'models' + query({ name, filename: storedFileName(file.name ?? '') }),
        file,
        onProgress
      )
  };

  /**
   * Jobs: submit, list, show, stop, re-run, logs, metrics.
   */
  readonly jobs = {
    list: async (state?: JobState): Promise<Job[]> =>
      (await this.request<{ jobs: Job[] }>('jobs' + query({ state }))).jobs,
    get: (id: string): Promise<Job> => this.request(path('jobs', id)),
    submit: (request: JobRequest): Promise<Job> =>
      this.request('jobs', { method: 'POST', body: JSON.stringify(request) }),
    stop: (id: string): Promise<Job> =>
      this.request(path('jobs', id, 'stop'), { method: 'POST' }),
    rerun: (id: string): Promise<Job> =>
      this.request(path('jobs', id, 'rerun'), { method: 'POST' }),
    logs: (id: string, offset: number, wait = 0): Promise<LogChunk> =>
      this.request(
        path('jobs', id, 'logs') + query({ offset, wait: wait || undefined })
      ),
    metrics: (id: string, maxPoints: number): Promise<IMetrics> =>
      this.request(
        path('jobs', id, 'metrics') + query({ max_points: maxPoints })
      )
  };

  /**
   * The machine's capacity, what all projects and this one hold, and the quota.
   */
  devices(): Promise<Devices> {
    return this.request<Devices>('devices');
  }

  /**
   * Two or more jobs side by side (docs/experiments.md).
   */
  compare(ids: string[]): Promise<Comparison> {
    return this.request('comparisons' + query({ ids: ids.join(',') }));
  }

  /**
   * Pipelines: node types, templates, validate, runs.
   */
  readonly pipelines = {
    nodeTypes: async (): Promise<PipelineNodeType[]> =>
      (
        await this.request<{ node_types: PipelineNodeType[] }>(
          'pipelines/node-types'
        )
      ).node_types,
    templates: async (): Promise<PipelineTemplate[]> =>
      (
        await this.request<{ templates: PipelineTemplate[] }>(
          'pipelines/templates'
        )
      ).templates,
    validate: (text: string): Promise<PipelineValidation> =>
      this.request('pipelines/validate', {
        method: 'POST',
        body: JSON.stringify({ text })
      }),
    runs: async (limit = 20): Promise<PipelineRun[]> =>
      (
        await this.request<{ runs: PipelineRun[] }>(
          'pipelines/runs' + query({ limit })
        )
      ).runs,
    run: (text: string, filePath: string): Promise<PipelineRun> =>
      this.request('pipelines/runs', {
        method: 'POST',
        body: JSON.stringify({ text, path: filePath })
      }),
    get: (id: string): Promise<PipelineRun> =>
      this.request(path('pipelines', 'runs', id)),
    // A fused node's output is written on this first request (then cached).
    records: (id: string, node: string, limit = 5): Promise<PipelineRecords> =>
      this.request(
        path('pipelines', 'runs', id, 'nodes', node, 'records') +
          query({ limit })
      )
  };

  /**
   * Experiments (hyperparameter searches): list, show with trials, stop, resume.
   */
  readonly experiments = {
    list: async (): Promise<Experiment[]> =>
      (await this.request<{ experiments: Experiment[] }>('experiments'))
        .experiments,
    get: (name: string): Promise<Experiment> =>
      this.request(path('experiments', name)),
    stop: (name: string): Promise<Experiment> =>
      this.request(path('experiments', name, 'stop'), { method: 'POST' }),
    resume: (
      name: string,
      request: ResumeExperimentRequest = {}
    ): Promise<Experiment> =>
      this.request(path('experiments', name, 'resume'), {
        method: 'POST',
        body: JSON.stringify(request)
      })
  };

  /**
   * Deployments: list, create, canary, show, logs, metrics history, promote, delete, and predict through the gateway.
   */
  readonly deployments = {
    list: async (): Promise<Deployment[]> =>
      (await this.request<{ deployments: Deployment[] }>('deployments'))
        .deployments,
    create: (request: DeploymentRequest): Promise<Deployment> =>
      this.request('deployments', {
        method: 'POST',
        body: JSON.stringify(request)
      }),
    canary: (name: string, request: CanaryRequest): Promise<Deployment> =>
      this.request(path('deployments', name, 'canary'), {
        method: 'POST',
        body: JSON.stringify(request)
      }),
    get: (name: string): Promise<Deployment> =>
      this.request(path('deployments', name)),
    logs: (name: string, lines: number): Promise<DeploymentLogs> =>
      this.request(path('deployments', name, 'logs') + query({ lines })),
    metrics: (name: string, since: string): Promise<DeploymentMetricsHistory> =>
      this.request(path('deployments', name, 'metrics') + query({ since })),
    promote: (name: string): Promise<Deployment> =>
      this.request(path('deployments', name, 'promote'), { method: 'POST' }),
    delete: (name: string): Promise<Deleted> =>
      this.request(path('deployments', name), { method: 'DELETE' }),
    predict: (name: string, file: Blob): Promise<IPrediction> =>
      this.predict(name, file)
  };

  /**
   * The URL of a server path (as the API answers them) that an <img> can load.
   *
   * The path leads to this page's own server, so the browser's cookie authenticates it:
   * no token ever goes into a URL (under the hub, the user's server forwards it to the service).
   */
  mediaURL(serverPath: string): string {
    const origin = new URL(this.serverSettings.baseUrl, window.location.href)
      .origin;
    return new URL(serverPath, origin).toString();
  }

  private request<T>(endPoint: string, init: RequestInit = {}): Promise<T> {
    return requestAPI<T>(this.serverSettings, endPoint, init);
  }

  /**
   * Send a file's bytes to a deployment; the version that answered is in a header.
   */
  private async predict(name: string, file: Blob): Promise<IPrediction> {
    const settings = this.serverSettings;
    const url = URLExt.join(
      settings.baseUrl,
      API_NAMESPACE,
      path('deployments', name, 'predict')
    );
    let response: Response;
    try {
      response = await ServerConnection.makeRequest(
        url,
        {
          method: 'POST',
          body: file,
          headers: {
            'Content-Type': file.type || 'application/octet-stream'
          }
        },
        settings
      );
    } catch (error) {
      throw new KPLApiError(
        `Cannot reach the KPL Lab server at ${url}: ${String(error)}`,
        0
      );
    }
    const text = await response.text();
    if (!response.ok) {
      throw KPLApiError.fromResponse(
        response.status,
        response.statusText,
        text,
        url
      );
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw new KPLApiError(
        `Deployment ${name} answered with a body that is not JSON`,
        response.status
      );
    }
    return {
      response: body,
      modelVersion: response.headers.get('X-KPL-Model-Version') ?? ''
    };
  }

  /**
   * Upload an archive as a new dataset version, reporting the fraction sent.
   */
  private upload(
    file: Blob & { name?: string },
    options: IUploadOptions,
    onProgress: (fraction: number) => void
  ): Promise<DatasetVersion> {
    return this.send(
      'datasets' + query({ ...options, filename: file.name }),
      file,
      onProgress
    );
  }

  /**
   * POST a file as the raw body, reporting the fraction sent.
   *
   * XMLHttpRequest, because fetch() reports no upload progress.
   */
  private send<T>(
    endPoint: string,
    file: Blob,
    onProgress: (fraction: number) => void
  ): Promise<T> {
    const settings = this.serverSettings;
    const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
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
        reject(new KPLApiError(`Cannot reach the KPL Lab server at ${url}`, 0));
      xhr.onload = () => {
        if (xhr.status >= 200 && xhr.status < 300) {
          resolve(JSON.parse(xhr.responseText) as T);
        } else {
          reject(
            KPLApiError.fromResponse(
              xhr.status,
              xhr.statusText,
              xhr.responseText,
              url
            )
          );
        }
      };
      xhr.send(file);
    });
  }
}
