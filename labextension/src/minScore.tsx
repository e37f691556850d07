/**
 * The minimum score a predicted box shows with, in the deployment view and the dataset viewer.
 */
import React from 'react';

/**
 * The lowest score a box shows with at first: a detector's many faint guesses stay out of the way.
 */
export const DEFAULT_MIN_SCORE = 0.25;

/**
 * A box that may carry a prediction's score.
 */
export interface IScoredBox {
  score?: number | null;
}

/**
 * Whether a box is a prediction: its score is a finite number.
 */
export function isScored(box: IScoredBox): box is { score: number } {
  return typeof box.score === 'number' && Number.isFinite(box.score);
}

/**
 * The boxes scored at least `minimum`; a box without a score always shows, and at 0 every box
 * does (a score under 0 too, as the class chart counts it in its first band).
 */
export function boxesAbove<T extends IScoredBox>(
  boxes: T[],
  minimum: number
): T[] {
  return boxes.filter(
    box => !isScored(box) || minimum <= 0 || box.score >= minimum
  );
}

/**
 * The boxes in drawing order: the surest last, on top, its label readable where boxes overlap; labels (no score) above all.
 */
export function surestOnTop<T extends IScoredBox>(boxes: T[]): T[] {
  const rank = (box: T): number => (isScored(box) ? box.score : 1);
  return [...boxes].sort((a, b) => rank(a) - rank(b));
}

const percent = (value: number): number => Math.round(value * 100);

/**
 * Each class's count at a minimum score, from a dataset's stats: its predictions in the 5 % bands
 * under the minimum (`class_scores`, bands [0, 0.05) … [0.95, 1), 1) left out; a class without
 * scores keeps its count; a class left with none is left out.
 */
export function countsAbove(
  classes: Record<string, number>,
  bands: Record<string, number[]>,
  minimum: number
): Record<string, number> {
  const under = Math.round(minimum * 20);
  const counts: Record<string, number> = {};
  for (const [name, count] of Object.entries(classes)) {
    const left =
      count - (bands[name] ?? []).slice(0, under).reduce((a, b) => a + b, 0);
    if (left > 0) {
      counts[name] = left;
    }
  }
  return counts;
}

/**
 * What the minimum score hides, in words: `3 more under 25% hidden`.
 */
export function hiddenNote(hidden: number, minimum: number): string {
  return `${hidden} more under ${percent(minimum)}% hidden`;
}

/**
 * A slider of the lowest score a box shows with, in percent.
 */
export function MinScore(props: {
  value: number;
  onChange: (value: number) => void;
}): JSX.Element {
  const value = percent(props.value);
  return (
    <label className="kpl-min-score">
      Minimum score
      <input
        type="range"
        min={0}
        max={100}
        step={5}
        value={value}
        onChange={event => props.onChange(Number(event.target.value) / 100)}
      />
      <span>{value}%</span>
    </label>
  );
}
