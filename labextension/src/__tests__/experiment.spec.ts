import type { Experiment, Trial } from '../api';
import {
  formatParams,
  historySeries,
  searchParameters,
  searchSpace,
  trialRows,
  trialsDone
} from '../experiment';
import { searchRequest } from '../searchForm';

function trial(
  number: number,
  state: Trial['state'],
  value: number | null,
  params: Record<string, unknown> = { lr: 0.1 }
): Trial {
  return {
    number,
    state,
    job_id: `job-${number}`,
    params,
    value,
    reported: 0,
    created: null,
    finished: null
  };
}

const trials = [
  trial(2, 'complete', 0.5),
  trial(0, 'complete', 0.7),
  trial(1, 'pruned', 0.2),
  trial(3, 'complete', 0.9),
  trial(4, 'running', null),
  trial(5, 'failed', null)
];

describe('historySeries', () => {
  it('plots complete trials and the lowest value so far when minimizing', () => {
    const history = historySeries({
      objective: { metric: 'loss', direction: 'minimize' },
      trials
    });
    expect(history.objective).toEqual([
      [0, 0.7],
      [2, 0.5],
      [3, 0.9]
    ]);
    expect(history['best so far']).toEqual([
      [0, 0.7],
      [2, 0.5],
      [3, 0.5]
    ]);
  });

  it('keeps the highest value so far when maximizing', () => {
    const history = historySeries({
      objective: { metric: 'accuracy', direction: 'maximize' },
      trials
    });
    expect(history['best so far']).toEqual([
      [0, 0.7],
      [2, 0.7],
      [3, 0.9]
    ]);
  });

  it('is empty before any trial completes', () => {
    const history = historySeries({
      objective: { metric: 'loss', direction: 'minimize' },
      trials: [trial(0, 'running', null), trial(1, 'pruned', 0.3)]
    });
    expect(history.objective).toEqual([]);
    expect(history['best so far']).toEqual([]);
  });
});

describe('formatParams', () => {
  it('shows the best trial as the table does: sorted, four significant digits', () => {
    expect(formatParams({ lr: 0.006029978892389945, epochs: 3 })).toBe(
      'epochs=3, lr=0.006030'
    );
    expect(formatParams({})).toBe('');
  });
});

describe('trialRows', () => {
  const experiment = {
    trials,
    best_trial: 2
  } as Pick<Experiment, 'trials' | 'best_trial'>;

  it('lists trials by number with their state, parameters and value', () => {
    const rows = trialRows(experiment);
    expect(rows.map(row => row.number)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(rows[1]).toEqual({
      number: 1,
      state: 'pruned',
      queue: '',
      params: 'lr=0.1000',
      value: '0.2000',
      jobId: 'job-1',
      best: false
    });
    expect(rows[4].value).toBe('-');
  });

  it('marks only the best trial', () => {
    expect(
      trialRows(experiment)
        .filter(row => row.best)
        .map(row => row.number)
    ).toEqual([2]);
  });

  it('writes parameters sorted by name', () => {
    const rows = trialRows({
      trials: [trial(0, 'complete', 1, { optimizer: 'adam', batch_size: 32 })],
      best_trial: null
    });
    expect(rows[0].params).toBe('batch_size=32, optimizer=adam');
    expect(rows[0].best).toBe(false);
  });
});

describe('trialsDone', () => {
  it('counts every trial that is not running', () => {
    expect(trialsDone({ trials })).toBe(5);
  });
});

describe('a trial whose job waits', () => {
  it('shows queued and why, not running', () => {
    const queued = [
      {
        id: 'job-4',
        queue: {
          message: 'waits for 2 CPUs (1 free of 2); held by notebook alice/',
          position: 1,
          queued: 1,
          limit: 'machine',
          needs: {},
          free: {},
          holders: [],
          behind: null
        }
      }
    ] as unknown as Parameters<typeof trialRows>[1];
    const rows = trialRows({ trials, best_trial: 3 }, queued);
    const waiting = rows.find(r => r.number === 4)!;
    expect(waiting.state).toBe('queued');
    expect(waiting.queue).toBe(
      'waits for 2 CPUs (1 free of 2); held by notebook alice/'
    );
    expect(rows.find(r => r.number === 3)).toMatchObject({
      state: 'complete',
      queue: ''
    });
    // its job started since: running again, no reason
    expect(
      trialRows({ trials, best_trial: 3 }).find(r => r.number === 4)
    ).toMatchObject({ state: 'running', queue: '' });
  });
});

describe('the new search form', () => {
  const schema = {
    type: 'object',
    properties: {
      epochs: { type: 'integer', default: 6 },
      lr: { type: 'number', default: 0.002 },
      momentum: { type: 'number', default: 0 },
      optimizer: { type: 'string', default: 'adam' },
      augment: { type: 'boolean', default: true },
      model: {
        type: 'object',
        properties: { depth: { type: 'integer', default: 3 } }
      }
    }
  };

  it("offers parameter.yml's numbers as ranges around their defaults and the rest as choices", () => {
    const rows = searchParameters(schema);
    expect(rows.map(r => [r.name, r.kind])).toEqual([
      ['epochs', 'int'],
      ['lr', 'float'],
      ['momentum', 'float'],
      ['optimizer', 'categorical'],
      ['augment', 'categorical'],
      ['model.depth', 'int']
    ]);
    expect(rows[0]).toMatchObject({ low: '3', high: '12', searched: false });
    expect(rows[1]).toMatchObject({ low: '0.0002', high: '0.02', log: true });
    expect(rows[2]).toMatchObject({ low: '0', high: '1', log: false });
    expect(rows[4].choices).toBe('true, false');
  });

  it('sends the searched parameters as the space of POST /experiments', () => {
    const rows = searchParameters(schema).map(r =>
      ['lr', 'optimizer', 'augment'].includes(r.name)
        ? { ...r, searched: true }
        : r
    );
    rows[3].choices = 'adam, sgd, 0.5';
    const body = searchRequest(
      {
        name: ' lr-search ',
        algorithm: 'image-classification',
        fn: 'train',
        inputs: { data: 'dataset:digits:1', checkpoint: '' },
        metric: 'accuracy/eval_accuracy',
        direction: 'maximize',
        sampler: 'tpe',
        pruner: '',
        trials: '8',
        parallelism: '2'
      },
      rows,
      'image-classification:abc',
      { cpu: 0.5 }
    );
    expect(body).toEqual({
      name: 'lr-search',
      algorithm: 'image-classification:abc',
      function: 'train',
      inputs: { data: 'dataset:digits:1' },
      space: {
        lr: { type: 'float', low: 0.0002, high: 0.02, log: true },
        optimizer: { type: 'categorical', choices: ['adam', 'sgd', 0.5] },
        augment: { type: 'categorical', choices: [true, false] }
      },
      objective: { metric: 'accuracy/eval_accuracy', direction: 'maximize' },
      budget: { trials: 8 },
      parallelism: 2,
      sampler: { name: 'tpe' },
      pruner: null,
      resources: { cpu: 0.5 }
    });
    expect(searchSpace([{ ...rows[1], low: 'x' }]).lr).toMatchObject({
      low: 'x' // not a number: sent as typed, for the server to refuse by name
    });
  });
});
