import type { RJSFSchema } from '@rjsf/utils';

import type { AlgorithmVersionDetail, Devices } from '../api';
import {
  fieldErrors,
  fitNow,
  inputChoices,
  jobFormData,
  jobFormSchema,
  jobRequest,
  resourceSummary,
  room,
  schemaPath
} from '../jobForm';

const detail = {
  name: 'tiny',
  version: 'abc',
  ref: 'tiny:abc',
  function_specs: {
    train: {
      cmd: 'python train.py',
      resource: { limits: { cpu: 1, memory: 512, gpu: 0 } },
      inputs: [
        { key: 'data', name: 'training dataset' },
        { key: 'init', name: 'starting model', optional: true }
      ],
      outputs: [{ key: 'model', name: 'trained model' }]
    }
  },
  parameter_schema: {
    type: 'object',
    properties: {
      steps: { type: 'integer', default: 10 },
      delay: { type: 'number', default: 0.5 },
      'optimizer.lr': { type: 'number' },
      model: {
        type: 'object',
        properties: { depth: { type: 'integer', default: 3 } }
      }
    }
  }
} as unknown as AlgorithmVersionDetail;

describe('jobFormSchema', () => {
  it('offers the refs for each input and keeps the parameter schema', () => {
    const { schema, uiSchema } = jobFormSchema(detail, 'train', {
      datasets: ['dataset:digits:1'],
      models: ['model:tiny-model:9']
    });
    const inputs = schema.properties!.inputs as RJSFSchema;
    expect(Object.keys(inputs.properties!)).toEqual(['data', 'init']);
    expect((inputs.properties!.data as RJSFSchema).enum).toEqual([
      '',
      'dataset:digits:1'
    ]);
    expect(uiSchema.inputs.data['ui:enumNames']).toEqual([
      '(none)',
      'dataset:digits:1'
    ]);
    // environment.yml marks `init` optional: the form says so, `data` is needed
    expect((inputs.properties!.data as RJSFSchema).title).toBe('data');
    expect((inputs.properties!.init as RJSFSchema).title).toBe(
      'init (optional)'
    );
    // `init` is a "starting model": it offers models, not datasets
    expect((inputs.properties!.init as RJSFSchema).enum).toEqual([
      '',
      'model:tiny-model:9'
    ]);
    const parameters = schema.properties!.parameters as RJSFSchema;
    expect(Object.keys(parameters.properties!)).toContain('steps');
    const resources = schema.properties!.resources as RJSFSchema;
    expect(Object.keys(resources.properties!)).toEqual([
      'cpu',
      'memory',
      'shm',
      'gpu',
      'npu'
    ]);
  });
});

describe('inputChoices', () => {
  const refs = {
    datasets: ['dataset:digits:1', 'dataset:voc:2'],
    models: ['model:net-model:3']
  };

  it('offers models to a checkpoint input and datasets to a data input', () => {
    const checkpoint = { key: 'checkpoint', name: 'to resume from' };
    expect(inputChoices(checkpoint, refs)).toEqual(['model:net-model:3']);
    expect(inputChoices({ key: 'weights', name: 'w' }, refs)).toEqual(
      refs.models
    );
    expect(inputChoices({ key: 'data', name: 'training data' }, refs)).toEqual(
      refs.datasets
    );
    expect(inputChoices({ key: 'images' }, refs)).toEqual(refs.datasets);
  });

  it('offers both when the input says neither', () => {
    expect(inputChoices({ key: 'extra', name: 'anything' }, refs)).toEqual([
      ...refs.datasets,
      ...refs.models
    ]);
  });
});

describe('jobFormData and jobRequest', () => {
  it('starts from the first dataset, the defaults and the limits', () => {
    const data = jobFormData(detail, 'train', ['dataset:digits:2']);
    expect(data).toEqual({
      inputs: { data: 'dataset:digits:2' },
      parameters: { steps: 10, delay: 0.5 },
      resources: { cpu: 1, memory: 512, gpu: 0 }
    });
  });

  it('leaves empty inputs and resources out of the request', () => {
    const request = jobRequest('tiny:abc', 'train', {
      inputs: { data: 'dataset:digits:2', init: undefined },
      parameters: { steps: 60 },
      resources: { cpu: 2 }
    });
    expect(request).toEqual({
      algorithm: 'tiny:abc',
      function: 'train',
      inputs: { data: 'dataset:digits:2' },
      parameters: { steps: 60 },
      resources: { cpu: 2 }
    });
  });

  it('summarizes the resources of a function', () => {
    expect(resourceSummary(detail.function_specs.train)).toBe(
      'cpu 1 · memory 512 MB'
    );
  });
});

describe('fieldErrors', () => {
  const { schema } = jobFormSchema(detail, 'train', {
    datasets: [],
    models: []
  });

  it('finds fields by dotted path, parameter names with dots included', () => {
    expect(schemaPath(schema, 'parameters.steps')).toEqual([
      'parameters',
      'steps'
    ]);
    expect(schemaPath(schema, 'parameters.optimizer.lr')).toEqual([
      'parameters',
      'optimizer.lr'
    ]);
    expect(schemaPath(schema, 'parameters.model.depth')).toEqual([
      'parameters',
      'model',
      'depth'
    ]);
    expect(schemaPath(schema, 'parameters.nope')).toBeNull();
  });

  it('puts each error under its field and the others on the form', () => {
    const { errorSchema, general } = fieldErrors(schema, [
      { field: 'parameters.steps', message: 'expected an integer' },
      { field: 'parameters.steps', message: 'at least 1' },
      { field: 'resources.cpu', message: 'more than the quota' },
      { field: 'priority', message: 'not allowed' },
      { field: '', message: 'the algorithm is being deleted' }
    ]);
    expect(errorSchema).toEqual({
      parameters: {
        steps: { __errors: ['expected an integer', 'at least 1'] }
      },
      resources: { cpu: { __errors: ['more than the quota'] } }
    });
    expect(general).toEqual([
      'priority: not allowed',
      'the algorithm is being deleted'
    ]);
  });
});

function devices(options: {
  cpu?: number;
  usedCpu?: number;
  gpus?: number[];
  usedGpus?: number[];
  quota?: Record<string, number> | null;
  projectCpu?: number;
}): Devices {
  const { cpu = 2, usedCpu = 0, gpus = [], usedGpus = [] } = options;
  return {
    capacity: { cpu, memory: 8192, devices: gpus.length ? { gpu: gpus } : {} },
    used: {
      cpu: usedCpu,
      memory: 512,
      devices: usedGpus.length ? { gpu: usedGpus } : {}
    },
    project_used: { cpu: options.projectCpu ?? 0, memory: 0, devices: {} },
    quota: options.quota ?? null,
    devices: []
  };
}

describe('fitNow', () => {
  it('leaves what fits as it is', () => {
    expect(fitNow({ cpu: 2, memory: 2048 }, devices({}))).toEqual({
      resources: { cpu: 2, memory: 2048 },
      notes: []
    });
  });

  it('caps at the core your notebook leaves free, with a note', () => {
    expect(fitNow({ cpu: 2, memory: 2048 }, devices({ usedCpu: 1 }))).toEqual({
      resources: { cpu: 1, memory: 2048 },
      notes: ['cpu capped at 1: environment.yml asks 2 CPUs, 1 free now']
    });
  });

  it('keeps the amount when nothing is free: the job waits, saying why', () => {
    expect(fitNow({ cpu: 1 }, devices({ usedCpu: 2 })).resources).toEqual({
      cpu: 1
    });
  });

  it('caps at the quota, shared by the workers', () => {
    expect(
      room(devices({ cpu: 8, quota: { cpu: 3 }, projectCpu: 1 })).cpu
    ).toEqual([2, 3]);
    expect(
      fitNow({ cpu: 2 }, devices({ cpu: 8, quota: { cpu: 3 } }), 2)
    ).toEqual({
      resources: { cpu: 1.5 },
      notes: [
        'cpu capped at 1.5: environment.yml asks 2 CPUs, 3 free now for 2 workers'
      ]
    });
  });

  it('asks no GPU where none can be had, and waits for a busy one', () => {
    expect(fitNow({ cpu: 1, gpu: 1 }, devices({}))).toEqual({
      resources: { cpu: 1, gpu: 0 },
      notes: ['gpu 0: environment.yml asks 1 GPU; none can be had here']
    });
    expect(
      fitNow({ cpu: 1, gpu: 1 }, devices({ gpus: [0], usedGpus: [0] }))
        .resources
    ).toEqual({ cpu: 1, gpu: 1 });
  });
});
