import { UseSignal } from '@jupyterlab/ui-components';
import { ISignal, Signal } from '@lumino/signaling';
import React from 'react';

/**
 * Where an upload stands: the fraction sent while it runs, then what came of it.
 */
export interface IUploadState {
  running: boolean;
  fraction: number;
  status: string;
  failed: boolean;
}

/**
 * The state of a side panel's upload, with a signal when it changes.
 */
export class UploadProgress {
  get state(): IUploadState {
    return this._state;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Replace the state and tell the view.
   */
  set(state: IUploadState): void {
    this._state = state;
    this._changed.emit();
  }

  private _state: IUploadState = {
    running: false,
    fraction: 0,
    status: '',
    failed: false
  };
  private _changed = new Signal<this, void>(this);
}

/**
 * The progress bar while an upload runs and its status line after.
 */
export function UploadStatus(props: { progress: UploadProgress }): JSX.Element {
  const { progress } = props;
  return (
    <UseSignal signal={progress.changed}>
      {() => (
        <>
          <progress
            className="kpl-upload-progress"
            max={1}
            value={progress.state.fraction}
            hidden={!progress.state.running}
          />
          <div
            className={`kpl-upload-status${progress.state.failed ? ' kpl-error' : ''}`}
            role="status"
          >
            {progress.state.status}
          </div>
        </>
      )}
    </UseSignal>
  );
}
