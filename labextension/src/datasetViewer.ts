import { Widget } from '@lumino/widgets';

import {
  DatasetsAPI,
  IBytesRef,
  IDatasetVersionDetail,
  IRecord,
  IStats,
  mediaURL
} from './api';
import { formatBytes, h, palette, svg } from './dom';
import { ServerError } from './request';

/**
 * Whether a record value is a reference to bytes on the server.
 */
export function isBytesRef(value: unknown): value is IBytesRef {
  return (
    typeof value === 'object' &&
    value !== null &&
    '$bytes' in value &&
    'url' in value
  );
}

/**
 * An object of a detection record: a named box, maybe with polygons.
 */
interface IBoxObject {
  name?: string;
  xmin: number;
  ymin: number;
  xmax: number;
  ymax: number;
  segmentation?: number[][];
  points?: number[][];
  mask?: IBytesRef;
}

function boxObjects(fields: Record<string, unknown>): IBoxObject[] {
  const objects = fields['object'];
  if (!Array.isArray(objects)) {
    return [];
  }
  return objects.filter(
    (o): o is IBoxObject =>
      typeof o === 'object' &&
      o !== null &&
      ['xmin', 'ymin', 'xmax', 'ymax'].every(
        key => typeof (o as Record<string, unknown>)[key] === 'number'
      )
  );
}

const TEXT_TYPES = /^(text\/|application\/(json|xml|x-yaml|yaml))/;

/**
 * Draw a class-id mask PNG as colored, half transparent pixels on a canvas.
 */
function maskCanvas(url: string, width: number, height: number): HTMLCanvasElement {
  const canvas = h('canvas', { class: 'kpl-mask' });
  const image = new Image();
  image.onload = () => {
    canvas.width = image.naturalWidth;
    canvas.height = image.naturalHeight;
    const context = canvas.getContext('2d');
    if (!context) {
      return;
    }
    context.drawImage(image, 0, 0);
    const pixels = context.getImageData(0, 0, canvas.width, canvas.height);
    const data = pixels.data;
    for (let i = 0; i < data.length; i += 4) {
      const id = data[i];
      if (id === 0) {
        data[i + 3] = 0;
        continue;
      }
      const color = palette(id - 1);
      data[i] = parseInt(color.slice(1, 3), 16);
      data[i + 1] = parseInt(color.slice(3, 5), 16);
      data[i + 2] = parseInt(color.slice(5, 7), 16);
      data[i + 3] = 120;
    }
    context.putImageData(pixels, 0, 0);
  };
  image.src = url;
  canvas.style.aspectRatio = width && height ? `${width} / ${height}` : '';
  return canvas;
}

/**
 * The picture of a record: the thumbnail, its boxes and labels in SVG, its masks.
 */
function recordImage(
  fields: Record<string, unknown>,
  imageField: string,
  ref: IBytesRef,
  classColor: (name: string) => string
): HTMLElement {
  const frame = h('div', { class: 'kpl-figure' });
  const img = h('img', {
    class: 'kpl-thumbnail',
    alt: String(fields['path'] ?? imageField),
    loading: 'lazy',
    src: mediaURL(ref.thumbnail ?? ref.url)
  });
  frame.append(img);
  const objects = boxObjects(fields);
  let width = Number(fields['width']) || 0;
  let height = Number(fields['height']) || 0;
  const masks: IBytesRef[] = [];
  for (const [key, value] of Object.entries(fields)) {
    if (key !== imageField && /mask/i.test(key) && isBytesRef(value)) {
      masks.push(value);
    }
  }
  for (const object of objects) {
    if (isBytesRef(object.mask)) {
      masks.push(object.mask);
    }
  }
  for (const mask of masks) {
    frame.append(maskCanvas(mediaURL(mask.url), width, height));
  }
  if (objects.length === 0) {
    return frame;
  }
  const overlay = svg('svg', { class: 'kpl-boxes' });
  const draw = () => {
    overlay.setAttribute('viewBox', `0 0 ${width} ${height}`);
    overlay.setAttribute('preserveAspectRatio', 'none');
    // Labels scale with the image: about a sixteenth of its longer side.
    const fontSize = Math.max(width, height) / 16;
    for (const object of objects) {
      const color = classColor(object.name ?? '');
      const group = svg('g', { class: 'kpl-box', 'data-name': object.name ?? '' });
      const polygons = [...(object.segmentation ?? [])];
      if (object.points && object.points.length > 2) {
        polygons.push(object.points.flat());
      }
      for (const polygon of polygons) {
        const points: string[] = [];
        for (let i = 0; i + 1 < polygon.length; i += 2) {
          points.push(`${polygon[i]},${polygon[i + 1]}`);
        }
        group.append(
          svg('polygon', {
            points: points.join(' '),
            fill: color,
            'fill-opacity': 0.35,
            stroke: color,
            'stroke-width': 1.5,
            'vector-effect': 'non-scaling-stroke'
          })
        );
      }
      group.append(
        svg('rect', {
          x: object.xmin,
          y: object.ymin,
          width: Math.max(0, object.xmax - object.xmin),
          height: Math.max(0, object.ymax - object.ymin),
          fill: 'none',
          stroke: color,
          'stroke-width': 2,
          'vector-effect': 'non-scaling-stroke'
        })
      );
      const label = svg('text', {
        x: object.xmin + fontSize / 4,
        y: object.ymin > fontSize ? object.ymin - fontSize / 4 : object.ymin + fontSize,
        fill: color,
        'font-size': fontSize,
        'font-weight': 'bold'
      });
      label.textContent = object.name ?? '';
      group.append(label);
      overlay.append(group);
    }
  };
  if (width > 0 && height > 0) {
    draw();
  } else {
    // No size in the record: read it from the full image.
    const full = new Image();
    full.onload = () => {
      width = full.naturalWidth;
      height = full.naturalHeight;
      draw();
    };
    full.src = mediaURL(ref.url);
  }
  frame.append(overlay);
  return frame;
}

/**
 * A text field fetched on demand (XML annotations, JSON, plain text).
 */
function textField(ref: IBytesRef): HTMLElement {
  const details = h(
    'details',
    { class: 'kpl-text-field' },
    h('summary', {}, `${ref.contentType} · ${formatBytes(ref.$bytes)}`)
  );
  const pre = h('pre', {});
  details.append(pre);
  details.addEventListener('toggle', async () => {
    if (!details.open || pre.textContent) {
      return;
    }
    try {
      const response = await fetch(mediaURL(ref.url), { credentials: 'same-origin' });
      const text = await response.text();
      pre.textContent = text.length > 100000 ? text.slice(0, 100000) + '\n…' : text;
    } catch (error) {
      pre.textContent = String(error);
    }
  });
  return details;
}

function valueText(value: unknown): string {
  if (typeof value === 'string') {
    return value;
  }
  return JSON.stringify(value, (_key, v) =>
    isBytesRef(v) ? `<${v.contentType}, ${formatBytes(v.$bytes)}>` : v
  );
}

/**
 * The main-area view of one dataset version: pages of records and per-class counts.
 */
export class DatasetViewer extends Widget {
  constructor(
    readonly name: string,
    readonly version: string,
    private pageSize: number
  ) {
    super();
    this.id = `kpl-dataset-${name}-${version}`;
    this.addClass('kpl-DatasetViewer');
    this.title.label = `${name}:${version.slice(0, 6)}`;
    this.title.caption = `Dataset ${name}:${version}`;
    this.title.closable = true;

    this._part = h('select', { class: 'jp-mod-styled kpl-part', 'aria-label': 'Part' });
    this._part.addEventListener('change', () => {
      this._offset = 0;
      void this.loadPage();
      void this.loadStats();
    });
    this._prev = h('button', { class: 'jp-mod-styled kpl-prev', type: 'button' }, '‹ Previous');
    this._next = h('button', { class: 'jp-mod-styled kpl-next', type: 'button' }, 'Next ›');
    this._prev.addEventListener('click', () => this.go(this._offset - this.pageSize));
    this._next.addEventListener('click', () => this.go(this._offset + this.pageSize));
    this._position = h('span', { class: 'kpl-position' });
    this._info = h('div', { class: 'kpl-dataset-info' });
    this._chart = h('div', { class: 'kpl-class-chart' });
    this._grid = h('div', { class: 'kpl-records' });
    this._error = h('div', { class: 'kpl-error' });
    this.node.append(
      this._info,
      h(
        'div',
        { class: 'kpl-toolbar' },
        h('label', {}, 'Part ', this._part),
        this._prev,
        this._position,
        this._next
      ),
      this._error,
      h('div', { class: 'kpl-dataset-body' }, this._grid, this._chart)
    );
    void this.load();
  }

  /**
   * The version's details, once loaded.
   */
  get detail(): IDatasetVersionDetail | null {
    return this._detail;
  }

  set size(value: number) {
    if (value !== this.pageSize) {
      this.pageSize = value;
      void this.loadPage();
    }
  }

  private go(offset: number): void {
    this._offset = Math.max(0, Math.min(offset, Math.max(0, this._total - 1)));
    this._offset -= this._offset % this.pageSize;
    void this.loadPage();
  }

  private async load(): Promise<void> {
    try {
      this._detail = await DatasetsAPI.version(this.name, this.version);
    } catch (error) {
      this.showError(error);
      return;
    }
    const detail = this._detail;
    const parts = Object.keys(detail.parts ?? {});
    for (const part of parts) {
      this._part.append(h('option', { value: part }, `${part} (${detail.parts![part]})`));
    }
    if (parts.includes('root')) {
      this._part.value = 'root';
    }
    this._info.replaceChildren(
      h('h2', {}, detail.ref),
      h(
        'span',
        { class: 'kpl-meta' },
        `${detail.record_count ?? 0} records · ${parts.length} part(s) · ${formatBytes(detail.size_bytes)}`
      ),
      detail.description ? h('p', {}, detail.description) : ''
    );
    await Promise.all([this.loadPage(), this.loadStats()]);
  }

  private showError(error: unknown): void {
    this._error.textContent =
      error instanceof ServerError ? error.message : String(error);
  }

  private async loadPage(): Promise<void> {
    const generation = ++this._generation;
    let page;
    try {
      page = await DatasetsAPI.records(this.name, this.version, {
        part: this._part.value || undefined,
        offset: this._offset,
        limit: this.pageSize
      });
    } catch (error) {
      this.showError(error);
      return;
    }
    if (generation !== this._generation) {
      return;
    }
    this._error.textContent = '';
    this._total = page.total;
    const last = Math.min(page.offset + page.records.length, page.total);
    this._position.textContent =
      page.total === 0 ? 'no records' : `${page.offset + 1}–${last} of ${page.total}`;
    this._prev.disabled = page.offset <= 0;
    this._next.disabled = last >= page.total;
    this._grid.replaceChildren(...page.records.map(record => this.card(record)));
  }

  private classColor = (name: string): string => {
    if (!this._classes.has(name)) {
      this._classes.set(name, this._classes.size);
    }
    return palette(this._classes.get(name)!);
  };

  private card(record: IRecord): HTMLElement {
    const card = h('div', { class: 'kpl-record', 'data-index': record.index });
    const fields = record.fields;
    const imageField = Object.keys(fields).find(key => {
      const value = fields[key];
      return isBytesRef(value) && value.contentType.startsWith('image/') && !/mask/i.test(key);
    });
    if (imageField) {
      card.append(recordImage(fields, imageField, fields[imageField] as IBytesRef, this.classColor));
    }
    const table = h('table', { class: 'kpl-fields' });
    for (const [key, value] of Object.entries(fields)) {
      if (key === imageField || (key === 'object' && boxObjects(fields).length > 0)) {
        continue;
      }
      let cell: Node;
      if (isBytesRef(value)) {
        cell = TEXT_TYPES.test(value.contentType)
          ? textField(value)
          : document.createTextNode(`${value.contentType} · ${formatBytes(value.$bytes)}`);
      } else if (typeof value === 'string' && value.length > 120) {
        cell = h('pre', { class: 'kpl-long-text' }, value);
      } else {
        cell = document.createTextNode(valueText(value));
      }
      table.append(h('tr', {}, h('th', {}, key), h('td', {}, cell)));
    }
    const objects = boxObjects(fields);
    if (objects.length > 0) {
      const names = objects.map(o => o.name ?? '?');
      table.append(h('tr', {}, h('th', {}, 'object'), h('td', {}, `${objects.length}: ${names.join(', ')}`)));
    }
    card.append(h('div', { class: 'kpl-record-index' }, `#${record.index}`), table);
    return card;
  }

  private async loadStats(): Promise<void> {
    let stats: IStats;
    try {
      stats = await DatasetsAPI.stats(
        this.name,
        this.version,
        this._part.value || undefined
      );
    } catch (error) {
      this._chart.replaceChildren(h('div', { class: 'kpl-error' }, (error as Error).message));
      return;
    }
    this.renderChart(stats);
  }

  private renderChart(stats: IStats): void {
    const entries = Object.entries(stats.classes ?? {}).sort((a, b) => b[1] - a[1]);
    this._chart.replaceChildren(
      h('h3', {}, stats.class_field ? `Classes (${stats.class_field})` : 'Classes')
    );
    if (entries.length === 0) {
      this._chart.append(h('div', { class: 'kpl-meta' }, 'No class field in these records.'));
      return;
    }
    const max = Math.max(...entries.map(([, count]) => count));
    const shown = entries.slice(0, 50);
    for (const [name, count] of shown) {
      const bar = h('div', { class: 'kpl-bar-fill' });
      bar.style.width = `${(100 * count) / max}%`;
      bar.style.background = this.classColor(name);
      this._chart.append(
        h(
          'div',
          { class: 'kpl-bar', 'data-class': name, title: `${name}: ${count}` },
          h('span', { class: 'kpl-bar-label' }, name),
          h('div', { class: 'kpl-bar-track' }, bar),
          h('span', { class: 'kpl-bar-count' }, String(count))
        )
      );
    }
    if (entries.length > shown.length) {
      this._chart.append(h('div', { class: 'kpl-meta' }, `and ${entries.length - shown.length} more classes`));
    }
  }

  private _detail: IDatasetVersionDetail | null = null;
  private _offset = 0;
  private _total = 0;
  private _generation = 0;
  private _classes = new Map<string, number>();
  private _part: HTMLSelectElement;
  private _prev: HTMLButtonElement;
  private _next: HTMLButtonElement;
  private _position: HTMLSpanElement;
  private _info: HTMLDivElement;
  private _chart: HTMLDivElement;
  private _grid: HTMLDivElement;
  private _error: HTMLDivElement;
}
