import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';

const ARCHIVES = mkdtempSync(path.join(tmpdir(), 'kpl-ui-compare-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_archives.py'),
  ARCHIVES
]);

/**
 * Upload the tiny algorithm and a dataset, then run two jobs that differ in `lr` to the end.
 */
async function twoJobs(page: IJupyterLabPageFixture): Promise<string[]> {
  const suffix = `${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;
  const dataset = `compare-data-${suffix}`;
  const algorithm = `compare-tiny-${suffix}`;
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
  const ids: string[] = [];
  for (const lr of [0.1, 0.5]) {
    const response = await page.request.post('/kpl/api/jobs', {
      data: {
        algorithm,
        inputs: { data: dataset },
        parameters: { steps: 5, delay: 0, lr }
      }
    });
    expect(response.status(), await response.text()).toBe(201);
    ids.push((await response.json()).id);
  }
  for (const id of ids) {
    await expect
      .poll(
        async () =>
          (await (await page.request.get(`/kpl/api/jobs/${id}`)).json()).state,
        { timeout: 60_000 }
      )
      .toBe('succeeded');
  }
  return ids;
}

test('two jobs ticked in the Jobs panel open side by side with differences highlighted', async ({
  page
}) => {
  const ids = await twoJobs(page);
  const panel = page.locator('#kpl-lab-jobs');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="kpl-lab-jobs"]').click();
  }
  const button = panel.locator('button.kpl-compare-button');
  await expect(button).toBeDisabled();
  for (const id of ids) {
    await panel
      .locator(`.kpl-job[data-id="${id}"] input.kpl-compare-pick`)
      .check();
  }
  await expect(button).toHaveText('Compare 2 jobs');
  await button.click();

  const view = page.locator(`#kpl-compare-${ids.join('-')}`);
  await expect(view.locator('.kpl-compare-table thead th')).toHaveText([
    '',
    ...ids
  ]);
  await expect(view.locator('tr[data-key="lr"]')).toHaveClass('kpl-differs');
  await expect(view.locator('tr[data-key="lr"] td')).toHaveText([
    '0.1000',
    '0.5000'
  ]);
  await expect(view.locator('tr[data-key="steps"]')).not.toHaveClass(
    'kpl-differs'
  );
  await expect(
    view.locator('tr[data-key="loss/train_loss final"]')
  ).toHaveClass('kpl-differs');
  // one chart per shared metric, one line per job (uPlot's legend lists the x axis, then each job)
  const chart = view.locator('.kpl-chart[data-figure="loss/train_loss"]');
  await expect(chart.locator('canvas')).toBeVisible();
  await expect(chart.locator('.u-legend .u-series')).toHaveCount(3);
  await expect(chart).toHaveAttribute('data-points', '5');
});
