import { MainAreaWidget } from '@jupyterlab/apputils';
import { Button, HTMLSelect, ReactWidget } from '@jupyterlab/ui-components';
import React, { useEffect, useRef, useState } from 'react';

import {
  BytesRef,
  DatasetRecord,
  DatasetVersionDetail,
  KPLClient,
  RecordsPage,
  Stats
} from './api';
import { formatBytes, palette, partOrder } from './format';
import {
  boxesAbove,
  countsAbove,
  DEFAULT_MIN_SCORE,
  hiddenNote,
  isScored,
  MinScore,
  surestOnTop
} from './minScore';
import { boxLabel, predictedClass } from './predictions';

/**
 * Whether a record value is a reference to bytes on the server.
 */
export function isBytesRef(value: unknown): value is BytesRef {
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
export interface IBoxObject {
  name?: string;
  xmin: number;
  ymin: number;
  xmax: number;
  ymax: number;
  segmentation?: number[][];
  points?: number[][];
  mask?: BytesRef;
  score?: number; // a prediction's confidence (batch inference output)
}

/**
 * The boxes of a record's `object` list (Pascal VOC, COCO, labelme).
 */
export function boxObjects(fields: Record<string, unknown>): IBoxObject[] {
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
 * Gives each class name a color, the same in the boxes and in the class chart.
 */
type ClassColor = (name: string) => string;

/**
 * A class-id mask PNG drawn as colored, half transparent pixels.
 */
function MaskCanvas(props: {
  url: string;
  width: number;
  height: number;
}): JSX.Element {
  const canvas = useRef<HTMLCanvasElement>(null);
  useEffect(() => {
    const image = new Image();
    image.onload = () => {
      const node = canvas.current;
      const context = node?.getContext('2d');
      if (!node || !context) {
        return;
      }
      node.width = image.naturalWidth;
      node.height = image.naturalHeight;
      context.drawImage(image, 0, 0);
      const pixels = context.getImageData(0, 0, node.width, node.height);
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
    image.src = props.url;
  }, [props.url]);
  const ratio =
    props.width && props.height
      ? `${props.width} / ${props.height}`
      : undefined;
  return (
    <canvas ref={canvas} className="kpl-mask" style={{ aspectRatio: ratio }} />
  );
}

/**
 * The boxes, polygons and labels of a record's objects, in image coordinates.
 */
function Boxes(props: {
  objects: IBoxObject[];
  width: number;
  height: number;
  classColor: ClassColor;
}): JSX.Element {
  const { width, height } = props;
  // Labels scale with the image: about a sixteenth of its longer side.
  const fontSize = Math.max(width, height) / 16;
  return (
    <svg
      className="kpl-boxes"
      viewBox={`0 0 ${width} ${height}`}
      preserveAspectRatio="none"
    >
      {surestOnTop(props.objects).map((object, index) => {
        const color = props.classColor(object.name ?? '');
        const polygons = [...(object.segmentation ?? [])];
        if (object.points && object.points.length > 2) {
          polygons.push(object.points.flat());
        }
        return (
          <g key={index} className="kpl-box" data-name={object.name ?? ''}>
            {polygons.map((polygon, i) => {
              const points: string[] = [];
              for (let j = 0; j + 1 < polygon.length; j += 2) {
                points.push(`${polygon[j]},${polygon[j + 1]}`);
              }
              return (
                <polygon
                  key={i}
                  points={points.join(' ')}
                  fill={color}
                  fillOpacity={0.35}
                  stroke={color}
                  strokeWidth={1.5}
                  vectorEffect="non-scaling-stroke"
                />
              );
            })}
            <rect
              x={object.xmin}
              y={object.ymin}
              width={Math.max(0, object.xmax - object.xmin)}
              height={Math.max(0, object.ymax - object.ymin)}
              fill="none"
              stroke={color}
              strokeWidth={2}
              vectorEffect="non-scaling-stroke"
            />
            <text
              x={object.xmin + fontSize / 4}
              y={
                object.ymin > fontSize
                  ? object.ymin - fontSize / 4
                  : object.ymin + fontSize
              }
              fill={color}
              fontSize={fontSize}
              fontWeight="bold"
            >
              {boxLabel(object)}
            </text>
          </g>
        );
      })}
    </svg>
  );
}

/**
 * The picture of a record: the thumbnail, the boxes shown with their labels, masks.
 */
function RecordImage(props: {
  client: KPLClient;
  fields: Record<string, unknown>;
  imageField: string;
  image: BytesRef;
  objects: IBoxObject[];
  shown: IBoxObject[];
  classColor: ClassColor;
}): JSX.Element {
  const { client, fields, imageField, image, objects, shown } = props;
  const predicted = predictedClass(fields);
  const [size, setSize] = useState({
    width: Number(fields['width']) || 0,
    height: Number(fields['height']) || 0
  });
  useEffect(() => {
    if (objects.length === 0 || (size.width > 0 && size.height > 0)) {
      return;
    }
    // No size in the record: read it from the full image.
    const full = new Image();
    full.onload = () =>
      setSize({ width: full.naturalWidth, height: full.naturalHeight });
    full.src = client.mediaURL(image.url);
  }, [image.url]);
  const masks: BytesRef[] = [];
  for (const [key, value] of Object.entries(fields)) {
    if (key !== imageField && /mask/i.test(key) && isBytesRef(value)) {
      masks.push(value);
    }
  }
  for (const object of shown) {
    if (isBytesRef(object.mask)) {
      masks.push(object.mask);
    }
  }
  return (
    <div className="kpl-figure">
      <img
        className="kpl-thumbnail"
        alt={String(fields['path'] ?? imageField)}
        loading="lazy"
        src={client.mediaURL(image.thumbnail ?? image.url)}
      />
      {masks.map(mask => (
        <MaskCanvas
          key={mask.url}
          url={client.mediaURL(mask.url)}
          width={size.width}
          height={size.height}
        />
      ))}
      {predicted !== null && (
        <span className="kpl-predicted-class">{predicted}</span>
      )}
      {shown.length > 0 && size.width > 0 && size.height > 0 && (
        <Boxes
          objects={shown}
          width={size.width}
          height={size.height}
          classColor={props.classColor}
        />
      )}
    </div>
  );
}

/**
 * A text field fetched when opened (XML annotations, JSON, plain text).
 */
function TextField(props: { client: KPLClient; value: BytesRef }): JSX.Element {
  const { client, value } = props;
  const [text, setText] = useState('');
  return (
    <details
      className="kpl-text-field"
      onToggle={event => {
        if (!(event.target as HTMLDetailsElement).open || text) {
          return;
        }
        fetch(client.mediaURL(value.url), { credentials: 'same-origin' })
          .then(response => response.text())
          .then(body =>
            setText(body.length > 100000 ? body.slice(0, 100000) + '\n…' : body)
          )
          .catch(error => setText(String(error)));
      }}
    >
      <summary>
        {value.contentType} · {formatBytes(value.$bytes)}
      </summary>
      <pre>{text}</pre>
    </details>
  );
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
 * One record: its picture with the boxes scored at least `minScore`, then a table of its other fields.
 */
function RecordCard(props: {
  client: KPLClient;
  record: DatasetRecord;
  classColor: ClassColor;
  minScore: number;
}): JSX.Element {
  const { client, record } = props;
  const fields = record.fields ?? {};
  const imageField = Object.keys(fields).find(key => {
    const value = fields[key];
    return (
      isBytesRef(value) &&
      value.contentType.startsWith('image/') &&
      !/mask/i.test(key)
    );
  });
  const objects = boxObjects(fields);
  const shown = boxesAbove(objects, props.minScore);
  const hidden = objects.length - shown.length;
  const cell = (value: unknown): React.ReactNode => {
    if (isBytesRef(value)) {
      return TEXT_TYPES.test(value.contentType) ? (
        <TextField client={client} value={value} />
      ) : (
        `${value.contentType} · ${formatBytes(value.$bytes)}`
      );
    }
    if (typeof value === 'string' && value.length > 120) {
      return <pre className="kpl-long-text">{value}</pre>;
    }
    return valueText(value);
  };
  return (
    <div className="kpl-record" data-index={record.index}>
      {imageField && (
        <RecordImage
          client={client}
          fields={fields}
          imageField={imageField}
          image={fields[imageField] as BytesRef}
          objects={objects}
          shown={shown}
          classColor={props.classColor}
        />
      )}
      <div className="kpl-record-index">#{record.index}</div>
      {hidden > 0 && (
        <div className="kpl-meta kpl-hidden-boxes">
          {hiddenNote(hidden, props.minScore)}
        </div>
      )}
      <table className="kpl-fields">
        <tbody>
          {Object.entries(fields)
            .filter(
              ([key]) =>
                key !== imageField && !(key === 'object' && objects.length > 0)
            )
            .map(([key, value]) => (
              <tr key={key}>
                <th>{key}</th>
                <td>{cell(value)}</td>
              </tr>
            ))}
          {objects.length > 0 && (
            <tr>
              <th>object</th>
              <td>
                {hidden > 0
                  ? `${shown.length} of ${objects.length}`
                  : shown.length}
                : {shown.map(o => o.name ?? '?').join(', ')}
              </td>
            </tr>
          )}
        </tbody>
      </table>
    </div>
  );
}

/**
 * The count of each class, as bars.
 */
function ClassChart(props: {
  stats: Stats;
  classColor: ClassColor;
  minScore: number;
}): JSX.Element {
  const { stats } = props;
  // predictions: counted as the cards draw them, scored at least the minimum
  const scored = Object.keys(stats.class_scores ?? {}).length > 0;
  const counts = scored
    ? countsAbove(stats.classes ?? {}, stats.class_scores, props.minScore)
    : (stats.classes ?? {});
  const entries = Object.entries(counts).sort((a, b) => b[1] - a[1]);
  const max = Math.max(...entries.map(([, count]) => count));
  const shown = entries.slice(0, 50);
  return (
    <>
      <h3>
        {stats.class_field ? `Classes (${stats.class_field})` : 'Classes'}
      </h3>
      {scored && (
        <div className="kpl-meta kpl-chart-min-score">
          scored at least {Math.round(props.minScore * 100)}%
        </div>
      )}
      {entries.length === 0 && (
        <div className="kpl-meta">
          {scored
            ? 'None at this minimum score.'
            : 'No class field in these records.'}
        </div>
      )}
      {shown.map(([name, count]) => (
        <div
          key={name}
          className="kpl-bar"
          data-class={name}
          title={`${name}: ${count}`}
        >
          <span className="kpl-bar-label">{name}</span>
          <div className="kpl-bar-track">
            <div
              className="kpl-bar-fill"
              style={{
                width: `${(100 * count) / max}%`,
                background: props.classColor(name)
              }}
            />
          </div>
          <span className="kpl-bar-count">{count}</span>
        </div>
      ))}
      {entries.length > shown.length && (
        <div className="kpl-meta">
          and {entries.length - shown.length} more classes
        </div>
      )}
    </>
  );
}

/**
 * Pages of a dataset version's records with the per-class counts of the part shown.
 */
function DatasetBrowser(props: {
  client: KPLClient;
  name: string;
  version: string;
  pageSize: number;
}): JSX.Element {
  const { client, name, version, pageSize } = props;
  const [detail, setDetail] = useState<DatasetVersionDetail | null>(null);
  const [part, setPart] = useState<string | undefined>(undefined);
  const [offset, setOffset] = useState(0);
  const [page, setPage] = useState<RecordsPage | null>(null);
  const [stats, setStats] = useState<Stats | null>(null);
  const [statsError, setStatsError] = useState('');
  const [error, setError] = useState('');
  // kept here: the minimum a user chose holds while paging through records
  const [minScore, setMinScore] = useState(DEFAULT_MIN_SCORE);
  const classes = useRef(new Map<string, number>());
  const classColor: ClassColor = className => {
    if (!classes.current.has(className)) {
      classes.current.set(className, classes.current.size);
    }
    return palette(classes.current.get(className)!);
  };

  useEffect(() => {
    client
      .GET('/datasets/{name}/versions/{version}', {
        params: { path: { name, version } }
      })
      .then(loaded => {
        setPart(partOrder(Object.keys(loaded.parts ?? {}))[0]);
        setDetail(loaded);
      })
      .catch(reason => setError((reason as Error).message));
  }, [name, version]);

  useEffect(() => {
    if (!detail) {
      return;
    }
    let current = true;
    client
      .GET('/datasets/{name}/versions/{version}/records', {
        params: {
          path: { name, version },
          query: { part, offset, limit: pageSize }
        }
      })
      .then(loaded => {
        // An older answer arriving after a newer one must not win.
        if (current) {
          setPage(loaded);
          setError('');
        }
      })
      .catch(reason => current && setError((reason as Error).message));
    return () => {
      current = false;
    };
  }, [detail, part, offset, pageSize]);

  useEffect(() => {
    if (!detail) {
      return;
    }
    client
      .GET('/datasets/{name}/versions/{version}/stats', {
        params: { path: { name, version }, query: { part } }
      })
      .then(setStats)
      .catch(reason => setStatsError((reason as Error).message));
  }, [detail, part]);

  const total = page?.total ?? 0;
  const go = (to: number) => {
    const clamped = Math.max(0, Math.min(to, Math.max(0, total - 1)));
    setOffset(clamped - (clamped % pageSize));
  };
  const last = page
    ? Math.min(page.offset + page.records.length, page.total)
    : 0;
  const counts = detail?.parts ?? {};
  const parts = partOrder(Object.keys(counts)).map(
    key => [key, counts[key]] as const
  );
  const scored = page?.records.some(record =>
    boxObjects(record.fields ?? {}).some(isScored)
  );
  return (
    <>
      <div className="kpl-dataset-info">
        {detail && (
          <>
            <h2>{detail.ref}</h2>
            <span className="kpl-meta">
              {detail.record_count ?? 0} records · {parts.length} part(s) ·{' '}
              {formatBytes(detail.size_bytes)}
            </span>
            {detail.description && <p>{detail.description}</p>}
          </>
        )}
      </div>
      <div className="kpl-toolbar">
        <label>
          Part{' '}
          <HTMLSelect
            className="kpl-part"
            aria-label="Part"
            value={part ?? ''}
            onChange={event => {
              setOffset(0);
              setPart(event.target.value);
            }}
            options={parts.map(([key, count]) => ({
              value: key,
              label: `${key} (${count})`
            }))}
          />
        </label>
        <Button
          className="kpl-prev"
          small
          disabled={!page || page.offset <= 0}
          onClick={() => go(offset - pageSize)}
        >
          ‹ Previous
        </Button>
        <span className="kpl-position">
          {page
            ? page.total === 0
              ? 'no records'
              : `${page.offset + 1}–${last} of ${page.total}`
            : ''}
        </span>
        <Button
          className="kpl-next"
          small
          disabled={!page || last >= page.total}
          onClick={() => go(offset + pageSize)}
        >
          Next ›
        </Button>
        {scored && <MinScore value={minScore} onChange={setMinScore} />}
      </div>
      <div className="kpl-error">{error}</div>
      <div className="kpl-dataset-body">
        <div className="kpl-records">
          {page?.records.map(record => (
            <RecordCard
              key={record.index}
              client={client}
              record={record}
              classColor={classColor}
              minScore={minScore}
            />
          ))}
        </div>
        <div className="kpl-class-chart">
          {statsError && <div className="kpl-error">{statsError}</div>}
          {stats && (
            <ClassChart
              stats={stats}
              classColor={classColor}
              minScore={minScore}
            />
          )}
        </div>
      </div>
    </>
  );
}

/**
 * The main-area view of one dataset version: pages of records and per-class counts.
 */
export class DatasetViewer extends ReactWidget {
  constructor(
    private readonly client: KPLClient,
    readonly name: string,
    readonly version: string,
    private pageSize: number
  ) {
    super();
    this.addClass('kpl-DatasetViewer-content');
    this.title.label = `${name}:${version.slice(0, 6)}`;
    this.title.caption = `Dataset ${name}:${version}`;
  }

  /**
   * Records shown on a page.
   */
  set size(value: number) {
    if (value !== this.pageSize) {
      this.pageSize = value;
      this.update();
    }
  }

  render(): JSX.Element {
    return (
      <DatasetBrowser
        client={this.client}
        name={this.name}
        version={this.version}
        pageSize={this.pageSize}
      />
    );
  }
}

/**
 * A dataset version's view in the main area.
 */
export function datasetWidget(
  client: KPLClient,
  name: string,
  version: string,
  pageSize: number
): MainAreaWidget<DatasetViewer> {
  const widget = new MainAreaWidget({
    content: new DatasetViewer(client, name, version, pageSize)
  });
  widget.id = `kpl-dataset-${name}-${version}`;
  widget.addClass('kpl-DatasetViewer');
  widget.title.closable = true;
  return widget;
}
