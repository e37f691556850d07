import { ServerConnection } from '@jupyterlab/services';
import { createFinalURL, defaultPathSerializer } from 'openapi-fetch';

import {
  components,
  jobStateValues,
  paths,
  pathsDatasetsPostParametersQueryFormatValues
} from './generated/api';
import {
  answering,
  apiURL,
  createAPI,
  KPLApi,
  sendFile,
  serverFetch,
  withoutEmptyValues
} from './request';

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
export type ExperimentRequest = Schemas['ExperimentRequest'];
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
 * The paths of docs/openapi.yaml that answer a GET, and that GET's parameters.
 */
type GetPath = {
  [P in keyof paths]: paths[P] extends { get: unknown } ? P : never;
}[keyof paths];
type GetParameters<P extends GetPath> = paths[P]['get'] extends {
  parameters: infer T;
}
  ? T
  : never;

/**
 * The KPL Lab REST API, called with the server settings of the app.
 *
 * `GET`, `POST`, `PUT` and `DELETE` are openapi-fetch's methods answering the parsed body:
 * `client.GET('/jobs/{job_id}', { params: { path: { job_id } } })`; the compiler checks the
 * path, its parameters and the body against the generated `paths`. `api` is the openapi-fetch
 * client itself, for an answer's headers (through `answered`). Every failure is a KPLApiError.
 */
export class KPLClient {
  constructor(readonly serverSettings: ServerConnection.ISettings) {}

  readonly api: KPLApi = createAPI(this.serverSettings);
  readonly GET = answering(this.api.GET);
  readonly POST = answering(this.api.POST);
  readonly PUT = answering(this.api.PUT);
  readonly DELETE = answering(this.api.DELETE);

  /**
   * The options of a call whose body is `file`, sent as it is, reporting the fraction sent.
   *
   * The file goes by sendFile's XMLHttpRequest, not inside openapi-fetch's Request, whose
   * body would be read into memory.
   */
  fileBody(
    file: Blob,
    contentType: string,
    onProgress: (fraction: number) => void = () => undefined
  ) {
    return {
      body: file,
      bodySerializer: () => undefined,
      headers: { 'Content-Type': contentType },
      fetch: serverFetch(this.serverSettings, sendFile(file, onProgress))
    };
  }

  /**
   * The URL of a GET that the browser follows itself (a download link).
   *
   * The browser's cookie authenticates it: no token ever goes into a URL.
   */
  link<P extends GetPath>(path: P, init: { params: GetParameters<P> }): string {
    return createFinalURL(path, {
      baseUrl: apiURL(this.serverSettings),
      params: init.params as Parameters<typeof createFinalURL>[1]['params'],
      querySerializer: withoutEmptyValues,
      pathSerializer: defaultPathSerializer
    });
  }

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
}
