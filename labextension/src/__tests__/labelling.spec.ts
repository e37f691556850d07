import {
  change,
  dragBox,
  isChanged,
  isSavable,
  keyAction,
  redo,
  saveError,
  startEditing,
  undo,
  withBox,
  withClass,
  withoutLastBox
} from '../labelling';

describe('labelling keys', () => {
  it('moves, saves, removes and drops with single keys', () => {
    const action = (key: string) => keyAction({ key }, 3)?.type ?? null;
    expect(action('ArrowRight')).toBe('next');
    expect(action('n')).toBe('next');
    expect(action('N')).toBe('next');
    expect(action('ArrowLeft')).toBe('previous');
    expect(action('p')).toBe('previous');
    expect(action('Enter')).toBe('save');
    expect(action('s')).toBe('save');
    expect(action('Backspace')).toBe('remove');
    expect(action('Delete')).toBe('remove');
    expect(action('x')).toBe('drop');
    expect(action('a')).toBe('accept');
    expect(action('q')).toBeNull();
  });

  it('picks a class by its number, 0 for the tenth, none past the classes', () => {
    expect(keyAction({ key: '1' }, 3)).toEqual({ type: 'class', index: 0 });
    expect(keyAction({ key: '3' }, 3)).toEqual({ type: 'class', index: 2 });
    expect(keyAction({ key: '4' }, 3)).toBeNull();
    expect(keyAction({ key: '0' }, 10)).toEqual({ type: 'class', index: 9 });
    expect(keyAction({ key: '0' }, 9)).toBeNull();
  });

  it('undoes and redoes with Ctrl or Cmd, and leaves other chords alone', () => {
    expect(keyAction({ key: 'z', ctrlKey: true }, 3)).toEqual({ type: 'undo' });
    expect(keyAction({ key: 'z', metaKey: true }, 3)).toEqual({ type: 'undo' });
    expect(keyAction({ key: 'Z', ctrlKey: true, shiftKey: true }, 3)).toEqual({
      type: 'redo'
    });
    expect(keyAction({ key: 'y', ctrlKey: true }, 3)).toEqual({ type: 'redo' });
    expect(keyAction({ key: 'n', ctrlKey: true }, 3)).toBeNull(); // the browser's new window
    expect(keyAction({ key: '1', altKey: true }, 3)).toBeNull();
  });
});

describe('editing a label', () => {
  it('undoes and redoes every change, and a change clears redo', () => {
    let editor = startEditing(null);
    expect(isChanged(editor)).toBe(false);
    editor = change(editor, withClass(editor.value, 'cat'));
    editor = change(editor, withClass(editor.value, 'dog'));
    expect(editor.value.class_name).toBe('dog');
    editor = undo(editor);
    expect(editor.value.class_name).toBe('cat');
    editor = undo(editor);
    expect(editor.value).toEqual({});
    expect(isChanged(editor)).toBe(false);
    expect(undo(editor)).toBe(editor);
    editor = redo(editor);
    expect(editor.value.class_name).toBe('cat');
    editor = change(editor, withClass(editor.value, 'bird'));
    expect(redo(editor)).toBe(editor);
    expect(editor.value.class_name).toBe('bird');
  });

  it('adds boxes and removes the last one', () => {
    const box = dragBox([10, 20], [2, 4], [16, 12], 'cat');
    expect(box).toEqual({
      type: 'box',
      class_name: 'cat',
      xmin: 2,
      ymin: 4,
      xmax: 10,
      ymax: 12 // clipped to the image
    });
    const value = withBox(withBox({ width: 16, height: 12 }, box!), {
      ...box!,
      class_name: 'dog'
    });
    expect(value.objects!.map(b => b.class_name)).toEqual(['cat', 'dog']);
    expect(withoutLastBox(value).objects!.map(b => b.class_name)).toEqual([
      'cat'
    ]);
    expect(withoutLastBox({})).toEqual({});
    expect(dragBox([5, 5], [6, 30], [16, 12], 'cat')).toBeNull(); // a click, not a box
  });

  it('saves a class label with a class or a drop mark, a box label with its image size', () => {
    expect(isSavable({}, true)).toBe(false);
    expect(isSavable({ class_name: 'cat' }, true)).toBe(true);
    expect(isSavable({ dropped: true }, true)).toBe(true);
    expect(isSavable({ objects: [] }, false)).toBe(false);
    expect(isSavable({ objects: [], width: 16, height: 12 }, false)).toBe(true);
    expect(withClass({ dropped: true, subclass: 'tabby' }, 'dog')).toEqual({
      class_name: 'dog',
      subclass: null,
      dropped: false
    });
  });

  it('says plainly that a conflicting save was not saved', () => {
    expect(saveError(409, 'record 3: ann saved it at 12:00')).toBe(
      'Not saved: record 3: ann saved it at 12:00'
    );
    expect(saveError(undefined, 'offline')).toBe(
      'Not saved (no answer): offline'
    );
  });
});
