import type { Experiment, ExperimentRequest, Job, Trial } from './api';

/**
 * Whether a larger objective value is better.
 */
export function maximizes(experiment: Pick<Experiment, 'objective'>): boolean {
  return experiment.objective.direction === 'maximize';
}

/**
 * The optimisation history: each complete trial's objective value, and the best value so far.
 *
 * Series of [trial number, value] points, as the charts take them; pruned, failed and
 * running trials have no final value, so only complete trials count (as in Optuna's plot).
 */
export function historySeries(
  experiment: Pick<Experiment, 'objective' | 'trials'>
): { objective: [number, number][]; 'best so far': [number, number][] } {
  const better = maximizes(experiment)
    ? (a: number, b: number) => a > b
    : (a: number, b: number) => a < b;
  const complete = experiment.trials
    .filter(trial => trial.state === 'complete' && trial.value !== null)
    .sort((a, b) => a.number - b.number);
  const objective: [number, number][] = [];
  const best: [number, number][] = [];
  let bestValue: number | null = null;
  for (const trial of complete) {
    const value = trial.value as number;
    if (bestValue === null || better(value, bestValue)) {
      bestValue = value;
    }
    objective.push([trial.number, value]);
    best.push([trial.number, bestValue]);
  }
  return { objective, 'best so far': best };
}

/**
 * One row of the trials table.
 *
 * `state` is the trial's, but `queued` for a running trial whose job still waits, with
 * `queue` saying why (the jobs API's reason).
 */
export interface ITrialRow {
  number: number;
  state: Trial['state'] | 'queued';
  queue: string;
  params: string;
  value: string;
  jobId: string;
  best: boolean;
}

function formatValue(value: unknown): string {
  if (value === null || value === undefined) {
    return '-';
  }
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : value.toPrecision(4);
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/**
 * A trial's parameters as the trials table and the best trial's line show them: `lr=0.006030, …`.
 */
export function formatParams(params: { [name: string]: unknown }): string {
  return Object.keys(params)
    .sort()
    .map(key => `${key}=${formatValue(params[key])}`)
    .join(', ');
}

/**
 * The rows of the trials table, by trial number; the experiment's best trial is marked.
 */
export function trialRows(
  experiment: Pick<Experiment, 'trials' | 'best_trial'>,
  queued: ReadonlyArray<Pick<Job, 'id' | 'queue'>> = []
): ITrialRow[] {
  const waiting = new Map(queued.map(job => [job.id, job]));
  return [...experiment.trials]
    .sort((a, b) => a.number - b.number)
    .map(trial => ({
      number: trial.number,
      state:
        trial.state === 'running' && waiting.has(trial.job_id)
          ? 'queued'
          : trial.state,
      queue:
        trial.state === 'running'
          ? (waiting.get(trial.job_id)?.queue?.message ?? '')
          : '',
      params: formatParams(trial.params),
      value: formatValue(trial.value),
      jobId: trial.job_id,
      best: trial.number === experiment.best_trial
    }));
}

/**
 * Trials that have ended (any state but running), for the "done/budget" count.
 */
export function trialsDone(experiment: Pick<Experiment, 'trials'>): number {
  return experiment.trials.filter(trial => trial.state !== 'running').length;
}

/**
 * One parameter of parameter.yml in the search form: searched or fixed at its default.
 */
export interface ISearchParameter {
  name: string;
  kind: 'float' | 'int' | 'categorical';
  searched: boolean;
  low: string;
  high: string;
  log: boolean;
  choices: string;
}

function plain(value: number): string {
  return String(Number(value.toPrecision(6)));
}

/**
 * The parameters a search may range over, from the algorithm's parameter schema: numbers
 * (a range around the default: a tenth to ten times it, on a log scale where it is
 * positive) and text or booleans (choices, the default first). None is searched at first.
 */
export function searchParameters(schema: {
  properties?: { [name: string]: unknown };
}): ISearchParameter[] {
  const rows: ISearchParameter[] = [];
  const walk = (properties: { [name: string]: unknown }, prefix: string) => {
    for (const [key, spec] of Object.entries(properties)) {
      if (!spec || typeof spec !== 'object') {
        continue;
      }
      const {
        type,
        default: value,
        properties: inner
      } = spec as {
        type?: string;
        default?: unknown;
        properties?: { [name: string]: unknown };
      };
      const name = prefix + key;
      if (type === 'object' && inner) {
        walk(inner, `${name}.`);
        continue;
      }
      const row = {
        name,
        searched: false,
        low: '',
        high: '',
        log: false,
        choices: ''
      };
      if (type === 'number' || type === 'integer') {
        const start = typeof value === 'number' ? value : 0;
        const positive = start > 0;
        if (type === 'integer') {
          rows.push({
            ...row,
            kind: 'int',
            low: String(positive ? Math.max(1, Math.floor(start / 2)) : 0),
            high: String(positive ? start * 2 : 10)
          });
        } else {
          rows.push({
            ...row,
            kind: 'float',
            low: plain(positive ? start / 10 : 0),
            high: plain(positive ? start * 10 : 1),
            log: positive
          });
        }
      } else if (type === 'string' || type === 'boolean') {
        const first = value === undefined ? '' : String(value);
        rows.push({
          ...row,
          kind: 'categorical',
          choices: type === 'boolean' ? 'true, false' : first
        });
      }
    }
  };
  walk(schema.properties ?? {}, '');
  return rows;
}

function choiceValue(text: string): string | number | boolean {
  if (text === 'true' || text === 'false') {
    return text === 'true';
  }
  const number = Number(text);
  return text !== '' && Number.isFinite(number) ? number : text;
}

/**
 * The `space` of the searched parameters, as POST /experiments takes it; a field left
 * empty or not a number stays as typed, for the server to refuse by name.
 */
export function searchSpace(
  rows: ReadonlyArray<ISearchParameter>
): ExperimentRequest['space'] {
  const space: ExperimentRequest['space'] = {};
  const number = (text: string) =>
    (text.trim() === '' || !Number.isFinite(Number(text))
      ? text
      : Number(text)) as number;
  for (const row of rows) {
    if (!row.searched) {
      continue;
    }
    if (row.kind === 'categorical') {
      space[row.name] = {
        type: 'categorical',
        choices: row.choices
          .split(',')
          .map(choice => choice.trim())
          .filter(choice => choice !== '')
          .map(choiceValue)
      };
    } else {
      space[row.name] = {
        type: row.kind,
        low: number(row.low),
        high: number(row.high),
        log: row.log
      };
    }
  }
  return space;
}
