/**
 * The labelling view of a task in the main area: one record at a time, class buttons numbered
 * for the keyboard, boxes drawn by dragging on the image, undo and redo, saves checked against
 * the version loaded, the next record fetched ahead.
 */
import { ReactWidget } from '@jupyterlab/apputils';
import React from 'react';

import { components } from './generated/api';
import { KPLClient } from './api';
import { KPLApiError } from './request';
import {
  change,
  dragBox,
  fromSuggestion,
  IEditor,
  ILabelValue,
  isChanged,
  isSavable,
  keyAction,
  redo,
  saveError,
  SHORTCUTS,
  startEditing,
  undo,
  withBox,
  withClass,
  withoutLastBox
} from './labelling';

type Schemas = components['schemas'];

/**
 * What the view reads of a task.
 */
export interface ITask {
  kind: string;
  dataset: string;
  content_field: string;
  label_schema: { classes: { name: string; color: string }[] };
  progress: { percent: number; percent_accepted: number };
}

/**
 * What the view reads of a record: its fields, its label (with the version a save names).
 */
export interface IRecord {
  record: number;
  fields: Record<string, unknown>;
  suggestion?: { run_id: number; value: Record<string, unknown> } | null;
  label?: {
    value: Record<string, unknown>;
    version: number;
    state: string;
    comment: string;
  } | null;
}

/**
 * The kinds the view labels; the others are labelled through the API, the CLI or an import.
 */
export const VIEW_KINDS: ReadonlyArray<string> = [
  'image_class',
  'text_class',
  'audio_class',
  'boxes'
];
const CLASS_KINDS = ['image_class', 'text_class', 'audio_class'];
const QUEUE_PAGE = 50;

interface IState {
  task: ITask | null;
  records: number[];
  position: number;
  record: IRecord | null;
  editor: IEditor;
  suggestionRun: number | null; // the run whose suggestion the value being edited took
  classIndex: number;
  message: string;
  drag: [number, number, number, number] | null;
}

/**
 * The labelling view of one task: the caller's unlabelled and rejected records in record order.
 */
export class LabellingView extends ReactWidget {
  constructor(
    readonly client: KPLClient,
    readonly taskName: string
  ) {
    super();
    this.addClass('kpl-LabellingView');
    this.title.label = `Label ${taskName}`;
    this.node.tabIndex = 0; // the view takes the keys while it has the focus
    this.node.addEventListener('keydown', this.onKey);
    this.ready = this.load();
  }

  /**
   * Settles once the task and the first record are loaded.
   */
  readonly ready: Promise<void>;

  /**
   * Settles once what the last key started (a save, a move) is done.
   */
  pending: Promise<unknown> = Promise.resolve();

  state: IState = {
    task: null,
    records: [],
    position: 0,
    record: null,
    editor: startEditing(null),
    suggestionRun: null,
    classIndex: 0,
    message: 'Loading…',
    drag: null
  };
  private prefetched = new Map<number, Promise<IRecord>>();

  private set(changes: Partial<IState>): void {
    this.state = { ...this.state, ...changes };
    this.update();
  }

  private get isClassTask(): boolean {
    return CLASS_KINDS.includes(this.state.task?.kind ?? '');
  }

  private get classes(): string[] {
    return (this.state.task?.label_schema.classes ?? []).map(c => c.name);
  }

  /**
   * Load the task and the records to label: unlabelled ones dealt to the caller, then rejected ones.
   */
  async load(): Promise<void> {
    try {
      const path = { name: this.taskName };
      const task = await this.client.GET('/annotation/tasks/{name}', {
        params: { path }
      });
      if (!VIEW_KINDS.includes(task.kind)) {
        this.set({
          task,
          message: `This view labels ${VIEW_KINDS.join(', ')} tasks; label ${task.kind} through the API, kpl-lab annotation or an import.`
        });
        return;
      }
      const records: number[] = [];
      for (const state of ['unlabelled', 'rejected'] as const) {
        const page = await this.client.GET('/annotation/tasks/{name}/queue', {
          params: {
            path,
            query: { state, mine: 1, limit: QUEUE_PAGE, order: 'uncertainty' }
          }
        });
        records.push(...page.records.map(entry => entry.record));
      }
      this.set({
        task,
        records,
        message: records.length ? '' : 'Nothing left to label.'
      });
      if (records.length) {
        await this.showRecord(0);
      }
    } catch (error) {
      this.set({ message: (error as Error).message });
    }
  }

  private fetchRecord(record: number): Promise<IRecord> {
    let answer = this.prefetched.get(record);
    if (!answer) {
      answer = this.client.GET('/annotation/tasks/{name}/records/{record}', {
        params: { path: { name: this.taskName, record } }
      });
      this.prefetched.set(record, answer);
      answer.catch(() => this.prefetched.delete(record));
    }
    return answer;
  }

  /**
   * Show the record at a position of the list, and fetch the one after it (its image too).
   */
  async showRecord(position: number): Promise<void> {
    const records = this.state.records;
    if (position < 0 || position >= records.length) {
      return;
    }
    const record = await this.fetchRecord(records[position]);
    this.prefetched.delete(records[position]); // a record shown again is fetched again
    this.set({
      position,
      record,
      editor: startEditing(
        (record.label?.value as ILabelValue | undefined) ?? null
      ),
      suggestionRun: null,
      message: record.label?.comment ? `Reviewer: ${record.label.comment}` : '',
      drag: null
    });
    if (position + 1 < records.length) {
      void this.fetchRecord(records[position + 1]).then(next => {
        const url = this.imageURL(next);
        if (url) {
          new Image().src = url;
        }
      });
    }
  }

  private imageURL(record: IRecord | null): string | null {
    const field = record?.fields[this.state.task?.content_field ?? 'content'];
    const url = (field as { url?: string } | undefined)?.url;
    return url ? this.client.mediaURL(url) : null;
  }

  /**
   * Save the label over the version loaded; a conflict is shown and the view stays on the record.
   */
  async save(): Promise<boolean> {
    const { record, editor } = this.state;
    if (!record || !isChanged(editor)) {
      return true;
    }
    if (!isSavable(editor.value, this.isClassTask)) {
      this.set({
        message: 'Not saved: choose a class, or draw on the loaded image.'
      });
      return false;
    }
    try {
      const label = await this.client.PUT(
        '/annotation/tasks/{name}/records/{record}/label',
        {
          params: { path: { name: this.taskName, record: record.record } },
          body: {
            value: editor.value as Schemas['LabelValue'],
            version: record.label?.version ?? 0,
            suggestion_run: this.state.suggestionRun
          }
        }
      );
      this.set({
        record: { ...record, label },
        editor: startEditing(label.value as ILabelValue),
        suggestionRun: null,
        message: `Saved record ${record.record} (version ${label.version}).`
      });
      return true;
    } catch (error) {
      const status = error instanceof KPLApiError ? error.status : undefined;
      this.set({ message: saveError(status, (error as Error).message) });
      return false;
    }
  }

  private edit(value: ILabelValue): void {
    this.set({ editor: change(this.state.editor, value) });
  }

  private async move(step: number): Promise<void> {
    if (await this.save()) {
      await this.showRecord(this.state.position + step);
    }
  }

  /**
   * Choose a class: a class task labels the record with it, saves and moves on; a box task draws with it.
   */
  async chooseClass(index: number): Promise<void> {
    const name = this.classes[index];
    if (!name) {
      return;
    }
    if (this.isClassTask) {
      this.edit(withClass(this.state.editor.value, name));
      await this.move(1);
    } else {
      this.set({ classIndex: index });
    }
  }

  /**
   * Take the record's suggestion as its label (a class task saves and moves on); the save names its run.
   */
  async acceptSuggestion(): Promise<void> {
    const suggestion = this.state.record?.suggestion;
    if (!suggestion) {
      this.set({ message: 'This record has no suggestion.' });
      return;
    }
    const value = fromSuggestion(suggestion.value, this.state.editor.value);
    this.set({
      editor: change(this.state.editor, value),
      suggestionRun: suggestion.run_id
    });
    if (this.isClassTask) {
      await this.move(1);
    }
  }

  private onKey = (event: KeyboardEvent): void => {
    const target = event.target as HTMLElement | null;
    if (target && ['INPUT', 'TEXTAREA', 'SELECT'].includes(target.tagName)) {
      return;
    }
    const action = keyAction(event, this.classes.length);
    if (!action || !this.state.record) {
      return;
    }
    event.preventDefault();
    const value = this.state.editor.value;
    switch (action.type) {
      case 'next':
        this.pending = this.move(1);
        break;
      case 'previous':
        this.pending = this.move(-1);
        break;
      case 'class':
        this.pending = this.chooseClass(action.index);
        break;
      case 'undo':
        this.set({ editor: undo(this.state.editor) });
        break;
      case 'redo':
        this.set({ editor: redo(this.state.editor) });
        break;
      case 'save':
        this.pending = this.save();
        break;
      case 'remove':
        this.edit(withoutLastBox(value));
        break;
      case 'drop':
        this.edit({ ...value, dropped: !value.dropped });
        break;
      case 'accept':
        this.pending = this.acceptSuggestion();
        break;
    }
  };

  private pointer(event: React.MouseEvent<SVGSVGElement>): [number, number] {
    const box = event.currentTarget.getBoundingClientRect();
    const [width, height] = this.imageSize();
    return [
      ((event.clientX - box.left) / box.width) * width,
      ((event.clientY - box.top) / box.height) * height
    ];
  }

  private imageSize(): [number, number] {
    const value = this.state.editor.value;
    return [value.width ?? 1, value.height ?? 1];
  }

  private onImageLoad = (event: React.SyntheticEvent<HTMLImageElement>) => {
    const image = event.currentTarget;
    const value = this.state.editor.value;
    if (
      !this.isClassTask &&
      (value.width !== image.naturalWidth ||
        value.height !== image.naturalHeight)
    ) {
      // the size is part of a box label (exports need it); it is no change to undo
      this.set({
        editor: {
          ...this.state.editor,
          value: {
            ...value,
            width: image.naturalWidth,
            height: image.naturalHeight
          }
        }
      });
    }
  };

  private renderBoxes(): React.ReactElement | null {
    if (this.isClassTask) {
      return null;
    }
    const [width, height] = this.imageSize();
    const colour = (name: string) =>
      this.state.task?.label_schema.classes.find(c => c.name === name)?.color ??
      '#ff0000';
    const drag = this.state.drag;
    return (
      <svg
        className="kpl-LabellingView-overlay"
        viewBox={`0 0 ${width} ${height}`}
        preserveAspectRatio="none"
        onMouseDown={event => {
          const [x, y] = this.pointer(event);
          this.set({ drag: [x, y, x, y] });
        }}
        onMouseMove={event => {
          if (drag) {
            const [x, y] = this.pointer(event);
            this.set({ drag: [drag[0], drag[1], x, y] });
          }
        }}
        onMouseUp={() => {
          if (drag) {
            const box = dragBox(
              [drag[0], drag[1]],
              [drag[2], drag[3]],
              [width, height],
              this.classes[this.state.classIndex]
            );
            this.set({ drag: null });
            if (box) {
              this.edit(withBox(this.state.editor.value, box));
            }
          }
        }}
      >
        {(this.state.editor.value.objects ?? []).map((box, i) => (
          <rect
            key={i}
            x={box.xmin}
            y={box.ymin}
            width={box.xmax - box.xmin}
            height={box.ymax - box.ymin}
            fill="none"
            stroke={colour(box.class_name)}
            strokeWidth={Math.max(width, height) / 200}
          >
            <title>{box.class_name}</title>
          </rect>
        ))}
        {drag && (
          <rect
            x={Math.min(drag[0], drag[2])}
            y={Math.min(drag[1], drag[3])}
            width={Math.abs(drag[2] - drag[0])}
            height={Math.abs(drag[3] - drag[1])}
            fill="none"
            stroke="#ffffff"
            strokeDasharray="4"
            strokeWidth={Math.max(width, height) / 200}
          />
        )}
      </svg>
    );
  }

  private renderContent(): React.ReactElement | null {
    const record = this.state.record;
    if (!record) {
      return null;
    }
    const url = this.imageURL(record);
    const field = record.fields[this.state.task?.content_field ?? 'content'];
    if (this.state.task?.kind === 'text_class' && typeof field === 'string') {
      return <pre className="kpl-LabellingView-text">{field}</pre>;
    }
    if (this.state.task?.kind === 'audio_class' && url) {
      return <audio controls src={url} />;
    }
    return (
      <div className="kpl-LabellingView-image">
        {url && (
          <img
            src={url}
            alt={`record ${record.record}`}
            onLoad={this.onImageLoad}
          />
        )}
        {this.renderBoxes()}
      </div>
    );
  }

  render(): React.ReactElement {
    const { task, record, records, position, editor, classIndex, message } =
      this.state;
    const progress = task?.progress;
    return (
      <div className="kpl-LabellingView-body">
        <header>
          <strong>{this.taskName}</strong>
          {task && ` · ${task.kind} · ${task.dataset}`}
          {progress &&
            ` · ${progress.percent}% labelled, ${progress.percent_accepted}% accepted`}
          {record &&
            ` · record ${record.record} (${position + 1} of ${records.length})`}
          {record?.label &&
            ` · ${record.label.state}, version ${record.label.version}`}
          {editor.value.dropped && ' · dropped'}
          {isChanged(editor) && ' · changed'}
        </header>
        <div className="kpl-LabellingView-classes">
          {this.classes.map((name, i) => (
            <button
              key={name}
              className={
                (
                  this.isClassTask
                    ? editor.value.class_name === name
                    : classIndex === i
                )
                  ? 'jp-mod-styled jp-mod-accept'
                  : 'jp-mod-styled'
              }
              onClick={() => void this.chooseClass(i)}
            >
              {i < 10 ? `${(i + 1) % 10} ` : ''}
              {name}
            </button>
          ))}
        </div>
        {message && <p className="kpl-LabellingView-message">{message}</p>}
        {this.renderContent()}
        <table className="kpl-LabellingView-shortcuts">
          <tbody>
            {SHORTCUTS.map(([keys, what]) => (
              <tr key={keys}>
                <td>
                  <kbd>{keys}</kbd>
                </td>
                <td>{what}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    );
  }
}
