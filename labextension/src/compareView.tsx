import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { ComparedJob, Comparison, KPLClient } from './api';
import { MetricChart } from './charts';
import { formatSeconds } from './format';

const CHART_WIDTH = 560;
const MAX_POINTS = 1000;

/**
 * One row of the comparison: a label, one cell per job, and whether the cells differ.
 */
export interface ICompareRow {
  label: string;
  cells: string[];
  differs: boolean;
}

function cell(value: unknown): string {
  if (value === null || value === undefined) {
    return '-';
  }
  if (typeof value === 'number') {
    return Number.isInteger(value) ? String(value) : value.toPrecision(4);
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function differ(cells: string[]): boolean {
  return new Set(cells).size > 1;
}

/**
 * The rows of a comparison, as `kpl-lab job compare` prints them.
 */
export function compareRows(comparison: Comparison): ICompareRow[] {
  const jobs = comparison.jobs;
  const row = (label: string, values: unknown[], differs?: boolean) => {
    const cells = values.map(cell);
    return { label, cells, differs: differs ?? differ(cells) };
  };
  const keys = (pick: (job: ComparedJob) => object) =>
    [...new Set(jobs.flatMap(job => Object.keys(pick(job))))].sort();
  const rows: ICompareRow[] = [
    row(
      'state',
      jobs.map(job => job.state)
    ),
    row(
      'algorithm',
      jobs.map(job => `${job.algorithm} ${job.function}`),
      comparison.differing_algorithms
    )
  ];
  for (const key of keys(job => job.inputs)) {
    rows.push(
      row(
        `input ${key}`,
        jobs.map(job => job.inputs[key]),
        comparison.differing_inputs.includes(key)
      )
    );
  }
  for (const key of keys(job => job.parameters)) {
    rows.push(
      row(
        key,
        jobs.map(job => job.parameters[key]),
        comparison.differing_parameters.includes(key)
      )
    );
  }
  for (const key of keys(job => job.results)) {
    rows.push(
      row(
        `result ${key}`,
        jobs.map(job => job.results[key]),
        comparison.differing_results.includes(key)
      )
    );
  }
  for (const name of comparison.common_metrics) {
    const found = jobs.map(job =>
      job.metrics.find(m => `${m.figure}/${m.series}` === name)
    );
    rows.push(
      row(
        `${name} final`,
        found.map(m => m?.final)
      )
    );
    rows.push(
      row(
        `${name} best`,
        found.map(m => m?.best)
      )
    );
  }
  rows.push(
    row(
      'duration',
      jobs.map(job =>
        job.duration_seconds === null
          ? null
          : formatSeconds(job.duration_seconds)
      )
    )
  );
  rows.push(
    row(
      'peak memory MB',
      jobs.map(job =>
        job.peak_memory_mb === null ? null : Math.round(job.peak_memory_mb)
      )
    )
  );
  return rows;
}

/**
 * Jobs side by side: the table (rows that differ highlighted), then each shared metric's curves overlaid.
 */
export class CompareView extends ReactWidget {
  constructor(
    private readonly client: KPLClient,
    readonly jobIds: string[]
  ) {
    super();
    this.addClass('kpl-CompareView');
    this.title.label = `Compare ${jobIds.length} jobs`;
    this.title.closable = true;
    void this.load();
  }

  private comparison: Comparison | null = null;
  private curves: Record<string, Record<string, [number, number][]>> = {};
  private error = '';

  private async load(): Promise<void> {
    try {
      const comparison = await this.client.GET('/comparisons', {
        params: { query: { ids: this.jobIds.join(',') } }
      });
      const metrics = await Promise.all(
        comparison.jobs.map(job =>
          this.client.GET('/jobs/{job_id}/metrics', {
            params: {
              path: { job_id: job.id },
              query: { max_points: MAX_POINTS }
            }
          })
        )
      );
      const curves: Record<string, Record<string, [number, number][]>> = {};
      for (const name of comparison.common_metrics) {
        const [figure, series] = name.split('/');
        curves[name] = {};
        comparison.jobs.forEach((job, index) => {
          curves[name][job.id] = (metrics[index].figures[figure]?.[series] ??
            []) as [number, number][];
        });
      }
      this.comparison = comparison;
      this.curves = curves;
    } catch (error) {
      this.error = (error as Error).message;
    }
    this.update();
  }

  protected render(): JSX.Element {
    if (this.error) {
      return <div className="kpl-error">{this.error}</div>;
    }
    if (!this.comparison) {
      return <div className="kpl-empty">Loading…</div>;
    }
    const jobs = this.comparison.jobs;
    return (
      <div className="kpl-compare">
        <table className="kpl-compare-table">
          <thead>
            <tr>
              <th />
              {jobs.map(job => (
                <th key={job.id}>
                  {job.id}
                  {job.experiment ? ` (${job.experiment} #${job.trial})` : ''}
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            {compareRows(this.comparison).map(row => (
              <tr
                key={row.label}
                data-key={row.label}
                className={row.differs ? 'kpl-differs' : undefined}
              >
                <th>{row.label}</th>
                {row.cells.map((text, index) => (
                  <td key={jobs[index].id}>{text}</td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
        {Object.entries(this.curves).map(([name, series]) => (
          <MetricChart
            key={name}
            title={name}
            series={series}
            xName="x"
            width={CHART_WIDTH}
          />
        ))}
      </div>
    );
  }
}
