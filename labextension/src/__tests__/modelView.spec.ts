import { ServerConnection } from '@jupyterlab/services';

import { KPLClient } from '../api';
import { parseLineage } from '../modelInfo';
import { IModelViewLinks, ModelView } from '../modelView';

const version = (v: string, lineage: Record<string, unknown> | null) => ({
  name: 'net',
  version: v,
  ref: `net:${v}`,
  description: '',
  size_bytes: 10,
  lineage,
  created: null,
  files: ['model.pt'],
  aliases: []
});

const V1 = version('aaa1', null);
const V2 = version('bbb2', {
  job_id: 'job7',
  inputs: { data: 'digits:d1' },
  metrics: { 'loss/val': 0.5 }
});

/**
 * A server with model net (versions aaa1, bbb2), job7 when `jobKnown`, recording paths.
 */
function client(jobKnown: boolean, paths: string[]): KPLClient {
  const answers: Record<string, unknown> = {
    '/kpl/api/models/net': {
      name: 'net',
      description: '',
      created: null,
      versions: [V1, V2],
      aliases: {}
    },
    '/kpl/api/models/net/versions/aaa1': V1,
    '/kpl/api/models/net/versions/bbb2': V2,
    '/kpl/api/models/net/versions/aaa1/structure': {
      ref: 'net:aaa1',
      files: []
    },
    '/kpl/api/models/net/versions/bbb2/structure': {
      ref: 'net:bbb2',
      files: []
    }
  };
  if (jobKnown) {
    answers['/kpl/api/jobs/job7'] = {
      id: 'job7',
      inputs: {
        data: {
          ref: 'dataset:digits',
          kind: 'dataset',
          version_id: 1,
          version: 'digits:d1'
        }
      }
    };
  }
  return new KPLClient(
    ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
        const path = new URL(new Request(input, init).url).pathname;
        paths.push(path);
        const body = answers[path];
        return body === undefined
          ? new Response(
              JSON.stringify({ error: 'NotFound', message: `no ${path}` }),
              { status: 404 }
            )
          : new Response(JSON.stringify(body), { status: 200 });
      }
    })
  );
}

const links: IModelViewLinks = {
  openJob: () => undefined,
  openDataset: () => undefined,
  openModel: () => undefined,
  openDeployment: () => undefined,
  changed: () => undefined
};

describe('the model view', () => {
  it('shows the latest version when none is named, with its job and structure', async () => {
    const paths: string[] = [];
    const view = new ModelView(client(true, paths), 'net', '', links);
    await view.load();
    expect(view.version).toBe('bbb2');
    expect(view.ref).toBe('net:bbb2');
    expect(view.structure?.ref).toBe('net:bbb2');
    expect(parseLineage(view.detail?.lineage, view.job)?.inputs).toEqual([
      { key: 'data', name: 'digits', version: 'd1', kind: 'dataset' }
    ]);
    expect(view.title.label).toBe('Model net:bbb2');
    expect(view.downloadURL).toBe(
      'http://localhost:8888/kpl/api/models/net/versions/bbb2/download'
    );
    view.dispose();
  });

  it('selects another version, fetching no job for an uploaded one', async () => {
    const paths: string[] = [];
    const view = new ModelView(client(true, paths), 'net', 'bbb2', links);
    await view.select('aaa1');
    expect(view.detail?.ref).toBe('net:aaa1');
    expect(view.structure?.ref).toBe('net:aaa1');
    expect(view.job).toBeNull();
    expect(view.error).toBe('');
    view.dispose();
  });

  it('keeps the lineage when the job is gone, without links', async () => {
    const paths: string[] = [];
    const view = new ModelView(client(false, paths), 'net', 'bbb2', links);
    await view.load();
    expect(paths).toContain('/kpl/api/jobs/job7');
    expect(view.error).toBe('');
    expect(parseLineage(view.detail?.lineage, view.job)?.inputs[0].kind).toBe(
      ''
    );
    view.dispose();
  });

  it('says why when the model is not there', async () => {
    const view = new ModelView(client(true, []), 'other', '', links);
    await view.load();
    expect(view.error).toBe('no /kpl/api/models/other');
    expect(view.model).toBeNull();
    view.dispose();
  });
});
