import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import { execFileSync } from 'child_process';
import { getJSON, trainDetector, unique } from './detection';
import { shot } from './screenshots';

// An action that cannot happen fails at once, leaving time to delete the deployment.
test.use({ actionTimeout: 30_000 });

async function openModelsPanel(page: IJupyterLabPageFixture): Promise<Locator> {
  const panel = page.locator('#kpl-lab-models');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="kpl-lab-models"]').click();
  }
  await expect(panel.locator('.kpl-Panel-header h2')).toHaveText('Models');
  return panel;
}

test('the model view links lineage, shows the structure, sets an alias, deploys and sets a canary through its dialogs', async ({
  page
}, testInfo) => {
  test.setTimeout(480_000);
  const { dataset, jobId, ref, canary } = await trainDetector(page);
  const [name, version] = ref.split(':');
  const deployment = unique('models-ui');
  try {
    const panel = await openModelsPanel(page);
    const item = panel.locator(
      `.kpl-model[data-name="${name}"] .kpl-version[data-ref="${ref}"]`
    );
    await expect(item).toContainText(`job ${jobId}`, { timeout: 30_000 });
    await item.click();

    const view = page.locator(`#kpl-model-${name}`);
    await expect(view.locator('.kpl-model-version > h3')).toHaveText(ref);
    await expect(
      view.locator('.kpl-model-versions tr.kpl-mod-selected')
    ).toHaveAttribute('data-version', version);

    // Lineage: the job and the dataset version it trained on, metrics last as the server recorded them.
    const detail = await getJSON(
      page,
      `/kpl/api/models/${name}/versions/${version}`
    );
    const lineage = view.locator('.kpl-lineage');
    await expect(lineage.locator('.kpl-lineage-job')).toHaveText(jobId);
    await expect(lineage.locator('.kpl-lineage-dataset')).toHaveText(
      `${dataset.name}:${dataset.version}`
    );
    const metrics = Object.keys(detail.lineage.metrics);
    expect(metrics.length).toBeGreaterThan(0);
    await expect(lineage.locator('.kpl-lineage-metrics tr')).toHaveCount(
      metrics.length
    );
    for (const metric of metrics) {
      await expect(
        lineage.locator(`.kpl-lineage-metrics tr[data-metric="${metric}"]`)
      ).toBeVisible();
    }

    // Structure: each file the REST API describes, with as many layer rows as it lists.
    const structure = await getJSON(
      page,
      `/kpl/api/models/${name}/versions/${version}/structure`
    );
    const described = structure.files.find((f: any) => f.layers.length > 0);
    expect(described, JSON.stringify(structure)).toBeTruthy();
    const fileView = view.locator(
      `.kpl-structure-file[data-path="${described.path}"]`
    );
    // The server reads the layers with torch: the first read in a fresh server takes a while.
    await expect(
      fileView.locator('.kpl-structure-layers tbody tr')
    ).toHaveCount(described.layers.length, {
      timeout: 60_000
    });
    await expect(fileView.locator('h4')).toContainText('parameters');
    await expect(view.locator('.kpl-structure-file')).toHaveCount(
      structure.files.length
    );

    // The download is a plain link to the zip, with no token in it.
    const href = await page
      .locator(`#kpl-model-${name} .kpl-download`)
      .getAttribute('href');
    expect(href).toContain(
      `/kpl/api/models/${name}/versions/${version}/download`
    );
    expect(href).not.toContain('token');
    const zip = await page.request.get(href!);
    expect(zip.status()).toBe(200);
    expect(zip.headers()['content-type']).toBe('application/zip');
    expect((await zip.body()).subarray(0, 2).toString()).toBe('PK');

    // An alias set in the view is the registry's, and shows in the panel.
    await view.locator('.kpl-alias-input').fill('production');
    await view.locator('.kpl-alias-set').click();
    await expect(
      view.locator('.kpl-model-aliases .kpl-alias[data-alias="production"]')
    ).toContainText(version);
    expect(
      (await getJSON(page, `/kpl/api/models/${name}/aliases/production`))
        .version
    ).toBe(version);
    await expect(
      panel.locator(
        `.kpl-model[data-name="${name}"] .kpl-alias[data-alias="production"]`
      )
    ).toBeVisible();
    await shot(page, testInfo, 'model-view');

    // The lineage links open the dataset viewer and the job view.
    await lineage.locator('.kpl-lineage-dataset').click();
    await expect(
      page.locator(`#kpl-dataset-${dataset.name}-${dataset.version}`)
    ).toBeVisible();
    await item.click();
    await lineage.locator('.kpl-lineage-job').click();
    const jobView = page.locator(`#kpl-job-${jobId}`);
    await expect(jobView).toBeVisible();
    await expect(
      jobView.locator('.kpl-badge[data-state="succeeded"]').first()
    ).toBeVisible();

    // Deploy… asks the name and replicas, creates the deployment and opens its view.
    await item.click();
    await page.locator(`#kpl-model-${name} .kpl-deploy`).click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText(`Deploy ${ref}`);
    // The dialog focuses its first field as it opens, and keeps the caret where the user moves it (replicas next).
    await expect(dialog.locator('.kpl-deploy-name')).toBeFocused();
    // Replicas out of range keep Deploy disabled; a bad name opens the dialog again, saying so.
    await dialog.locator('.kpl-deploy-replicas').fill('0');
    await expect(dialog.getByRole('button', { name: 'Deploy' })).toBeDisabled();
    await dialog.locator('.kpl-deploy-replicas').fill('1');
    await dialog.locator('.kpl-deploy-name').fill('-bad');
    await dialog.getByRole('button', { name: 'Deploy' }).click();
    await expect(dialog.locator('.kpl-dialog-problem')).toContainText(
      'deployment name "-bad"'
    );
    await expect(dialog.locator('.kpl-deploy-replicas')).toHaveValue('1');
    await shot(page, testInfo, 'deploy-dialog');
    await dialog.locator('.kpl-deploy-name').fill(deployment);
    await dialog.getByRole('button', { name: 'Deploy' }).click();
    const deploymentView = page.locator(`#kpl-deployment-${deployment}`);
    await expect(
      deploymentView.locator('.kpl-deployment-header h2')
    ).toContainText(deployment);
    await expect(
      deploymentView.locator('.kpl-deployment-header h2 .kpl-badge')
    ).toHaveAttribute('data-state', 'ready', {
      timeout: 120_000
    });
    await expect(
      deploymentView
        .locator('.kpl-versions tr[data-role="production"] td')
        .first()
    ).toHaveText(ref);

    // Canary… from the second version's view: the deployment serves it to 25 % of the requests.
    const canaryItem = panel.locator(
      `.kpl-model[data-name="${name}"] .kpl-version[data-ref="${canary}"]`
    );
    await canaryItem.click();
    await expect(view.locator('.kpl-model-version > h3')).toHaveText(canary);
    await page.locator(`#kpl-model-${name} .kpl-canary`).click();
    await expect(dialog).toContainText(`Canary ${canary}`);
    await expect(dialog.locator('.kpl-canary-weight')).toBeFocused();
    await dialog.locator('.kpl-canary-deployment').selectOption(deployment);
    await dialog.locator('.kpl-canary-weight').fill('25');
    await dialog.getByRole('button', { name: 'Set canary' }).click();
    const canaryRow = deploymentView.locator(
      '.kpl-versions tr[data-role="canary"]'
    );
    await expect(canaryRow).toContainText(canary);
    await expect(canaryRow).toContainText('25%');
    expect(
      (await getJSON(page, `/kpl/api/deployments/${deployment}`))
        .canary_model_version
    ).toBe(canary);

    // Deleting the served version is refused with the server's sentence.
    await item.click();
    await page.locator(`#kpl-model-${name} .kpl-delete`).click();
    await expect(dialog).toContainText(`Delete ${ref}?`);
    await dialog.getByRole('button', { name: 'Delete' }).click();
    await expect(page.locator('.jp-Dialog')).toContainText(
      `is served by deployment '${deployment}'`
    );
    await page
      .locator('.jp-Dialog')
      .getByRole('button', { name: 'Close' })
      .click();
    expect(
      (
        await page.request.get(`/kpl/api/models/${name}/versions/${version}`)
      ).status()
    ).toBe(200);
  } finally {
    // Replicas outlive the test server: a failed run must not leave its replica serving.
    await page.request.delete(`/kpl/api/deployments/${deployment}`);
  }
});

test('a model uploaded from the panel opens with its files, and Delete version removes it', async ({
  page
}) => {
  const name = unique('uploaded');
  const panel = await openModelsPanel(page);
  await panel.locator('.kpl-upload-name').fill(name);
  // A zip of a model folder, made in the page as a user's file would be picked.
  const archive = execFileSync('python3', [
    '-c',
    'import io, sys, zipfile\n' +
      'b = io.BytesIO()\n' +
      'with zipfile.ZipFile(b, "w") as z:\n' +
      '    z.writestr("model.json", "{\\"classes\\": [\\"cat\\", \\"dog\\"]}")\n' +
      '    z.writestr("labels.txt", "cat\\ndog\\n")\n' +
      'sys.stdout.buffer.write(b.getvalue())'
  ]);
  await panel.locator('.kpl-upload-input').setInputFiles({
    name: 'folder.zip',
    mimeType: 'application/zip',
    buffer: archive
  });
  await expect(panel.locator('.kpl-upload-status')).toContainText(`${name}:`);
  await expect(panel.locator('.kpl-upload-status')).toContainText('2 files');

  const view = page.locator(`#kpl-model-${name}`);
  await expect(view.locator('.kpl-lineage')).toContainText(
    'Uploaded, not made by a job.'
  );
  await expect(view.locator('.kpl-structure-file')).toHaveCount(2);
  await expect(
    view.locator('.kpl-structure-file[data-path="labels.txt"] h4')
  ).toContainText('file · 8 B');
  await expect(
    panel.locator(`.kpl-model[data-name="${name}"] .kpl-version`)
  ).toHaveCount(1);

  // The search box asks the server for the models whose name or description matches.
  const search = panel.locator('.kpl-search input');
  await search.fill(name);
  await expect(panel.locator('.kpl-model')).toHaveCount(1);
  await expect(panel.locator('.kpl-model')).toHaveAttribute('data-name', name);
  await search.fill(`${name}-no-such`);
  await expect(panel.locator('.kpl-empty')).toHaveText('No model matches.');
  await search.fill('');
  await expect(panel.locator(`.kpl-model[data-name="${name}"]`)).toHaveCount(1);

  await page.locator(`#kpl-model-${name} .kpl-delete`).click();
  await page
    .locator('.jp-Dialog')
    .getByRole('button', { name: 'Delete' })
    .click();
  await expect(view).toHaveCount(0);
  await expect(panel.locator(`.kpl-model[data-name="${name}"]`)).toHaveCount(0);
  expect((await page.request.get(`/kpl/api/models/${name}`)).status()).toBe(
    404
  );
});
