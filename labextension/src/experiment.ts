import type { Experiment, Trial } from './api';

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
 */
export interface ITrialRow {
  number: number;
  state: Trial['state'];
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
 * The rows of the trials table, by trial number; the experiment's best trial is marked.
 */
export function trialRows(
  experiment: Pick<Experiment, 'trials' | 'best_trial'>
): ITrialRow[] {
  return [...experiment.trials]
    .sort((a, b) => a.number - b.number)
    .map(trial => ({
      number: trial.number,
      state: trial.state,
      params: Object.keys(trial.params)
        .sort()
        .map(key => `${key}=${formatValue(trial.params[key])}`)
        .join(', '),
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
