import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IErrorBody, IFieldError } from './api';

/**
 * The URL namespace of the KPL Lab REST API on the Jupyter server.
 */
export const API_NAMESPACE = 'kpl/api';

/**
 * An error answered by the KPL Lab REST API, or a failure to reach it (status 0).
 *
 * `error` is the kind (BadRequest, NotFound, ...), `field` the first request field at
 * fault and `errors` every field problem the server listed.
 */
export class KPLApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly error: string = '',
    readonly field: string | null = null,
    readonly errors: ReadonlyArray<IFieldError> = [],
    readonly traceback: string = ''
  ) {
    super(message);
    this.name = 'KPLApiError';
  }

  /**
   * The error of a failed answer from its status and body text.
   */
  static fromResponse(
    status: number,
    statusText: string,
    text: string,
    url: string
  ): KPLApiError {
    let body: Partial<IErrorBody> & { reason?: string; traceback?: string } =
      {};
    try {
      body = text ? JSON.parse(text) : {};
    } catch {
      body = { message: text };
    }
    const errors = body.errors ?? [];
    return new KPLApiError(
      body.message || `${status} ${statusText} from ${url}`,
      status,
      body.error ?? body.reason ?? '',
      body.field ?? errors[0]?.field ?? null,
      errors,
      body.traceback ?? ''
    );
  }
}

/**
 * Call the KPL Lab REST API and return its JSON answer.
 *
 * @param settings the server settings of the app (`app.serviceManager.serverSettings`)
 * @param endPoint path under `/kpl/api/`, e.g. `version`
 * @param init options of the request (method, body, ...)
 * @throws {KPLApiError} when the server cannot be reached or answers an error
 */
export async function requestAPI<T>(
  settings: ServerConnection.ISettings,
  endPoint: string,
  init: RequestInit = {}
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
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
  if (text.length === 0) {
    return null as T;
  }
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new KPLApiError(
      `KPL Lab server answered ${url} with a body that is not JSON`,
      response.status
    );
  }
}
