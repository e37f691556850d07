import { Dialog, showDialog } from '@jupyterlab/apputils';
import { Contents } from '@jupyterlab/services';
import { Button, UseSignal } from '@jupyterlab/ui-components';
import React, { useEffect, useState } from 'react';

import { KPLClient, PipelineRun, PipelineTemplate } from './api';
import { formatTime } from './format';
import { pipelinesIcon } from './icons';
import { StateBadge } from './jobs';
import { FieldsForm, IField } from './modelDialogs';
import { PollingListModel } from './model';
import { PIPELINE_SUFFIX } from './pipelineEditor';
import {
  dumpPipeline,
  parsePipeline,
  templateChoices,
  withChoices
} from './pipelineGraph';
import { KPLSidePanel } from './sidePanel';

/**
 * What the Pipelines sidebar does with files: list them, create one, open one.
 */
export interface IPipelineFiles {
  contents: Contents.IManager;
  open: (path: string) => void;
}

/**
 * A free file name for a new pipeline from a template, in the server's root folder.
 */
async function freePath(
  contents: Contents.IManager,
  base: string
): Promise<string> {
  const taken = new Set(
    (
      (await contents.get('', { content: true })).content as Contents.IModel[]
    ).map(item => item.path)
  );
  let path = `${base}${PIPELINE_SUFFIX}`;
  for (let n = 2; taken.has(path); n++) {
    path = `${base}-${n}${PIPELINE_SUFFIX}`;
  }
  return path;
}

/**
 * A template's text with the project's dataset and algorithm of each node it asks for; the
 * template's own names are chosen where the project has them. Null when cancelled.
 */
async function askTemplateChoices(
  client: KPLClient,
  template: PipelineTemplate
): Promise<string | null> {
  const doc = parsePipeline(template.text);
  const asked = templateChoices(doc);
  if (!asked.length) {
    return template.text;
  }
  const [datasets, algorithms] = await Promise.all([
    client.GET('/datasets').then(list => list.datasets.map(d => d.name)),
    client.GET('/algorithms').then(list => list.algorithms.map(a => a.name))
  ]);
  const fields: IField<string>[] = [];
  const values: Record<string, string> = {};
  for (const { node, key, value } of asked) {
    const names = key === 'dataset' ? datasets : algorithms;
    if (!names.length) {
      continue; // none in the project yet: the template's name stays, for the user to edit
    }
    fields.push({
      key: node,
      label:
        key === 'dataset' ? `Input dataset (${node})` : `Algorithm (${node})`,
      className: `kpl-TemplateDialog-${key}`,
      choices: names.map(name => ({ value: name, label: name }))
    });
    values[node] = names.includes(value) ? value : names[0];
  }
  if (!fields.length) {
    return template.text;
  }
  const result = await showDialog({
    title: `New ${template.name} pipeline`,
    body: new FieldsForm(fields, values, ''),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Create' })],
    focusNodeSelector: 'select'
  });
  if (!result.button.accept || !result.value) {
    return null;
  }
  const chosen = withChoices(doc, result.value);
  // The template's own text (its layout) where nothing changed.
  return JSON.stringify(chosen) === JSON.stringify(doc)
    ? template.text
    : dumpPipeline(chosen);
}

function PipelinesList(props: {
  client: KPLClient;
  files: IPipelineFiles;
  model: PollingListModel<PipelineRun>;
}): JSX.Element {
  const { client, files, model } = props;
  const [paths, setPaths] = useState<string[]>([]);
  const [templates, setTemplates] = useState<PipelineTemplate[]>([]);
  const [error, setError] = useState('');

  useEffect(() => {
    client
      .GET('/pipelines/templates')
      .then(answer => setTemplates(answer.templates))
      .catch(reason => setError(String(reason)));
  }, [client]);
  // The files are listed again whenever the runs are (each refresh of the panel), and at
  // once when a file is made, renamed, saved or deleted (the file browser, a notebook, here).
  const [changes, setChanges] = useState(0);
  useEffect(() => {
    const changed = () => setChanges(n => n + 1);
    files.contents.fileChanged.connect(changed);
    return () => {
      files.contents.fileChanged.disconnect(changed);
    };
  }, [files]);
  useEffect(() => {
    files.contents
      .get('', { content: true })
      .then(dir =>
        setPaths(
          (dir.content as Contents.IModel[])
            .filter(item => item.path.endsWith(PIPELINE_SUFFIX))
            .map(item => item.path)
            .sort()
        )
      )
      .catch(reason => setError(String(reason)));
  }, [files, model.items, changes]);

  const fromTemplate = async (template: PipelineTemplate) => {
    try {
      const text = await askTemplateChoices(client, template);
      if (text === null) {
        return;
      }
      const path = await freePath(files.contents, template.name);
      await files.contents.save(path, {
        type: 'file',
        format: 'text',
        content: text
      });
      files.open(path);
      void model.refresh();
    } catch (reason) {
      setError(String(reason));
    }
  };

  return (
    <>
      <div className="kpl-error">{error || model.error?.message || ''}</div>
      <h3>Files</h3>
      <ul className="kpl-list kpl-PipelinesPanel-files">
        {paths.length === 0 && (
          <li className="kpl-empty">
            No *{PIPELINE_SUFFIX} files here yet: start from a template.
          </li>
        )}
        {paths.map(path => (
          <li
            key={path}
            className="kpl-item"
            data-path={path}
            tabIndex={0}
            onClick={() => files.open(path)}
            onKeyDown={event => event.key === 'Enter' && files.open(path)}
          >
            {path}
          </li>
        ))}
      </ul>
      <h3>New pipeline from template</h3>
      <div className="kpl-PipelinesPanel-templates">
        {templates.map(template => (
          <Button
            key={template.name}
            className="jp-mod-styled"
            data-template={template.name}
            onClick={() => void fromTemplate(template)}
          >
            {template.name}
          </Button>
        ))}
      </div>
      <h3>Recent runs</h3>
      <ul className="kpl-list kpl-PipelinesPanel-runs">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">No runs yet.</li>
        )}
        {model.items.map(run => (
          <li
            key={run.id}
            className="kpl-item"
            data-id={run.id}
            data-state={run.state}
            tabIndex={0}
            title={run.path ? `Open ${run.path}` : run.id}
            onClick={() => run.path && files.open(run.path)}
            onKeyDown={event =>
              event.key === 'Enter' && run.path && files.open(run.path)
            }
          >
            <div className="kpl-item-title">
              <span className="kpl-name">{run.name}</span>
              <StateBadge state={run.state} />
            </div>
            <div className="kpl-meta">
              {run.id} · {formatTime(run.created)}
              {run.reason ? ` · ${run.reason}` : ''}
            </div>
          </li>
        ))}
      </ul>
    </>
  );
}

/**
 * The Pipelines sidebar: the pipeline files, new ones from templates, recent runs.
 */
export class PipelinesPanel extends KPLSidePanel<PipelineRun> {
  constructor(client: KPLClient, interval: number, files: IPipelineFiles) {
    super({
      id: 'kpl-lab-pipelines',
      label: 'Pipelines',
      caption: 'KPL Pipelines',
      icon: pipelinesIcon,
      fetcher: async () =>
        (
          await client.GET('/pipelines/runs', {
            params: { query: { limit: 20 } }
          })
        ).runs,
      interval
    });
    this.addClass('kpl-PipelinesPanel');
    this.addContent(
      <UseSignal signal={this.model.changed}>
        {() => (
          <PipelinesList client={client} files={files} model={this.model} />
        )}
      </UseSignal>
    );
  }
}
