import { expect, test } from '@jupyterlab/galata';
import { getJSON, trainDetector } from './detection';
import { shot } from './screenshots';

/**
 * The class chart of a part's records at a minimum score (0 to 100): per class, the objects
 * scored at least that, as the cards draw them.
 */
function chartAt(records: any[], percent: number): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const record of records) {
    for (const o of record.fields.object ?? []) {
      if (typeof o.score !== 'number' || o.score >= percent / 100) {
        counts[o.name] = (counts[o.name] ?? 0) + 1;
      }
    }
  }
  return counts;
}

/**
 * What a page of the dataset viewer should show at a minimum score (0 to 100, as the slider):
 * per record, the boxes drawn and the note of those hidden.
 */
function expected(
  records: any[],
  percent: number
): { index: number; boxes: number; note: string }[] {
  return records.map(record => {
    const objects = (record.fields.object ?? []).filter((o: any) =>
      ['xmin', 'ymin', 'xmax', 'ymax'].every(key => typeof o[key] === 'number')
    );
    const boxes = objects.filter(
      (o: any) => typeof o.score !== 'number' || o.score >= percent / 100
    ).length;
    const hidden = objects.length - boxes;
    return {
      index: record.index,
      boxes,
      note: hidden ? `${hidden} more under ${percent}% hidden` : ''
    };
  });
}

test('the dataset viewer hides the predicted boxes of a batch inference scored under its minimum', async ({
  page
}, testInfo) => {
  test.setTimeout(420_000);
  const { dataset, ref } = await trainDetector(page);
  const [part] = Object.keys(dataset.parts);

  // `kpl-lab model infer MODEL DATASET`: the infer function of the algorithm that made the model.
  const [modelName, modelVersion] = ref.split(':');
  const model = await getJSON(
    page,
    `/kpl/api/models/${modelName}/versions/${modelVersion}`
  );
  const submitted = await page.request.post('/kpl/api/jobs', {
    data: {
      algorithm: model.lineage.algorithm,
      function: 'infer',
      inputs: {
        model: `model:${ref}`,
        data: `dataset:${dataset.name}:${dataset.version}`
      },
      parameters: { eval_part: part }
    }
  });
  expect(submitted.status(), await submitted.text()).toBe(201);
  const jobId = (await submitted.json()).id;
  await expect
    .poll(async () => (await getJSON(page, `/kpl/api/jobs/${jobId}`)).state, {
      timeout: 120_000,
      intervals: [1000]
    })
    .toMatch(/succeeded|failed|stopped/);
  const job = await getJSON(page, `/kpl/api/jobs/${jobId}`);
  const log = await getJSON(page, `/kpl/api/jobs/${jobId}/logs`);
  expect(job.state, log.text).toBe('succeeded');
  // The folder it wrote is registered as a dataset version: dataset:NAME:VERSION.
  const [name, version] = job.outputs.predictions.registered
    .replace(/^dataset:/, '')
    .split(':');

  await page.evaluate(
    ([name, version]) =>
      window.jupyterapp.commands.execute('kpl-lab:open-dataset', {
        name,
        version
      }),
    [name, version]
  );
  const viewer = page.locator('.kpl-DatasetViewer', {
    has: page.locator('h2', { hasText: `${name}:${version}` })
  });
  const cards = viewer.locator('.kpl-record');
  await expect(cards.first()).toBeVisible();
  const slider = viewer.locator('.kpl-toolbar .kpl-min-score');
  await expect(slider).toContainText('Minimum score');
  await expect(slider.locator('span')).toHaveText('25%');
  await expect(slider.locator('input')).toHaveValue('25');

  // The first page's records as the REST API answers them, with their scores.
  const shown = await cards.count();
  const page0 = await getJSON(
    page,
    `/kpl/api/datasets/${name}/versions/${version}/records?offset=0&limit=${shown}`
  );
  expect(page0.records).toHaveLength(shown);
  const scores = page0.records.flatMap((r: any) =>
    (r.fields.object ?? []).map((o: any) => o.score)
  );
  expect(scores.length).toBeGreaterThan(0);
  expect(scores.every((s: any) => typeof s === 'number')).toBe(true);

  // The class chart counts the whole part's objects at the same minimum (the stats' score bands).
  const all = await getJSON(
    page,
    `/kpl/api/datasets/${name}/versions/${version}/records?offset=0&limit=1000&columns=object`
  );
  expect(all.records).toHaveLength(all.total);
  const bars = viewer.locator('.kpl-class-chart .kpl-bar');
  const chart = async () =>
    Object.fromEntries(
      await bars.evaluateAll(nodes =>
        nodes.map(node => [
          node.getAttribute('data-class') ?? '',
          Number(node.querySelector('.kpl-bar-count')?.textContent)
        ])
      )
    );
  await expect.poll(chart).toEqual(chartAt(all.records, 25));
  await expect(viewer.locator('.kpl-chart-min-score')).toHaveText(
    'scored at least 25%'
  );

  // What each card draws and says, in the order shown.
  const drawn = () =>
    cards.evaluateAll(nodes =>
      nodes.map(node => ({
        index: Number(node.getAttribute('data-index')),
        boxes: node.querySelectorAll('svg.kpl-boxes .kpl-box').length,
        note: node.querySelector('.kpl-hidden-boxes')?.textContent ?? ''
      }))
    );
  const boxes = viewer.locator('svg.kpl-boxes .kpl-box');
  const notes = viewer.locator('.kpl-hidden-boxes');

  await expect.poll(drawn).toEqual(expected(page0.records, 25));
  // Not by accident: 25 % hides some of these boxes and draws others.
  const faint = scores.filter((s: number) => s < 0.25).length;
  expect(faint).toBeGreaterThan(0);
  expect(faint).toBeLessThan(scores.length);
  await expect(boxes).toHaveCount(scores.length - faint);
  // Each drawn box says its score: none under the minimum.
  const labels = await viewer
    .locator('svg.kpl-boxes text')
    .evaluateAll(nodes =>
      nodes.map(node => parseFloat(node.textContent!.split(' ').pop()!))
    );
  expect(labels).toHaveLength(scores.length - faint);
  expect(labels.every(label => label >= 25)).toBe(true);
  await expect(notes).toHaveCount(
    expected(page0.records, 25).filter(card => card.note).length
  );
  await shot(page, testInfo, 'dataset-viewer-min-score');

  // At 0 % every predicted box is drawn and no card hides any.
  await slider.locator('input').fill('0');
  await expect(slider.locator('span')).toHaveText('0%');
  await expect.poll(drawn).toEqual(expected(page0.records, 0));
  await expect(boxes).toHaveCount(scores.length);
  await expect(notes).toHaveCount(0);
  await expect.poll(chart).toEqual(chartAt(all.records, 0));

  // At 100 % the boxes scored under 1 are hidden, each card counting its own.
  await slider.locator('input').fill('100');
  await expect(slider.locator('span')).toHaveText('100%');
  await expect.poll(drawn).toEqual(expected(page0.records, 100));
  const sure = scores.filter((s: number) => s >= 1).length;
  expect(sure).toBeLessThan(scores.length);
  await expect(boxes).toHaveCount(sure);
  await expect(notes.first()).toHaveText(/^\d+ more under 100% hidden$/);
  await expect.poll(chart).toEqual(chartAt(all.records, 100));
});
