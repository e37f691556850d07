import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';

import { shot } from './screenshots';

/**
 * The archives the tests upload, written once by fixtures/make_archives.py.
 */
const ARCHIVES = mkdtempSync(path.join(tmpdir(), 'kpl-ui-archives-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_archives.py'),
  ARCHIVES
]);
const archive = (name: string) => path.join(ARCHIVES, name);

/**
 * A name no other test (or earlier run on the same server) has used.
 */
const unique = (prefix: string) =>
  `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;

async function openPanel(
  page: IJupyterLabPageFixture,
  id: string
): Promise<Locator> {
  const panel = page.locator(`#${id}`);
  if (!(await panel.isVisible())) {
    await page.locator(`.jp-SideBar [data-id="${id}"]`).click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

/**
 * Register a dataset and the tiny algorithm through the REST API, as a user's CLI would.
 */
async function registerFixtures(
  page: IJupyterLabPageFixture
): Promise<{ dataset: string; algorithm: string }> {
  const dataset = unique('digits');
  const algorithm = unique('tiny');
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
      data: readFileSync(archive(file)),
      headers: { 'Content-Type': 'application/zip' }
    });
    expect(response.status(), await response.text()).toBe(201);
  }
  return { dataset, algorithm };
}

test('each KPL panel opens from the left sidebar and from the palette', async ({
  page
}, testInfo) => {
  for (const [id, title] of [
    ['kpl-lab-datasets', 'Datasets'],
    ['kpl-lab-algorithms', 'Algorithms'],
    ['kpl-lab-jobs', 'Jobs'],
    ['kpl-lab-services', 'Services']
  ]) {
    const panel = await openPanel(page, id);
    await expect(panel.locator('.kpl-Panel-header h2')).toHaveText(title);
    await expect(panel.locator('.kpl-error')).toHaveText('');
  }
  // The palette command shows the Datasets panel again.
  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#modal-command-palette');
  await palette.locator('.lm-CommandPalette-input').fill('Open KPL Datasets');
  await palette
    .locator('.lm-CommandPalette-item', { hasText: 'Open KPL Datasets' })
    .click();
  await expect(page.locator('#kpl-lab-datasets')).toBeVisible();
  await page.screenshot({ path: testInfo.outputPath('panels.png') });
});

test('uploading a zip shows its thumbnails and class counts', async ({
  page
}, testInfo) => {
  const name = unique('shapes');
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(name);
  await panel.locator('.kpl-upload-format select').selectOption('imagefolder');
  await panel.locator('.kpl-upload-input').setInputFiles(archive('shapes.zip'));

  const viewer = page.locator('.kpl-DatasetViewer');
  await expect(viewer.locator('.kpl-dataset-info h2')).toContainText(
    `${name}:`
  );
  const thumbnails = viewer.locator('.kpl-record img.kpl-thumbnail');
  await expect(thumbnails).toHaveCount(6);
  // Every thumbnail was served and decoded (not a broken image); they load lazily when seen.
  await expect
    .poll(() =>
      thumbnails.evaluateAll(images => {
        images.forEach(image => image.scrollIntoView());
        return images.filter(
          image => (image as HTMLImageElement).naturalWidth > 0
        ).length;
      })
    )
    .toBe(6);
  await viewer.locator('.kpl-dataset-info').scrollIntoViewIfNeeded();
  await expect(viewer.locator('.kpl-position')).toHaveText('1–6 of 6');
  await expect(viewer.locator('.kpl-bar')).toHaveCount(2);
  await expect(
    viewer.locator('.kpl-bar[data-class="red"] .kpl-bar-count')
  ).toHaveText('3');
  await expect(
    panel.locator(`.kpl-dataset[data-name="${name}"]`)
  ).toBeVisible();
  await expect(panel.locator('.kpl-upload-status')).toContainText('6 records');
  await shot(page, testInfo, 'dataset-viewer');
});

test('a slow upload shows its progress, then the import', async ({ page }) => {
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(unique('slow'));
  await panel.locator('.kpl-upload-format select').selectOption('import');
  // About 2 s of upload at 256 KB/s; the browser reports its own upload events.
  const cdp = await page.context().newCDPSession(page.page);
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false,
    latency: 0,
    downloadThroughput: -1,
    uploadThroughput: 256 * 1024
  });
  await panel.locator('.kpl-upload-input').setInputFiles(archive('large.zip'));
  const progress = panel.locator('.kpl-upload-progress');
  await expect(progress).toBeVisible();
  // Seen part way: more than nothing sent, less than everything.
  await expect
    .poll(() =>
      progress.evaluate(node => {
        const value = (node as HTMLProgressElement).value;
        return value > 0 && value < 1;
      })
    )
    .toBe(true);
  await expect(panel.locator('.kpl-upload-status')).toContainText('1 records');
  await expect(progress).toBeHidden();
  await cdp.detach();
});

test('an upload that is not an archive is refused with the file named', async ({
  page
}) => {
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(unique('broken'));
  await panel.locator('.kpl-upload-input').setInputFiles({
    name: 'notes.zip',
    mimeType: 'application/zip',
    buffer: Buffer.from('these are notes, not a zip archive')
  });
  const status = panel.locator('.kpl-upload-status');
  await expect(status).toHaveClass(/kpl-error/);
  await expect(status).toContainText('Upload of notes.zip failed');
  await expect(panel.locator('.kpl-upload-progress')).toBeHidden();
});

test('files imported as they are show their text on demand', async ({
  page
}) => {
  const name = unique('files');
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(name);
  await panel.locator('.kpl-upload-format select').selectOption('import');
  await panel.locator('.kpl-upload-input').setInputFiles(archive('files.zip'));

  const viewer = page.locator('.kpl-DatasetViewer', {
    has: page.locator('h2', { hasText: `${name}:` })
  });
  await expect(viewer.locator('.kpl-record')).toHaveCount(3);
  await expect(viewer.locator('.kpl-thumbnail')).toHaveCount(0);
  for (const [path, text] of [
    ['notes/readme.txt', 'second line'],
    ['notes/labels.json', '"classes": ["cat", "dog"]'],
    ['notes/cat1.xml', '<name>cat</name>']
  ]) {
    const card = viewer.locator('.kpl-record', { hasText: path });
    await card.locator('.kpl-text-field summary').click();
    await expect(card.locator('.kpl-text-field pre')).toContainText(text);
  }
});

test('dropping a Pascal VOC zip draws its boxes with labels', async ({
  page
}, testInfo) => {
  const name = unique('boxes');
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(name);
  await panel.locator('.kpl-upload-format select').selectOption('voc');
  const dataTransfer = await page.evaluateHandle(
    ({ base64, fileName }) => {
      const bytes = Uint8Array.from(atob(base64), c => c.charCodeAt(0));
      const transfer = new DataTransfer();
      transfer.items.add(
        new File([bytes], fileName, { type: 'application/zip' })
      );
      return transfer;
    },
    {
      base64: readFileSync(archive('boxes.zip')).toString('base64'),
      fileName: 'boxes.zip'
    }
  );
  await panel.dispatchEvent('dragover', { dataTransfer });
  await panel.dispatchEvent('drop', { dataTransfer });

  const viewer = page.locator('.kpl-DatasetViewer', {
    has: page.locator('h2', { hasText: `${name}:` })
  });
  await expect(viewer.locator('.kpl-record')).toHaveCount(2);
  const boxes = viewer.locator('svg.kpl-boxes .kpl-box');
  await expect(boxes).toHaveCount(2);
  await expect(viewer.locator('svg.kpl-boxes text')).toHaveText(['cat', 'dog']);
  await expect(viewer.locator('svg.kpl-boxes').first()).toHaveAttribute(
    'viewBox',
    '0 0 64 48'
  );
  await expect(viewer.locator('.kpl-bar')).toHaveCount(2);
  await shot(page, testInfo, 'dataset-viewer-boxes');
});

test('a COCO zip shows its polygons filled over the image', async ({
  page
}) => {
  const name = unique('coco');
  const panel = await openPanel(page, 'kpl-lab-datasets');
  await panel.locator('.kpl-upload-name').fill(name);
  await panel.locator('.kpl-upload-format select').selectOption('coco');
  await panel.locator('.kpl-upload-input').setInputFiles(archive('coco.zip'));

  const viewer = page.locator('.kpl-DatasetViewer', {
    has: page.locator('h2', { hasText: `${name}:` })
  });
  const box = viewer.locator('svg.kpl-boxes .kpl-box[data-name="bird"]');
  await expect(box).toHaveCount(1);
  await expect(box.locator('polygon')).toHaveAttribute(
    'points',
    '10,10 50,10 30,40'
  );
  await expect(box.locator('rect')).toHaveAttribute('width', '40');
  await expect(viewer.locator('svg.kpl-boxes')).toHaveAttribute(
    'viewBox',
    '0 0 80 60'
  );
});

test('a job submitted from the form shows its curve growing and ends', async ({
  page
}, testInfo) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const panel = await openPanel(page, 'kpl-lab-algorithms');
  const item = panel.locator(`.kpl-algorithm[data-name="${algorithm}"]`);
  await item.locator('.kpl-item-title').first().click();
  await expect(
    item.locator('.kpl-function[data-function="train"]')
  ).toContainText('cpu 1 · memory 512 MB');
  await expect(
    item.locator('.kpl-function[data-function="train"]')
  ).toContainText('data (training dataset)');
  await shot(page, testInfo, 'algorithms-panel');
  await item.locator('.kpl-submit-open[data-function="train"]').click();

  // The form is JupyterLab's FormComponent (rjsf): fields have ids root_<group>_<name>.
  const form = page.locator('.kpl-SubmitJobForm');
  const input = form.locator('#root_inputs_data');
  await expect(input).toBeVisible();
  const choice = input.locator('option', { hasText: `dataset:${dataset}:` });
  await input.selectOption((await choice.getAttribute('value')) ?? '');
  // A bad parameter: the server's error appears next to that field.
  await form.locator('#root_parameters_steps').fill('2.5');
  await form.locator('button.kpl-submit').click();
  const stepsRow = form.locator(
    '.form-group:has(> .jp-FormGroup-content > .jp-inputFieldWrapper #root_parameters_steps)'
  );
  await expect(stepsRow.locator('.validationErrors')).toContainText(
    'expected an integer'
  );
  await expect(stepsRow.locator('.jp-errorIndicator')).toHaveCount(1);
  await shot(page, testInfo, 'submit-form');

  await form.locator('#root_parameters_steps').fill('60');
  await form.locator('#root_parameters_delay').fill('0.1');
  await form.locator('button.kpl-submit').click();

  const view = page.locator('.kpl-JobView');
  await expect(view).toBeVisible();
  const chart = view.locator('.kpl-chart[data-figure="loss"]');
  await expect(chart.locator('canvas')).toBeVisible();
  const points = async () =>
    Number((await chart.getAttribute('data-points')) ?? 0);
  await expect.poll(points).toBeGreaterThan(0);
  const first = await points();
  await expect.poll(points).toBeGreaterThan(first);
  await expect(view.locator('.kpl-log')).toContainText('step 0: loss');
  await shot(page, testInfo, 'job-view');

  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'succeeded',
    { timeout: 60_000 }
  );
  await expect.poll(points).toBe(60);
  await expect(view.locator('.kpl-log')).toContainText('step 59: loss');
  await expect(view.locator('.kpl-progress-text')).toHaveText('100%');
  await expect(view.locator('button.kpl-stop')).toHaveCount(0); // an ended job shows no Stop
  // The followed log shows its last line.
  const hidden = () =>
    view
      .locator('.kpl-log')
      .evaluate(log => log.scrollHeight - log.scrollTop - log.clientHeight);
  await expect.poll(hidden).toBeLessThan(2);
  await expect(
    view.locator('.kpl-job-details tr[data-key="limits"]')
  ).toContainText('"memory":512');
});

test('a curve of 100 000 points reaches the chart downsampled', async ({
  page
}) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const response = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm,
      inputs: { data: dataset },
      parameters: { steps: 100000, delay: 0 }
    }
  });
  expect(response.status(), await response.text()).toBe(201);
  const job = await response.json();
  const asked: number[] = [];
  page.on('request', request => {
    const url = new URL(request.url());
    if (url.pathname.endsWith(`/kpl/api/jobs/${job.id}/metrics`)) {
      asked.push(Number(url.searchParams.get('max_points')));
    }
  });
  await page.evaluate(
    id => window.jupyterapp.commands.execute('kpl-lab:open-job', { id }),
    job.id
  );
  const view = page.locator(`#kpl-job-${job.id}`);
  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'succeeded',
    { timeout: 120_000 }
  );
  const chart = view.locator('.kpl-chart[data-figure="loss"]');
  // The final answer holds at most max_points (lowest and highest of each bucket), far fewer than 100 000.
  await expect
    .poll(async () => Number(await chart.getAttribute('data-points')))
    .toBeGreaterThan(100);
  const shown = Number(await chart.getAttribute('data-points'));
  expect(asked.length).toBeGreaterThan(0);
  expect(shown).toBeLessThanOrEqual(Math.max(...asked));
  expect(Math.max(...asked)).toBeLessThan(100000);
});

test('a running job stops from its view and the Jobs panel shows it', async ({
  page
}, testInfo) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const response = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm,
      inputs: { data: dataset },
      parameters: { steps: 100000, delay: 0.2 }
    }
  });
  expect(response.status(), await response.text()).toBe(201);
  const job = await response.json();

  const panel = await openPanel(page, 'kpl-lab-jobs');
  const item = panel.locator(`.kpl-job[data-id="${job.id}"]`);
  await expect(item).toHaveAttribute('data-state', 'running');
  await expect(item.locator('.kpl-progress')).toBeVisible();
  await item.click();

  const view = page.locator(`#kpl-job-${job.id}`);
  await expect(view.locator('.kpl-log')).toContainText('step 1: loss');
  await expect(view.locator('.kpl-progress-text')).toContainText('left');
  await shot(page, testInfo, 'jobs-panel');
  await view.locator('button.kpl-stop').click();
  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'stopped'
  );
  await expect(item).toHaveAttribute('data-state', 'stopped');
  await expect(view.locator('button.kpl-stop')).toHaveCount(0);

  // Re-run starts a new job with the same request, in its own view; stop it too.
  await view.locator('button.kpl-rerun').click();
  const rerun = page.locator('.kpl-JobView:visible');
  await expect(rerun).not.toHaveId(`kpl-job-${job.id}`);
  await expect(
    rerun.locator('.kpl-job-details tr[data-key="parameters"]')
  ).toContainText('"steps":100000');
  await expect(rerun.locator('.kpl-log')).toContainText('step 0: loss');
  await rerun.locator('button.kpl-stop').click();
  await expect(rerun.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'stopped'
  );
});

/**
 * Resolve when JupyterLab has saved a layout holding every piece of text (the save is asynchronous:
 * a reload before it restores the layout before).
 */
function layoutSaved(
  page: IJupyterLabPageFixture,
  ...pieces: string[]
): Promise<unknown> {
  return page.waitForRequest(
    request =>
      request.method() === 'PUT' &&
      request.url().includes('/api/workspaces') &&
      pieces.every(piece => (request.postData() ?? '').includes(piece))
  );
}

test('an ended job opens with no Stop and its log on the last line', async ({
  page
}) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const response = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm,
      inputs: { data: dataset },
      parameters: { steps: 80, delay: 0 }
    }
  });
  expect(response.status(), await response.text()).toBe(201);
  const job = await response.json();
  const state = async () =>
    (await (await page.request.get(`/kpl/api/jobs/${job.id}`)).json()).state;
  await expect.poll(state, { timeout: 120_000 }).toBe('succeeded');

  // The whole log arrives before the view is on screen: it still opens on its last line.
  await page.evaluate(
    id => window.jupyterapp.commands.execute('kpl-lab:open-job', { id }),
    job.id
  );
  const view = page.locator(`#kpl-job-${job.id}`);
  await expect(view.locator('.kpl-log')).toContainText('step 79: loss');
  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'succeeded'
  );
  await expect(view.locator('button.kpl-stop')).toHaveCount(0);
  await expect(view.locator('button.kpl-rerun')).toBeVisible();
  const below = () =>
    view
      .locator('.kpl-log')
      .evaluate(log => log.scrollHeight - log.scrollTop - log.clientHeight);
  await expect.poll(below).toBeLessThan(2);
  expect(
    await view
      .locator('.kpl-log')
      .evaluate(log => log.scrollHeight > log.clientHeight)
  ).toBe(true);

  // After a reload the job view comes back behind a dataset view, and its log arrives while
  // it is hidden: shown again, it is on its last line.
  const version = (
    await (await page.request.get(`/kpl/api/datasets/${dataset}`)).json()
  ).versions[0].version;
  const saved = layoutSaved(page, `"current":"kpl-lab-dataset:${dataset}:`);
  await page.evaluate(
    ([name, version]) =>
      window.jupyterapp.commands.execute('kpl-lab:open-dataset', {
        name,
        version
      }),
    [dataset, version]
  );
  await saved;
  await page.page.reload();
  await expect(view.locator('.kpl-log')).toContainText('step 79: loss', {
    timeout: 30_000
  });
  await expect(view).toBeHidden();
  await page.locator('.lm-TabBar-tab', { hasText: `Job ${job.id}` }).click();
  await expect(view).toBeVisible();
  await expect.poll(below).toBeLessThan(2);
});

test('open job and dataset views come back after a reload', async ({
  page
}) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const version = (
    await (await page.request.get(`/kpl/api/datasets/${dataset}`)).json()
  ).versions[0].version;
  const response = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm,
      inputs: { data: dataset },
      parameters: { steps: 3, delay: 0 }
    }
  });
  expect(response.status(), await response.text()).toBe(201);
  const job = await response.json();
  const saved = layoutSaved(
    page,
    `"kpl-lab-dataset:${dataset}:`,
    `"current":"kpl-lab-job:${job.id}"`
  );
  await page.evaluate(
    ([name, version, id]) =>
      window.jupyterapp.commands
        .execute('kpl-lab:open-dataset', { name, version })
        .then(() =>
          window.jupyterapp.commands.execute('kpl-lab:open-job', { id })
        ),
    [dataset, version, job.id]
  );
  const datasetView = page.locator(`#kpl-dataset-${dataset}-${version}`);
  const jobView = page.locator(`#kpl-job-${job.id}`);
  await expect(jobView.locator('.kpl-log')).toContainText('step 0: loss');

  await saved;
  // Playwright's own reload: Galata's waits for a launcher, and the restored layout has none.
  await page.page.reload();
  await expect(jobView.locator('.kpl-log')).toContainText('step 0: loss', {
    timeout: 30_000
  });
  await page.locator('.lm-TabBar-tab', { hasText: `${dataset}:` }).click();
  await expect(datasetView.locator('.kpl-dataset-info h2')).toContainText(
    `${dataset}:`
  );
});

test('a queued job says why in the Jobs panel and its view; the form starts at what is free', async ({
  page
}) => {
  const { dataset, algorithm } = await registerFixtures(page);
  const devices = await (await page.request.get('/kpl/api/devices')).json();
  const total: number = devices.capacity.cpu - devices.used.cpu;
  // A job holding all but half a CPU: the tiny algorithm's 1 CPU does not fit now.
  const blocking = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm,
      inputs: { data: dataset },
      parameters: { steps: 100000, delay: 0.2 },
      resources: { cpu: total - 0.5 }
    }
  });
  expect(blocking.status(), await blocking.text()).toBe(201);
  const blocker = await blocking.json();
  const waiting = await page.request.post('/kpl/api/jobs', {
    data: { algorithm, inputs: { data: dataset } }
  });
  expect(waiting.status(), await waiting.text()).toBe(201);
  const queued = await waiting.json();
  expect(queued.state).toBe('queued');
  const why = `waits for 1 CPU (0.5 free of ${devices.capacity.cpu}); held by job ${blocker.id}`;

  const panel = await openPanel(page, 'kpl-lab-jobs');
  const item = panel.locator(`.kpl-job[data-id="${queued.id}"]`);
  await expect(item.locator('.kpl-queue')).toContainText(why);
  await item.click();
  const view = page.locator(`#kpl-job-${queued.id}`);
  await expect(view.locator('.kpl-job-header .kpl-queue')).toContainText(why);

  const algorithms = await openPanel(page, 'kpl-lab-algorithms');
  const entry = algorithms.locator(`.kpl-algorithm[data-name="${algorithm}"]`);
  await entry.locator('.kpl-item-title').first().click();
  await entry.locator('.kpl-submit-open[data-function="train"]').click();
  const form = page.locator('.kpl-SubmitJobForm');
  await expect(form.locator('.kpl-form-note')).toHaveText(
    'cpu capped at 0.5: environment.yml asks 1 CPU, 0.5 free now'
  );
  await expect(form.locator('#root_resources_cpu')).toHaveValue('0.5');

  for (const job of [queued, blocker]) {
    expect(
      (await page.request.post(`/kpl/api/jobs/${job.id}/stop`)).status()
    ).toBe(200);
  }
  // The view asks nothing while hidden behind the form: show it again.
  await page.evaluate(
    id => window.jupyterapp.commands.execute('kpl-lab:open-job', { id }),
    queued.id
  );
  await expect(view.locator('.kpl-job-header .kpl-badge')).toHaveText(
    'stopped'
  );
  await expect(view.locator('.kpl-queue')).toHaveCount(0);
});
