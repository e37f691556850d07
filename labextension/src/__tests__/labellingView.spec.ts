import { ServerConnection } from '@jupyterlab/services';

import { KPLClient } from '../api';
import { LabellingView } from '../labellingView';

const BOX = {
  type: 'box',
  class_name: 'red',
  xmin: 1,
  ymin: 1,
  xmax: 5,
  ymax: 5
};

const task = (kind: string) => ({
  name: 'colours',
  kind,
  dataset: 'squares:abc',
  content_field: 'content',
  label_schema: {
    classes: [
      { name: 'red', children: [], color: '#ff0000' },
      { name: 'green', children: [], color: '#00ff00' }
    ],
    keypoints: [],
    skeleton: []
  },
  progress: { percent: 0, percent_accepted: 0 }
});

const record = (n: number, label: unknown = null) => ({
  record: n,
  part: 'root',
  index: n,
  assignee: null,
  fields: { path: `sq/${n}.png` },
  label,
  // record 1 has a suggestion of pre-labelling run 4
  suggestion:
    n === 1
      ? {
          run_id: 4,
          value: {
            objects: [{ ...BOX, score: 0.4 }],
            class_name: null,
            width: 16,
            height: 12
          },
          score: 0.4
        }
      : null
});

interface ISent {
  method: string;
  path: string;
  body: unknown;
}

/**
 * A server of task `colours` (records 0 and 1 to label) that answers saves with `saveStatus`.
 */
function client(
  kind: string,
  sent: ISent[],
  saveStatus = 200,
  label: unknown = null
): KPLClient {
  return new KPLClient(
    ServerConnection.makeSettings({
      baseUrl: 'http://localhost:8888/',
      fetch: async (input: RequestInfo | URL, init?: RequestInit) => {
        const request = new Request(input, init);
        const url = new URL(request.url);
        const path = url.pathname.replace(
          '/kpl/api/annotation/tasks/colours',
          ''
        );
        const body = request.method === 'PUT' ? await request.json() : null;
        sent.push({ method: request.method, path, body });
        const answer = (status: number, value: unknown) =>
          new Response(JSON.stringify(value), { status });
        if (path === '') {
          return answer(200, task(kind));
        }
        if (path === '/queue') {
          const unlabelled = url.searchParams.get('state') === 'unlabelled';
          return answer(200, {
            records: unlabelled ? [{ record: 0 }, { record: 1 }] : [],
            next: null
          });
        }
        const match = /^\/records\/(\d+)(\/label)?$/.exec(path);
        if (match && !match[2]) {
          return answer(
            200,
            record(Number(match[1]), Number(match[1]) === 0 ? label : null)
          );
        }
        if (match && saveStatus === 409) {
          return answer(409, {
            error: 'Conflict',
            message:
              'record 0: bob saved it at 2026-11-29 03:00:00 UTC (version 1)',
            field: 'version',
            errors: []
          });
        }
        if (match) {
          const saved = body as { value: unknown; version: number };
          return answer(200, {
            record: Number(match[1]),
            value: saved.value,
            version: saved.version + 1,
            state: 'labelled',
            comment: ''
          });
        }
        return answer(404, { error: 'NotFound', message: path, errors: [] });
      }
    })
  );
}

const press = async (
  view: LabellingView,
  key: string,
  more: KeyboardEventInit = {}
) => {
  view.node.dispatchEvent(
    new KeyboardEvent('keydown', { key, bubbles: true, ...more })
  );
  await view.pending;
};

describe('the labelling view', () => {
  it('labels a class task by number, saving over the version loaded and moving on', async () => {
    const sent: ISent[] = [];
    const view = new LabellingView(client('image_class', sent), 'colours');
    await view.ready;
    expect(view.state.record?.record).toBe(0);
    await press(view, '2');
    const saves = sent.filter(s => s.method === 'PUT');
    expect(saves).toEqual([
      {
        method: 'PUT',
        path: '/records/0/label',
        body: {
          value: { class_name: 'green', subclass: null, dropped: false },
          version: 0,
          suggestion_run: null
        }
      }
    ]);
    expect(view.state.record?.record).toBe(1);
    expect(sent.filter(s => s.path === '/records/1')).toHaveLength(1); // fetched ahead once, shown from there
    await press(view, '3'); // no third class: nothing happens
    await press(view, 'ArrowLeft'); // nothing changed on record 1: no save
    expect(view.state.record?.record).toBe(0);
    expect(sent.filter(s => s.method === 'PUT')).toHaveLength(1);
    view.dispose();
  });

  it('stays on the record and says so when someone saved it first', async () => {
    const sent: ISent[] = [];
    const view = new LabellingView(client('image_class', sent, 409), 'colours');
    await view.ready;
    await press(view, '1');
    expect(view.state.record?.record).toBe(0);
    expect(view.state.message).toBe(
      'Not saved: record 0: bob saved it at 2026-11-29 03:00:00 UTC (version 1)'
    );
    view.dispose();
  });

  it('removes a box, undoes and redoes it, and saves the change on next', async () => {
    const sent: ISent[] = [];
    const saved = {
      value: { objects: [BOX], width: 16, height: 12 },
      version: 3,
      state: 'rejected',
      comment: 'the box is too small'
    };
    const view = new LabellingView(
      client('boxes', sent, 200, saved),
      'colours'
    );
    await view.ready;
    expect(view.state.message).toBe('Reviewer: the box is too small');
    await press(view, 'Backspace');
    expect(view.state.editor.value.objects).toEqual([]);
    await press(view, 'z', { ctrlKey: true });
    expect(view.state.editor.value.objects).toEqual([BOX]);
    await press(view, 'z', { ctrlKey: true, shiftKey: true });
    expect(view.state.editor.value.objects).toEqual([]);
    await press(view, '2'); // a box task draws the next box with class 2
    expect(view.state.classIndex).toBe(1);
    await press(view, 'n');
    const saves = sent.filter(s => s.method === 'PUT');
    expect(saves.map(s => s.body)).toEqual([
      {
        value: { objects: [], width: 16, height: 12 },
        version: 3,
        suggestion_run: null
      }
    ]);
    expect(view.state.record?.record).toBe(1);
    await press(view, 'a'); // its suggestion, without the model's score, saved naming its run
    expect(view.state.editor.value.objects).toEqual([BOX]);
    await press(view, 's');
    expect(sent.filter(s => s.method === 'PUT').map(s => s.body)[1]).toEqual({
      value: { objects: [BOX], class_name: null, width: 16, height: 12 },
      version: 0,
      suggestion_run: 4
    });
    view.dispose();
  });
});
