import { chartData } from '../charts';
import {
  formatBytes,
  formatCell,
  formatSeconds,
  nameFromFile
} from '../format';

describe('formatting', () => {
  it('writes sizes and durations for people', () => {
    expect(formatBytes(320)).toBe('320 B');
    expect(formatBytes(1536)).toBe('1.5 KB');
    expect(formatSeconds(65)).toBe('1 min 05 s');
    expect(formatSeconds(3720)).toBe('1 h 02 min');
    expect(formatSeconds(null)).toBe('');
  });

  it('names a dataset after its archive', () => {
    expect(nameFromFile('my shapes.tar.gz')).toBe('my-shapes');
    expect(nameFromFile('.zip')).toBe('dataset');
  });
});

describe('chartData', () => {
  it('aligns the series of a figure on one x column', () => {
    const { names, data } = chartData({
      train: [
        [0, 1],
        [1, 0.5]
      ],
      val: [[1, 0.7]],
      empty: []
    });
    expect(names).toEqual(['train', 'val']);
    expect(Array.from(data[0])).toEqual([0, 1]);
    expect(Array.from(data[1])).toEqual([1, 0.5]);
    expect(Array.from(data[2])).toEqual([undefined, 0.7]);
  });
});

describe('record cells', () => {
  it('shows bytes by size, nulls as ∅ and the rest as text or JSON', () => {
    expect(formatCell({ $bytes: 1536 })).toBe('1.5 KB');
    expect(formatCell(null)).toBe('∅');
    expect(formatCell('Fruit/a.jpg')).toBe('Fruit/a.jpg');
    expect(formatCell(3)).toBe('3');
    expect(formatCell([{ name: 'apple', xmin: 1 }])).toBe(
      '[{"name":"apple","xmin":1}]'
    );
  });
});
