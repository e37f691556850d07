// A new team's first hour through the hub (seed 001 from the browser): the admin logs in, starts a
// notebook, trains the demo from the submit form, finds the model, deploys and tries it; a second
// member joins the project and works beside the admin; the admin builds a pipeline from the
// classification template and runs it, then starts a hyperparameter search from the Experiments
// panel. One walk: each step starts where the last one left the hub.
const { test, expect } = require('@playwright/test');
const { api, auth, logIn, openLab, openPanel, shot } = require('./hub');

// what `kpl-lab up` adds to project demo (kpl_lab/hub/up.py), of which the admin is the member
const PROJECT = 'demo';
const DATASET = 'digits';
const ALGORITHM = 'mlp-classification'; // numpy: the run command installs nothing more
const MODEL = `${ALGORITHM}-model`;
const DEPLOYMENT = 'digits';
const MEMBER = 'dana';

test.describe.configure({ mode: 'serial' });

test.afterAll(async ({ request }) => {
  for (const user of ['admin', MEMBER]) {
    await request.delete(api(`users/${user}/server`), { headers: auth });
  }
});

test('the sample algorithm trains with every default, and its model is the user’s', async ({
  page
}, testInfo) => {
  test.setTimeout(20 * 60 * 1000); // a real training on a shared 2-core machine
  await logIn(page, 'admin');
  await page.goto('/hub/spawn');
  await expect(page.locator('#kpl-project option')).toHaveText([PROJECT]);
  await openLab(page, 'admin');

  const algorithms = await openPanel(page, 'kpl-lab-algorithms');
  const item = algorithms.locator(`.kpl-algorithm[data-name="${ALGORITHM}"]`);
  await item.locator('.kpl-item-title').first().click();
  await item.locator('.kpl-submit-open[data-function="train"]').click();
  const form = page.locator('.kpl-SubmitJobForm');
  // the defaults: the project's one dataset, parameter.yml's values, what is free now
  await expect(form.locator('#root_inputs_data option:checked')).toHaveText(
    new RegExp(`^dataset:${DATASET}:`)
  );
  await form.locator('button.kpl-submit').click();

  const view = page.locator('.kpl-JobView');
  await expect(view).toBeVisible();
  const id = (await view.getAttribute('id')).replace(/^kpl-job-/, '');
  await page.locator('.jp-SideBar [data-id="kpl-lab-jobs"]').click();
  const listed = page.locator(`#kpl-lab-jobs .kpl-job[data-id="${id}"]`);
  await expect(listed).toBeVisible();
  // no timing threshold: the job takes what the machine gives it
  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'succeeded',
    { timeout: 15 * 60 * 1000 }
  );
  await expect(listed).toHaveAttribute('data-state', 'succeeded');
  const registered = `model:${MODEL}:`;
  await expect(
    view.locator('.kpl-job-details tr[data-key="outputs"]')
  ).toContainText(registered);

  // the platform service itself, as the user: the hub's Services menu logs the browser in (OAuth)
  const service = await page.context().newPage();
  await service.goto('/services/kpl/');
  await expect(service).toHaveURL(/\/services\/kpl\/admin/);
  await service.close();
  const answer = await page.request.get(
    `/services/kpl/api/models?project=${PROJECT}`
  );
  expect(answer.status(), await answer.text()).toBe(200);
  const model = (await answer.json()).models.find(m => m.name === MODEL);
  expect(model).toBeDefined();
  const made = model.versions.find(v => v.lineage?.job_id === id);
  expect(made).toBeDefined();
  expect(made.files).toContain('model.npz');
  const job = await (
    await page.request.get(`/services/kpl/api/jobs/${id}?project=${PROJECT}`)
  ).json();
  expect(job.project).toBe(PROJECT);
  expect(job.outputs.model.registered).toBe(`model:${made.ref}`);

  // seed 001's last step under the hub: deploy the model from its view, drop a test image of
  // the dataset on the deployment's view, read the class it answers
  await page.locator('.jp-SideBar [data-id="kpl-lab-models"]').click();
  await page
    .locator(
      `#kpl-lab-models .kpl-model[data-name="${MODEL}"] .kpl-version[data-ref="${made.ref}"]`
    )
    .click();
  await page.locator(`#kpl-model-${MODEL} .kpl-deploy`).click();
  const dialog = page.locator('.jp-Dialog');
  await dialog.locator('.kpl-deploy-name').fill(DEPLOYMENT);
  await expect(dialog.locator('.kpl-deploy-replicas')).toHaveValue('1');
  await shot(page, testInfo, 'hub-deploy-dialog');
  await dialog.getByRole('button', { name: 'Deploy' }).click();
  const deployment = page.locator(`#kpl-deployment-${DEPLOYMENT}`);
  await expect(
    deployment.locator('.kpl-deployment-header h2 .kpl-badge')
  ).toHaveAttribute('data-state', 'ready', { timeout: 5 * 60 * 1000 });
  // a test image as the dataset viewer reads it: through the user's server, with the page's cookie
  const user = '/user/admin/kpl/api';
  const { versions } = await (
    await page.request.get(`${user}/datasets/${DATASET}`)
  ).json();
  const records = await (
    await page.request.get(
      `${user}/datasets/${DATASET}/versions/${versions[0].version}/records?part=test&limit=1`
    )
  ).json();
  const image = Object.values(records.records[0].fields).find(
    value =>
      value && value.$bytes && String(value.contentType).startsWith('image/')
  );
  const bytes = (await (await page.request.get(image.url)).body()).toString(
    'base64'
  );
  const predictedResponse = page.waitForResponse(response =>
    new URL(response.url()).pathname.endsWith(
      `/deployments/${DEPLOYMENT}/predict`
    )
  );
  const dataTransfer = await page.evaluateHandle(
    ([data, type]) => {
      const file = Uint8Array.from(atob(data), c => c.charCodeAt(0));
      const transfer = new DataTransfer();
      transfer.items.add(new File([file], 'digit', { type }));
      return transfer;
    },
    [bytes, image.contentType]
  );
  await deployment
    .locator('.kpl-dropzone')
    .dispatchEvent('drop', { dataTransfer });
  const response = await predictedResponse;
  expect(response.status(), await response.text()).toBe(200);
  const predicted = await response.json();
  expect(predicted.type).toBe('classification');
  await expect(deployment.locator('.kpl-class')).toHaveText(
    new RegExp(`^${predicted.class_name} \\d+\\.\\d%$`)
  );
  await expect(deployment.locator('.kpl-served-by')).toContainText(made.ref);
  await shot(page, testInfo, 'hub-deployment-view');
  // the deployment keeps serving, and the notebook running: the second member comes beside them
});

test('a second member joins the project and works beside the admin', async ({
  page,
  browser
}, testInfo) => {
  test.setTimeout(10 * 60 * 1000);
  // the admin adds her on the KPL admin page
  await logIn(page, 'admin');
  await page.goto('/services/kpl/admin');
  await page.fill('#new-user-name', MEMBER);
  await page.click('#new-user button');
  await expect(page.locator('#status')).toContainText(
    `Created user ${MEMBER}.`
  );
  await page.selectOption('#new-member-user', MEMBER);
  await page.selectOption('#new-member-project', PROJECT);
  await page.click('#new-member button');
  await expect(page.locator('#status')).toContainText(
    `Added ${MEMBER} to ${PROJECT}.`
  );

  // she logs in from her own browser while the admin's notebook (1 CPU) and deployment (0.5) run
  const hers = await browser.newContext({
    baseURL: testInfo.project.use.baseURL,
    viewport: testInfo.project.use.viewport
  });
  const her = await hers.newPage();
  await logIn(her, MEMBER);
  await her.goto('/hub/spawn');
  await expect(her.locator('#kpl-project option')).toHaveText([PROJECT]);
  // the machine as it is (2 cores here), the defaults capped at what is free now, saying so
  await expect(her.locator('.kpl-quotas')).toContainText(
    'this machine: 1.5 of 2 CPUs'
  );
  await expect(her.locator('input[name="small-cpu"]')).toHaveAttribute(
    'max',
    '2'
  );
  await expect(her.locator('input[name="small-cpu"]')).toHaveValue('0.5');
  await expect(her.locator('.kpl-profile .kpl-note')).toContainText(
    'cpu capped at 0.5: profile small asks 1 CPU, 0.5 free now'
  );
  await shot(her, testInfo, 'hub-member-spawn-form');
  await openLab(her, MEMBER);
  const datasets = await openPanel(her, 'kpl-lab-datasets');
  await expect(
    datasets.locator(`.kpl-dataset[data-name="${DATASET}"]`)
  ).toBeVisible();
  const users = await (
    await page.request.get(api('users'), { headers: auth })
  ).json();
  const running = users
    .filter(u => u.servers?.['']?.ready)
    .map(u => u.name)
    .sort();
  expect(running).toEqual(['admin', MEMBER]);
  await shot(her, testInfo, 'hub-member-lab');
  const stopped = await her.request.delete(api(`users/${MEMBER}/server`), {
    headers: auth
  });
  expect([202, 204]).toContain(stopped.status());
  await hers.close();

  // the admin takes the deployment down from the Services panel: its CPU is free for the next runs
  await openLab(page, 'admin');
  const services = await openPanel(page, 'kpl-lab-services');
  await services.locator(`.kpl-deployment[data-name="${DEPLOYMENT}"]`).click();
  const deployment = page.locator(`#kpl-deployment-${DEPLOYMENT}`);
  await deployment.locator('.kpl-delete').click();
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Delete' })
    .click();
  await expect(deployment).toHaveCount(0);
});

test('a pipeline from the classification template runs on the demo and trains its model', async ({
  page
}, testInfo) => {
  test.setTimeout(20 * 60 * 1000); // a real training on a shared 2-core machine
  const missingEdges = [];
  page.on('console', message => {
    if (message.text().includes("Couldn't create edge")) {
      missingEdges.push(message.text());
    }
  });
  await logIn(page, 'admin');
  await openLab(page, 'admin');
  const panel = await openPanel(page, 'kpl-lab-pipelines');
  await panel.locator('[data-template="classification"]').click();
  // the template asks for the project's dataset and algorithm: the demo's
  const dialog = page.locator('.jp-Dialog');
  await dialog
    .locator('select.kpl-TemplateDialog-dataset')
    .selectOption(DATASET);
  await dialog
    .locator('select.kpl-TemplateDialog-algorithm')
    .selectOption(ALGORITHM);
  await dialog.getByRole('button', { name: 'Create' }).click();

  const file = 'classification.kpl-pipeline.yaml';
  await expect(
    panel.locator(`.kpl-PipelinesPanel-files [data-path="${file}"]`)
  ).toBeVisible();
  const editor = page.locator('.kpl-PipelineEditor');
  // raw → images → extract → labels → save → train → model: every edge drawn
  await expect(editor.locator('.react-flow__node')).toHaveCount(7);
  await expect(editor.locator('.react-flow__edge')).toHaveCount(6);
  await expect(
    editor.locator('.react-flow__node[data-id="train"]')
  ).toContainText('train');
  await expect(editor.locator('.kpl-PipelineEditor-status')).toHaveText(
    'valid',
    { timeout: 60 * 1000 }
  );
  // the canvas gets the room of the sidebar, and the graph is fitted to it again
  await page.locator('.jp-SideBar [data-id="kpl-lab-pipelines"]').click();
  await expect(panel).toBeHidden();
  // every node whole on the canvas ...
  await expect
    .poll(async () => {
      const canvas = await editor.locator('.react-flow').boundingBox();
      const boxes = await editor
        .locator('.react-flow__node')
        .evaluateAll(nodes =>
          nodes.map(node => node.getBoundingClientRect().toJSON())
        );
      return boxes.every(
        box => box.left >= canvas.x && box.right <= canvas.x + canvas.width
      );
    })
    .toBe(true);
  // ... and labels readable: the graph is not shrunk below the editor's least fit zoom (0.75)
  const zoom = await editor
    .locator('.react-flow__viewport')
    .evaluate(node => new DOMMatrix(getComputedStyle(node).transform).a);
  expect(zoom).toBeGreaterThanOrEqual(0.75);
  await shot(page, testInfo, 'hub-pipeline-template');

  await editor.locator('.kpl-PipelineEditor-run').click();
  // no timing threshold: the training takes what the machine gives it; the run's end is in the
  // status line, with the reason of a failure
  const status = editor.locator('.kpl-PipelineEditor-status');
  await expect(status).toContainText(/run \w+: (succeeded|failed|stopped)/, {
    timeout: 15 * 60 * 1000
  });
  await expect(status).toContainText(': succeeded');
  for (const node of ['raw', 'images', 'extract', 'labels', 'save', 'train']) {
    await expect(
      editor.locator(
        `.react-flow__node[data-id="${node}"] .kpl-PipelineNode-state`
      )
    ).toContainText('succeeded');
  }
  // a model is no table: its nodes show no row count
  for (const node of ['train', 'model']) {
    await expect(
      editor.locator(
        `.react-flow__node[data-id="${node}"] .kpl-PipelineNode-state`
      )
    ).toHaveText('succeeded');
  }
  await shot(page, testInfo, 'hub-pipeline-run');
  // the run history: the run in the panel's recent runs, with its state
  await openPanel(page, 'kpl-lab-pipelines');
  await expect(
    panel.locator('.kpl-PipelinesPanel-runs [data-state="succeeded"]').first()
  ).toBeVisible({ timeout: 60 * 1000 });
  // the model the template names, made by this run's train job
  // (through the admin's server, with the page's cookie, as the Lab reads it)
  const answer = await page.request.get('/user/admin/kpl/api/models');
  expect(answer.status(), await answer.text()).toBe(200);
  expect((await answer.json()).models.map(m => m.name)).toContain('classifier');
  expect(missingEdges).toEqual([]);
});

test('a hyperparameter search starts from the Experiments panel and finds its best model', async ({
  page
}, testInfo) => {
  test.setTimeout(25 * 60 * 1000); // two trainings on a shared 2-core machine
  await logIn(page, 'admin');
  await openLab(page, 'admin');
  const panel = await openPanel(page, 'kpl-lab-experiments');
  await panel.locator('.kpl-ExperimentsPanel-new').click();
  const form = page.locator('.kpl-SearchForm');
  await form.locator('.kpl-SearchForm-algorithm').selectOption(ALGORITHM);
  const name = `${ALGORITHM}-search`;
  await expect(form.locator('.kpl-SearchForm-name')).toHaveValue(name);
  // the demo's dataset (its train and test parts; the newest, the pipeline's, is the default), and
  // parameter.yml's parameters to pick from
  const data = form.locator('.kpl-SearchForm-input[data-input="data"]');
  // the options come with the project's datasets, fetched after the form opens: wait for them
  const digitsOption = data
    .locator(`option[value^="dataset:${DATASET}:"]`)
    .first();
  await expect(digitsOption).toBeAttached({ timeout: 60 * 1000 });
  await data.selectOption(await digitsOption.getAttribute('value'));
  const lr = form.locator('.kpl-SearchForm-space tr[data-parameter="lr"]');
  await expect(lr).toBeVisible();
  await lr.locator('.kpl-SearchForm-searched').check();
  await lr.locator('.kpl-SearchForm-low').fill('0.001');
  await lr.locator('.kpl-SearchForm-high').fill('0.01');
  // the objective from the metrics the demo's training pushed (the first test's job)
  await expect(form.locator('#kpl-SearchForm-metrics option')).not.toHaveCount(
    0
  );
  await form.locator('.kpl-SearchForm-metric').fill('accuracy/train_accuracy');
  await form.locator('.kpl-SearchForm-direction').selectOption('maximize');
  await form.locator('.kpl-SearchForm-trials').fill('2');
  await form.locator('.kpl-SearchForm-parallelism').fill('1');
  // the whole form in the screenshot: a taller window for it
  const viewport = page.viewportSize();
  await page.setViewportSize({ width: viewport.width, height: 1250 });
  await shot(page, testInfo, 'hub-search-form');
  await page.setViewportSize(viewport);
  await form.locator('.kpl-SearchForm-start').click();

  const view = page.locator(`#kpl-experiment-${name}`);
  await expect(view).toBeVisible();
  // no timing threshold; a search that ends otherwise fails here at once, its reason in the view
  const state = view.locator('h2 .kpl-badge');
  await expect(state).toHaveText(/^(succeeded|failed|stopped)$/, {
    timeout: 20 * 60 * 1000
  });
  await expect(
    state,
    await view
      .locator('.kpl-reason')
      .allTextContents()
      .then(r => r.join(' '))
  ).toHaveText('succeeded');
  await expect(view.locator('.kpl-trials tbody tr')).toHaveCount(2);
  await expect(view.locator('.kpl-trials tr.kpl-best')).toHaveCount(1);
  await expect(view.locator('.kpl-experiment-best')).toContainText(
    'best: trial'
  );
  await expect(view.locator('.kpl-experiment-best')).toContainText(
    /lr=0\.0\d{5}\b/
  );
  await expect(view.locator('.kpl-experiment-best')).toContainText('model:');
  await expect(view.locator('button.kpl-stop')).toBeDisabled();
  const item = panel.locator(`.kpl-experiment[data-name="${name}"]`);
  await expect(item).toContainText('2/2 trials');
  await shot(page, testInfo, 'hub-search-view');
});
