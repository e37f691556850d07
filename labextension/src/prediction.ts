import { palette } from './format';

/**
 * A box to draw over the image, in the image's pixels.
 */
export interface IDrawableBox {
  name: string;
  score: number | null;
  x: number;
  y: number;
  width: number;
  height: number;
  color: string;
  label: string;
}

/**
 * A class mask as RGBA pixels to overlay on the image, with the color of each class.
 */
export interface IDrawableMask {
  width: number;
  height: number;
  rgba: Uint8ClampedArray;
  classes: { id: number; color: string; pixels: number }[];
}

/**
 * What a prediction draws: a class with its score, boxes, a mask, or the raw JSON.
 */
export type Drawable =
  | { kind: 'classification'; label: string; score: number | null }
  | { kind: 'detection'; width: number; height: number; boxes: IDrawableBox[] }
  | { kind: 'segmentation'; mask: IDrawableMask }
  | { kind: 'other' };

/**
 * Alpha of a class in the mask overlay; class 0 (background) stays transparent.
 */
const MASK_ALPHA = 110;

const num = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;

const scoreText = (score: number | null): string =>
  score === null ? '' : ` ${(100 * score).toFixed(1)}%`;

/**
 * The RGB of a `#rrggbb` color.
 */
function rgb(color: string): [number, number, number] {
  const value = parseInt(color.slice(1), 16);
  return [(value >> 16) & 255, (value >> 8) & 255, value & 255];
}

/**
 * Boxes of a detection response, clipped to the image; class names pick the colors.
 */
function detection(response: Record<string, unknown>): Drawable {
  const objects = Array.isArray(response.objects) ? response.objects : [];
  const names: string[] = [];
  const width = num(response.width) ?? 0;
  const height = num(response.height) ?? 0;
  const clip = (value: number, max: number) =>
    max > 0 ? Math.max(0, Math.min(max, value)) : Math.max(0, value);
  const boxes: IDrawableBox[] = [];
  for (const object of objects as Record<string, unknown>[]) {
    const [xmin, ymin, xmax, ymax] = [
      object.xmin,
      object.ymin,
      object.xmax,
      object.ymax
    ].map(num);
    if (xmin === null || ymin === null || xmax === null || ymax === null) {
      continue;
    }
    const name = String(object.name ?? '');
    if (!names.includes(name)) {
      names.push(name);
    }
    const score = num(object.score);
    const x = clip(Math.min(xmin, xmax), width);
    const y = clip(Math.min(ymin, ymax), height);
    boxes.push({
      name,
      score,
      x,
      y,
      width: clip(Math.max(xmin, xmax), width) - x,
      height: clip(Math.max(ymin, ymax), height) - y,
      color: palette(names.indexOf(name)),
      label: name + scoreText(score)
    });
  }
  return { kind: 'detection', width, height, boxes };
}

/**
 * The mask of a segmentation response (rows of class indices) as colored pixels.
 */
export function maskPixels(mask: unknown): IDrawableMask | null {
  if (!Array.isArray(mask) || mask.length === 0 || !Array.isArray(mask[0])) {
    return null;
  }
  const rows = mask as unknown[][];
  const height = rows.length;
  const width = rows[0].length;
  const rgba = new Uint8ClampedArray(width * height * 4);
  const counts = new Map<number, number>();
  rows.forEach((row, y) => {
    for (let x = 0; x < width; x++) {
      const id = num(row[x]) ?? 0;
      counts.set(id, (counts.get(id) ?? 0) + 1);
      if (id === 0) {
        continue;
      }
      const [r, g, b] = rgb(palette(id));
      const at = 4 * (y * width + x);
      rgba[at] = r;
      rgba[at + 1] = g;
      rgba[at + 2] = b;
      rgba[at + 3] = MASK_ALPHA;
    }
  });
  const classes = [...counts.entries()]
    .sort(([a], [b]) => a - b)
    .map(([id, pixels]) => ({ id, color: palette(id), pixels }));
  return { width, height, rgba, classes };
}

/**
 * What to draw for a prediction, from the `type` of a `kpl_helper.deploy` response.
 */
export function drawable(response: unknown): Drawable {
  if (typeof response !== 'object' || response === null) {
    return { kind: 'other' };
  }
  const body = response as Record<string, unknown>;
  switch (body.type) {
    case 'classification': {
      const score = num(body.score);
      const name = body.class_name ?? body.class_id;
      return {
        kind: 'classification',
        label: String(name ?? '') + scoreText(score),
        score
      };
    }
    case 'rectangle_box_detection':
      return detection(body);
    case 'segmentation': {
      const mask = maskPixels(body.mask);
      return mask ? { kind: 'segmentation', mask } : { kind: 'other' };
    }
    default:
      return { kind: 'other' };
  }
}
