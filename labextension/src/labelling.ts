/**
 * The labelling view's rules, apart from React: what each key does, the label being edited with
 * its undo and redo, and boxes drawn in image pixels.
 */

/**
 * A box drawn on an image, in its pixels.
 */
export interface IBoxShape {
  type: 'box';
  class_name: string;
  subclass?: string | null;
  xmin: number;
  ymin: number;
  xmax: number;
  ymax: number;
}

/**
 * A record's label as the API saves it (the view edits classes and boxes).
 */
export interface ILabelValue {
  class_name?: string | null;
  subclass?: string | null;
  objects?: IBoxShape[];
  width?: number | null;
  height?: number | null;
  dropped?: boolean;
}

/**
 * What a key does in the view.
 */
export type Action =
  | { type: 'next' }
  | { type: 'previous' }
  | { type: 'class'; index: number }
  | { type: 'undo' }
  | { type: 'redo' }
  | { type: 'save' }
  | { type: 'remove' }
  | { type: 'drop' }
  | { type: 'accept' };

/**
 * The key events the view reads.
 */
export interface IKey {
  key: string;
  ctrlKey?: boolean;
  metaKey?: boolean;
  shiftKey?: boolean;
  altKey?: boolean;
}

/**
 * The shortcuts, as the view lists them.
 */
export const SHORTCUTS: ReadonlyArray<[string, string]> = [
  ['→ or n', 'next record (saves a changed label first)'],
  ['← or p', 'previous record'],
  [
    '1 … 9, 0',
    'class 1 … 9, 10 (a class task labels and moves on; a box task draws with it)'
  ],
  ['Ctrl+Z', 'undo'],
  ['Ctrl+Shift+Z or Ctrl+Y', 'redo'],
  ['Enter or s', 'save'],
  ['Delete or Backspace', 'remove the last box'],
  ['x', 'mark the record dropped (never published)'],
  ['a', 'accept the pre-labelling suggestion (a class task saves and moves on)']
];

/**
 * The action of a key, or null when the view leaves the key alone (typing in a field, Alt chords,
 * a class number past the task's classes).
 */
export function keyAction(event: IKey, classCount: number): Action | null {
  const command = event.ctrlKey || event.metaKey;
  if (event.altKey) {
    return null;
  }
  const key = event.key.length === 1 ? event.key.toLowerCase() : event.key;
  if (command) {
    if (key === 'z') {
      return { type: event.shiftKey ? 'redo' : 'undo' };
    }
    return key === 'y' ? { type: 'redo' } : null;
  }
  switch (key) {
    case 'ArrowRight':
    case 'n':
      return { type: 'next' };
    case 'ArrowLeft':
    case 'p':
      return { type: 'previous' };
    case 'Enter':
    case 's':
      return { type: 'save' };
    case 'Delete':
    case 'Backspace':
      return { type: 'remove' };
    case 'x':
      return { type: 'drop' };
    case 'a':
      return { type: 'accept' };
  }
  if (/^[0-9]$/.test(key)) {
    const index = key === '0' ? 9 : Number(key) - 1;
    return index < classCount ? { type: 'class', index } : null;
  }
  return null;
}

/**
 * A label being edited: its value now, the values undo and redo go back and forth to.
 */
export interface IEditor {
  value: ILabelValue;
  undo: ILabelValue[];
  redo: ILabelValue[];
}

/**
 * An editor of a record's label as loaded (an empty value when it has none).
 */
export function startEditing(value: ILabelValue | null): IEditor {
  return { value: value ?? {}, undo: [], redo: [] };
}

/**
 * The editor after a change: the old value goes on the undo stack and redo is cleared.
 */
export function change(editor: IEditor, value: ILabelValue): IEditor {
  return { value, undo: [...editor.undo, editor.value], redo: [] };
}

/**
 * The editor one change back (unchanged when there is none).
 */
export function undo(editor: IEditor): IEditor {
  if (editor.undo.length === 0) {
    return editor;
  }
  return {
    value: editor.undo[editor.undo.length - 1],
    undo: editor.undo.slice(0, -1),
    redo: [editor.value, ...editor.redo]
  };
}

/**
 * The editor one undone change forward (unchanged when there is none).
 */
export function redo(editor: IEditor): IEditor {
  if (editor.redo.length === 0) {
    return editor;
  }
  return {
    value: editor.redo[0],
    undo: [...editor.undo, editor.value],
    redo: editor.redo.slice(1)
  };
}

/**
 * Whether the label was changed since it was loaded or saved.
 */
export function isChanged(editor: IEditor): boolean {
  return editor.undo.length > 0;
}

/**
 * A value with its class set (class tasks): a dropped mark is lifted.
 */
export function withClass(value: ILabelValue, name: string): ILabelValue {
  return { ...value, class_name: name, subclass: null, dropped: false };
}

/**
 * A value with one more box.
 */
export function withBox(value: ILabelValue, box: IBoxShape): ILabelValue {
  return { ...value, objects: [...(value.objects ?? []), box] };
}

/**
 * A value without its last box (unchanged when it has none).
 */
export function withoutLastBox(value: ILabelValue): ILabelValue {
  const objects = value.objects ?? [];
  return objects.length ? { ...value, objects: objects.slice(0, -1) } : value;
}

/**
 * The box between two corners a drag went through, in image pixels, clipped to the image and
 * rounded to tenths; null for a box too thin to mean anything (a click).
 */
export function dragBox(
  from: [number, number],
  to: [number, number],
  size: [number, number],
  className: string
): IBoxShape | null {
  const clip = (v: number, high: number) =>
    Math.round(Math.min(Math.max(v, 0), high) * 10) / 10;
  const [width, height] = size;
  const xmin = clip(Math.min(from[0], to[0]), width);
  const xmax = clip(Math.max(from[0], to[0]), width);
  const ymin = clip(Math.min(from[1], to[1]), height);
  const ymax = clip(Math.max(from[1], to[1]), height);
  if (xmax - xmin < 2 || ymax - ymin < 2) {
    return null;
  }
  return { type: 'box', class_name: className, xmin, ymin, xmax, ymax };
}

/**
 * A class task's value is complete with a class (or a drop mark); a box task's with its image size.
 */
export function isSavable(value: ILabelValue, classTask: boolean): boolean {
  if (classTask) {
    return Boolean(value.class_name) || Boolean(value.dropped);
  }
  return Boolean(value.width && value.height);
}

/**
 * The message of a failed save: a conflict says so plainly, with what the server said.
 */
export function saveError(status: number | undefined, message: string): string {
  if (status === 409) {
    return `Not saved: ${message}`;
  }
  return `Not saved (${status ?? 'no answer'}): ${message}`;
}

/**
 * A suggestion's value as a label: the scores the model gave each object are left out (a label
 * has none), the image size of the label loaded is kept when the suggestion has none.
 */
export function fromSuggestion(
  suggested: Record<string, unknown>,
  loaded: ILabelValue
): ILabelValue {
  const value = { ...(suggested as ILabelValue) };
  if (Array.isArray(value.objects)) {
    value.objects = value.objects.map(shape => {
      const copy = { ...shape } as IBoxShape & { score?: number };
      delete copy.score;
      return copy;
    });
  }
  return {
    ...value,
    width: value.width ?? loaded.width,
    height: value.height ?? loaded.height
  };
}
