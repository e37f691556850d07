import type { RJSFSchema } from '@rjsf/utils';
import { dump, load } from 'js-yaml';

/**
 * A pipeline file as read from YAML: `version`, `name`, `description`, `nodes`.
 */
export interface IPipelineDoc {
  [key: string]: unknown;
  nodes: { [id: string]: INodeSettings };
}

/**
 * One node's mapping: its `type`, its parameters and the editor's `ui: {x, y}`.
 */
export interface INodeSettings {
  [key: string]: unknown;
  type: string;
  ui?: { x: number; y: number };
}

/**
 * What the editor needs of a node type: which parameters name input nodes.
 */
export interface INodePorts {
  inputs: ReadonlyArray<string>;
  named_inputs: boolean;
}

/**
 * A node type as the property panel reads it: its ports and parameters' JSON schema.
 */
export interface INodeType extends INodePorts {
  parameters: { [key: string]: unknown };
}

/**
 * A node on the canvas (the shape @xyflow/react takes).
 */
export interface IGraphNode {
  id: string;
  position: { x: number; y: number };
  data: { settings: INodeSettings };
}

/**
 * An edge: from a node's output port to the parameter naming it.
 *
 * `sourceHandle` is the port (`out` for a node with one output), `targetHandle`
 * the parameter (`input`, `left`, `inputs.data`).
 */
export interface IGraphEdge {
  id: string;
  source: string;
  sourceHandle: string;
  target: string;
  targetHandle: string;
}

/**
 * The single output port of most nodes (as in kpl_lab/pipelines/schema.py).
 */
export const PORT = 'out';

const STEP_X = 190;
const STEP_Y = 100;
// Columns of a band: a long chain wraps into bands below one another, so that the canvas
// fits it at a zoom whose labels are readable (ten columns side by side would not).
const BAND_COLUMNS = 4;
const BAND_GAP = 40;

/**
 * The node types of an algorithm's functions (kpl_lab/pipelines/nodes.py ALGORITHM_FUNCTIONS).
 */
export const ALGORITHM_TYPES: ReadonlyArray<string> = [
  'train',
  'test',
  'infer',
  'deploy',
  'compile'
];

/**
 * Read a pipeline file's text (YAML 1.2: only true/false are booleans, `on` stays a key).
 */
export function parsePipeline(text: string): IPipelineDoc {
  const doc = load(text) as IPipelineDoc | null;
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) {
    throw new Error(
      'a pipeline file is a mapping with version, name and nodes'
    );
  }
  if (!doc.nodes || typeof doc.nodes !== 'object') {
    doc.nodes = {};
  }
  return doc;
}

/**
 * Write a pipeline file's text; strings YAML 1.1 reads as booleans (on, yes) are quoted.
 */
export function dumpPipeline(doc: IPipelineDoc): string {
  return dump(doc, { flowLevel: 2, lineWidth: 100, noRefs: true });
}

/**
 * The parameters of a node that name input nodes, with the reference each holds.
 */
export function inputRefs(
  settings: INodeSettings,
  ports: INodePorts | undefined
): [string, string][] {
  const refs: [string, string][] = [];
  for (const key of ports?.inputs ?? []) {
    if (typeof settings[key] === 'string') {
      refs.push([key, settings[key] as string]);
    }
  }
  const named = settings.inputs;
  if (ports?.named_inputs && named && typeof named === 'object') {
    for (const [key, ref] of Object.entries(named)) {
      if (typeof ref === 'string') {
        refs.push([`inputs.${key}`, ref]);
      }
    }
  }
  return refs;
}

/**
 * The canvas of a pipeline: nodes where `ui` places them (else in columns by depth), edges from the inputs.
 */
export function toGraph(
  doc: IPipelineDoc,
  types: { [type: string]: INodePorts }
): { nodes: IGraphNode[]; edges: IGraphEdge[] } {
  const edges: IGraphEdge[] = [];
  for (const [id, settings] of Object.entries(doc.nodes)) {
    for (const [param, ref] of inputRefs(settings, types[settings.type])) {
      const [source, port] = splitRef(ref);
      edges.push({
        id: `${source}.${port}->${id}.${param}`,
        source,
        sourceHandle: port,
        target: id,
        targetHandle: param
      });
    }
  }
  const depth = depths(Object.keys(doc.nodes), edges);
  const rows = new Map<number, number>(); // nodes at each depth so far
  const place = new Map<string, [number, number]>(); // id -> [depth, row]
  for (const id of Object.keys(doc.nodes)) {
    const d = depth.get(id) ?? 0;
    const r = rows.get(d) ?? 0;
    rows.set(d, r + 1);
    place.set(id, [d, r]);
  }
  // Each band is as tall as its deepest column.
  const bandTop = [0];
  const bands = Math.ceil((Math.max(0, ...rows.keys()) + 1) / BAND_COLUMNS);
  for (let b = 1; b <= bands; b++) {
    let tallest = 1;
    for (let d = (b - 1) * BAND_COLUMNS; d < b * BAND_COLUMNS; d++) {
      tallest = Math.max(tallest, rows.get(d) ?? 0);
    }
    bandTop.push(bandTop[b - 1] + tallest * STEP_Y + BAND_GAP);
  }
  const nodes = Object.entries(doc.nodes).map(([id, settings]) => {
    const [d, r] = place.get(id) ?? [0, 0];
    const band = Math.floor(d / BAND_COLUMNS);
    const position = settings.ui
      ? { x: settings.ui.x, y: settings.ui.y }
      : { x: (d % BAND_COLUMNS) * STEP_X, y: bandTop[band] + r * STEP_Y };
    return { id, position, data: { settings } };
  });
  return { nodes, edges };
}

/**
 * The output handles a node shows: the ports validation found, and any port an edge
 * leaves it from (a node that failed validation still shows the edges the file names),
 * else the single port.
 */
export function sourcePorts(
  node: string,
  validated: ReadonlyArray<string>,
  edges: ReadonlyArray<Pick<IGraphEdge, 'source' | 'sourceHandle'>>
): string[] {
  const ports = [...validated];
  for (const edge of edges) {
    if (edge.source === node && !ports.includes(edge.sourceHandle)) {
      ports.push(edge.sourceHandle);
    }
  }
  return ports.length ? ports : [PORT];
}

/**
 * What a template asks for: the dataset of each dataset node and the algorithm of each
 * algorithm node, with the template's own names.
 */
export interface ITemplateChoice {
  node: string;
  key: 'dataset' | 'algorithm';
  value: string;
}

/**
 * The choices of a template, in the order of its nodes.
 */
export function templateChoices(doc: IPipelineDoc): ITemplateChoice[] {
  const choices: ITemplateChoice[] = [];
  for (const [node, settings] of Object.entries(doc.nodes)) {
    if (settings.type === 'dataset' && typeof settings.dataset === 'string') {
      choices.push({ node, key: 'dataset', value: settings.dataset });
    } else if (
      ALGORITHM_TYPES.includes(settings.type) &&
      typeof settings.algorithm === 'string'
    ) {
      choices.push({ node, key: 'algorithm', value: settings.algorithm });
    }
  }
  return choices;
}

/**
 * A template with the names chosen (node -> name). A dataset node given another dataset
 * forgets the template's `part`, which that dataset may not have (the node then reads its
 * root, or its first part).
 */
export function withChoices(
  doc: IPipelineDoc,
  chosen: { [node: string]: string }
): IPipelineDoc {
  const nodes = { ...doc.nodes };
  for (const { node, key, value } of templateChoices(doc)) {
    const name = chosen[node];
    if (!name || name === value) {
      continue;
    }
    const settings: INodeSettings = { ...nodes[node], [key]: name };
    if (key === 'dataset') {
      delete settings.part;
    }
    nodes[node] = settings;
  }
  return { ...doc, nodes };
}

/**
 * The pipeline file of a canvas: each node's settings with its inputs from the edges.
 *
 * A node keeps `ui` only when it had one or was moved (`moved`), so a file
 * opened and saved unchanged stays the same.
 */
export function fromGraph(
  doc: IPipelineDoc,
  nodes: ReadonlyArray<IGraphNode>,
  edges: ReadonlyArray<IGraphEdge>,
  types: { [type: string]: INodePorts },
  moved: ReadonlySet<string> = new Set()
): IPipelineDoc {
  const wired = new Map<string, Map<string, string>>();
  for (const edge of edges) {
    const ref =
      edge.sourceHandle === PORT
        ? edge.source
        : `${edge.source}.${edge.sourceHandle}`;
    const params = wired.get(edge.target) ?? new Map<string, string>();
    params.set(edge.targetHandle, ref);
    wired.set(edge.target, params);
  }
  const out: IPipelineDoc = { ...doc, nodes: {} };
  for (const node of nodes) {
    const settings: INodeSettings = { ...node.data.settings };
    const params = wired.get(node.id) ?? new Map<string, string>();
    // Inputs come from the edges; set in place so the keys keep their order.
    for (const [param] of inputRefs(settings, types[settings.type])) {
      if (!params.has(param)) {
        setParam(settings, param, undefined);
      }
    }
    for (const [param, ref] of params) {
      setParam(settings, param, ref);
    }
    if (settings.ui || moved.has(node.id)) {
      settings.ui = {
        x: Math.round(node.position.x),
        y: Math.round(node.position.y)
      };
    }
    out.nodes[node.id] = settings;
  }
  return out;
}

/**
 * A free node id for a new node of a type (the type name, numbered when taken).
 */
export function freeId(doc: IPipelineDoc, type: string): string {
  if (!(type in doc.nodes)) {
    return type;
  }
  let n = 2;
  while (`${type}_${n}` in doc.nodes) {
    n += 1;
  }
  return `${type}_${n}`;
}

function splitRef(ref: string): [string, string] {
  const dot = ref.indexOf('.');
  return dot < 0 ? [ref, PORT] : [ref.slice(0, dot), ref.slice(dot + 1)];
}

function setParam(
  settings: INodeSettings,
  param: string,
  value: string | undefined
): void {
  if (param.startsWith('inputs.')) {
    const key = param.slice('inputs.'.length);
    const named = { ...((settings.inputs as object) ?? {}) } as {
      [key: string]: string;
    };
    if (value === undefined) {
      delete named[key];
    } else {
      named[key] = value;
    }
    settings.inputs = named;
  } else if (value === undefined) {
    delete settings[param];
  } else {
    settings[param] = value;
  }
}

function depths(
  ids: ReadonlyArray<string>,
  edges: ReadonlyArray<IGraphEdge>
): Map<string, number> {
  const depth = new Map<string, number>(ids.map(id => [id, 0]));
  // Longest path from a source; bounded by the node count so a cycle cannot loop forever.
  for (let round = 0; round < ids.length; round++) {
    let changed = false;
    for (const edge of edges) {
      const d = (depth.get(edge.source) ?? 0) + 1;
      if (depth.has(edge.target) && d > (depth.get(edge.target) ?? 0)) {
        depth.set(edge.target, d);
        changed = true;
      }
    }
    if (!changed) {
      break;
    }
  }
  return depth;
}

/**
 * The parameters a form edits: the node type's schema less the inputs (edges set those).
 * A relational node's `keep` comes with its type's schema (a checkbox). An optional
 * parameter (pydantic's `anyOf: [X, null]`) is edited as X that may be left empty,
 * not as a choice between "option 1" and "option 2".
 */
export function paramSchema(type: INodeType): RJSFSchema {
  const schema = JSON.parse(JSON.stringify(type.parameters)) as RJSFSchema;
  const properties = { ...(schema.properties ?? {}) };
  for (const key of [
    ...type.inputs,
    ...(type.named_inputs ? ['inputs'] : [])
  ]) {
    delete properties[key];
  }
  for (const [key, spec] of Object.entries(properties)) {
    if (typeof spec === 'object') {
      properties[key] = withoutNullOption(spec);
    }
  }
  return {
    ...schema,
    properties,
    required: (schema.required ?? []).filter(k => k in properties)
  };
}

/**
 * `anyOf: [{type: X, ...}, {type: 'null'}]` as `{type: [X, 'null'], ...}`; any other schema as it is.
 */
function withoutNullOption(spec: RJSFSchema): RJSFSchema {
  const options = (spec.anyOf ?? []) as RJSFSchema[];
  const kept = options.filter(o => o.type !== 'null');
  if (
    options.length !== 2 ||
    kept.length !== 1 ||
    typeof kept[0].type !== 'string'
  ) {
    return spec;
  }
  const rest = { ...spec };
  delete rest.anyOf;
  return { ...kept[0], ...rest, type: [kept[0].type, 'null'] };
}

/**
 * A node's settings after a form edit, leaving out defaults the form filled in
 * that the file did not have (so the file holds what the user set).
 */
export function withoutDefaults(
  settings: INodeSettings,
  edited: { [key: string]: unknown },
  schema: RJSFSchema
): INodeSettings {
  const out: INodeSettings = { ...settings };
  for (const [key, value] of Object.entries(edited)) {
    const spec = schema.properties?.[key];
    const fallback =
      spec && typeof spec === 'object' ? (spec.default ?? null) : undefined;
    const unset =
      value === undefined || JSON.stringify(value) === JSON.stringify(fallback);
    if (unset && !(key in settings)) {
      continue;
    }
    if (value === undefined) {
      delete out[key];
    } else {
      out[key] = value;
    }
  }
  return out;
}
