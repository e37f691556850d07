import { ServerConnection } from '@jupyterlab/services';

import { KPLClient } from '../api';
import {
  aliasList,
  canaryRequest,
  deploymentNameFor,
  deployRequest,
  formatCount,
  formatMetric,
  formatTensor,
  modelNameFromFile,
  parseLineage,
  splitRef,
  storedFileName
} from '../modelInfo';

const LINEAGE = {
  job_id: 'a1b2c3',
  algorithm: 'image-classification:9f8e',
  function: 'train',
  inputs: { data: 'digits:1234abcd', checkpoint: 'net:77aa' },
  parameters: { epochs: 2, lr: 0.01 },
  metrics: { 'loss/val': 0.123456, 'accuracy/val': 0.9, 'steps/total': 40 },
  output: 'model'
};

describe('parseLineage', () => {
  it('gives each input its kind from the job and puts metrics sorted last', () => {
    const lineage = parseLineage(LINEAGE, {
      inputs: {
        data: {
          ref: 'dataset:digits',
          kind: 'dataset',
          version_id: 1,
          version: 'digits:1234abcd'
        },
        checkpoint: {
          ref: 'model:net',
          kind: 'model',
          version_id: 2,
          version: 'net:77aa'
        }
      }
    });
    expect(lineage).not.toBeNull();
    expect(lineage!.jobId).toBe('a1b2c3');
    expect(lineage!.algorithm).toBe('image-classification:9f8e');
    expect(lineage!.output).toBe('model');
    expect(lineage!.inputs).toEqual([
      { key: 'data', name: 'digits', version: '1234abcd', kind: 'dataset' },
      { key: 'checkpoint', name: 'net', version: '77aa', kind: 'model' }
    ]);
    expect(lineage!.parameters).toEqual([
      ['epochs', 2],
      ['lr', 0.01]
    ]);
    expect(lineage!.metrics.map(([name]) => name)).toEqual([
      'accuracy/val',
      'loss/val',
      'steps/total'
    ]);
  });

  it('leaves the kinds empty when the job is gone', () => {
    const lineage = parseLineage(LINEAGE, null);
    expect(lineage!.inputs.map(input => input.kind)).toEqual(['', '']);
  });

  it('answers null for an uploaded version and survives odd values', () => {
    expect(parseLineage(null)).toBeNull();
    const odd = parseLineage({ inputs: ['x'], metrics: { a: 'high', b: 1 } });
    expect(odd!.jobId).toBe('');
    expect(odd!.inputs).toEqual([]);
    expect(odd!.metrics).toEqual([['b', 1]]);
  });
});

describe('formatting', () => {
  it('splits a reference at its first colon', () => {
    expect(splitRef('net:3f2a')).toEqual({ name: 'net', version: '3f2a' });
    expect(splitRef('net')).toEqual({ name: 'net', version: '' });
  });

  it('writes metrics, counts and tensors short', () => {
    expect(formatMetric(0.123456)).toBe('0.1235');
    expect(formatMetric(40)).toBe('40');
    expect(formatCount(812)).toBe('812');
    expect(formatCount(34_500)).toBe('34.5k');
    expect(formatCount(1_230_000)).toBe('1.2M');
    expect(formatCount(null)).toBe('');
    expect(
      formatTensor({
        name: 'image',
        shape: ['batch', 1, 16, 16],
        dtype: 'float'
      })
    ).toBe('float[batch×1×16×16]');
  });

  it('lists aliases sorted with their versions', () => {
    expect(aliasList({ aliases: { production: 'b', canary: 'a' } })).toEqual([
      { alias: 'canary', version: 'a' },
      { alias: 'production', version: 'b' }
    ]);
  });

  it('names uploads after the file', () => {
    expect(modelNameFromFile('resnet 18.onnx')).toBe('resnet-18');
    expect(modelNameFromFile('weights.tar.gz')).toBe('weights');
    expect(modelNameFromFile('.onnx')).toBe('model');
    expect(storedFileName('my model (1).pt')).toBe('my_model_1_.pt');
    expect(storedFileName('model.onnx')).toBe('model.onnx');
    expect(deploymentNameFor('image classification')).toBe(
      'image-classification'
    );
  });
});

describe('dialog requests', () => {
  it('builds a deployment request or names the bad field', () => {
    expect(deployRequest('net:3f2a', { name: ' api ', replicas: '2' })).toEqual(
      { name: 'api', model: 'net:3f2a', replicas: 2 }
    );
    expect(deployRequest('net:3f2a', { name: '-api', replicas: '1' })).toMatch(
      /^deployment name "-api"/
    );
    expect(
      deployRequest('net:3f2a', { name: 'modèle', replicas: '1' })
    ).toMatch(/^deployment name "modèle": use 1-100 ASCII letters/);
    expect(deployRequest('net:3f2a', { name: 'api', replicas: '0' })).toMatch(
      /^replicas "0"/
    );
    expect(deployRequest('net:3f2a', { name: 'api', replicas: '1.5' })).toMatch(
      /whole number/
    );
  });

  it('builds a canary request or names the bad field', () => {
    expect(
      canaryRequest('net:77aa', { deployment: 'api', weight: '20' })
    ).toEqual({
      deployment: 'api',
      request: { model: 'net:77aa', weight: 20 }
    });
    expect(canaryRequest('net:77aa', { deployment: '', weight: '20' })).toMatch(
      /deploy the model first/
    );
    expect(
      canaryRequest('net:77aa', { deployment: 'api', weight: '101' })
    ).toMatch(/^weight "101"/);
  });
});

describe('KPLClient.models', () => {
  const calls: Request[] = [];
  const client = new KPLClient(
    ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/lab-base/',
      token: 'secret',
      fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
        calls.push(new Request(input, init));
        return new Response(JSON.stringify({ name: 'net', aliases: {} }), {
          status: 200
        });
      }
    })
  );
  const urlOf = (request: Request) => request.url.replace(/[?&]\d+$/, '');

  beforeEach(() => {
    calls.length = 0;
  });

  it('points and removes aliases with PUT and DELETE', async () => {
    await client.PUT('/models/{name}/aliases/{alias}', {
      params: { path: { name: 'net', alias: 'production' } },
      body: { version: '3f2a' }
    });
    await client.DELETE('/models/{name}/aliases/{alias}', {
      params: { path: { name: 'net', alias: 'canary' } }
    });
    expect(calls.map(call => [call.method, urlOf(call)])).toEqual([
      [
        'PUT',
        'http://localhost:8888/lab-base/kpl/api/models/net/aliases/production'
      ],
      [
        'DELETE',
        'http://localhost:8888/lab-base/kpl/api/models/net/aliases/canary'
      ]
    ]);
    expect(await calls[0].json()).toEqual({ version: '3f2a' });
  });

  it('deletes one version or the whole model', async () => {
    await client.DELETE('/models/{name}/versions/{version}', {
      params: { path: { name: 'net', version: '3f2a' } }
    });
    await client.DELETE('/models/{name}', {
      params: { path: { name: 'net' } }
    });
    expect(calls.map(urlOf)).toEqual([
      'http://localhost:8888/lab-base/kpl/api/models/net/versions/3f2a',
      'http://localhost:8888/lab-base/kpl/api/models/net'
    ]);
  });

  it('creates deployments and canaries on their routes', async () => {
    await client.POST('/deployments', {
      body: { name: 'api', model: 'net:3f2a', replicas: 1 }
    });
    await client.POST('/deployments/{name}/canary', {
      params: { path: { name: 'api' } },
      body: { model: 'net:77aa', weight: 20 }
    });
    expect(calls.map(call => [call.method, urlOf(call)])).toEqual([
      ['POST', 'http://localhost:8888/lab-base/kpl/api/deployments'],
      ['POST', 'http://localhost:8888/lab-base/kpl/api/deployments/api/canary']
    ]);
    expect(await calls[1].json()).toEqual({ model: 'net:77aa', weight: 20 });
  });

  it('links downloads without the token', () => {
    const url = client.link('/models/{name}/versions/{version}/download', {
      params: { path: { name: 'net', version: '3f2a' } }
    });
    expect(url).toBe(
      'http://localhost:8888/lab-base/kpl/api/models/net/versions/3f2a/download'
    );
    expect(url).not.toContain('secret');
  });
});
