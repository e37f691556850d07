// A new user's first hour through the hub: log in, start a notebook, train the demo, find the model.
const { test, expect } = require('@playwright/test');
const { api, auth, logIn, shot } = require('./hub');

// what `kpl-lab up` adds to project demo (kpl_lab/hub/up.py), of which the admin is the member
const PROJECT = 'demo';
const DATASET = 'digits';
const ALGORITHM = 'mlp-classification'; // numpy: the run command installs nothing more
const MODEL = `${ALGORITHM}-model`;

test('the sample algorithm trains with every default, and its model is the user’s', async ({
  page
}, testInfo) => {
  test.setTimeout(20 * 60 * 1000); // a real training on a shared 2-core machine
  await logIn(page, 'admin');
  await page.goto('/hub/spawn');
  await expect(page.locator('#kpl-project option')).toHaveText([PROJECT]);
  await page.getByRole('button', { name: /start/i }).click();
  await page.waitForURL(/\/user\/admin\/lab/, { timeout: 150 * 1000 });

  const algorithms = page.locator('#kpl-lab-algorithms');
  await page
    .locator('.jp-SideBar [data-id="kpl-lab-algorithms"]')
    .click({ timeout: 90 * 1000 });
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
  await dialog.locator('.kpl-deploy-name').fill('digits');
  await expect(dialog.locator('.kpl-deploy-replicas')).toHaveValue('1');
  await shot(page, testInfo, 'hub-deploy-dialog');
  await dialog.getByRole('button', { name: 'Deploy' }).click();
  const deployment = page.locator('#kpl-deployment-digits');
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
    new URL(response.url()).pathname.endsWith('/deployments/digits/predict')
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
  await deployment.locator('.kpl-delete').click();
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Delete' })
    .click();
  await expect(deployment).toHaveCount(0);

  const stopped = await page.request.delete(api('users/admin/server'), {
    headers: auth
  });
  expect([202, 204]).toContain(stopped.status());
});
