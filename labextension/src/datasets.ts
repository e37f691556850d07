import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { refreshIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import {
  DATASET_FORMATS,
  DatasetFormat,
  DatasetsAPI,
  IDataset,
  IDatasetVersion
} from './api';
import { formatBytes, h } from './dom';
import { datasetsIcon } from './icons';
import { PollingListModel } from './model';

/**
 * A dataset name from an archive's file name: its stem with unsupported characters replaced.
 */
export function nameFromFile(fileName: string): string {
  const stem = fileName.replace(/\.(zip|tar|tar\.gz|tgz|tar\.bz2|tar\.xz)$/i, '');
  const name = stem.replace(/[^\w.-]+/g, '-').replace(/^[^\w]+/, '');
  return name.slice(0, 100) || 'dataset';
}

/**
 * The Datasets sidebar: search, upload by drag and drop or a button, open a version.
 */
export class DatasetsPanel extends Widget {
  constructor(
    readonly model: PollingListModel<IDataset>,
    private readonly openVersion: (name: string, version: string) => void
  ) {
    super();
    this.id = 'kpl-lab-datasets';
    this.addClass('kpl-Panel');
    this.addClass('kpl-DatasetsPanel');
    this.title.icon = datasetsIcon;
    this.title.caption = 'KPL Datasets';

    this._search = h('input', {
      class: 'jp-mod-styled kpl-search',
      type: 'search',
      placeholder: 'Search datasets',
      'aria-label': 'Search datasets'
    });
    this._search.addEventListener('input', () => {
      this.model.filter = this._search.value.trim();
    });
    this._name = h('input', {
      class: 'jp-mod-styled kpl-upload-name',
      placeholder: 'name',
      'aria-label': 'Dataset name (default: the file name)',
      title: 'Dataset name (default: the file name)'
    });
    this._format = h('select', {
      class: 'jp-mod-styled kpl-upload-format',
      'aria-label': 'Dataset format'
    });
    for (const format of DATASET_FORMATS) {
      this._format.append(h('option', { value: format }, format));
    }
    this._format.value = 'imagefolder';
    this._file = h('input', {
      type: 'file',
      accept: '.zip,.tar,.tar.gz,.tgz,.tar.bz2,.tar.xz',
      class: 'kpl-upload-input'
    });
    this._file.addEventListener('change', () => {
      const file = this._file.files?.[0];
      this._file.value = '';
      if (file) {
        void this.upload(file);
      }
    });
    const uploadButton = h(
      'button',
      { class: 'jp-mod-styled jp-mod-accept kpl-upload-button', type: 'button' },
      'Upload…'
    );
    uploadButton.addEventListener('click', () => this._file.click());
    const refresh = h('button', {
      class: 'jp-mod-styled kpl-icon-button',
      type: 'button',
      title: 'Refresh'
    });
    refreshIcon.element({ container: refresh });
    refresh.addEventListener('click', () => void this.model.refresh());

    this._progress = h('progress', { class: 'kpl-upload-progress', max: 1, value: 0 });
    this._status = h('div', { class: 'kpl-upload-status', role: 'status' });
    this._uploadBox = h(
      'div',
      { class: 'kpl-upload' },
      h('div', { class: 'kpl-upload-row' }, this._name, this._format),
      h(
        'div',
        { class: 'kpl-upload-row' },
        uploadButton,
        h('span', { class: 'kpl-hint' }, 'or drop a zip/tar here')
      ),
      this._progress,
      this._status
    );
    this._progress.hidden = true;
    this._list = h('ul', { class: 'kpl-list kpl-DatasetsPanel-list' });
    this._error = h('div', { class: 'kpl-error' });

    this.node.append(
      h(
        'header',
        { class: 'kpl-Panel-header' },
        h('h2', {}, 'Datasets'),
        refresh
      ),
      this._search,
      this._uploadBox,
      this._file,
      this._error,
      this._list
    );
    this._file.hidden = true;

    this.node.addEventListener('dragover', event => {
      if (event.dataTransfer?.types.includes('Files')) {
        event.preventDefault();
        event.dataTransfer.dropEffect = 'copy';
        this.addClass('kpl-mod-dropTarget');
      }
    });
    this.node.addEventListener('dragleave', event => {
      if (!this.node.contains(event.relatedTarget as Node | null)) {
        this.removeClass('kpl-mod-dropTarget');
      }
    });
    this.node.addEventListener('drop', event => {
      this.removeClass('kpl-mod-dropTarget');
      const file = event.dataTransfer?.files[0];
      if (file) {
        event.preventDefault();
        event.stopPropagation();
        void this.upload(file);
      }
    });

    model.changed.connect(this.render, this);
    this.render();
  }

  /**
   * Ask for a file to upload.
   */
  chooseFile(): void {
    this._file.click();
  }

  /**
   * Upload an archive with the name and format of the form, then open the new version.
   */
  async upload(file: File): Promise<IDatasetVersion | null> {
    const name = this._name.value.trim() || nameFromFile(file.name);
    const format = this._format.value as DatasetFormat;
    this._progress.hidden = false;
    this._progress.value = 0;
    this._status.className = 'kpl-upload-status';
    this._status.textContent = `Uploading ${file.name} (${formatBytes(file.size)})…`;
    this.addClass('kpl-mod-uploading');
    try {
      const version = await DatasetsAPI.upload(
        file,
        { name, format },
        fraction => {
          this._progress.value = fraction;
          if (fraction >= 1) {
            this._status.textContent = `Importing ${file.name} as ${format}…`;
          }
        }
      );
      this._progress.value = 1;
      this._status.textContent = `${version.ref}: ${version.record_count ?? 0} records`;
      this._name.value = '';
      await this.model.refresh();
      this.openVersion(version.name, version.version);
      return version;
    } catch (error) {
      this._status.className = 'kpl-upload-status kpl-error';
      this._status.textContent = `Upload of ${file.name} failed: ${(error as Error).message}`;
      return null;
    } finally {
      this._progress.hidden = true;
      this.removeClass('kpl-mod-uploading');
    }
  }

  private render(): void {
    const error = this.model.error;
    this._error.textContent = error ? error.message : '';
    this._list.replaceChildren();
    if (this.model.items.length === 0 && !error) {
      this._list.append(
        h(
          'li',
          { class: 'kpl-empty' },
          this.model.filter ? 'No dataset matches.' : 'No datasets yet: upload one.'
        )
      );
    }
    for (const dataset of this.model.items) {
      const versions = h('ul', { class: 'kpl-versions' });
      for (const version of dataset.versions) {
        const item = h(
          'li',
          {
            class: 'kpl-item kpl-version',
            title: `Open ${version.ref}`,
            'data-ref': version.ref,
            tabindex: 0
          },
          h('span', { class: 'kpl-version-id' }, version.version),
          h(
            'span',
            { class: 'kpl-meta' },
            `${version.record_count ?? 0} records · ${formatBytes(version.size_bytes)}`
          )
        );
        const open = () => this.openVersion(dataset.name, version.version);
        item.addEventListener('click', open);
        item.addEventListener('keydown', event => {
          if (event.key === 'Enter') {
            open();
          }
        });
        versions.append(item);
      }
      const remove = h(
        'button',
        {
          class: 'jp-mod-styled kpl-link-button',
          type: 'button',
          title: `Delete ${dataset.name} and all its versions`
        },
        'Delete'
      );
      remove.addEventListener('click', () => void this.remove(dataset.name));
      this._list.append(
        h(
          'li',
          { class: 'kpl-dataset', 'data-name': dataset.name },
          h(
            'div',
            { class: 'kpl-item-title' },
            h('span', { class: 'kpl-name' }, dataset.name),
            remove
          ),
          dataset.description
            ? h('div', { class: 'kpl-meta' }, dataset.description)
            : null,
          versions
        )
      );
    }
  }

  private async remove(name: string): Promise<void> {
    const answer = await showDialog({
      title: 'Delete dataset',
      body: `Delete ${name} and all its versions?`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await DatasetsAPI.remove(name);
    } catch (error) {
      void showErrorMessage('Cannot delete the dataset', error as Error);
    }
    await this.model.refresh();
  }

  private _search: HTMLInputElement;
  private _name: HTMLInputElement;
  private _format: HTMLSelectElement;
  private _file: HTMLInputElement;
  private _progress: HTMLProgressElement;
  private _status: HTMLDivElement;
  private _uploadBox: HTMLDivElement;
  private _list: HTMLUListElement;
  private _error: HTMLDivElement;
}
