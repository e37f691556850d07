import { palette } from '../format';
import { boxesAbove } from '../minScore';
import { drawable, maskPixels } from '../prediction';
import { historyFigures } from '../requestCurves';

describe('drawable', () => {
  it('labels a classification with its class and score', () => {
    expect(
      drawable({
        type: 'classification',
        height: 8,
        width: 8,
        depth: 1,
        class_id: 7,
        class_name: 'seven',
        score: 0.9731,
        error: ''
      })
    ).toEqual({ kind: 'classification', label: 'seven 97.3%', score: 0.9731 });
    // No name and no score: the class id alone.
    expect(drawable({ type: 'classification', class_id: 3 })).toEqual({
      kind: 'classification',
      label: '3',
      score: null
    });
  });

  it('turns detected objects into boxes clipped to the image, colored by class', () => {
    const result = drawable({
      type: 'rectangle_box_detection',
      height: 40,
      width: 60,
      depth: 3,
      objects: [
        { name: 'cat', score: 0.5, xmin: 10, ymin: 5, xmax: 30, ymax: 25 },
        { name: 'dog', score: 0.25, xmin: 50, ymin: 30, xmax: 70, ymax: 45 },
        { name: 'cat', score: 0.75, xmin: 20, ymin: 2, xmax: 4, ymax: 12 },
        { name: 'broken', xmin: 'a', ymin: 1, xmax: 2, ymax: 3 }
      ],
      error: ''
    });
    expect(result.kind).toBe('detection');
    if (result.kind !== 'detection') {
      return;
    }
    expect([result.width, result.height]).toEqual([60, 40]);
    expect(
      result.boxes.map(box => [box.x, box.y, box.width, box.height])
    ).toEqual([
      [10, 5, 20, 20],
      [50, 30, 10, 10], // clipped at the right and bottom edges
      [4, 2, 16, 10] // corners given the wrong way round
    ]);
    expect(result.boxes.map(box => box.label)).toEqual([
      'cat 50.0%',
      'dog 25.0%',
      'cat 75.0%'
    ]);
    expect(result.boxes.map(box => box.color)).toEqual([
      palette(0),
      palette(1),
      palette(0)
    ]);
  });

  it('shows the boxes scored at least the minimum, and those without a score', () => {
    const result = drawable({
      type: 'rectangle_box_detection',
      height: 10,
      width: 10,
      objects: [
        { name: 'faint', score: 0.05, xmin: 0, ymin: 0, xmax: 2, ymax: 2 },
        { name: 'edge', score: 0.25, xmin: 1, ymin: 1, xmax: 3, ymax: 3 },
        { name: 'sure', score: 0.9, xmin: 2, ymin: 2, xmax: 4, ymax: 4 },
        { name: 'unscored', xmin: 3, ymin: 3, xmax: 5, ymax: 5 }
      ]
    });
    if (result.kind !== 'detection') {
      throw new Error(`not a detection: ${result.kind}`);
    }
    const names = (minimum: number) =>
      boxesAbove(result.boxes, minimum).map(box => box.name);
    expect(names(0)).toEqual(['faint', 'edge', 'sure', 'unscored']);
    expect(names(0.25)).toEqual(['edge', 'sure', 'unscored']);
    expect(names(1)).toEqual(['unscored']);
  });

  it('colors every non-background pixel of a segmentation mask', () => {
    const result = drawable({
      type: 'segmentation',
      height: 2,
      width: 3,
      depth: 3,
      mask: [
        [0, 1, 1],
        [2, 0, 1]
      ],
      error: ''
    });
    expect(result.kind).toBe('segmentation');
    if (result.kind !== 'segmentation') {
      return;
    }
    const { mask } = result;
    expect([mask.width, mask.height]).toEqual([3, 2]);
    expect(mask.classes.map(c => [c.id, c.pixels])).toEqual([
      [0, 2],
      [1, 3],
      [2, 1]
    ]);
    const pixel = (x: number, y: number) =>
      Array.from(mask.rgba.slice(4 * (y * 3 + x), 4 * (y * 3 + x) + 4));
    expect(pixel(0, 0)).toEqual([0, 0, 0, 0]);
    const one = parseInt(palette(1).slice(1), 16);
    expect(pixel(1, 0)).toEqual([one >> 16, (one >> 8) & 255, one & 255, 110]);
    const two = parseInt(palette(2).slice(1), 16);
    expect(pixel(0, 1).slice(0, 3)).toEqual([
      two >> 16,
      (two >> 8) & 255,
      two & 255
    ]);
  });

  it('draws nothing for answers it does not know', () => {
    expect(drawable({ label: 'x' })).toEqual({ kind: 'other' });
    expect(drawable(null)).toEqual({ kind: 'other' });
    expect(drawable({ type: 'segmentation', mask: [] })).toEqual({
      kind: 'other'
    });
    expect(maskPixels([1, 2, 3])).toBeNull();
  });
});

describe('historyFigures', () => {
  const point = (time: string, requests: number, p50: number | null) => ({
    time,
    requests,
    errors: requests > 2 ? 1 : 0,
    p50_ms: p50,
    p99_ms: p50 === null ? null : p50 * 2
  });
  const now = Date.parse('2026-11-26T12:10:00Z');

  it('draws each interval in minutes before now, one curve per version and figure', () => {
    const figures = historyFigures(
      {
        'm:1': [
          point('2026-11-26T12:00:00Z', 3, 4),
          point('2026-11-26T12:00:30Z', 1, 6)
        ],
        'm:2': [point('2026-11-26T12:09:50Z', 2, 8)]
      },
      10,
      now
    );
    expect(Object.keys(figures)).toEqual([
      'requests',
      'errors',
      'latency p50 (ms)',
      'latency p99 (ms)'
    ]);
    // intervals without requests count zero between the first and the last one
    expect(figures.requests['m:1']).toEqual([
      [-10, 3],
      [-9.83, 0],
      [-9.67, 0],
      [-9.5, 1]
    ]);
    expect(figures.errors['m:1']).toEqual([
      [-10, 1],
      [-9.83, 0],
      [-9.67, 0],
      [-9.5, 0]
    ]);
    // but their latency is a gap, not a zero
    expect(figures['latency p50 (ms)']['m:1']).toEqual([
      [-10, 4],
      [-9.5, 6]
    ]);
    expect(figures['latency p99 (ms)']['m:2']).toEqual([[-0.17, 16]]);
  });

  it('leaves out latencies no replica answered and versions without points', () => {
    const figures = historyFigures(
      { 'm:1': [point('2026-11-26T12:09:00Z', 1, null)], 'm:2': [] },
      10,
      now
    );
    expect(figures.requests).toEqual({ 'm:1': [[-1, 1]] });
    expect(figures['latency p50 (ms)']).toEqual({ 'm:1': [] });
  });
});
