import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';

import { shot } from './screenshots';

const ARCHIVES = mkdtempSync(path.join(tmpdir(), 'kpl-ui-experiments-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_archives.py'),
  ARCHIVES
]);

/**
 * Upload the tiny algorithm and a dataset, then create an experiment over `lr` with the given fixed parameters.
 */
async function createExperiment(
  page: IJupyterLabPageFixture,
  parameters: Record<string, number>,
  trials: number
): Promise<string> {
  const suffix = `${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;
  const dataset = `experiment-data-${suffix}`;
  const algorithm = `experiment-tiny-${suffix}`;
  const name = `search-${suffix}`;
  const uploads: [string, string][] = [
    [
      `/kpl/api/datasets?name=${dataset}&format=imagefolder&filename=shapes.zip`,
      'shapes.zip'
    ],
    [
      `/kpl/api/algorithms?name=${algorithm}&filename=tiny-algorithm.zip`,
      'tiny-algorithm.zip'
    ]
  ];
  for (const [url, file] of uploads) {
    const response = await page.request.post(url, {
      data: readFileSync(path.join(ARCHIVES, file)),
      headers: { 'Content-Type': 'application/zip' }
    });
    expect(response.status(), await response.text()).toBe(201);
  }
  const created = await page.request.post('/kpl/api/experiments', {
    data: {
      name,
      algorithm,
      inputs: { data: dataset },
      parameters,
      space: { lr: { type: 'float', low: 0.01, high: 1.0, log: true } },
      objective: { metric: 'loss/train_loss', direction: 'minimize' },
      budget: { trials },
      sampler: { name: 'random', seed: 3 }
    }
  });
  expect(created.status(), await created.text()).toBe(201);
  return name;
}

async function openExperiment(page: IJupyterLabPageFixture, name: string) {
  const panel = page.locator('#kpl-lab-experiments');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="kpl-lab-experiments"]').click();
  }
  return panel.locator(`.kpl-experiment[data-name="${name}"]`);
}

test('the Experiments panel opens a search with its trials table and optimisation history', async ({
  page
}, testInfo) => {
  test.setTimeout(180_000);
  const name = await createExperiment(page, { steps: 3, delay: 0 }, 4);
  await expect
    .poll(
      async () =>
        (await (await page.request.get(`/kpl/api/experiments/${name}`)).json())
          .state,
      {
        timeout: 150_000
      }
    )
    .toBe('succeeded');
  const experiment = await (
    await page.request.get(`/kpl/api/experiments/${name}`)
  ).json();

  const item = await openExperiment(page, name);
  await expect(item).toContainText('4/4 trials');
  await expect(item.locator('.kpl-badge')).toHaveText('succeeded');
  await item.click();

  const view = page.locator(`#kpl-experiment-${name}`);
  await expect(view.locator('.kpl-trials tbody tr')).toHaveCount(4);
  await expect(view.locator('.kpl-trials tr.kpl-best')).toHaveAttribute(
    'data-trial',
    String(experiment.best_trial)
  );
  await expect(view.locator('.kpl-trials tr.kpl-best td').nth(1)).toHaveText(
    'complete'
  );
  // the history: one point per complete trial, the objective and the best value so far
  const chart = view.locator('.kpl-chart[data-figure="optimisation history"]');
  await expect(chart.locator('canvas')).toBeVisible();
  await expect(chart.locator('.u-legend .u-series')).toHaveCount(3);
  await expect(chart).toHaveAttribute('data-points', '4');
  await expect(view.locator('button.kpl-stop')).toBeDisabled();
  await expect(view.locator('button.kpl-resume')).toBeDisabled();
  await shot(page, testInfo, 'experiment-view');

  // a trial's job link opens its job view
  const jobId = experiment.trials[0].job_id;
  await view.locator(`a.kpl-trial-job:text-is("${jobId}")`).click();
  await expect(page.locator(`#kpl-job-${jobId}`)).toBeVisible();
});

test('Stop and Resume in the experiment view stop and restart a running search', async ({
  page
}) => {
  test.setTimeout(120_000);
  const name = await createExperiment(page, { steps: 60, delay: 1 }, 2);
  await (await openExperiment(page, name)).click();
  const view = page.locator(`#kpl-experiment-${name}`);
  const state = view.locator('h2 .kpl-badge');
  await expect(state).toHaveText('running');
  await expect(view.locator('.kpl-trials tbody tr').first()).toBeVisible({
    timeout: 30_000
  });
  await expect(view.locator('button.kpl-resume')).toBeDisabled();
  await view.locator('button.kpl-stop').click();
  await expect(state).toHaveText('stopped');
  await expect(
    view.locator('.kpl-trials tbody tr[data-trial="0"] .kpl-badge')
  ).toHaveText('stopped');
  await expect(view.locator('button.kpl-stop')).toBeDisabled();
  await view.locator('button.kpl-resume').click();
  await expect(state).toHaveText('running');
  await expect(view.locator('button.kpl-stop')).toBeEnabled();
  const stopped = await page.request.post(`/kpl/api/experiments/${name}/stop`);
  expect(stopped.status(), await stopped.text()).toBe(200);
});
