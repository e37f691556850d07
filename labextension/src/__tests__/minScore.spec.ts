import { IBoxObject } from '../datasetViewer';
import {
  boxesAbove,
  countsAbove,
  DEFAULT_MIN_SCORE,
  hiddenNote,
  isScored,
  surestOnTop
} from '../minScore';

const box = (name: string, score?: number): IBoxObject => ({
  name,
  xmin: 0,
  ymin: 0,
  xmax: 1,
  ymax: 1,
  ...(score === undefined ? {} : { score })
});

describe('minimum score', () => {
  it('tells predicted boxes from labelled ones by a finite score', () => {
    expect(isScored(box('cat', 0.5))).toBe(true);
    expect(isScored(box('cat', 0))).toBe(true);
    expect(isScored(box('cat'))).toBe(false);
    expect(isScored({ score: null })).toBe(false);
    expect(isScored(box('cat', NaN))).toBe(false);
  });

  it('shows the dataset boxes scored at least the minimum, and every labelled box', () => {
    const boxes = [
      box('faint', 0.1),
      box('edge', DEFAULT_MIN_SCORE),
      box('sure', 0.9),
      box('label'),
      box('broken', NaN)
    ];
    const names = (minimum: number) =>
      boxesAbove(boxes, minimum).map(b => b.name);
    expect(names(0)).toEqual(['faint', 'edge', 'sure', 'label', 'broken']);
    expect(names(DEFAULT_MIN_SCORE)).toEqual([
      'edge',
      'sure',
      'label',
      'broken'
    ]);
    expect(names(1)).toEqual(['label', 'broken']);
    // the boxes keep their type and fields
    expect(boxesAbove(boxes, 0.5)[0]).toBe(boxes[2]);
  });

  it('counts and names the boxes the minimum hides', () => {
    const boxes = [box('a', 0.05), box('b', 0.2), box('c', 0.3), box('d')];
    const hidden = (minimum: number) =>
      boxes.length - boxesAbove(boxes, minimum).length;
    expect(hidden(0)).toBe(0);
    expect(hidden(DEFAULT_MIN_SCORE)).toBe(2);
    expect(hidden(1)).toBe(3);
    expect(hiddenNote(2, DEFAULT_MIN_SCORE)).toBe('2 more under 25% hidden');
    expect(hiddenNote(1, 0.35)).toBe('1 more under 35% hidden');
  });

  it('keeps the deployment view boxes without a score (null)', () => {
    const drawn = [
      { name: 'low', score: 0.1 },
      { name: 'high', score: 0.8 },
      { name: 'none', score: null }
    ];
    expect(boxesAbove(drawn, 0.5).map(b => b.name)).toEqual(['high', 'none']);
  });

  it('draws the surest box last, and labelled boxes above every prediction', () => {
    const boxes = [box('label'), box('sure', 0.9), box('faint', 0.2)];
    expect(surestOnTop(boxes).map(b => b.name)).toEqual([
      'faint',
      'sure',
      'label'
    ]);
    expect(boxes.map(b => b.name)).toEqual(['label', 'sure', 'faint']); // a copy, in order
    expect(
      surestOnTop([{ score: null }, { score: 0.3 }]).map(b => b.score)
    ).toEqual([0.3, null]);
  });

  it('counts each class at the minimum from its score bands, as the cards draw its boxes', () => {
    // bands of 5 %: [0, 0.05) … [0.95, 1), 1
    const bands = (...scores: number[]): number[] => {
      const counts = new Array(21).fill(0);
      scores.forEach(
        s => (counts[Math.max(0, Math.min(20, Math.floor(s * 20)))] += 1)
      );
      return counts;
    };
    // a score under 0 is in the first band, over 1 in the last, as the server counts them
    const scores = { cat: [0.9, 0.25, 1, 1.2], dog: [0.1, 0.35, -0.3] };
    const classes = { cat: 4, dog: 3, label: 4 }; // label: no scores, always counted
    const classBands = { cat: bands(...scores.cat), dog: bands(...scores.dog) };
    for (const minimum of [0, 0.05, 0.25, 0.35, 0.4, 0.95, 1]) {
      const drawn: Record<string, number> = { label: 4 };
      for (const [name, list] of Object.entries(scores)) {
        const shown = boxesAbove(
          list.map(score => ({ score })),
          minimum
        ).length;
        if (shown > 0) {
          drawn[name] = shown;
        }
      }
      expect(countsAbove(classes, classBands, minimum)).toEqual(drawn);
    }
    expect(countsAbove(classes, classBands, 1)).toEqual({ cat: 2, label: 4 });
    expect(countsAbove(classes, classBands, 0)).toEqual(classes);
  });
});
