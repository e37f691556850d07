import { Dialog } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { FieldsForm, FIRST_FIELD, IField } from '../modelDialogs';

const FIELDS: IField<'name' | 'replicas'>[] = [
  { key: 'name', label: 'Deployment name', className: 'kpl-deploy-name' },
  {
    key: 'replicas',
    label: 'Replicas',
    className: 'kpl-deploy-replicas',
    range: [1, 64]
  }
];

describe('the model dialogs', () => {
  it('focus their first field as they open, not once the browser is idle', () => {
    const form = new FieldsForm(FIELDS, { name: 'digits', replicas: '1' }, '');
    const dialog = new Dialog({
      body: form,
      buttons: [Dialog.okButton({ label: 'Deploy' })],
      focusNodeSelector: FIRST_FIELD
    });
    Widget.attach(dialog, document.body);
    expect(document.activeElement).toBe(
      form.node.querySelector('.kpl-deploy-name')
    );
    dialog.dispose();
  });

  it('read back what was typed, and bound numbers by the field range', () => {
    const form = new FieldsForm(
      FIELDS,
      { name: 'digits', replicas: '1' },
      'replicas "0": a whole number from 1 to 64'
    );
    const replicas = form.node.querySelector<HTMLInputElement>(
      '.kpl-deploy-replicas'
    )!;
    expect([replicas.type, replicas.min, replicas.max]).toEqual([
      'number',
      '1',
      '64'
    ]);
    replicas.value = '3';
    expect(form.getValue()).toEqual({ name: 'digits', replicas: '3' });
    expect(form.node.querySelector('.kpl-dialog-problem')!.textContent).toBe(
      'replicas "0": a whole number from 1 to 64'
    );
  });

  it('offer the choices of a choice field, with the given one chosen', () => {
    const form = new FieldsForm(
      [
        {
          key: 'deployment',
          label: 'Deployment',
          className: 'kpl-canary-deployment',
          choices: [
            { value: 'a', label: 'a (m:1)' },
            { value: 'b', label: 'b (m:2)' }
          ]
        }
      ],
      { deployment: 'b' },
      ''
    );
    expect(form.getValue()).toEqual({ deployment: 'b' });
    expect(form.node.querySelectorAll('option')).toHaveLength(2);
  });
});
