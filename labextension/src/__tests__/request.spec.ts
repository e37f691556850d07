import { ServerConnection } from '@jupyterlab/services';

import { KPLClient } from '../api';
import { answered, KPLApiError } from '../request';

const BASE = 'http://localhost:8888/lab-base/';

/**
 * The URL of a request without the cache-busting number ServerConnection appends.
 */
const urlOf = (request: Request) => request.url.replace(/[?&]\d+$/, '');

/**
 * The path and query of a request under the API, without the cache-busting number.
 */
const routeOf = (request: Request) =>
  urlOf(request).replace(`${BASE}kpl/api`, '');

/**
 * The error a request failed with.
 */
async function failure(request: Promise<unknown>): Promise<KPLApiError> {
  try {
    await request;
  } catch (error) {
    return error as KPLApiError;
  }
  throw new Error('the request succeeded');
}

/**
 * A client whose server answers `status` with `body`, recording the requests it sends.
 */
function client(
  status: number,
  body: unknown,
  calls: Request[] = [],
  token = ''
): KPLClient {
  return new KPLClient(
    ServerConnection.makeSettings({
      baseUrl: BASE,
      token,
      fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
        calls.push(new Request(input, init));
        return new Response(
          typeof body === 'string' ? body : JSON.stringify(body),
          { status, statusText: status === 200 ? 'OK' : 'Bad Request' }
        );
      }
    })
  );
}

describe('KPLClient', () => {
  it('calls the KPL API under the base URL with the server credentials', async () => {
    const calls: Request[] = [];
    document.cookie = '_xsrf=xsrf-cookie';
    try {
      const answer = await client(
        200,
        { name: 'kpl-lab', version: '1.2.3' },
        calls,
        'secret'
      ).GET('/version');
      expect(answer.version).toBe('1.2.3');
    } finally {
      document.cookie = '_xsrf=; expires=Thu, 01 Jan 1970 00:00:00 GMT';
    }
    expect(urlOf(calls[0])).toBe(`${BASE}kpl/api/version`);
    expect(calls[0].headers.get('Authorization')).toBe('token secret');
    expect(calls[0].headers.get('X-XSRFToken')).toBe('xsrf-cookie');
    expect(calls[0].credentials).toBe('same-origin');
  });

  it('builds paths and queries, leaving undefined and empty values out', async () => {
    const calls: Request[] = [];
    const api = client(200, { jobs: [] }, calls);
    await api.GET('/jobs');
    await api.GET('/jobs', { params: { query: { state: undefined } } });
    await api.GET('/jobs', { params: { query: { state: 'running' } } });
    await api.GET('/datasets', { params: { query: { q: '' } } });
    await api.GET('/datasets', { params: { query: { q: 'digits & co' } } });
    await api.GET('/jobs/{job_id}/metrics', {
      params: { path: { job_id: 'a/b' }, query: { max_points: 500 } }
    });
    expect(calls.map(routeOf)).toEqual([
      '/jobs',
      '/jobs',
      '/jobs?state=running',
      '/datasets',
      '/datasets?q=digits%20%26%20co',
      '/jobs/a%2Fb/metrics?max_points=500'
    ]);
    expect(calls.map(call => call.method)).toEqual(Array(6).fill('GET'));
  });

  it('sends a JSON body with its method', async () => {
    const calls: Request[] = [];
    const api = client(200, { name: 'net', aliases: {} }, calls);
    await api.PUT('/models/{name}/aliases/{alias}', {
      params: { path: { name: 'net', alias: 'production' } },
      body: { version: '3f2a' }
    });
    await api.DELETE('/datasets/{name}', { params: { path: { name: 'x' } } });
    expect(calls.map(call => [call.method, routeOf(call)])).toEqual([
      ['PUT', '/models/net/aliases/production'],
      ['DELETE', '/datasets/x']
    ]);
    expect(calls[0].headers.get('Content-Type')).toBe('application/json');
    expect(await calls[0].json()).toEqual({ version: '3f2a' });
    expect(await calls[1].text()).toBe('');
  });

  it('throws a KPLApiError with every field error of the body', async () => {
    const body = {
      error: 'BadRequest',
      message: 'steps: expected an integer',
      field: 'parameters.steps',
      errors: [
        { field: 'parameters.steps', message: 'expected an integer' },
        { field: 'resources.cpu', message: 'more than the quota' }
      ]
    };
    const error = await failure(
      client(400, body).POST('/jobs', { body: { algorithm: 'a:1' } })
    );
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(400);
    expect(error.error).toBe('BadRequest');
    expect(error.message).toBe('steps: expected an integer');
    expect(error.field).toBe('parameters.steps');
    expect(error.errors).toEqual(body.errors);
  });

  it('takes the first listed field when the body names none', async () => {
    const error = await failure(
      client(400, {
        error: 'BadRequest',
        message: 'bad',
        errors: [{ field: 'inputs.data', message: 'no such dataset' }]
      }).GET('/jobs')
    );
    expect(error.field).toBe('inputs.data');
  });

  it('keeps an error body that is not JSON as the message', async () => {
    const error = await failure(
      client(502, 'Bad Gateway from the proxy').GET('/jobs')
    );
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(502);
    expect(error.message).toBe('Bad Gateway from the proxy');
    expect(error.errors).toEqual([]);
  });

  it('answers status 0 when the server cannot be reached', async () => {
    const unreachable = new KPLClient(
      ServerConnection.makeSettings({
        baseUrl: BASE,
        fetch: () => Promise.reject(new TypeError('Failed to fetch'))
      })
    );
    const error = await failure(unreachable.GET('/version'));
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(0);
    expect(error.message).toContain('Cannot reach the KPL Lab server');
    expect(error.message).toContain(`${BASE}kpl/api/version`);
  });

  it('fails on a success body that is not JSON', async () => {
    const error = await failure(client(200, '<html>').GET('/version'));
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.message).toBe(
      'The KPL Lab server answered /version with a body that is not JSON'
    );
  });

  it('links a GET without the token', () => {
    const url = client(200, {}, [], 'secret').link(
      '/models/{name}/versions/{version}/download',
      { params: { path: { name: 'net', version: '3f2a' } } }
    );
    expect(url).toBe(`${BASE}kpl/api/models/net/versions/3f2a/download`);
    expect(url).not.toContain('secret');
  });
});

/**
 * An XMLHttpRequest that records what is sent and answers as `FakeXHR.answer` says.
 */
class FakeXHR {
  static sent: FakeXHR[] = [];
  static answer: (xhr: FakeXHR) => void = () => undefined;

  method = '';
  url = '';
  headers: Record<string, string> = {};
  body: unknown = null;
  status = 0;
  statusText = '';
  responseText = '';
  responseHeaders = '';
  upload: { onprogress: ((event: Partial<ProgressEvent>) => void) | null } = {
    onprogress: null
  };
  onload: (() => void) | null = null;
  onerror: (() => void) | null = null;

  open(method: string, url: string): void {
    this.method = method;
    this.url = url;
  }

  setRequestHeader(name: string, value: string): void {
    this.headers[name.toLowerCase()] = value;
  }

  getAllResponseHeaders(): string {
    return this.responseHeaders;
  }

  send(body: unknown): void {
    this.body = body;
    FakeXHR.sent.push(this);
    setTimeout(() => FakeXHR.answer(this), 0);
  }

  /**
   * Report the whole body sent, then answer `status` with `body` and `headers`.
   */
  respond(status: number, body: unknown, headers = ''): void {
    this.upload.onprogress?.({
      lengthComputable: true,
      loaded: 5,
      total: 10
    });
    this.upload.onprogress?.({
      lengthComputable: true,
      loaded: 10,
      total: 10
    });
    this.status = status;
    this.statusText = status < 300 ? 'Created' : 'Bad Request';
    this.responseText = JSON.stringify(body);
    this.responseHeaders = headers;
    this.onload?.();
  }
}

describe('KPLClient.fileBody', () => {
  const original = globalThis.XMLHttpRequest;
  const file = new File(['PK archive bytes'], 'digits v1.zip');

  beforeEach(() => {
    FakeXHR.sent = [];
    (globalThis as any).XMLHttpRequest = FakeXHR;
  });

  afterEach(() => {
    globalThis.XMLHttpRequest = original;
  });

  it('uploads the file itself with its query, credentials and progress', async () => {
    FakeXHR.answer = xhr =>
      xhr.respond(201, { name: 'digits', version: 'd1', ref: 'digits:d1' });
    const fractions: number[] = [];
    const api = client(200, {}, [], 'secret');
    const version = await api.POST('/datasets', {
      params: {
        query: { name: 'digits', format: 'imagefolder', filename: file.name }
      },
      ...api.fileBody(file, 'application/octet-stream', fraction =>
        fractions.push(fraction)
      )
    });
    expect(version.ref).toBe('digits:d1');
    expect(fractions).toEqual([0.5, 1]);
    const [xhr] = FakeXHR.sent;
    expect(xhr.method).toBe('POST');
    expect(xhr.url.replace(/&\d+$/, '')).toBe(
      `${BASE}kpl/api/datasets?name=digits&format=imagefolder&filename=digits%20v1.zip`
    );
    expect(xhr.body).toBe(file);
    expect(xhr.headers['content-type']).toBe('application/octet-stream');
    expect(xhr.headers['authorization']).toBe('token secret');
  });

  it('maps a refused upload to a KPLApiError naming the field', async () => {
    FakeXHR.answer = xhr =>
      xhr.respond(400, {
        error: 'BadRequest',
        message: 'digits v1.zip: entry ../x escapes the archive',
        field: 'body'
      });
    const api = client(200, {});
    const error = await failure(
      api.POST('/models', {
        params: { query: { name: 'net' } },
        ...api.fileBody(file, 'application/octet-stream')
      })
    );
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(400);
    expect(error.field).toBe('body');
    expect(error.message).toContain('escapes the archive');
  });

  it('answers status 0 when the upload cannot reach the server', async () => {
    FakeXHR.answer = xhr => xhr.onerror?.();
    const api = client(200, {});
    const error = await failure(
      api.POST('/models', {
        params: { query: { name: 'net' } },
        ...api.fileBody(file, 'application/octet-stream')
      })
    );
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(0);
  });

  it('gives a prediction its answer headers', async () => {
    FakeXHR.answer = xhr =>
      xhr.respond(
        200,
        { type: 'classification', class_name: '7' },
        'content-type: application/json\r\nx-kpl-model-version: net:3f2a\r\n'
      );
    const api = client(200, {});
    const image = new File(['png'], 'seven.png', { type: 'image/png' });
    const path = '/deployments/{name}/predict';
    const { data, response } = await answered(
      path,
      api.api.POST(path, {
        params: { path: { name: 'digits' } },
        ...api.fileBody(image, image.type)
      })
    );
    expect(data).toEqual({ type: 'classification', class_name: '7' });
    expect(response.headers.get('X-KPL-Model-Version')).toBe('net:3f2a');
    expect(FakeXHR.sent[0].headers['content-type']).toBe('image/png');
    expect(FakeXHR.sent[0].body).toBe(image);
  });
});
