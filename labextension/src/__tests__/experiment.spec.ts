import type { Experiment, Trial } from '../api';
import { historySeries, trialRows, trialsDone } from '../experiment';

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
