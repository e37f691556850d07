import {
  ABCWidgetFactory,
  DocumentRegistry,
  DocumentWidget
} from '@jupyterlab/docregistry';
import { Button, FormComponent, ReactWidget } from '@jupyterlab/ui-components';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import { Poll } from '@lumino/polling';
import { customizeValidator } from '@rjsf/validator-ajv8';
import {
  addEdge,
  applyEdgeChanges,
  applyNodeChanges,
  Background,
  Connection,
  Controls,
  Edge,
  Handle,
  Node,
  NodeChange,
  EdgeChange,
  NodeProps,
  Position,
  ReactFlow,
  ReactFlowProvider,
  useReactFlow
} from '@xyflow/react';
import React, {
  useCallback,
  useEffect,
  useMemo,
  useRef,
  useState
} from 'react';

import {
  KPLClient,
  PipelineNodeType,
  PipelineRecords,
  PipelineRun,
  PipelineValidation
} from './api';
import { formatCell } from './format';
import {
  dumpPipeline,
  freeId,
  fromGraph,
  IGraphEdge,
  IGraphNode,
  INodeSettings,
  IPipelineDoc,
  paramSchema,
  parsePipeline,
  sourcePorts,
  toGraph,
  withoutDefaults
} from './pipelineGraph';

/**
 * The file type of pipeline files.
 */
export const PIPELINE_FILE_TYPE = 'kpl-pipeline';
export const PIPELINE_SUFFIX = '.kpl-pipeline.yaml';
export const PIPELINE_FACTORY = 'KPL Pipeline Editor';

const MIME_NODE_TYPE = 'application/x-kpl-node-type';
const VALIDATE_DELAY_MS = 500;
const RUN_POLL_MS = 1000;
const MIN_FIT_ZOOM = 0.75;
// A large graph is not shrunk below readable labels: the rest is a pan away.
const FIT_OPTIONS = { maxZoom: 1, minZoom: MIN_FIT_ZOOM };

const validator = customizeValidator<ReadonlyJSONObject>();

type NodeRun = PipelineRun['nodes'][number];

/**
 * What a node shows: its settings, its problems, its state in the current run.
 */
interface INodeData extends Record<string, unknown> {
  settings: INodeSettings;
  type?: PipelineNodeType;
  problems: string[];
  outputs: string[];
  run?: NodeRun;
  onOpenOutput: (node: string) => void;
}

type CanvasNode = Node<INodeData>;

function PipelineNode({ id, data, selected }: NodeProps<CanvasNode>) {
  const inputs = [
    ...(data.type?.inputs ?? []),
    ...(data.type?.named_inputs
      ? Object.keys((data.settings.inputs as object) ?? {})
          .map(k => `inputs.${k}`)
          .concat(['inputs.' + newInputKey(data.settings)])
      : [])
  ];
  const state = data.run?.state;
  const opens = Object.values(data.run?.outputs ?? {}).some(o =>
    String((o as { ref?: string }).ref ?? '').startsWith('dataset:')
  );
  return (
    <div
      className={
        'kpl-PipelineNode' +
        (selected ? ' kpl-mod-selected' : '') +
        (data.problems.length ? ' kpl-mod-problem' : '')
      }
      data-node={id}
      title={data.problems.join('\n')}
    >
      {inputs.map((param, i) => (
        <Handle
          key={param}
          id={param}
          type="target"
          position={Position.Left}
          style={{ top: `${((i + 1) * 100) / (inputs.length + 1)}%` }}
          title={param}
        />
      ))}
      <div className="kpl-PipelineNode-id">{id}</div>
      <div className="kpl-PipelineNode-type">{data.settings.type}</div>
      {data.problems.length > 0 && (
        <span className="kpl-PipelineNode-problems" role="status">
          {data.problems.length} problem{data.problems.length > 1 ? 's' : ''}
        </span>
      )}
      {state && (
        <span className={`kpl-PipelineNode-state kpl-state-${state}`}>
          {state}
          {data.run?.rows_out !== null && data.run?.rows_out !== undefined
            ? ` · ${data.run.rows_out} rows`
            : ''}
        </span>
      )}
      {opens && (
        <button
          className="kpl-PipelineNode-open"
          onClick={() => data.onOpenOutput(id)}
        >
          Open output
        </button>
      )}
      {data.outputs.map((port, i) => (
        <Handle
          key={port}
          id={port}
          type="source"
          position={Position.Right}
          style={{ top: `${((i + 1) * 100) / (data.outputs.length + 1)}%` }}
          title={port}
        />
      ))}
    </div>
  );
}

const NODE_TYPES = { pipeline: PipelineNode };

function newInputKey(settings: INodeSettings): string {
  const taken = Object.keys((settings.inputs as object) ?? {});
  let n = taken.length + 1;
  while (taken.includes(`input${n}`)) {
    n += 1;
  }
  return `input${n}`;
}

interface IEditorProps {
  client: KPLClient;
  context: DocumentRegistry.IContext<DocumentRegistry.ICodeModel>;
  onOpenDataset: (name: string, version: string) => void;
}

function Editor(props: IEditorProps): JSX.Element {
  const { client, context } = props;
  const flow = useReactFlow();
  const [types, setTypes] = useState<PipelineNodeType[]>([]);
  const [text, setText] = useState(context.model.sharedModel.getSource());
  const [selected, setSelected] = useState<string | null>(null);
  const [validation, setValidation] = useState<PipelineValidation | null>(null);
  const [run, setRun] = useState<PipelineRun | null>(null);
  const [preview, setPreview] = useState<{
    node: string;
    records?: PipelineRecords;
    error?: string;
  } | null>(null);
  const [error, setError] = useState('');
  const moved = useRef(new Set<string>());
  // The graph is fitted again when the canvas changes size (the Lab's sidebars open and close,
  // the first layout settles) until the user pans or zooms it.
  const canvas = useRef<HTMLDivElement>(null);
  const viewMoved = useRef(false);
  useEffect(() => {
    const node = canvas.current;
    if (!node || typeof ResizeObserver === 'undefined') {
      return;
    }
    const observer = new ResizeObserver(() => {
      if (!viewMoved.current && node.clientWidth && node.clientHeight) {
        void flow.fitView(FIT_OPTIONS);
      }
    });
    observer.observe(node);
    return () => observer.disconnect();
  }, [flow]);
  const [sizes, setSizes] = useState(
    new Map<string, { width: number; height: number }>()
  );

  useEffect(() => {
    client
      .GET('/pipelines/node-types')
      .then(answer => setTypes(answer.node_types))
      .catch(reason => setError(String(reason)));
  }, [client]);

  // The text model is the source of truth: the canvas follows it (undo, other editors).
  useEffect(() => {
    const update = () => setText(context.model.sharedModel.getSource());
    context.model.contentChanged.connect(update);
    return () => {
      context.model.contentChanged.disconnect(update);
    };
  }, [context]);

  const byType = useMemo(
    () => Object.fromEntries(types.map(t => [t.name, t])),
    [types]
  );
  const parsed = useMemo(() => {
    try {
      return { doc: parsePipeline(text), problem: '' };
    } catch (reason) {
      return { doc: null, problem: String(reason) };
    }
  }, [text]);

  useEffect(() => {
    if (!parsed.doc) {
      return;
    }
    const timer = setTimeout(() => {
      client
        .POST('/pipelines/validate', { body: { text } })
        .then(setValidation)
        .catch(reason => setError(String(reason)));
    }, VALIDATE_DELAY_MS);
    return () => clearTimeout(timer);
  }, [client, text, parsed.doc]);

  const write = useCallback(
    (doc: IPipelineDoc) => {
      context.model.sharedModel.setSource(dumpPipeline(doc));
    },
    [context]
  );

  const openOutput = useCallback(
    (node: string) => {
      const outputs = run?.nodes.find(n => n.node === node)?.outputs ?? {};
      for (const out of Object.values(outputs)) {
        const ref = String((out as { ref?: string }).ref ?? '');
        if (ref.startsWith('dataset:')) {
          const [name, version] = ref.slice('dataset:'.length).split(':');
          props.onOpenDataset(name, version);
          return;
        }
      }
    },
    [run, props.onOpenDataset]
  );

  const graph = useMemo(
    () => (parsed.doc ? toGraph(parsed.doc, byType) : { nodes: [], edges: [] }),
    [parsed.doc, byType]
  );
  const nodes: CanvasNode[] = graph.nodes.map(node => {
    const check = validation?.nodes.find(n => n.id === node.id);
    const ports = Object.keys(check?.outputs ?? {});
    return {
      id: node.id,
      type: 'pipeline',
      position: node.position,
      measured: sizes.get(node.id),
      selected: node.id === selected,
      data: {
        settings: node.data.settings,
        type: byType[node.data.settings.type],
        problems: (check?.problems ?? []).map(p =>
          p.parameter ? `${p.parameter}: ${p.message}` : p.message
        ),
        outputs: sourcePorts(node.id, ports, graph.edges),
        run: run?.nodes.find(n => n.node === node.id),
        onOpenOutput: openOutput
      }
    };
  });
  const edges: Edge[] = graph.edges.map(e => ({ ...e }));

  const save = (next: CanvasNode[], nextEdges: Edge[]) => {
    if (!parsed.doc) {
      return;
    }
    write(
      fromGraph(
        parsed.doc,
        next as unknown as IGraphNode[],
        nextEdges as IGraphEdge[],
        byType,
        moved.current
      )
    );
  };

  const onNodesChange = (changes: NodeChange<CanvasNode>[]) => {
    for (const change of changes) {
      if (change.type === 'select' && change.selected) {
        setSelected(change.id);
      }
    }
    const structural = changes.filter(
      c =>
        (c.type === 'position' && c.dragging === false) || c.type === 'remove'
    );
    if (!structural.length) {
      return;
    }
    for (const change of structural) {
      if (change.type === 'position') {
        moved.current.add(change.id);
      }
    }
    const next = applyNodeChanges(structural, nodes);
    const ids = new Set(next.map(n => n.id));
    save(
      next,
      edges.filter(e => ids.has(e.source) && ids.has(e.target))
    );
  };
  // Positions while dragging stay on the canvas only; the file changes when the drag ends.
  const [dragging, setDragging] = useState<
    Map<string, { x: number; y: number }>
  >(new Map());
  const shown = nodes.map(n =>
    dragging.has(n.id) ? { ...n, position: dragging.get(n.id)! } : n
  );

  const onEdgesChange = (changes: EdgeChange[]) => {
    const removals = changes.filter(c => c.type === 'remove');
    if (removals.length) {
      save(nodes, applyEdgeChanges(removals, edges));
    }
  };
  const onConnect = (connection: Connection) => {
    // One edge per input parameter: a new connection replaces the old one.
    const kept = edges.filter(
      e =>
        !(
          e.target === connection.target &&
          e.targetHandle === connection.targetHandle
        )
    );
    const id = `${connection.source}.${connection.sourceHandle}->${connection.target}.${connection.targetHandle}`;
    save(nodes, addEdge({ ...connection, id }, kept));
  };

  const onDrop = (event: React.DragEvent) => {
    event.preventDefault();
    const type = event.dataTransfer.getData(MIME_NODE_TYPE);
    if (!type || !parsed.doc) {
      return;
    }
    const position = flow.screenToFlowPosition({
      x: event.clientX,
      y: event.clientY
    });
    const id = freeId(parsed.doc, type);
    write({
      ...parsed.doc,
      nodes: {
        ...parsed.doc.nodes,
        [id]: {
          type,
          ui: { x: Math.round(position.x), y: Math.round(position.y) }
        }
      }
    });
    setSelected(id);
  };

  const runPipeline = async () => {
    setError('');
    try {
      await context.save();
      const started = await client.POST('/pipelines/runs', {
        body: { text, path: context.path }
      });
      setRun(started);
      const poll = new Poll({
        factory: async () => {
          const current = await client.GET('/pipelines/runs/{run_id}', {
            params: { path: { run_id: started.id } }
          });
          setRun(current);
          if (current.state !== 'running') {
            poll.dispose();
          }
        },
        frequency: { interval: RUN_POLL_MS, backoff: false },
        name: `kpl-lab:pipeline-run-${started.id}`
      });
    } catch (reason) {
      setError(String((reason as Error).message ?? reason));
    }
  };

  const settings = selected ? parsed.doc?.nodes[selected] : undefined;
  const selectedType = settings ? byType[settings.type] : undefined;
  const selectedRun = run?.nodes.find(n => n.node === selected);
  const previewable =
    run &&
    selectedRun &&
    ['succeeded', 'cached'].includes(selectedRun.state) &&
    selectedType?.category !== 'sink';
  const showRecords = async (node: string) => {
    if (!run) {
      return;
    }
    setPreview({ node });
    try {
      setPreview({
        node,
        // a fused node's output is written on this first request (then cached)
        records: await client.GET(
          '/pipelines/runs/{run_id}/nodes/{node}/records',
          { params: { path: { run_id: run.id, node }, query: { limit: 5 } } }
        )
      });
    } catch (reason) {
      setPreview({ node, error: String((reason as Error).message ?? reason) });
    }
  };
  const problems = validation?.problems ?? [];

  return (
    <div className="kpl-PipelineEditor">
      <div className="kpl-PipelineEditor-palette" aria-label="Node palette">
        {types.map(t => (
          <div
            key={t.name}
            className={`kpl-PipelineEditor-paletteItem kpl-category-${t.category}`}
            draggable
            data-type={t.name}
            title={t.description}
            onDragStart={event => {
              event.dataTransfer.setData(MIME_NODE_TYPE, t.name);
              event.dataTransfer.effectAllowed = 'move';
            }}
          >
            {t.name}
          </div>
        ))}
      </div>
      <div className="kpl-PipelineEditor-main">
        <div className="kpl-PipelineEditor-toolbar">
          <Button
            className="jp-mod-styled jp-mod-accept kpl-PipelineEditor-run"
            disabled={!validation?.ok || run?.state === 'running'}
            onClick={() => void runPipeline()}
          >
            Run
          </Button>
          <span className="kpl-PipelineEditor-status" role="status">
            {parsed.problem ||
              (validation
                ? validation.ok
                  ? 'valid'
                  : `${problems.length} problem${problems.length > 1 ? 's' : ''}`
                : 'validating…')}
            {run ? ` · run ${run.id}: ${run.state}` : ''}
            {run?.reason ? ` (${run.reason})` : ''}
          </span>
          <span className="kpl-error">{error}</span>
        </div>
        <div
          ref={canvas}
          className="kpl-PipelineEditor-canvas"
          onDragOver={event => {
            event.preventDefault();
            event.dataTransfer.dropEffect = 'move';
          }}
          onDrop={onDrop}
        >
          {/* Edges and the layout come from the node types: a canvas laid out without
              them would move every node when they arrive, after the first fit. */}
          {types.length ? (
            <ReactFlow
              nodes={shown}
              edges={edges}
              nodeTypes={NODE_TYPES}
              onNodesChange={changes => {
                const during = new Map(dragging);
                for (const c of changes) {
                  if (c.type === 'position' && c.dragging && c.position) {
                    during.set(c.id, c.position);
                  } else if (c.type === 'position' && c.dragging === false) {
                    during.delete(c.id);
                  }
                }
                setDragging(during);
                // Controlled nodes show once measured: keep the sizes xyflow reports.
                const measured = changes.filter(c => c.type === 'dimensions');
                if (measured.length) {
                  setSizes(current => {
                    const next = new Map(current);
                    for (const c of measured) {
                      if (c.type === 'dimensions' && c.dimensions) {
                        next.set(c.id, c.dimensions);
                      }
                    }
                    return next;
                  });
                }
                onNodesChange(
                  changes.map(c =>
                    c.type === 'position' &&
                    c.dragging === false &&
                    !c.position &&
                    dragging.has(c.id)
                      ? { ...c, position: dragging.get(c.id) }
                      : c
                  )
                );
              }}
              onEdgesChange={onEdgesChange}
              onConnect={onConnect}
              onPaneClick={() => setSelected(null)}
              fitView
              fitViewOptions={FIT_OPTIONS}
              onMoveEnd={event => {
                // null: a fit, not the user's pan or zoom
                if (event) {
                  viewMoved.current = true;
                }
              }}
              deleteKeyCode={['Delete', 'Backspace']}
            >
              <Background />
              <Controls />
            </ReactFlow>
          ) : (
            <div className="kpl-meta">
              {error
                ? 'No node types: the canvas needs them.'
                : 'Loading node types…'}
            </div>
          )}
        </div>
      </div>
      <div className="kpl-PipelineEditor-properties">
        {selected && settings && selectedType ? (
          <>
            <h3>
              {selected} · {settings.type}
            </h3>
            <div className="kpl-meta">{selectedType.description}</div>
            <ul className="kpl-PipelineEditor-problems">
              {problems
                .filter(p => p.node === selected)
                .map((p, i) => (
                  <li key={i} className="kpl-error">
                    {p.parameter ? `${p.parameter}: ` : ''}
                    {p.message}
                  </li>
                ))}
            </ul>
            <FormComponent
              schema={paramSchema(selectedType)}
              formData={settings as unknown as ReadonlyJSONObject}
              validator={validator}
              noValidate
              showErrorList={false}
              liveValidate={false}
              tagName="div"
              onChange={event => {
                if (!parsed.doc) {
                  return;
                }
                const edited = withoutDefaults(
                  settings,
                  event.formData as { [key: string]: unknown },
                  paramSchema(selectedType)
                );
                write({
                  ...parsed.doc,
                  nodes: { ...parsed.doc.nodes, [selected]: edited }
                });
              }}
            />
            {previewable ? (
              <Button
                className="jp-mod-styled kpl-PipelineEditor-preview"
                onClick={() => void showRecords(selected)}
              >
                Show records
              </Button>
            ) : null}
            {preview?.node === selected ? (
              <div className="kpl-PipelineEditor-records">
                {preview.error ? (
                  <div className="kpl-error">{preview.error}</div>
                ) : preview.records ? (
                  <>
                    <div className="kpl-meta">
                      {preview.records.records.length} of{' '}
                      {preview.records.total} records
                    </div>
                    <table>
                      <thead>
                        <tr>
                          {preview.records.fields.map(f => (
                            <th key={f.name} title={f.type}>
                              {f.name}
                            </th>
                          ))}
                        </tr>
                      </thead>
                      <tbody>
                        {preview.records.records.map((r, i) => (
                          <tr key={i}>
                            {preview.records!.fields.map(f => (
                              <td key={f.name}>{formatCell(r[f.name])}</td>
                            ))}
                          </tr>
                        ))}
                      </tbody>
                    </table>
                  </>
                ) : (
                  <div className="kpl-meta">Reading records…</div>
                )}
              </div>
            ) : null}
          </>
        ) : (
          <div className="kpl-meta">
            Drag a node type from the palette; drag from a node's right handle
            to another's left handle to connect them; select a node to edit its
            parameters.
          </div>
        )}
      </div>
    </div>
  );
}

/**
 * The canvas of a pipeline file, over the file's text model.
 */
export class PipelineEditorView extends ReactWidget {
  constructor(
    private readonly client: KPLClient,
    private readonly context: DocumentRegistry.IContext<DocumentRegistry.ICodeModel>,
    private readonly onOpenDataset: (name: string, version: string) => void
  ) {
    super();
    this.addClass('kpl-PipelineEditorView');
  }

  render(): JSX.Element {
    return (
      <ReactFlowProvider>
        <Editor
          client={this.client}
          context={this.context}
          onOpenDataset={this.onOpenDataset}
        />
      </ReactFlowProvider>
    );
  }
}

/**
 * Opens `*.kpl-pipeline.yaml` files in the pipeline editor.
 */
export class PipelineEditorFactory extends ABCWidgetFactory<
  DocumentWidget<PipelineEditorView, DocumentRegistry.ICodeModel>,
  DocumentRegistry.ICodeModel
> {
  constructor(
    options: DocumentRegistry.IWidgetFactoryOptions,
    private readonly client: KPLClient,
    private readonly onOpenDataset: (name: string, version: string) => void
  ) {
    super(options);
  }

  protected createNewWidget(
    context: DocumentRegistry.IContext<DocumentRegistry.ICodeModel>
  ): DocumentWidget<PipelineEditorView, DocumentRegistry.ICodeModel> {
    const content = new PipelineEditorView(
      this.client,
      context,
      this.onOpenDataset
    );
    return new DocumentWidget({ content, context });
  }
}
