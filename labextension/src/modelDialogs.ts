import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { Deployment, KPLClient } from './api';
import { canaryRequest, deployRequest } from './modelInfo';

/**
 * One labelled field of a dialog: a text field unless it has a range or choices.
 */
export interface IField<K extends string> {
  key: K;
  label: string;
  className: string;
  range?: [number, number];
  choices?: { value: string; label: string }[];
}

// The field the dialog focuses as it opens, and again when focus wanders outside it.
export const FIRST_FIELD = 'input';

/**
 * A dialog body of labelled fields whose values the dialog reads back.
 *
 * Built when it is made, not a ReactWidget: the dialog focuses a ReactWidget body's
 * field only once the browser is idle, which on a busy page (live curves, polls) comes
 * seconds later and pulls the caret out of the field the user has moved to since.
 */
export class FieldsForm<K extends string>
  extends Widget
  implements Dialog.IBodyWidget<Record<K, string>>
{
  private readonly inputs = new Map<K, HTMLInputElement | HTMLSelectElement>();

  constructor(fields: IField<K>[], values: Record<K, string>, problem: string) {
    super();
    this.addClass('kpl-dialog-form');
    for (const field of fields) {
      const input = field.choices
        ? document.createElement('select')
        : document.createElement('input');
      input.className = `jp-mod-styled ${field.className}`;
      if (input instanceof HTMLSelectElement) {
        for (const choice of field.choices ?? []) {
          input.append(new Option(choice.label, choice.value));
        }
      } else if (field.range) {
        input.type = 'number';
        [input.min, input.max] = field.range.map(String);
      }
      input.value = values[field.key];
      const label = document.createElement('label');
      label.className = 'kpl-field';
      label.append(field.label, input);
      this.node.append(label);
      this.inputs.set(field.key, input);
    }
    const note = document.createElement('div');
    note.className = 'kpl-error kpl-dialog-problem';
    note.textContent = problem;
    this.node.append(note);
  }

  getValue(): Record<K, string> {
    const values = {} as Record<K, string>;
    for (const [key, input] of this.inputs) {
      values[key] = input.value;
    }
    return values;
  }
}

/**
 * Ask for fields until they make a request the server takes; null when cancelled.
 *
 * A bad field or the server's refusal is shown in the dialog, which opens again with the
 * values as they were.
 */
async function askUntilDone<K extends string>(options: {
  title: string;
  accept: string;
  fields: IField<K>[];
  values: Record<K, string>;
  send: (values: Record<K, string>) => Promise<Deployment | string>;
}): Promise<Deployment | null> {
  let values = options.values;
  let problem = '';
  for (;;) {
    const result = await showDialog({
      title: options.title,
      body: new FieldsForm(options.fields, values, problem),
      buttons: [
        Dialog.cancelButton(),
        Dialog.okButton({ label: options.accept })
      ],
      focusNodeSelector: FIRST_FIELD
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
    fields: [
      { key: 'name', label: 'Deployment name', className: 'kpl-deploy-name' },
      {
        key: 'replicas',
        label: 'Replicas',
        className: 'kpl-deploy-replicas',
        range: [1, 64]
      }
    ],
    values: { name: defaultName, replicas: '1' },
    send: async values => {
      const request = deployRequest(ref, values);
      return typeof request === 'string'
        ? request
        : client.POST('/deployments', { body: request });
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
  const { deployments } = await client.GET('/deployments');
  return askUntilDone({
    title: `Canary ${ref}`,
    accept: 'Set canary',
    fields: [
      {
        key: 'deployment',
        label: 'Deployment',
        className: 'kpl-canary-deployment',
        choices: deployments.map(deployment => ({
          value: deployment.name,
          label: `${deployment.name} (${deployment.model_version ?? 'no version'})`
        }))
      },
      {
        key: 'weight',
        label: 'Weight (percent of requests)',
        className: 'kpl-canary-weight',
        range: [0, 100]
      }
    ],
    values: { deployment: deployments[0]?.name ?? '', weight: '10' },
    send: async values => {
      const canary = canaryRequest(ref, values);
      return typeof canary === 'string'
        ? canary
        : client.POST('/deployments/{name}/canary', {
            params: { path: { name: canary.deployment } },
            body: canary.request
          });
    }
  });
}
