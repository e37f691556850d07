import { Button, ReactWidget } from '@jupyterlab/ui-components';
import React, { useEffect, useState } from 'react';

import {
  AlgorithmVersionDetail,
  Devices,
  Experiment,
  ExperimentRequest,
  KPLClient
} from './api';
import { ISearchParameter, searchParameters, searchSpace } from './experiment';
import { fitNow, inputChoices, IRefs, jobFormData } from './jobForm';
import { KPLApiError } from './request';

const SAMPLERS = ['tpe', 'random', 'grid', 'cmaes'] as const;
const PRUNERS = ['', 'median', 'successive_halving', 'hyperband'] as const;

/**
 * What the form holds besides the parameters: text as typed, numbers read at submit.
 */
interface ISearchFields {
  name: string;
  algorithm: string;
  fn: string;
  inputs: Record<string, string>;
  metric: string;
  direction: 'maximize' | 'minimize';
  sampler: (typeof SAMPLERS)[number];
  pruner: (typeof PRUNERS)[number];
  trials: string;
  parallelism: string;
}

/**
 * What the form shows of the chosen algorithm: its detail, the metrics its last job pushed,
 * the resources each trial asks (capped at what is free now) and the notes saying so.
 */
interface IChosen {
  detail: AlgorithmVersionDetail;
  metrics: string[];
  resources: ExperimentRequest['resources'];
  notes: string[];
}

/**
 * The body of POST /experiments from the form's fields.
 */
export function searchRequest(
  fields: ISearchFields,
  parameters: ReadonlyArray<ISearchParameter>,
  ref: string,
  resources: ExperimentRequest['resources']
): ExperimentRequest {
  const inputs: Record<string, string> = {};
  for (const [key, value] of Object.entries(fields.inputs)) {
    if (value) {
      inputs[key] = value;
    }
  }
  return {
    name: fields.name.trim(),
    algorithm: ref,
    function: fields.fn,
    inputs,
    space: searchSpace(parameters),
    objective: { metric: fields.metric.trim(), direction: fields.direction },
    budget: { trials: Number(fields.trials) },
    parallelism: Number(fields.parallelism),
    sampler: { name: fields.sampler },
    pruner: fields.pruner ? { name: fields.pruner } : null,
    resources: resources && Object.keys(resources).length ? resources : null
  };
}

async function lastMetrics(
  client: KPLClient,
  algorithm: string,
  fn: string
): Promise<string[]> {
  const { jobs } = await client.GET('/jobs');
  const last = jobs.find(
    job =>
      job.algorithm.split(':')[0] === algorithm &&
      job.function === fn &&
      job.figures.length > 0
  );
  if (!last) {
    return [];
  }
  const metrics = await client.GET('/jobs/{job_id}/metrics', {
    params: { path: { job_id: last.id } }
  });
  return Object.entries(metrics.figures).flatMap(([figure, series]) =>
    Object.keys(series).map(name => `${figure}/${name}`)
  );
}

function SearchForm(props: {
  client: KPLClient;
  onCreated: (experiment: Experiment) => void;
}): JSX.Element {
  const { client } = props;
  const [algorithms, setAlgorithms] = useState<
    { name: string; version: string }[]
  >([]);
  const [refs, setRefs] = useState<IRefs>({ datasets: [], models: [] });
  const [devices, setDevices] = useState<Devices | null>(null);
  const [fields, setFields] = useState<ISearchFields>({
    name: '',
    algorithm: '',
    fn: 'train',
    inputs: {},
    metric: '',
    direction: 'maximize',
    sampler: 'tpe',
    pruner: '',
    trials: '10',
    parallelism: '1'
  });
  const [parameters, setParameters] = useState<ISearchParameter[]>([]);
  const [chosen, setChosen] = useState<IChosen | null>(null);
  const [problems, setProblems] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const set = (patch: Partial<ISearchFields>) =>
    setFields(current => ({ ...current, ...patch }));

  useEffect(() => {
    const versions = (list: { versions: { ref: string }[] }[], kind: string) =>
      list.flatMap(item =>
        item.versions
          .slice()
          .reverse()
          .map(v => `${kind}:${v.ref}`)
      );
    Promise.all([
      client.GET('/algorithms'),
      client.GET('/datasets'),
      client.GET('/models'),
      client.GET('/devices')
    ])
      .then(([found, datasets, models, machine]) => {
        const latest = found.algorithms
          .filter(a => a.versions.length)
          .map(a => ({
            name: a.name,
            version: a.versions[a.versions.length - 1].version
          }));
        setAlgorithms(latest);
        setRefs({
          datasets: versions(datasets.datasets, 'dataset'),
          models: versions(models.models, 'model')
        });
        setDevices(machine);
        if (latest.length) {
          set({ algorithm: latest[0].name, name: `${latest[0].name}-search` });
        }
      })
      .catch(error => setProblems([(error as Error).message]));
  }, [client]);

  // The chosen algorithm's functions, inputs, parameters and the metrics it pushed.
  useEffect(() => {
    const picked = algorithms.find(a => a.name === fields.algorithm);
    if (!picked || !devices) {
      return;
    }
    let current = true;
    client
      .GET('/algorithms/{name}/versions/{version}', {
        params: { path: { name: picked.name, version: picked.version } }
      })
      .then(async detail => {
        const fn = detail.function_specs[fields.fn]
          ? fields.fn
          : (Object.keys(detail.function_specs)[0] ?? 'train');
        const metrics = await lastMetrics(client, picked.name, fn).catch(
          () => []
        );
        if (!current) {
          return;
        }
        const declared = jobFormData(detail, fn, refs.datasets);
        // each trial is a job: its environment.yml amounts lowered to what is free now
        const fitted = fitNow(
          declared.resources,
          devices,
          detail.function_specs[fn]?.resource?.workers ?? 1
        );
        const capped: Record<string, number> = {};
        for (const [kind, amount] of Object.entries(fitted.resources)) {
          const asked =
            declared.resources[kind as keyof typeof declared.resources];
          if (typeof amount === 'number' && amount !== asked) {
            capped[kind] = amount;
          }
        }
        setChosen({
          detail,
          metrics,
          resources: capped,
          notes: fitted.notes
        });
        setParameters(searchParameters(detail.parameter_schema ?? {}));
        set({
          fn,
          inputs: Object.fromEntries(
            Object.entries(declared.inputs).map(([k, v]) => [k, v ?? ''])
          ),
          metric: metrics[0] ?? ''
        });
      })
      .catch(error => setProblems([(error as Error).message]));
    return () => {
      current = false;
    };
  }, [client, fields.algorithm, fields.fn, algorithms, devices, refs]);

  const submit = async () => {
    if (!chosen) {
      return;
    }
    setProblems([]);
    setBusy(true);
    try {
      props.onCreated(
        await client.POST('/experiments', {
          body: searchRequest(
            fields,
            parameters,
            chosen.detail.ref,
            chosen.resources
          )
        })
      );
    } catch (error) {
      if (!(error instanceof KPLApiError)) {
        throw error;
      }
      setProblems(
        error.errors.length
          ? error.errors.map(e =>
              e.field ? `${e.field}: ${e.message}` : e.message
            )
          : [error.message]
      );
    } finally {
      setBusy(false);
    }
  };

  const spec = chosen?.detail.function_specs[fields.fn];
  const editRow = (index: number, patch: Partial<ISearchParameter>) =>
    setParameters(rows =>
      rows.map((row, i) => (i === index ? { ...row, ...patch } : row))
    );
  return (
    <form
      className="kpl-form kpl-SearchForm-form"
      noValidate
      onSubmit={event => {
        event.preventDefault();
        void submit();
      }}
    >
      <h2>New hyperparameter search</h2>
      <div className="kpl-meta">
        Each trial is a job of the algorithm with parameters the sampler picks;
        the best trial&apos;s model is registered.
      </div>
      <label className="kpl-field">
        Name
        <input
          className="jp-mod-styled kpl-SearchForm-name"
          value={fields.name}
          onChange={event => set({ name: event.target.value })}
        />
      </label>
      <label className="kpl-field">
        Algorithm
        <select
          className="jp-mod-styled kpl-SearchForm-algorithm"
          value={fields.algorithm}
          onChange={event =>
            set({
              algorithm: event.target.value,
              name: `${event.target.value}-search`
            })
          }
        >
          {algorithms.map(a => (
            <option key={a.name} value={a.name}>
              {a.name}
            </option>
          ))}
        </select>
      </label>
      {chosen && (
        <label className="kpl-field">
          Function
          <select
            className="jp-mod-styled kpl-SearchForm-function"
            value={fields.fn}
            onChange={event => set({ fn: event.target.value })}
          >
            {Object.keys(chosen.detail.function_specs).map(fn => (
              <option key={fn} value={fn}>
                {fn}
              </option>
            ))}
          </select>
        </label>
      )}
      {(spec?.inputs ?? []).map(port => {
        const key = port.key ?? '';
        const choices = inputChoices(port, refs);
        return (
          <label key={key} className="kpl-field">
            {port.optional ? `${key} (optional)` : key}
            <select
              className="jp-mod-styled kpl-SearchForm-input"
              data-input={key}
              value={fields.inputs[key] ?? ''}
              onChange={event =>
                set({
                  inputs: { ...fields.inputs, [key]: event.target.value }
                })
              }
            >
              <option value="">(none)</option>
              {choices.map(ref => (
                <option key={ref} value={ref}>
                  {ref}
                </option>
              ))}
            </select>
          </label>
        );
      })}
      <h3>Parameters to search (parameter.yml)</h3>
      <table className="kpl-SearchForm-space">
        <thead>
          <tr>
            <th>search</th>
            <th>parameter</th>
            <th>kind</th>
            <th>low</th>
            <th>high</th>
            <th>log</th>
            <th>choices (comma-separated)</th>
          </tr>
        </thead>
        <tbody>
          {parameters.map((row, index) => (
            <tr key={row.name} data-parameter={row.name}>
              <td>
                <input
                  type="checkbox"
                  className="kpl-SearchForm-searched"
                  checked={row.searched}
                  onChange={event =>
                    editRow(index, { searched: event.target.checked })
                  }
                />
              </td>
              <td>{row.name}</td>
              <td>{row.kind}</td>
              {row.kind === 'categorical' ? (
                <>
                  <td />
                  <td />
                  <td />
                  <td>
                    <input
                      className="jp-mod-styled"
                      value={row.choices}
                      disabled={!row.searched}
                      onChange={event =>
                        editRow(index, { choices: event.target.value })
                      }
                    />
                  </td>
                </>
              ) : (
                <>
                  <td>
                    <input
                      className="jp-mod-styled kpl-SearchForm-low"
                      value={row.low}
                      disabled={!row.searched}
                      onChange={event =>
                        editRow(index, { low: event.target.value })
                      }
                    />
                  </td>
                  <td>
                    <input
                      className="jp-mod-styled kpl-SearchForm-high"
                      value={row.high}
                      disabled={!row.searched}
                      onChange={event =>
                        editRow(index, { high: event.target.value })
                      }
                    />
                  </td>
                  <td>
                    <input
                      type="checkbox"
                      checked={row.log}
                      disabled={!row.searched}
                      onChange={event =>
                        editRow(index, { log: event.target.checked })
                      }
                    />
                  </td>
                  <td />
                </>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      <h3>Objective and budget</h3>
      <label className="kpl-field">
        Metric (FIGURE/SERIES)
        <input
          className="jp-mod-styled kpl-SearchForm-metric"
          list="kpl-SearchForm-metrics"
          value={fields.metric}
          placeholder="e.g. accuracy/eval_accuracy"
          onChange={event => set({ metric: event.target.value })}
        />
        <datalist id="kpl-SearchForm-metrics">
          {(chosen?.metrics ?? []).map(metric => (
            <option key={metric} value={metric} />
          ))}
        </datalist>
      </label>
      <label className="kpl-field">
        Direction
        <select
          className="jp-mod-styled kpl-SearchForm-direction"
          value={fields.direction}
          onChange={event =>
            set({
              direction: event.target.value as ISearchFields['direction']
            })
          }
        >
          <option value="maximize">maximize</option>
          <option value="minimize">minimize</option>
        </select>
      </label>
      <label className="kpl-field">
        Sampler
        <select
          className="jp-mod-styled kpl-SearchForm-sampler"
          value={fields.sampler}
          onChange={event =>
            set({ sampler: event.target.value as ISearchFields['sampler'] })
          }
        >
          {SAMPLERS.map(name => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
      </label>
      <label className="kpl-field">
        Pruner
        <select
          className="jp-mod-styled kpl-SearchForm-pruner"
          value={fields.pruner}
          onChange={event =>
            set({ pruner: event.target.value as ISearchFields['pruner'] })
          }
        >
          {PRUNERS.map(name => (
            <option key={name} value={name}>
              {name || '(none)'}
            </option>
          ))}
        </select>
      </label>
      <label className="kpl-field">
        Trials
        <input
          className="jp-mod-styled kpl-SearchForm-trials"
          type="number"
          min="1"
          value={fields.trials}
          onChange={event => set({ trials: event.target.value })}
        />
      </label>
      <label className="kpl-field">
        Trials at once
        <input
          className="jp-mod-styled kpl-SearchForm-parallelism"
          type="number"
          min="1"
          value={fields.parallelism}
          onChange={event => set({ parallelism: event.target.value })}
        />
      </label>
      {chosen && chosen.notes.length > 0 && (
        <div className="kpl-form-note" role="note">
          {chosen.notes.join('\n')}
        </div>
      )}
      <div className="kpl-error kpl-form-error" role="alert">
        {problems.join('\n')}
      </div>
      <div className="kpl-form-actions">
        <Button
          className="jp-mod-styled jp-mod-accept kpl-SearchForm-start"
          type="submit"
          disabled={busy || !chosen}
        >
          Start search
        </Button>
      </div>
    </form>
  );
}

/**
 * The main-area form that starts a hyperparameter search (POST /experiments).
 */
export class NewSearchForm extends ReactWidget {
  constructor(
    private readonly client: KPLClient,
    private readonly onCreated: (experiment: Experiment) => void
  ) {
    super();
    this.addClass('kpl-SearchForm');
    this.title.label = 'New search';
  }

  render(): JSX.Element {
    return <SearchForm client={this.client} onCreated={this.onCreated} />;
  }
}
