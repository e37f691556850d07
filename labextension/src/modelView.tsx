import {
  Dialog,
  MainAreaWidget,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Signal } from '@lumino/signaling';
import React from 'react';

import {
  Job,
  KPLClient,
  Model,
  ModelFile,
  ModelStructure,
  ModelVersion
} from './api';
import { formatBytes, formatTime } from './format';
import { showCanaryDialog, showDeployDialog } from './modelDialogs';
import {
  aliasList,
  deploymentNameFor,
  formatCount,
  formatMetric,
  formatTensor,
  ILineage,
  parseLineage,
  storedFileName
} from './modelInfo';

/**
 * What the model view opens when a link is clicked.
 */
export interface IModelViewLinks {
  openJob: (id: string) => void;
  openDataset: (name: string, version: string) => void;
  openModel: (name: string, version: string) => void;
  openDeployment: (name: string) => void;
  /**
   * The registry changed here (alias, upload, delete): the panel refreshes.
   */
  changed: () => void;
}

/**
 * A link-styled button.
 */
function Link(props: {
  className: string;
  title: string;
  onClick: () => void;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <Button
      className={`kpl-link-button ${props.className}`}
      minimal
      small
      title={props.title}
      onClick={props.onClick}
    >
      {props.children}
    </Button>
  );
}

/**
 * Where a version came from: the job, the algorithm, its inputs, parameters, then metrics.
 */
function LineageView(props: {
  lineage: ILineage | null;
  links: IModelViewLinks;
}): JSX.Element {
  const { lineage, links } = props;
  if (!lineage) {
    return (
      <section className="kpl-lineage">
        <h3>Lineage</h3>
        <div className="kpl-meta">Uploaded, not made by a job.</div>
      </section>
    );
  }
  return (
    <section className="kpl-lineage">
      <h3>Lineage</h3>
      <table className="kpl-table">
        <tbody>
          {lineage.jobId && (
            <tr>
              <th>job</th>
              <td>
                <Link
                  className="kpl-lineage-job"
                  title={`Open job ${lineage.jobId}`}
                  onClick={() => links.openJob(lineage.jobId)}
                >
                  {lineage.jobId}
                </Link>
              </td>
            </tr>
          )}
          <tr>
            <th>algorithm</th>
            <td>
              {lineage.algorithm}
              {lineage.function && ` · ${lineage.function}`}
              {lineage.output && ` · output ${lineage.output}`}
            </td>
          </tr>
          {lineage.inputs.map(input => (
            <tr key={input.key} className="kpl-lineage-input">
              <th>{`input ${input.key}`}</th>
              <td>
                {input.kind === 'dataset' && (
                  <Link
                    className="kpl-lineage-dataset"
                    title={`Open dataset ${input.name}:${input.version}`}
                    onClick={() => links.openDataset(input.name, input.version)}
                  >
                    {`${input.name}:${input.version}`}
                  </Link>
                )}
                {input.kind === 'model' && (
                  <Link
                    className="kpl-lineage-model"
                    title={`Open model ${input.name}:${input.version}`}
                    onClick={() => links.openModel(input.name, input.version)}
                  >
                    {`${input.name}:${input.version}`}
                  </Link>
                )}
                {input.kind !== 'dataset' &&
                  input.kind !== 'model' &&
                  `${input.name}:${input.version}`}
              </td>
            </tr>
          ))}
          {lineage.parameters.map(([key, value]) => (
            <tr key={key} className="kpl-lineage-parameter">
              <th>{key}</th>
              <td>{JSON.stringify(value)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {lineage.metrics.length > 0 && (
        <>
          <h4>Metrics at the end</h4>
          <table className="kpl-table kpl-lineage-metrics">
            <tbody>
              {lineage.metrics.map(([metric, value]) => (
                <tr key={metric} data-metric={metric}>
                  <th>{metric}</th>
                  <td>{formatMetric(value)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      )}
    </section>
  );
}

/**
 * One file of the structure view: format, parameters, inputs/outputs, ops and layers.
 */
function FileStructure(props: { file: ModelFile }): JSX.Element {
  const { file } = props;
  const ops = Object.entries(file.op_counts ?? {});
  return (
    <div className="kpl-structure-file" data-path={file.path}>
      <h4>
        {file.path}{' '}
        <span className="kpl-meta">
          {`${file.format} · ${formatBytes(file.size_bytes)}` +
            (file.parameters !== null
              ? ` · ${formatCount(file.parameters)} parameters`
              : '') +
            (file.opset !== null ? ` · opset ${file.opset}` : '')}
        </span>
      </h4>
      {file.error && <div className="kpl-error">{file.error}</div>}
      {(file.inputs.length > 0 || file.outputs.length > 0) && (
        <table className="kpl-table kpl-structure-io">
          <tbody>
            {file.inputs.map(tensor => (
              <tr key={`in-${tensor.name}`}>
                <th>input</th>
                <td>{tensor.name}</td>
                <td>{formatTensor(tensor)}</td>
              </tr>
            ))}
            {file.outputs.map(tensor => (
              <tr key={`out-${tensor.name}`}>
                <th>output</th>
                <td>{tensor.name}</td>
                <td>{formatTensor(tensor)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {ops.length > 0 && (
        <div className="kpl-meta kpl-structure-ops">
          {ops.map(([op, count]) => `${op} ×${count}`).join(' · ')}
        </div>
      )}
      {file.layers.length > 0 && (
        <table className="kpl-table kpl-structure-layers">
          <thead>
            <tr>
              <th>layer</th>
              <th>type</th>
              <th>parameters</th>
              <th>shapes</th>
            </tr>
          </thead>
          <tbody>
            {file.layers.map((layer, index) => (
              <tr key={`${index}-${layer.name}`}>
                <td>{layer.name}</td>
                <td>{layer.type}</td>
                <td>{formatCount(layer.parameters)}</td>
                <td>
                  {Object.entries(layer.shapes ?? {})
                    .map(([key, shape]) => `${key} ${shape.join('×')}`)
                    .join(', ')}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {file.layers_total > file.layers.length && (
        <div className="kpl-meta">
          {`first ${file.layers.length} of ${file.layers_total} layers`}
        </div>
      )}
    </div>
  );
}

/**
 * The main-area view of a model: versions, aliases, lineage, structure, and actions.
 */
export class ModelView extends ReactWidget {
  constructor(
    readonly client: KPLClient,
    readonly name: string,
    version: string,
    private readonly links: IModelViewLinks
  ) {
    super();
    this.addClass('kpl-ModelView-content');
    this._version = version;
    this.title.label = `Model ${name}`;
    void this.load();
  }

  readonly changed = new Signal<this, void>(this);
  model: Model | null = null;
  detail: ModelVersion | null = null;
  structure: ModelStructure | null = null;
  job: Job | null = null;
  error = '';

  /**
   * The version shown (empty until the model loads: then the latest).
   */
  get version(): string {
    return this._version;
  }

  /**
   * NAME:VERSION of the version shown.
   */
  get ref(): string {
    return `${this.name}:${this._version}`;
  }

  /**
   * Show another version of the model.
   */
  async select(version: string): Promise<void> {
    this._version = version;
    await this.load();
  }

  /**
   * Fetch the model and the shown version's details and job, then its structure.
   *
   * The structure comes last: reading a large file's layers takes the server a while.
   */
  async load(): Promise<void> {
    const generation = ++this._generation;
    const current = () => generation === this._generation && !this.isDisposed;
    try {
      const name = this.name;
      const model = await this.client.GET('/models/{name}', {
        params: { path: { name } }
      });
      const known = model.versions.some(v => v.version === this._version);
      const version = known
        ? this._version
        : (model.versions[model.versions.length - 1]?.version ?? '');
      const detail = version
        ? await this.client.GET('/models/{name}/versions/{version}', {
            params: { path: { name, version } }
          })
        : null;
      const jobId = detail?.lineage?.job_id;
      // The job gives each input its kind; a deleted job leaves the refs as text.
      const job =
        typeof jobId === 'string'
          ? await this.client
              .GET('/jobs/{job_id}', { params: { path: { job_id: jobId } } })
              .catch(() => null)
          : null;
      if (!current()) {
        return;
      }
      Object.assign(this, { model, detail, job, error: '' });
      this._version = version;
      this.title.label = version
        ? `Model ${this.name}:${version}`
        : `Model ${this.name}`;
      this.changed.emit();
      const structure = version
        ? await this.client.GET('/models/{name}/versions/{version}/structure', {
            params: { path: { name, version } }
          })
        : null;
      if (current()) {
        this.structure = structure;
      }
    } catch (error) {
      if (current()) {
        this.error = (error as Error).message;
      }
    }
    if (!this.isDisposed) {
      this.changed.emit();
    }
  }

  /**
   * Point an alias at the shown version.
   */
  async setAlias(alias: string): Promise<void> {
    try {
      await this.client.PUT('/models/{name}/aliases/{alias}', {
        params: { path: { name: this.name, alias } },
        body: { version: this._version }
      });
      this.links.changed();
    } catch (error) {
      void showErrorMessage('Cannot set the alias', error as Error);
    }
    await this.load();
  }

  /**
   * Remove an alias.
   */
  async removeAlias(alias: string): Promise<void> {
    try {
      await this.client.DELETE('/models/{name}/aliases/{alias}', {
        params: { path: { name: this.name, alias } }
      });
      this.links.changed();
    } catch (error) {
      void showErrorMessage('Cannot remove the alias', error as Error);
    }
    await this.load();
  }

  /**
   * Upload a file or archive as a new version of this model and show it.
   */
  async upload(file: File): Promise<void> {
    this.status = `Uploading ${file.name} (${formatBytes(file.size)})…`;
    this.changed.emit();
    try {
      // the status line is enough here: no progress
      const version = await this.client.POST('/models', {
        params: {
          query: { name: this.name, filename: storedFileName(file.name) }
        },
        ...this.client.fileBody(file, 'application/octet-stream')
      });
      this.status = `Uploaded ${version.ref}`;
      this.links.changed();
      await this.select(version.version);
    } catch (error) {
      this.status = '';
      void showErrorMessage('Cannot upload the model', error as Error);
      this.changed.emit();
    }
  }

  /**
   * Delete the shown version once the user confirms; the server refuses while it is deployed.
   */
  async deleteVersion(): Promise<void> {
    const ref = this.ref;
    const answer = await showDialog({
      title: `Delete ${ref}?`,
      body: 'The version and the aliases pointing at it are removed.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      const [name, version] = [this.name, this._version];
      await (version
        ? this.client.DELETE('/models/{name}/versions/{version}', {
            params: { path: { name, version } }
          })
        : this.client.DELETE('/models/{name}', { params: { path: { name } } }));
    } catch (error) {
      void showErrorMessage(`Cannot delete ${ref}`, error as Error);
      return;
    }
    this.links.changed();
    if ((this.model?.versions.length ?? 0) <= 1) {
      this.parent?.dispose();
      return;
    }
    await this.load();
  }

  /**
   * Deploy the shown version and open the deployment's view.
   */
  async deploy(): Promise<void> {
    const deployment = await showDeployDialog(
      this.client,
      this.ref,
      deploymentNameFor(this.name)
    );
    if (deployment) {
      this.links.openDeployment(deployment.name);
    }
  }

  /**
   * Serve the shown version as a deployment's canary and open that deployment's view.
   */
  async canary(): Promise<void> {
    try {
      const deployment = await showCanaryDialog(this.client, this.ref);
      if (deployment) {
        this.links.openDeployment(deployment.name);
      }
    } catch (error) {
      void showErrorMessage('Cannot list the deployments', error as Error);
    }
  }

  /**
   * The zip of the shown version (a link: the browser's cookie authenticates it).
   */
  get downloadURL(): string {
    return this._version
      ? this.client.link('/models/{name}/versions/{version}/download', {
          params: { path: { name: this.name, version: this._version } }
        })
      : '';
  }

  status = '';

  render(): JSX.Element {
    return (
      <UseSignal signal={this.changed}>{() => this.renderModel()}</UseSignal>
    );
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    void this.load();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    Signal.clearData(this);
    super.dispose();
  }

  private renderModel(): JSX.Element {
    const { model, detail, structure, error } = this;
    return (
      <>
        {error && <div className="kpl-error">{error}</div>}
        {this.status && <div className="kpl-meta">{this.status}</div>}
        {model && (
          <div className="kpl-model-header">
            <h2>{model.name}</h2>
            {model.description && (
              <div className="kpl-meta">{model.description}</div>
            )}
            {this.renderAliases(model)}
            {this.renderVersions(model)}
          </div>
        )}
        {detail && (
          <section className="kpl-model-version" data-ref={detail.ref}>
            <h3>{detail.ref}</h3>
            <div className="kpl-meta">
              {`${formatBytes(detail.size_bytes)} · ${detail.files.length} files · created ${formatTime(detail.created)}`}
            </div>
            {detail.description && <p>{detail.description}</p>}
            <LineageView
              lineage={parseLineage(detail.lineage, this.job)}
              links={this.links}
            />
          </section>
        )}
        {detail && (
          <section className="kpl-structure">
            <h3>Structure</h3>
            {structure?.ref === detail.ref ? (
              structure.files.map(file => (
                <FileStructure key={file.path} file={file} />
              ))
            ) : (
              <div className="kpl-meta">Reading the files…</div>
            )}
          </section>
        )}
      </>
    );
  }

  private renderAliases(model: Model): JSX.Element {
    return (
      <div className="kpl-model-aliases">
        {aliasList(model).map(({ alias, version }) => (
          <span
            key={alias}
            className="kpl-alias"
            data-alias={alias}
            title={`${model.name}@${alias} → ${version}`}
          >
            {`@${alias} → ${version}`}
            <button
              className="kpl-alias-remove"
              title={`Remove the alias ${alias}`}
              aria-label={`Remove the alias ${alias}`}
              onClick={() => void this.removeAlias(alias)}
            >
              ×
            </button>
          </span>
        ))}
        <form
          className="kpl-alias-form"
          onSubmit={event => {
            event.preventDefault();
            const input = event.currentTarget.elements.namedItem(
              'alias'
            ) as HTMLInputElement;
            const alias = input.value.trim();
            if (alias) {
              input.value = '';
              void this.setAlias(alias);
            }
          }}
        >
          <input
            name="alias"
            className="jp-mod-styled kpl-alias-input"
            placeholder="production, canary, …"
            aria-label={`Alias for ${this.ref}`}
          />
          <Button type="submit" small className="kpl-alias-set">
            {`Set alias on ${this._version}`}
          </Button>
        </form>
      </div>
    );
  }

  private renderVersions(model: Model): JSX.Element {
    return (
      <table className="kpl-table kpl-model-versions">
        <thead>
          <tr>
            <th>version</th>
            <th>aliases</th>
            <th>made by</th>
            <th>size</th>
            <th>created</th>
          </tr>
        </thead>
        <tbody>
          {[...model.versions].reverse().map(version => (
            <tr
              key={version.version}
              className={`kpl-item${version.version === this._version ? ' kpl-mod-selected' : ''}`}
              data-version={version.version}
              tabIndex={0}
              onClick={() => void this.select(version.version)}
              onKeyDown={event =>
                event.key === 'Enter' && void this.select(version.version)
              }
            >
              <td className="kpl-version-id">{version.version}</td>
              <td>{version.aliases.map(alias => `@${alias}`).join(' ')}</td>
              <td>
                {version.lineage?.job_id
                  ? `job ${version.lineage.job_id}`
                  : 'upload'}
              </td>
              <td>{formatBytes(version.size_bytes)}</td>
              <td>{formatTime(version.created)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    );
  }

  private _version: string;
  private _generation = 0;
}

/**
 * A model view in the main area with Deploy, Canary, Download, Upload and Delete.
 */
export function modelWidget(
  client: KPLClient,
  name: string,
  version: string,
  links: IModelViewLinks
): MainAreaWidget<ModelView> {
  const content = new ModelView(client, name, version, links);
  const widget = new MainAreaWidget({ content });
  widget.id = `kpl-model-${name}`;
  widget.addClass('kpl-ModelView');
  widget.title.closable = true;
  const file = document.createElement('input');
  file.type = 'file';
  file.hidden = true;
  file.className = 'kpl-model-upload-input';
  file.addEventListener('change', () => {
    const chosen = file.files?.[0];
    file.value = '';
    if (chosen) {
      void content.upload(chosen);
    }
  });
  widget.node.appendChild(file);
  const items: [string, JSX.Element][] = [
    [
      'deploy',
      <Button
        className="jp-mod-styled jp-mod-accept kpl-deploy"
        small
        title="Serve this version as an HTTP API"
        onClick={() => void content.deploy()}
      >
        Deploy…
      </Button>
    ],
    [
      'canary',
      <Button
        className="kpl-canary"
        small
        title="Serve this version to a share of a deployment's requests"
        onClick={() => void content.canary()}
      >
        Canary…
      </Button>
    ],
    [
      'download',
      <UseSignal signal={content.changed}>
        {() => (
          <a
            className="jp-Button kpl-download"
            href={content.downloadURL}
            download
            title="Download this version's files as a zip"
          >
            Download
          </a>
        )}
      </UseSignal>
    ],
    [
      'upload',
      <Button
        className="kpl-upload-version"
        small
        title="Upload a file or a zip/tar as a new version of this model"
        onClick={() => file.click()}
      >
        Upload version…
      </Button>
    ],
    [
      'delete',
      <Button
        className="jp-mod-styled jp-mod-warn kpl-delete"
        small
        onClick={() => void content.deleteVersion()}
      >
        Delete version
      </Button>
    ]
  ];
  for (const [key, element] of items) {
    widget.toolbar.addItem(key, ReactWidget.create(element));
  }
  return widget;
}
