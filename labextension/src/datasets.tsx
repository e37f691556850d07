import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Button, HTMLSelect, UseSignal } from '@jupyterlab/ui-components';
import React from 'react';

import {
  DATASET_FORMATS,
  Dataset,
  DatasetFormat,
  DatasetVersion,
  KPLClient
} from './api';
import { formatBytes, nameFromFile } from './format';
import { datasetsIcon } from './icons';
import { PollingListModel } from './model';
import { KPLSidePanel, SearchBox } from './sidePanel';
import { UploadProgress, UploadStatus } from './uploadStatus';

/**
 * The datasets with their versions; a version opens on click.
 */
function DatasetsList(props: {
  model: PollingListModel<Dataset>;
  openVersion: (name: string, version: string) => void;
  deleteDataset: (name: string) => void;
}): JSX.Element {
  const { model, openVersion } = props;
  return (
    <>
      <div className="kpl-error">{model.error?.message ?? ''}</div>
      <ul className="kpl-list kpl-DatasetsPanel-list">
        {model.loaded && model.items.length === 0 && !model.error && (
          <li className="kpl-empty">
            {model.filter
              ? 'No dataset matches.'
              : 'No datasets yet: upload one.'}
          </li>
        )}
        {model.items.map(dataset => (
          <li
            key={dataset.name}
            className="kpl-dataset"
            data-name={dataset.name}
          >
            <div className="kpl-item-title">
              <span className="kpl-name">{dataset.name}</span>
              <Button
                className="kpl-link-button"
                minimal
                small
                title={`Delete ${dataset.name} and all its versions`}
                onClick={() => props.deleteDataset(dataset.name)}
              >
                Delete
              </Button>
            </div>
            {dataset.description && (
              <div className="kpl-meta">{dataset.description}</div>
            )}
            <ul className="kpl-versions">
              {dataset.versions.map(version => (
                <li
                  key={version.version}
                  className="kpl-item kpl-version"
                  title={`Open ${version.ref}`}
                  data-ref={version.ref}
                  tabIndex={0}
                  onClick={() => openVersion(dataset.name, version.version)}
                  onKeyDown={event =>
                    event.key === 'Enter' &&
                    openVersion(dataset.name, version.version)
                  }
                >
                  <span className="kpl-version-id">{version.version}</span>
                  <span className="kpl-meta">
                    {version.record_count ?? 0} records ·{' '}
                    {formatBytes(version.size_bytes)}
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
 * The Datasets sidebar: search, upload by drag and drop or a button, open a version.
 */
export class DatasetsPanel extends KPLSidePanel<Dataset> {
  constructor(
    private readonly client: KPLClient,
    interval: number,
    private readonly openVersion: (name: string, version: string) => void
  ) {
    super({
      id: 'kpl-lab-datasets',
      label: 'Datasets',
      caption: 'KPL Datasets',
      icon: datasetsIcon,
      fetcher: async q =>
        (await client.GET('/datasets', { params: { query: { q } } })).datasets,
      interval
    });
    this.addClass('kpl-DatasetsPanel');
    const model = this.model;
    this.addContent(
      <>
        <SearchBox what="datasets" model={model} />
        <div className="kpl-upload">
          <div className="kpl-upload-row">
            <input
              ref={this._name}
              className="jp-mod-styled kpl-upload-name"
              placeholder="name"
              aria-label="Dataset name (default: the file name)"
              title="Dataset name (default: the file name)"
            />
            <HTMLSelect
              className="kpl-upload-format"
              aria-label="Dataset format"
              elementRef={select => {
                this._format = select;
              }}
              defaultValue="imagefolder"
              options={DATASET_FORMATS.map(format => ({
                value: format,
                label: format
              }))}
            />
          </div>
          <div className="kpl-upload-row">
            <Button
              className="jp-mod-styled jp-mod-accept kpl-upload-button"
              onClick={() => this.chooseFile()}
            >
              Upload…
            </Button>
            <span className="kpl-hint">or drop a zip/tar here</span>
          </div>
          <UploadStatus progress={this._upload} />
        </div>
        <input
          ref={this._file}
          type="file"
          hidden
          accept=".zip,.tar,.tar.gz,.tgz,.tar.bz2,.tar.xz"
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
          {() => (
            <DatasetsList
              model={model}
              openVersion={openVersion}
              deleteDataset={name => void this.deleteDataset(name)}
            />
          )}
        </UseSignal>
      </>
    );
    this.node.addEventListener('dragover', this);
    this.node.addEventListener('dragleave', this);
    this.node.addEventListener('drop', this);
  }

  /**
   * Ask for a file to upload.
   */
  chooseFile(): void {
    this._file.current?.click();
  }

  /**
   * Upload an archive with the name and format of the form, then open the new version.
   */
  async upload(file: File): Promise<DatasetVersion | null> {
    const name = this._name.current?.value.trim() || nameFromFile(file.name);
    const format = (this._format?.value ?? 'imagefolder') as DatasetFormat;
    this._upload.set({
      running: true,
      fraction: 0,
      status: `Uploading ${file.name} (${formatBytes(file.size)})…`,
      failed: false
    });
    this.addClass('kpl-mod-uploading');
    try {
      const version = await this.client.POST('/datasets', {
        params: { query: { name, format, filename: file.name } },
        ...this.client.fileBody(file, 'application/octet-stream', fraction =>
          this._upload.set({
            ...this._upload.state,
            fraction,
            status:
              fraction >= 1
                ? `Importing ${file.name} as ${format}…`
                : this._upload.state.status
          })
        )
      });
      this._upload.set({
        running: false,
        fraction: 1,
        status: `${version.ref}: ${version.record_count ?? 0} records`,
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
    } finally {
      this.removeClass('kpl-mod-uploading');
    }
  }

  /**
   * Handle the drag and drop of an archive onto the panel.
   */
  handleEvent(event: Event): void {
    const drag = event as DragEvent;
    switch (event.type) {
      case 'dragover':
        if (drag.dataTransfer?.types.includes('Files')) {
          event.preventDefault();
          drag.dataTransfer.dropEffect = 'copy';
          this.addClass('kpl-mod-dropTarget');
        }
        break;
      case 'dragleave':
        if (!this.node.contains(drag.relatedTarget as Node | null)) {
          this.removeClass('kpl-mod-dropTarget');
        }
        break;
      case 'drop': {
        this.removeClass('kpl-mod-dropTarget');
        const file = drag.dataTransfer?.files[0];
        if (file) {
          event.preventDefault();
          event.stopPropagation();
          void this.upload(file);
        }
        break;
      }
    }
  }

  private async deleteDataset(name: string): Promise<void> {
    const answer = await showDialog({
      title: 'Delete dataset',
      body: `Delete ${name} and all its versions?`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await this.client.DELETE('/datasets/{name}', {
        params: { path: { name } }
      });
    } catch (error) {
      void showErrorMessage('Cannot delete the dataset', error as Error);
    }
    await this.model.refresh();
  }

  private _name = React.createRef<HTMLInputElement>();
  private _format: HTMLSelectElement | null = null;
  private _file = React.createRef<HTMLInputElement>();
  private _upload = new UploadProgress();
}
