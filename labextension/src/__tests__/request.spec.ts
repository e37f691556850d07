import { ServerConnection } from '@jupyterlab/services';

import { KPLClient } from '../api';
import { KPLApiError, requestAPI } from '../request';

/**
 * The URL of a request without the cache-busting number ServerConnection appends.
 */
const urlOf = (request: Request) => request.url.replace(/[?&]\d+$/, '');

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
 * Server settings whose fetch answers `status` with `body`, recording the requests.
 */
function settings(
  status: number,
  body: unknown,
  calls: Request[] = []
): ServerConnection.ISettings {
  return ServerConnection.makeSettings({
    baseUrl: 'http://localhost:8888/lab-base/',
    fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
      calls.push(new Request(input, init));
      return new Response(
        typeof body === 'string' ? body : JSON.stringify(body),
        { status, statusText: status === 200 ? 'OK' : 'Bad Request' }
      );
    }
  });
}

describe('requestAPI', () => {
  it('calls the KPL API under the base URL of the server settings', async () => {
    const calls: Request[] = [];
    const answer = await requestAPI<{ version: string }>(
      settings(200, { name: 'kpl-lab', version: '1.2.3' }, calls),
      'version'
    );
    expect(answer.version).toBe('1.2.3');
    expect(urlOf(calls[0])).toBe(
      'http://localhost:8888/lab-base/kpl/api/version'
    );
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
      requestAPI(settings(400, body), 'jobs', {
        method: 'POST',
        body: '{}'
      })
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
      requestAPI(
        settings(400, {
          error: 'BadRequest',
          message: 'bad',
          errors: [{ field: 'inputs.data', message: 'no such dataset' }]
        }),
        'jobs'
      )
    );
    expect(error.field).toBe('inputs.data');
  });

  it('keeps a body that is not JSON as the message', async () => {
    const error = await failure(
      requestAPI(settings(502, 'Bad Gateway from the proxy'), 'jobs')
    );
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(502);
    expect(error.message).toBe('Bad Gateway from the proxy');
    expect(error.errors).toEqual([]);
  });

  it('answers status 0 when the server cannot be reached', async () => {
    const unreachable = ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: () => Promise.reject(new TypeError('Failed to fetch'))
    });
    const error = await failure(requestAPI(unreachable, 'version'));
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.status).toBe(0);
    expect(error.message).toContain('Cannot reach the KPL Lab server');
  });

  it('fails on a success body that is not JSON', async () => {
    const error = await failure(requestAPI(settings(200, '<html>'), 'version'));
    expect(error).toBeInstanceOf(KPLApiError);
    expect(error.message).toContain('not JSON');
  });
});

describe('KPLClient', () => {
  it('builds paths and queries from names, leaving empty values out', async () => {
    const calls: Request[] = [];
    const client = new KPLClient(settings(200, { jobs: [] }, calls));
    await client.jobs.list();
    await client.jobs.list('running');
    await client.jobs.metrics('a/b', 500);
    expect(
      calls.map(call => urlOf(call).replace(/^.*\/kpl\/api\//, ''))
    ).toEqual([
      'jobs',
      'jobs?state=running',
      'jobs/a%2Fb/metrics?max_points=500'
    ]);
  });

  it('deletes a dataset with DELETE', async () => {
    const calls: Request[] = [];
    const client = new KPLClient(settings(200, { deleted: ['x:1'] }, calls));
    expect(await client.datasets.delete('x')).toEqual({ deleted: ['x:1'] });
    expect(calls[0].method).toBe('DELETE');
  });
});
