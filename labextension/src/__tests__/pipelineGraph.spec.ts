import {
  dumpPipeline,
  freeId,
  fromGraph,
  INodePorts,
  INodeType,
  paramSchema,
  parsePipeline,
  sourcePorts,
  templateChoices,
  toGraph,
  withChoices,
  withoutDefaults
} from '../pipelineGraph';

// Jest runs in Node; the extension's tsconfig has no Node types.
declare const require: (module: 'fs') => {
  readFileSync: (path: string, encoding: 'utf-8') => string;
};
declare const __dirname: string;

// The input parameters of the node types the templates use (GET /pipelines/node-types).
const TYPES: { [type: string]: INodePorts } = {
  dataset: { inputs: [], named_inputs: false },
  regex_extract: { inputs: ['input'], named_inputs: false },
  select: { inputs: ['input'], named_inputs: false },
  rename: { inputs: ['input'], named_inputs: false },
  left_join: { inputs: ['left', 'right'], named_inputs: false },
  label_id: { inputs: ['input'], named_inputs: false },
  parse_voc: { inputs: ['input'], named_inputs: false },
  save_dataset: { inputs: ['input'], named_inputs: false },
  save_model: { inputs: ['input'], named_inputs: false },
  sql: { inputs: [], named_inputs: true },
  train: { inputs: [], named_inputs: true }
};

function template(name: string): string {
  return require('fs').readFileSync(
    `${__dirname}/../../../kpl_lab/pipelines/templates/${name}.kpl-pipeline.yaml`,
    'utf-8'
  );
}

describe('pipeline graph', () => {
  it.each(['segmentation', 'classification', 'detection'])(
    'round-trips the %s template losslessly',
    name => {
      const doc = parsePipeline(template(name));
      const { nodes, edges } = toGraph(doc, TYPES);
      expect(nodes.map(n => n.id)).toEqual(Object.keys(doc.nodes));
      const text = dumpPipeline(fromGraph(doc, nodes, edges, TYPES));
      const again = parsePipeline(text);
      expect(again).toEqual(doc);
      // Same keys in the same order, so a saved file diffs only where it changed.
      expect(JSON.stringify(again)).toEqual(JSON.stringify(doc));
      expect(dumpPipeline(again)).toEqual(text);
    }
  );

  it('gives every edge its source handle, even from a node that failed validation', () => {
    const { edges } = toGraph(parsePipeline(template('classification')), TYPES);
    // the train node's validation failed (no outputs known): the edge to `model` still has its handle
    expect(sourcePorts('train', [], edges)).toEqual(['model']);
    expect(sourcePorts('train', ['model'], edges)).toEqual(['model']);
    expect(sourcePorts('labels', [], edges)).toEqual(['out']);
    expect(sourcePorts('model', [], edges)).toEqual(['out']);
    for (const edge of edges) {
      expect(sourcePorts(edge.source, [], edges)).toContain(edge.sourceHandle);
    }
  });

  it.each(['segmentation', 'classification', 'detection'])(
    'lays out the %s template at most four columns wide, readable at full size',
    name => {
      const { nodes } = toGraph(parsePipeline(template(name)), TYPES);
      const xs = new Set(nodes.map(n => n.position.x));
      expect(xs.size).toBeLessThanOrEqual(4);
      expect(Math.max(...xs)).toBeLessThan(600);
      const spots = new Set(nodes.map(n => `${n.position.x},${n.position.y}`));
      expect(spots.size).toBe(nodes.length); // no two nodes on one spot
    }
  );

  it("asks a template's datasets and algorithms and writes the names chosen", () => {
    const doc = parsePipeline(template('classification'));
    expect(templateChoices(doc)).toEqual([
      { node: 'raw', key: 'dataset', value: 'digits' },
      { node: 'train', key: 'algorithm', value: 'image-classification' }
    ]);
    const mine = withChoices(doc, { raw: 'fruit-upload', train: 'my-cnn' });
    expect(mine.nodes.raw).toEqual({
      type: 'dataset',
      dataset: 'fruit-upload'
    }); // its part was the digits'
    expect(mine.nodes.train.algorithm).toBe('my-cnn');
    expect(mine.nodes.images).toEqual(doc.nodes.images);
    expect(withChoices(doc, { raw: 'digits' }).nodes.raw).toEqual(
      doc.nodes.raw
    ); // the template's own: as it is
  });

  it('reads ports and named inputs as edges', () => {
    const { edges } = toGraph(parsePipeline(template('detection')), TYPES);
    expect(edges).toContainEqual(
      expect.objectContaining({
        source: 'boxes',
        sourceHandle: 'out',
        target: 'joined',
        targetHandle: 'right'
      })
    );
    expect(edges).toContainEqual(
      expect.objectContaining({
        source: 'train',
        sourceHandle: 'model',
        target: 'model',
        targetHandle: 'input'
      })
    );
    expect(edges).toContainEqual(
      expect.objectContaining({
        source: 'save',
        target: 'train',
        targetHandle: 'inputs.data'
      })
    );
  });

  it('keeps moved positions and the inputs of new edges', () => {
    const doc = parsePipeline(
      'version: 1\nname: two\nnodes:\n  raw: {type: dataset, dataset: pets}\n'
    );
    const id = freeId(doc, 'select');
    doc.nodes[id] = { type: 'select', where: 'true', ui: { x: 300, y: 40 } };
    const { nodes } = toGraph(doc, TYPES);
    nodes[0].position = { x: 12.4, y: 80 };
    const edge = {
      id: 'e',
      source: 'raw',
      sourceHandle: 'out',
      target: id,
      targetHandle: 'input'
    };
    const out = fromGraph(doc, nodes, [edge], TYPES, new Set(['raw']));
    expect(out.nodes).toEqual({
      raw: { type: 'dataset', dataset: 'pets', ui: { x: 12, y: 80 } },
      select: {
        type: 'select',
        where: 'true',
        ui: { x: 300, y: 40 },
        input: 'raw'
      }
    });
    expect(freeId(out, 'select')).toBe('select_2');
    // Removing the edge removes the input.
    expect(
      fromGraph(out, toGraph(out, TYPES).nodes, [], TYPES).nodes.select
    ).toEqual({
      type: 'select',
      where: 'true',
      ui: { x: 300, y: 40 }
    });
  });

  it('quotes the join key named on for YAML 1.1 readers', () => {
    const text = dumpPipeline(parsePipeline(template('detection')));
    expect(text).toMatch(/'on': id|"on": id/);
    expect(parsePipeline(text).nodes.joined.on).toBe('id');
  });

  it('offers keep: true in the property panel of a relational node, written only when ticked', () => {
    // GET /pipelines/node-types answers this for select (keep: not a parameter, shown as one)
    const select: INodeType = {
      inputs: ['input'],
      named_inputs: false,
      parameters: {
        additionalProperties: false,
        properties: {
          input: { title: 'Input', type: 'string' },
          where: { title: 'Where', type: 'string' },
          keep: { type: 'boolean', default: false, title: 'Keep' }
        },
        required: ['input', 'where'],
        type: 'object'
      }
    };
    const schema = paramSchema(select);
    expect(Object.keys(schema.properties ?? {})).toEqual(['where', 'keep']);
    // an optional parameter is a field that may stay empty, not a choice of two "options"
    const dataset = paramSchema({
      ...select,
      inputs: [],
      parameters: {
        properties: {
          part: {
            anyOf: [{ type: 'string' }, { type: 'null' }],
            default: null,
            title: 'Part'
          },
          either: { anyOf: [{ type: 'string' }, { type: 'integer' }] }
        },
        type: 'object'
      }
    });
    expect(dataset.properties?.part).toEqual({
      type: ['string', 'null'],
      default: null,
      title: 'Part'
    });
    expect(dataset.properties?.either).toEqual({
      anyOf: [{ type: 'string' }, { type: 'integer' }]
    });
    expect(schema.required).toEqual(['where']);
    const settings = { type: 'select', input: 'raw', where: 'true' };
    // the form fills in keep's default: the file does not get it
    expect(
      withoutDefaults(settings, { where: 'true', keep: false }, schema)
    ).toEqual(settings);
    const kept = withoutDefaults(
      settings,
      { where: 'true', keep: true },
      schema
    );
    expect(kept).toEqual({ ...settings, keep: true });
    const doc = parsePipeline(
      dumpPipeline({ version: 1, name: 'x', nodes: { s: kept } })
    );
    expect(doc.nodes.s.keep).toBe(true);
    expect(
      withoutDefaults(kept, { where: 'true', keep: false }, schema)
    ).toEqual({ ...settings, keep: false });
  });
});
