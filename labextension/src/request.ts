import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * The URL namespace of the KPL Lab REST API on the Jupyter server.
 */
export const API_NAMESPACE = 'kpl/api';

/**
 * An error answered by the KPL Lab REST API (or a failure to reach it).
 *
 * `reason` is the error kind (BadRequest, NotFound, ...) and `field` the request field
 * at fault, when the server names one.
 */
export class ServerError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly reason: string = '',
    readonly traceback: string = '',
    readonly field: string | null = null
  ) {
    super(message);
    this.name = 'ServerError';
  }
}

/**
 * The JSON body of an error answered by a Jupyter server API handler.
 */
interface IErrorBody {
  message?: string;
  error?: string;
  field?: string | null;
  reason?: string;
  traceback?: string;
}

/**
 * Call the KPL Lab REST API and return its JSON answer.
 *
 * @param endPoint path under `/kpl/api/`, e.g. `version`
 * @param init options of the request (method, body, ...)
 * @param settings server settings; the default connection when omitted
 * @throws {ServerError} when the server cannot be reached or answers an error
 */
export async function requestAPI<T>(
  endPoint: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, endPoint);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerError(
      `Cannot reach the KPL Lab server at ${url}: ${String(error)}`,
      0
    );
  }

  const text = await response.text();
  let data: unknown = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      if (response.ok) {
        throw new ServerError(
          `KPL Lab server answered ${url} with a body that is not JSON`,
          response.status
        );
      }
      data = { message: text };
    }
  }

  if (!response.ok) {
    const body = (data ?? {}) as IErrorBody;
    throw new ServerError(
      body.message || `${response.status} ${response.statusText} from ${url}`,
      response.status,
      body.error ?? body.reason ?? '',
      body.traceback ?? '',
      body.field ?? null
    );
  }
  return data as T;
}
