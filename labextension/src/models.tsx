import { Button, UseSignal } from '@jupyterlab/ui-components';
import React from 'react';

import { KPLClient, Model, ModelVersion } from './api';
import { formatBytes } from './format';
import { modelsIcon } from './icons';
import { aliasList, modelNameFromFile, storedFileName } from './modelInfo';
import { PollingListModel } from './model';
import { KPLSidePanel, SearchBox } from './sidePanel';
import { UploadProgress, UploadStatus } from './uploadStatus';

/**
 * The models with their aliases and versions (newest first); a version opens on click.
 */
function ModelsList(props: {
  model: PollingListModel<Model>;
  openVersion: (name: string, version: string) => void;
}): JSX.Element {
  const { model, openVersion } = props;
  return (
    <>
      <div className="kpl-error">{model.error?.message ?? ''}</div>
      <ul className="kpl-list kpl-ModelsPanel-list">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">
            {model.filter
              ? 'No model matches.'
              : 'No models yet: train one, or upload a file.'}
          </li>
        )}
        {model.items.map(item => (
          <li key={item.name} className="kpl-model" data-name={item.name}>
            <div className="kpl-item-title">
              <span className="kpl-name">{item.name}</span>
              <span className="kpl-aliases">
                {aliasList(item).map(({ alias, version }) => (
                  <span
                    key={alias}
                    className="kpl-alias"
                    data-alias={alias}
                    title={`${item.name}@${alias} → ${version}`}
                  >
                    @{alias}
                  </span>
                ))}
              </span>
            </div>
            {item.description && (
              <div className="kpl-meta">{item.description}</div>
            )}
            <ul className="kpl-versions">
              {[...item.versions].reverse().map(version => (
                <li
                  key={version.version}
                  className="kpl-item kpl-version"
                  title={`Open ${version.ref}`}
                  data-ref={version.ref}
                  tabIndex={0}
                  onClick={() => openVersion(item.name, version.version)}
                  onKeyDown={event =>
                    event.key === 'Enter' &&
                    openVersion(item.name, version.version)
                  }
                >
                  <span className="kpl-version-id">
                    {version.version}
                    {version.aliases.map(alias => (
                      <span key={alias} className="kpl-alias">
                        @{alias}
                      </span>
                    ))}
                  </span>
                  <span className="kpl-meta">
                    {(version.lineage?.job_id
                      ? `job ${version.lineage.job_id} · `
                      : 'uploaded · ') + formatBytes(version.size_bytes)}
                  </span>
                </li>
              ))}
            </ul>
          </li>
        ))}
      </ul>
    </>
  );
}

/**
 * The Models sidebar: search, upload a file or archive, open a version's view.
 */
export class ModelsPanel extends KPLSidePanel<Model> {
  constructor(
    private readonly client: KPLClient,
    interval: number,
    private readonly openVersion: (name: string, version: string) => void
  ) {
    super({
      id: 'kpl-lab-models',
      label: 'Models',
      caption: 'KPL Models',
      icon: modelsIcon,
      fetcher: async q =>
        (await client.GET('/models', { params: { query: { q } } })).models,
      interval
    });
    this.addClass('kpl-ModelsPanel');
    const model = this.model;
    this.addContent(
      <>
        <SearchBox what="models" model={model} />
        <div className="kpl-upload">
          <div className="kpl-upload-row">
            <input
              ref={this._name}
              className="jp-mod-styled kpl-upload-name"
              placeholder="name"
              aria-label="Model name (default: the file name)"
              title="Model name (default: the file name); an existing name gets a new version"
            />
          </div>
          <div className="kpl-upload-row">
            <Button
              className="jp-mod-styled jp-mod-accept kpl-upload-button"
              onClick={() => this.chooseFile()}
            >
              Upload…
            </Button>
            <span className="kpl-hint">a model file, or a zip/tar</span>
          </div>
          <UploadStatus progress={this._upload} />
        </div>
        <input
          ref={this._file}
          type="file"
          hidden
          className="kpl-upload-input"
          onChange={event => {
            const file = event.target.files?.[0];
            event.target.value = '';
            if (file) {
              void this.upload(file);
            }
          }}
        />
        <UseSignal signal={model.changed}>
          {() => <ModelsList model={model} openVersion={openVersion} />}
        </UseSignal>
      </>
    );
  }

  /**
   * Ask for a file to upload.
   */
  chooseFile(): void {
    this._file.current?.click();
  }

  /**
   * Upload a file or archive under the name of the form, then open the new version.
   */
  async upload(file: File): Promise<ModelVersion | null> {
    const name =
      this._name.current?.value.trim() || modelNameFromFile(file.name);
    this._upload.set({
      running: true,
      fraction: 0,
      status: `Uploading ${file.name} (${formatBytes(file.size)})…`,
      failed: false
    });
    try {
      const version = await this.client.POST('/models', {
        params: { query: { name, filename: storedFileName(file.name) } },
        ...this.client.fileBody(file, 'application/octet-stream', fraction =>
          this._upload.set({ ...this._upload.state, fraction })
        )
      });
      this._upload.set({
        running: false,
        fraction: 1,
        status: `${version.ref}: ${version.files.length} files`,
        failed: false
      });
      if (this._name.current) {
        this._name.current.value = '';
      }
      await this.model.refresh();
      this.openVersion(version.name, version.version);
      return version;
    } catch (error) {
      this._upload.set({
        running: false,
        fraction: 0,
        status: `Upload of ${file.name} failed: ${(error as Error).message}`,
        failed: true
      });
      return null;
    }
  }

  private _name = React.createRef<HTMLInputElement>();
  private _file = React.createRef<HTMLInputElement>();
  private _upload = new UploadProgress();
}
