import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import createClient, {
  Client,
  createQuerySerializer,
  Middleware
} from 'openapi-fetch';

import type { IErrorBody, IFieldError } from './api';
import type { paths } from './generated/api';

/**
 * The URL namespace of the KPL Lab REST API on the Jupyter server.
 */
export const API_NAMESPACE = 'kpl/api';

/**
 * An error answered by the KPL Lab REST API, or a failure to reach it (status 0: no answer,
 * or an answer that is not the API's JSON, such as a proxy's page).
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
 * The URL of the KPL Lab REST API on the server of `settings`.
 */
export function apiURL(settings: ServerConnection.ISettings): string {
  return URLExt.join(settings.baseUrl, API_NAMESPACE);
}

/**
 * The KPL Lab REST API as openapi-fetch calls it: paths, parameters and bodies typed by the
 * generated `paths` of docs/openapi.yaml, JSON answers.
 */
export type KPLApi = Client<paths, 'application/json'>;

/**
 * The client of the KPL Lab REST API under the app's server settings.
 *
 * Every request goes through ServerConnection.makeRequest, as JupyterLab's own do, so the
 * base URL, token, XSRF cookie and fetch options of the settings hold in JupyterLab and under
 * the hub alike. A failure throws a KPLApiError.
 */
export function createAPI(settings: ServerConnection.ISettings): KPLApi {
  const api = createClient<paths, 'application/json'>({
    baseUrl: apiURL(settings),
    fetch: serverFetch(settings),
    querySerializer: withoutEmptyValues
  });
  api.use(failures);
  return api;
}

/**
 * A fetch for openapi-fetch that sends its request through ServerConnection with `settings`.
 *
 * `send` is the fetch that sends the request once it carries the server's credentials: the
 * settings' own, or sendFile's for a file.
 */
export function serverFetch(
  settings: ServerConnection.ISettings,
  send: ServerConnection.ISettings['fetch'] = settings.fetch
): (request: Request) => Promise<Response> {
  return async request => {
    // read back as bytes: Firefox has no Request.body, and GET must have none
    const body = await request.blob();
    return ServerConnection.makeRequest(
      request.url,
      {
        method: request.method,
        headers: request.headers,
        body: body.size > 0 ? body : undefined,
        signal: request.signal
      },
      { ...settings, fetch: send }
    );
  };
}

/**
 * A fetch that sends `file` as the request's body by XMLHttpRequest, reporting the fraction
 * sent: fetch() reports no upload progress, and the file is read from disk as it goes.
 */
export function sendFile(
  file: Blob,
  onProgress: (fraction: number) => void
): ServerConnection.ISettings['fetch'] {
  return (input, init) =>
    new Promise((resolve, reject) => {
      const request = new Request(input, init);
      const xhr = new XMLHttpRequest();
      xhr.open(request.method, request.url);
      request.headers.forEach((value, name) =>
        xhr.setRequestHeader(name, value)
      );
      xhr.upload.onprogress = event => {
        if (event.lengthComputable && event.total > 0) {
          onProgress(event.loaded / event.total);
        }
      };
      xhr.onerror = () => reject(new TypeError('the request failed'));
      xhr.onload = () =>
        resolve(
          new Response(xhr.responseText === '' ? null : xhr.responseText, {
            status: xhr.status,
            statusText: xhr.statusText,
            headers: responseHeaders(xhr.getAllResponseHeaders())
          })
        );
      xhr.send(file);
    });
}

/**
 * The headers of an XMLHttpRequest's answer, from its `name: value` lines.
 */
function responseHeaders(lines: string): Headers {
  const headers = new Headers();
  for (const line of lines.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) {
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
  }
  return headers;
}

const serializeQuery = createQuerySerializer();

/**
 * A query string without the empty values: a cleared search box asks for everything.
 */
export function withoutEmptyValues(query: Record<string, unknown>): string {
  return serializeQuery(
    Object.fromEntries(
      Object.entries(query).filter(([, value]) => value !== '')
    )
  );
}

/**
 * Failures as KPLApiError: an error answer, with its body's kind, message and fields, or no
 * answer at all (status 0).
 */
const failures: Middleware = {
  async onResponse({ request, response }) {
    if (!response.ok) {
      throw KPLApiError.fromResponse(
        response.status,
        response.statusText,
        await response.text(),
        request.url
      );
    }
    return undefined;
  },
  onError({ request, error }) {
    return error instanceof KPLApiError
      ? error
      : new KPLApiError(
          `Cannot reach the KPL Lab server at ${request.url}: ${String(error)}`,
          0
        );
  }
};

/**
 * What a call of the client answers on success: its parsed body.
 */
export type Answer<R> = R extends { data?: infer D }
  ? Exclude<D, undefined>
  : never;

/**
 * A call of the client, a body that is not JSON thrown as a KPLApiError.
 */
export async function answered<R>(path: string, call: Promise<R>): Promise<R> {
  try {
    return await call;
  } catch (error) {
    if (error instanceof SyntaxError) {
      throw new KPLApiError(
        `The KPL Lab server answered ${path} with a body that is not JSON`,
        0
      );
    }
    throw error;
  }
}

/**
 * A method of the client (GET, POST, ...) that answers the parsed body alone.
 *
 * Its signature is the method's own, generic in the path, so the compiler checks every path,
 * parameter and body against docs/openapi.yaml.
 */
export function answering<A extends [string, ...unknown[]], R>(
  method: (...args: A) => Promise<R>
): (...args: A) => Promise<Answer<R>> {
  return async (...args) =>
    ((await answered(args[0], method(...args))) as { data?: unknown })
      .data as Answer<R>;
}
