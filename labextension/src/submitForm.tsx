import { Button, FormComponent, ReactWidget } from '@jupyterlab/ui-components';
import type { RJSFSchema, UiSchema } from '@rjsf/utils';
import { customizeValidator } from '@rjsf/validator-ajv8';
import type { ReadonlyJSONObject } from '@lumino/coreutils';
import React, { useEffect, useState } from 'react';

import { AlgorithmVersionDetail, Job, KPLClient } from './api';
import {
  fieldErrors,
  fitNow,
  IJobFormData,
  jobFormData,
  jobFormSchema,
  jobRequest,
  resourceSummary
} from './jobForm';
import { KPLApiError } from './request';

/**
 * The validator rjsf requires; the server validates (`noValidate`), listing every problem.
 */
const validator = customizeValidator<ReadonlyJSONObject>();

/**
 * What the form needs before it can show: the function's schema and first values.
 */
interface ILoaded {
  detail: AlgorithmVersionDetail;
  schema: RJSFSchema;
  uiSchema: UiSchema<ReadonlyJSONObject>;
  data: IJobFormData;
  notes: string[];
}

/**
 * The form that submits a job of one algorithm function.
 *
 * The server validates the request and lists every problem; each is shown under its
 * field (`parameters.steps`), the rest above the Submit button.
 */
function JobForm(props: {
  client: KPLClient;
  algorithm: string;
  version: string;
  fn: string;
  onSubmitted: (job: Job) => void;
}): JSX.Element {
  const { client, algorithm, version, fn } = props;
  const [loaded, setLoaded] = useState<ILoaded | null>(null);
  const [loadError, setLoadError] = useState('');
  const [data, setData] = useState<IJobFormData | null>(null);
  const [errors, setErrors] = useState<ReturnType<typeof fieldErrors>>({
    errorSchema: {},
    general: []
  });
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    const refs = (list: { versions: { ref: string }[] }[], kind: string) =>
      list.flatMap(item =>
        item.versions
          .slice()
          .reverse()
          .map(v => `${kind}:${v.ref}`)
      );
    Promise.all([
      client.GET('/algorithms/{name}/versions/{version}', {
        params: { path: { name: algorithm, version } }
      }),
      client.GET('/datasets').then(list => refs(list.datasets, 'dataset')),
      client.GET('/models').then(list => refs(list.models, 'model')),
      client.GET('/devices')
    ])
      .then(([detail, datasets, models, devices]) => {
        if (!detail.function_specs[fn]) {
          setLoadError(`${detail.ref} has no function ${fn}`);
          return;
        }
        const { schema, uiSchema } = jobFormSchema(detail, fn, {
          datasets,
          models
        });
        const declared = jobFormData(detail, fn, datasets);
        // environment.yml's amounts, lowered to what is free now
        const fitted = fitNow(
          declared.resources,
          devices,
          detail.function_specs[fn].resource?.workers ?? 1
        );
        const first = { ...declared, resources: fitted.resources };
        setLoaded({
          detail,
          schema,
          uiSchema,
          data: first,
          notes: fitted.notes
        });
        setData(first);
      })
      .catch(error => setLoadError((error as Error).message));
  }, [client, algorithm, version, fn]);

  if (loadError) {
    return <div className="kpl-error">{loadError}</div>;
  }
  if (!loaded || !data) {
    return <div className="kpl-meta">Loading {algorithm}…</div>;
  }

  const submit = async () => {
    setErrors({ errorSchema: {}, general: [] });
    setBusy(true);
    try {
      props.onSubmitted(
        await client.POST('/jobs', {
          body: jobRequest(`${algorithm}:${version}`, fn, data)
        })
      );
    } catch (error) {
      if (!(error instanceof KPLApiError)) {
        throw error;
      }
      const listed = error.errors.length
        ? error.errors
        : [{ field: error.field ?? '', message: error.message }];
      setErrors(fieldErrors(loaded.schema, listed));
    } finally {
      setBusy(false);
    }
  };

  const spec = loaded.detail.function_specs[fn];
  return (
    <form
      className="kpl-form"
      noValidate
      onSubmit={event => {
        event.preventDefault();
        void submit();
      }}
    >
      <h2>
        Submit {loaded.detail.ref} · {fn}
      </h2>
      <div className="kpl-meta">
        {spec.cmd} · {resourceSummary(spec)}
      </div>
      {loaded.notes.length > 0 && (
        <div className="kpl-form-note" role="note">
          {loaded.notes.join('\n')}
        </div>
      )}
      <FormComponent
        schema={loaded.schema}
        uiSchema={loaded.uiSchema}
        formData={data as unknown as ReadonlyJSONObject}
        formContext={{ defaultFormData: loaded.data }}
        validator={validator}
        noValidate
        showErrorList={false}
        showModifiedFromDefault={false}
        extraErrors={errors.errorSchema}
        tagName="div"
        onChange={event => setData(event.formData as unknown as IJobFormData)}
      />
      <div className="kpl-error kpl-form-error" role="alert">
        {errors.general.join('\n')}
      </div>
      <div className="kpl-form-actions">
        <Button
          className="jp-mod-styled jp-mod-accept kpl-submit"
          type="submit"
          disabled={busy}
        >
          Submit
        </Button>
      </div>
    </form>
  );
}

/**
 * The main-area content that submits a job of one algorithm function.
 */
export class SubmitJobForm extends ReactWidget {
  constructor(
    private readonly client: KPLClient,
    readonly algorithm: string,
    readonly version: string,
    readonly fn: string,
    private readonly onSubmitted: (job: Job) => void
  ) {
    super();
    this.addClass('kpl-SubmitJobForm');
    this.title.label = `Submit ${algorithm}/${fn}`;
  }

  render(): JSX.Element {
    return (
      <JobForm
        client={this.client}
        algorithm={this.algorithm}
        version={this.version}
        fn={this.fn}
        onSubmitted={this.onSubmitted}
      />
    );
  }
}
