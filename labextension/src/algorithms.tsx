import { Button, UseSignal } from '@jupyterlab/ui-components';
import React, { useEffect, useState } from 'react';

import { Algorithm, AlgorithmVersionDetail, KPLClient } from './api';
import { formatBytes } from './format';
import { algorithmsIcon } from './icons';
import { resourceSummary } from './jobForm';
import { PollingListModel } from './model';
import { KPLSidePanel, SearchBox } from './sidePanel';

/**
 * What the empty Algorithms panel says: the command that adds one.
 */
export const NO_ALGORITHMS =
  'No algorithms yet: add one with `kpl-lab algorithm add FOLDER` in a terminal, or through the REST API.';

/**
 * Opens the submit form of an algorithm version's function.
 */
type OpenForm = (algorithm: string, version: string, fn: string) => void;

/**
 * The ports of a function: `inputs: data (training dataset)`.
 */
function Ports(props: {
  label: string;
  ports: { key?: string; name?: string }[];
}): JSX.Element | null {
  if (props.ports.length === 0) {
    return null;
  }
  return (
    <div className="kpl-ports">
      <strong>{props.label}: </strong>
      {props.ports.map(port => `${port.key} (${port.name})`).join(', ')}
    </div>
  );
}

/**
 * The functions, resources, ports and parameters of one algorithm version.
 */
function AlgorithmDetails(props: {
  detail: AlgorithmVersionDetail;
  openForm: OpenForm;
}): JSX.Element {
  const { detail } = props;
  const parameters = Object.entries(detail.parameters ?? {});
  return (
    <div className="kpl-algorithm-details">
      <div className="kpl-meta">
        {detail.ref} · {formatBytes(detail.size_bytes)}
        {/* only where jobs run in it (Kubernetes): a local run builds a virtual environment */}
        {detail.image?.used && detail.image.from_image
          ? ` · image ${detail.image.from_image}`
          : ''}
      </div>
      {detail.description && <p>{detail.description}</p>}
      {Object.entries(detail.function_specs ?? {}).map(([fn, spec]) => (
        <div key={fn} className="kpl-function" data-function={fn}>
          <div className="kpl-item-title">
            <code>{fn}</code>
            <Button
              className="jp-mod-styled jp-mod-accept kpl-submit-open"
              small
              data-function={fn}
              onClick={() => props.openForm(detail.name, detail.version, fn)}
            >
              Submit job…
            </Button>
          </div>
          <div className="kpl-meta">
            {resourceSummary(spec) || 'no resource limits'}
          </div>
          <Ports label="inputs" ports={spec.inputs ?? []} />
          <Ports label="outputs" ports={spec.outputs ?? []} />
        </div>
      ))}
      {parameters.length > 0 && (
        <details className="kpl-parameters">
          <summary>parameters</summary>
          <table className="kpl-fields">
            <tbody>
              {parameters.map(([key, value]) => (
                <tr
                  key={key}
                  title={detail.parameter_descriptions?.[key] ?? ''}
                >
                  <th>{key}</th>
                  <td>{JSON.stringify(value)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      )}
    </div>
  );
}

/**
 * One algorithm: its name and versions; a click shows the latest version's details.
 */
function AlgorithmItem(props: {
  client: KPLClient;
  algorithm: Algorithm;
  openForm: OpenForm;
}): JSX.Element {
  const { client, algorithm } = props;
  const latest = algorithm.versions[algorithm.versions.length - 1];
  const [expanded, setExpanded] = useState(false);
  const [detail, setDetail] = useState<AlgorithmVersionDetail | null>(null);
  const [error, setError] = useState('');
  useEffect(() => {
    if (!expanded || !latest || detail?.version === latest.version) {
      return;
    }
    client
      .GET('/algorithms/{name}/versions/{version}', {
        params: { path: { name: algorithm.name, version: latest.version } }
      })
      .then(setDetail)
      .catch(reason => setError((reason as Error).message));
  }, [expanded, latest?.version]);
  const toggle = () => setExpanded(!expanded);
  return (
    <li className="kpl-algorithm" data-name={algorithm.name}>
      <div
        className="kpl-item-title kpl-item"
        tabIndex={0}
        onClick={toggle}
        onKeyDown={event => event.key === 'Enter' && toggle()}
      >
        <span className="kpl-name">{algorithm.name}</span>
        <span className="kpl-meta">
          {latest
            ? `${latest.version.slice(0, 8)} · ${algorithm.versions.length} version(s)`
            : ''}
        </span>
      </div>
      {expanded && error && <div className="kpl-error">{error}</div>}
      {expanded && detail && (
        <AlgorithmDetails detail={detail} openForm={props.openForm} />
      )}
    </li>
  );
}

/**
 * The Algorithms sidebar: each algorithm with its functions, resources, inputs and outputs.
 */
export class AlgorithmsPanel extends KPLSidePanel<Algorithm> {
  constructor(client: KPLClient, interval: number, openForm: OpenForm) {
    super({
      id: 'kpl-lab-algorithms',
      label: 'Algorithms',
      caption: 'KPL Algorithms',
      icon: algorithmsIcon,
      fetcher: async q =>
        (await client.GET('/algorithms', { params: { query: { q } } }))
          .algorithms,
      interval
    });
    this.addClass('kpl-AlgorithmsPanel');
    const model: PollingListModel<Algorithm> = this.model;
    this.addContent(
      <>
        <SearchBox what="algorithms" model={model} />
        <UseSignal signal={model.changed}>
          {() => (
            <>
              <div className="kpl-error">{model.error?.message ?? ''}</div>
              <ul className="kpl-list">
                {model.loaded && model.items.length === 0 && !model.error && (
                  <li className="kpl-empty">{NO_ALGORITHMS}</li>
                )}
                {model.items.map(algorithm => (
                  <AlgorithmItem
                    key={algorithm.name}
                    client={client}
                    algorithm={algorithm}
                    openForm={openForm}
                  />
                ))}
              </ul>
            </>
          )}
        </UseSignal>
      </>
    );
  }
}
