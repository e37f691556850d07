import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { Deployment, KPLClient } from './api';
import { canaryRequest, deployRequest } from './modelInfo';

/**
 * A dialog body of labelled fields whose values the dialog reads back.
 */
class FieldsForm<T extends Record<string, string>> extends ReactWidget {
  constructor(
    private readonly values: T,
    private readonly render_: (
      values: T,
      set: (key: keyof T, value: string) => void
    ) => JSX.Element,
    private readonly problem: string
  ) {
    super();
    this.addClass('kpl-dialog-form');
  }

  getValue(): T {
    return { ...this.values };
  }

  render(): JSX.Element {
    return (
      <>
        {this.render_(this.values, (key, value) => {
          this.values[key] = value as T[keyof T];
        })}
        <div className="kpl-error kpl-dialog-problem">{this.problem}</div>
      </>
    );
  }
}

/**
 * Ask for fields until they make a request the server takes; null when cancelled.
 *
 * A bad field or the server's refusal is shown in the dialog, which opens again with the
 * values as they were.
 */
async function askUntilDone<T extends Record<string, string>>(options: {
  title: string;
  accept: string;
  values: T;
  render: (
    values: T,
    set: (key: keyof T, value: string) => void
  ) => JSX.Element;
  send: (values: T) => Promise<Deployment | string>;
}): Promise<Deployment | null> {
  let values = options.values;
  let problem = '';
  for (;;) {
    const result = await showDialog({
      title: options.title,
      body: new FieldsForm({ ...values }, options.render, problem),
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: options.accept })
      ],
      focusNodeSelector: 'input'
    });
    if (!result.button.accept || !result.value) {
      return null;
    }
    values = result.value;
    try {
      const answer = await options.send(values);
      if (typeof answer !== 'string') {
        return answer;
      }
      problem = answer;
    } catch (error) {
      problem = (error as Error).message;
    }
  }
}

/**
 * Deploy a model version as an HTTP API: ask the name and replicas, create it.
 */
export function showDeployDialog(
  client: KPLClient,
  ref: string,
  defaultName: string
): Promise<Deployment | null> {
  return askUntilDone({
    title: `Deploy ${ref}`,
    accept: 'Deploy',
    values: { name: defaultName, replicas: '1' },
    render: (values, set) => (
      <>
        <label className="kpl-field">
          Deployment name
          <input
            className="jp-mod-styled kpl-deploy-name"
            defaultValue={values.name}
            onChange={event => set('name', event.target.value)}
          />
        </label>
        <label className="kpl-field">
          Replicas
          <input
            className="jp-mod-styled kpl-deploy-replicas"
            type="number"
            min={1}
            max={64}
            defaultValue={values.replicas}
            onChange={event => set('replicas', event.target.value)}
          />
        </label>
      </>
    ),
    send: async values => {
      const request = deployRequest(ref, values);
      return typeof request === 'string'
        ? request
        : client.deployments.create(request);
    }
  });
}

/**
 * Serve a model version as the canary of a deployment: ask which one and its weight.
 */
export async function showCanaryDialog(
  client: KPLClient,
  ref: string
): Promise<Deployment | null> {
  const deployments = await client.deployments.list();
  return askUntilDone({
    title: `Canary ${ref}`,
    accept: 'Set canary',
    values: { deployment: deployments[0]?.name ?? '', weight: '10' },
    render: (values, set) => (
      <>
        <label className="kpl-field">
          Deployment
          <select
            className="jp-mod-styled kpl-canary-deployment"
            defaultValue={values.deployment}
            onChange={event => set('deployment', event.target.value)}
          >
            {deployments.map(deployment => (
              <option key={deployment.name} value={deployment.name}>
                {`${deployment.name} (${deployment.model_version ?? 'no version'})`}
              </option>
            ))}
          </select>
        </label>
        <label className="kpl-field">
          Weight (percent of requests)
          <input
            className="jp-mod-styled kpl-canary-weight"
            type="number"
            min={0}
            max={100}
            defaultValue={values.weight}
            onChange={event => set('weight', event.target.value)}
          />
        </label>
      </>
    ),
    send: async values => {
      const canary = canaryRequest(ref, values);
      return typeof canary === 'string'
        ? canary
        : client.deployments.canary(canary.deployment, canary.request);
    }
  });
}
