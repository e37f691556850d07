import {
  Dialog,
  MainAreaWidget,
  showDialog,
  showErrorMessage
} from '@jupyterlab/apputils';
import { Button, ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Poll } from '@lumino/polling';
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';
import React, { useEffect, useRef, useState } from 'react';

import { Deployment, IPrediction, KPLClient } from './api';
import { MetricChart } from './charts';
import { formatTime } from './format';
import { StateBadge } from './jobs';
import { PollingListModel } from './model';
import {
  boxesAbove,
  DEFAULT_MIN_SCORE,
  hiddenNote,
  isScored,
  MinScore,
  surestOnTop
} from './minScore';
import { Drawable, drawable, IDrawableBox, IDrawableMask } from './prediction';
import { answered } from './request';
import { historyFigures } from './requestCurves';
import { replicaSummary } from './services';

/**
 * Log lines fetched per replica.
 */
const LOG_LINES = 40;
/**
 * Minutes of request history the curves show.
 */
const CURVE_MINUTES = 30;

/**
 * A deployment, its last log lines and its request curves, fetched while the view is shown.
 */
class DeploymentViewModel {
  constructor(
    readonly client: KPLClient,
    readonly name: string,
    interval: number,
    view: Widget
  ) {
    this.poll = new Poll({
      factory: () => this.fetch(),
      frequency: PollingListModel.frequency(interval || 2),
      name: `kpl-deployment-${name}`,
      standby: () => !view.isVisible || 'when-hidden'
    });
  }

  readonly changed = new Signal<this, void>(this);
  readonly poll: Poll;
  deployment: Deployment | null = null;
  /** figure -> version -> [[minutes before now, value], ...] of the last CURVE_MINUTES */
  figures: ReturnType<typeof historyFigures> = {};
  logs = '';
  error = '';

  dispose(): void {
    this.poll.dispose();
    Signal.clearData(this);
  }

  private async fetch(): Promise<void> {
    try {
      const now = Date.now();
      const since = new Date(now - CURVE_MINUTES * 60_000).toISOString();
      const name = { name: this.name };
      const [deployment, logs, history] = await Promise.all([
        this.client.GET('/deployments/{name}', { params: { path: name } }),
        this.client.GET('/deployments/{name}/logs', {
          params: { path: name, query: { lines: LOG_LINES } }
        }),
        this.client.GET('/deployments/{name}/metrics', {
          params: { path: name, query: { since } }
        })
      ]);
      this.deployment = deployment;
      this.figures = historyFigures(
        history.series,
        history.interval_seconds,
        now
      );
      this.logs = logs.logs
        .map(
          log =>
            `── ${log.replica} (${log.model_version})\n${log.text.trimEnd()}`
        )
        .join('\n');
      this.error = '';
    } catch (error) {
      this.error = (error as Error).message;
      this.changed.emit();
      throw error;
    }
    this.changed.emit();
  }
}

/**
 * The mask drawn on a canvas of its own size, stretched over the image by CSS.
 */
function MaskOverlay(props: { mask: IDrawableMask }): JSX.Element {
  const canvas = useRef<HTMLCanvasElement>(null);
  const { mask } = props;
  useEffect(() => {
    const context = canvas.current?.getContext('2d');
    if (context) {
      context.putImageData(
        new ImageData(mask.rgba, mask.width, mask.height),
        0,
        0
      );
    }
  }, [mask]);
  return (
    <canvas
      ref={canvas}
      className="kpl-mask"
      width={mask.width}
      height={mask.height}
    />
  );
}

/**
 * A box's label on a tag of its color, above the box (inside it at the image's top edge).
 */
function BoxLabel(props: { box: IDrawableBox; fontSize: number }): JSX.Element {
  const { box, fontSize } = props;
  const tag = fontSize * 1.2;
  const top = box.y >= tag ? box.y - tag : box.y;
  return (
    <>
      <rect
        className="kpl-label"
        x={box.x}
        y={top}
        width={box.label.length * fontSize * 0.6 + fontSize * 0.3}
        height={tag}
        fill={box.color}
      />
      <text
        x={box.x + fontSize * 0.15}
        y={top + fontSize * 0.95}
        fill="white"
        fontSize={fontSize}
      >
        {box.label}
      </text>
    </>
  );
}

/**
 * The boxes shown, in words, and how many the minimum score hides.
 */
function BoxList(props: {
  boxes: IDrawableBox[];
  hidden: number;
  minScore: number;
}): JSX.Element {
  const { boxes, hidden } = props;
  const percent = Math.round(props.minScore * 100);
  return (
    <ul className="kpl-box-list">
      {boxes.length === 0 && (
        <li>
          {hidden
            ? `no objects scored ${percent}% or more`
            : 'no objects found'}
        </li>
      )}
      {boxes.map((box, index) => (
        <li key={index} style={{ color: box.color }}>
          {`${box.label} at (${box.x}, ${box.y}) ${box.width}×${box.height}`}
        </li>
      ))}
      {hidden > 0 && (
        <li className="kpl-meta kpl-hidden-boxes">
          {hiddenNote(hidden, props.minScore)}
        </li>
      )}
    </ul>
  );
}

/**
 * The image with the prediction drawn over it, and what it says in words.
 */
function PredictionView(props: {
  image: string;
  prediction: IPrediction;
  minScore: number;
  setMinScore: (value: number) => void;
}): JSX.Element {
  const { image, prediction, minScore, setMinScore } = props;
  const [size, setSize] = useState<[number, number] | null>(null);
  const draw: Drawable = drawable(prediction.response);
  const boxes =
    draw.kind === 'detection' ? boxesAbove(draw.boxes, minScore) : [];
  const hidden =
    draw.kind === 'detection' ? draw.boxes.length - boxes.length : 0;
  // Boxes are in the model's pixel coordinates: the size it reports, else the image's.
  const width = (draw.kind === 'detection' && draw.width) || size?.[0] || 1;
  const height = (draw.kind === 'detection' && draw.height) || size?.[1] || 1;
  return (
    <div className="kpl-prediction" data-kind={draw.kind}>
      <div className="kpl-prediction-image">
        <img
          src={image}
          alt="input"
          onLoad={event =>
            setSize([
              event.currentTarget.naturalWidth,
              event.currentTarget.naturalHeight
            ])
          }
        />
        {draw.kind === 'detection' && (
          <svg
            className="kpl-boxes"
            viewBox={`0 0 ${width} ${height}`}
            preserveAspectRatio="none"
          >
            {surestOnTop(boxes).map((box, index) => (
              <g key={index} className="kpl-box" data-name={box.name}>
                <rect
                  className="kpl-outline"
                  x={box.x}
                  y={box.y}
                  width={box.width}
                  height={box.height}
                  stroke={box.color}
                  fill="none"
                  vectorEffect="non-scaling-stroke"
                />
                <BoxLabel box={box} fontSize={height / 18} />
              </g>
            ))}
          </svg>
        )}
        {draw.kind === 'segmentation' && <MaskOverlay mask={draw.mask} />}
      </div>
      <div className="kpl-prediction-text">
        {prediction.modelVersion && (
          <div className="kpl-meta kpl-served-by">
            served by {prediction.modelVersion}
          </div>
        )}
        {draw.kind === 'classification' && (
          <div className="kpl-class">{draw.label}</div>
        )}
        {draw.kind === 'detection' && (
          <>
            {draw.boxes.some(isScored) && (
              <MinScore value={minScore} onChange={setMinScore} />
            )}
            <BoxList boxes={boxes} hidden={hidden} minScore={minScore} />
          </>
        )}
        {draw.kind === 'segmentation' && (
          <ul className="kpl-mask-classes">
            {draw.mask.classes.map(item => (
              <li key={item.id} data-class={item.id}>
                <span
                  className="kpl-swatch"
                  style={{ background: item.id ? item.color : 'transparent' }}
                />
                {`class ${item.id}: ${item.pixels} px`}
              </li>
            ))}
          </ul>
        )}
        <details>
          <summary>JSON</summary>
          <pre className="kpl-prediction-json">
            {JSON.stringify(
              prediction.response,
              (key, value) => (key === 'mask' ? '[…]' : value),
              2
            )}
          </pre>
        </details>
      </div>
    </div>
  );
}

/**
 * Drop or pick an image, send it to the deployment and show the answer.
 */
function TryIt(props: { client: KPLClient; name: string }): JSX.Element {
  const [image, setImage] = useState<string | null>(null);
  const [prediction, setPrediction] = useState<IPrediction | null>(null);
  // kept here: the threshold a user chose holds for the next image
  const [minScore, setMinScore] = useState(DEFAULT_MIN_SCORE);
  const [status, setStatus] = useState('');
  const [over, setOver] = useState(false);
  const input = useRef<HTMLInputElement>(null);
  useEffect(
    () => () => {
      if (image) {
        URL.revokeObjectURL(image);
      }
    },
    [image]
  );
  const send = async (file: File) => {
    setImage(URL.createObjectURL(file));
    setPrediction(null);
    setStatus(`Predicting ${file.name}…`);
    try {
      const path = '/deployments/{name}/predict';
      const { data, response } = await answered(
        path,
        props.client.api.POST(path, {
          params: { path: { name: props.name } },
          ...props.client.fileBody(
            file,
            file.type || 'application/octet-stream'
          )
        })
      );
      setPrediction({
        response: data,
        modelVersion: response.headers.get('X-KPL-Model-Version') ?? ''
      });
      setStatus('');
    } catch (error) {
      setStatus(`Prediction failed: ${(error as Error).message}`);
    }
  };
  return (
    <section className="kpl-try">
      <h3>Try it</h3>
      <div
        className={`kpl-dropzone${over ? ' kpl-mod-over' : ''}`}
        tabIndex={0}
        onClick={() => input.current?.click()}
        onKeyDown={event => event.key === 'Enter' && input.current?.click()}
        onDragOver={event => {
          event.preventDefault();
          setOver(true);
        }}
        onDragLeave={() => setOver(false)}
        onDrop={event => {
          event.preventDefault();
          setOver(false);
          const file = event.dataTransfer.files[0];
          if (file) {
            void send(file);
          }
        }}
      >
        Drop an image here, or click to pick one
        <input
          ref={input}
          className="kpl-predict-input"
          type="file"
          accept="image/*"
          hidden
          onChange={event => {
            const file = event.target.files?.[0];
            event.target.value = '';
            if (file) {
              void send(file);
            }
          }}
        />
      </div>
      <div
        className={`kpl-predict-status${
          status.startsWith('Prediction failed') ? ' kpl-error' : ''
        }`}
      >
        {status}
      </div>
      {image && prediction && (
        <PredictionView
          image={image}
          prediction={prediction}
          minScore={minScore}
          setMinScore={setMinScore}
        />
      )}
    </section>
  );
}

/**
 * The main-area view of one deployment: state, versions, replicas, Try it, curves and logs.
 */
export class DeploymentView extends ReactWidget {
  constructor(
    client: KPLClient,
    readonly name: string,
    interval: number
  ) {
    super();
    this.addClass('kpl-DeploymentView-content');
    this.title.label = `Deployment ${name}`;
    this.model = new DeploymentViewModel(client, name, interval, this);
    this.model.changed.connect(() => {
      const deployment = this.model.deployment;
      if (deployment) {
        this.title.label = `Deployment ${name} (${deployment.state})`;
      }
    });
  }

  readonly model: DeploymentViewModel;

  /**
   * Seconds between refreshes; 0 (panels that never poll) means every 2 seconds here.
   */
  set interval(seconds: number) {
    this.model.poll.frequency = PollingListModel.frequency(seconds || 2);
    void this.model.poll.refresh();
  }

  /**
   * Make the canary the production version.
   */
  async promote(): Promise<void> {
    try {
      this.model.deployment = await this.model.client.POST(
        '/deployments/{name}/promote',
        { params: { path: { name: this.name } } }
      );
      this.model.changed.emit();
    } catch (error) {
      void showErrorMessage('Cannot promote the canary', error as Error);
    }
  }

  /**
   * Delete the deployment once the user confirms, then close the view.
   */
  async delete(): Promise<void> {
    const answer = await showDialog({
      title: `Delete deployment ${this.name}?`,
      body: 'Its replicas stop and its resources are freed; callers get 404.',
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Delete' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await this.model.client.DELETE('/deployments/{name}', {
        params: { path: { name: this.name } }
      });
      this.parent?.dispose();
    } catch (error) {
      void showErrorMessage('Cannot delete the deployment', error as Error);
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.model.dispose();
    super.dispose();
  }

  render(): JSX.Element {
    return (
      <>
        <UseSignal signal={this.model.changed}>
          {() => this.renderStatus()}
        </UseSignal>
        <TryIt client={this.model.client} name={this.name} />
        <UseSignal signal={this.model.changed}>
          {() => this.renderCurvesAndLogs()}
        </UseSignal>
      </>
    );
  }

  protected onResize(msg: Widget.ResizeMessage): void {
    super.onResize(msg);
    this.update();
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // The poll skipped its fetches while the view was hidden.
    void this.model.poll.refresh();
  }

  private renderStatus(): JSX.Element {
    const { deployment, error } = this.model;
    return (
      <div className="kpl-deployment-header">
        {error && <div className="kpl-error">{error}</div>}
        {deployment && (
          <>
            <h2>
              {deployment.name} <StateBadge state={deployment.state} />
            </h2>
            <div className="kpl-meta">
              {`${replicaSummary(deployment)} · ${deployment.replicas} production replicas · ` +
                `created ${formatTime(deployment.created)}` +
                (deployment.algorithm_version
                  ? ` · served by ${deployment.algorithm_version}`
                  : '')}
            </div>
            {deployment.reason && (
              <div className="kpl-error kpl-reason">{deployment.reason}</div>
            )}
            {deployment.gateway_url && (
              <div className="kpl-meta kpl-gateway-url">
                {'with an API key or your token: POST '}
                <code>{deployment.gateway_url}</code>
              </div>
            )}
            <table className="kpl-table kpl-versions">
              <thead>
                <tr>
                  <th>version</th>
                  <th>model</th>
                  <th>traffic</th>
                </tr>
              </thead>
              <tbody>
                <tr data-role="production">
                  <th>production</th>
                  <td>{deployment.model_version ?? ''}</td>
                  <td>{`${100 - (deployment.canary_model_version ? deployment.canary_weight : 0)}%`}</td>
                </tr>
                {deployment.canary_model_version && (
                  <tr data-role="canary">
                    <th>canary</th>
                    <td>{deployment.canary_model_version}</td>
                    <td>
                      {`${deployment.canary_weight}%` +
                        (deployment.sticky_header
                          ? ` (sticky by ${deployment.sticky_header})`
                          : '')}
                    </td>
                  </tr>
                )}
              </tbody>
            </table>
            <table className="kpl-table kpl-replicas">
              <thead>
                <tr>
                  <th>replica</th>
                  <th>role</th>
                  <th>model</th>
                  <th>state</th>
                  <th>restarts</th>
                </tr>
              </thead>
              <tbody>
                {deployment.replica_states.map(replica => (
                  <tr
                    key={replica.id}
                    data-replica={replica.id}
                    data-state={replica.state}
                  >
                    <th>{replica.id}</th>
                    <td>{replica.role}</td>
                    <td>{replica.model_version}</td>
                    <td>
                      <StateBadge state={replica.state} />
                    </td>
                    <td>
                      {String(replica.restarts) +
                        (replica.reason ? ` · ${replica.reason}` : '')}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </>
        )}
      </div>
    );
  }

  private renderCurvesAndLogs(): JSX.Element {
    const width = Math.max(
      300,
      Math.min(900, (this.node.clientWidth || 640) - 24)
    );
    return (
      <>
        <div className="kpl-charts">
          {Object.entries(this.model.figures)
            .filter(([, series]) => Object.values(series).some(p => p.length))
            .map(([title, series]) => (
              <MetricChart
                key={title}
                title={title}
                series={series}
                xName="minutes from now"
                width={width}
              />
            ))}
        </div>
        <section className="kpl-log-section">
          <h3>Last log lines</h3>
          <pre className="kpl-log kpl-deployment-log" tabIndex={0}>
            {this.model.logs}
          </pre>
        </section>
      </>
    );
  }
}

/**
 * A deployment view in the main area, with Promote and Delete in its toolbar.
 */
export function deploymentWidget(
  client: KPLClient,
  name: string,
  interval: number
): MainAreaWidget<DeploymentView> {
  const content = new DeploymentView(client, name, interval);
  const widget = new MainAreaWidget({ content });
  widget.id = `kpl-deployment-${name}`;
  widget.addClass('kpl-DeploymentView');
  widget.title.closable = true;
  widget.toolbar.addItem(
    'promote',
    ReactWidget.create(
      <UseSignal signal={content.model.changed}>
        {() => (
          <Button
            className="kpl-promote"
            small
            disabled={!content.model.deployment?.canary_model_version}
            title="Make the canary the production version"
            onClick={() => void content.promote()}
          >
            Promote canary
          </Button>
        )}
      </UseSignal>
    )
  );
  widget.toolbar.addItem(
    'delete',
    ReactWidget.create(
      <Button
        className="jp-mod-styled jp-mod-warn kpl-delete"
        small
        onClick={() => void content.delete()}
      >
        Delete
      </Button>
    )
  );
  return widget;
}
