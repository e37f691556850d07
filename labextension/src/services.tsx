import { UseSignal } from '@jupyterlab/ui-components';
import React from 'react';

import { Deployment, KPLClient } from './api';
import { servicesIcon } from './icons';
import { StateBadge } from './jobs';
import { PollingListModel } from './model';
import { KPLSidePanel } from './sidePanel';

/**
 * Ready replicas out of all, e.g. "2/3 ready".
 */
export function replicaSummary(deployment: Deployment): string {
  const states = deployment.replica_states;
  const ready = states.filter(replica => replica.state === 'ready').length;
  return `${ready}/${states.length} ready`;
}

/**
 * The deployments of the project with their state, versions and replicas.
 */
function DeploymentsList(props: {
  model: PollingListModel<Deployment>;
  openDeployment: (name: string) => void;
}): JSX.Element {
  const { model, openDeployment } = props;
  return (
    <>
      <div className="kpl-error">{model.error?.message ?? ''}</div>
      <ul className="kpl-list">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">
            No deployments yet: open a model version in the Models panel and
            press Deploy…, or run `kpl-lab deployment create NAME --model
            MODEL`.
          </li>
        )}
        {model.items.map(deployment => (
          <li
            key={deployment.name}
            className="kpl-deployment kpl-item"
            data-name={deployment.name}
            data-state={deployment.state}
            tabIndex={0}
            title={`Open deployment ${deployment.name}`}
            onClick={() => openDeployment(deployment.name)}
            onKeyDown={event =>
              event.key === 'Enter' && openDeployment(deployment.name)
            }
          >
            <div className="kpl-item-title">
              <span className="kpl-name">{deployment.name}</span>
              <StateBadge state={deployment.state} />
            </div>
            <div className="kpl-meta">
              {deployment.model_version ?? 'no version'}
              {deployment.canary_model_version
                ? ` · canary ${deployment.canary_model_version} ${deployment.canary_weight}%`
                : ''}
              {` · ${replicaSummary(deployment)}`}
            </div>
          </li>
        ))}
      </ul>
    </>
  );
}

/**
 * The Services sidebar: every deployment of the project, opening its view on click.
 */
export class ServicesPanel extends KPLSidePanel<Deployment> {
  constructor(
    client: KPLClient,
    interval: number,
    openDeployment: (name: string) => void
  ) {
    super({
      id: 'kpl-lab-services',
      label: 'Services',
      caption: 'KPL Services (deployments)',
      icon: servicesIcon,
      fetcher: async () => (await client.GET('/deployments')).deployments,
      interval
    });
    this.addClass('kpl-ServicesPanel');
    this.addContent(
      <UseSignal signal={this.model.changed}>
        {() => (
          <DeploymentsList model={this.model} openDeployment={openDeployment} />
        )}
      </UseSignal>
    );
  }
}
