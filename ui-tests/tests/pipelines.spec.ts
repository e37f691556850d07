import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import type { Locator } from '@playwright/test';
import { execFileSync } from 'child_process';
import { mkdtempSync, readFileSync } from 'fs';
import { tmpdir } from 'os';
import * as path from 'path';

import { shot } from './screenshots';

const ARCHIVES = mkdtempSync(path.join(tmpdir(), 'kpl-ui-archives-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_archives.py'),
  ARCHIVES
]);

const unique = (prefix: string) =>
  `${prefix}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e4)}`;

/**
 * Drop a node type from the editor's palette onto the canvas at (x, y).
 */
async function dropNode(
  editor: Locator,
  type: string,
  x: number,
  y: number
): Promise<Locator> {
  await editor
    .locator(`.kpl-PipelineEditor-paletteItem[data-type="${type}"]`)
    .dragTo(editor.locator('.kpl-PipelineEditor-canvas'), {
      targetPosition: { x, y }
    });
  const node = editor.locator(`.react-flow__node[data-id="${type}"]`);
  await expect(node).toBeVisible();
  return node;
}

async function openPipelines(page: IJupyterLabPageFixture): Promise<Locator> {
  const panel = page.locator('#kpl-lab-pipelines');
  if (!(await panel.isVisible())) {
    await page.locator('.jp-SideBar [data-id="kpl-lab-pipelines"]').click();
  }
  await expect(panel).toBeVisible();
  return panel;
}

test('a pipeline built by dragging runs and its output opens in the dataset viewer', async ({
  page
}, testInfo) => {
  const dataset = unique('shapes');
  const upload = await page.request.post(
    `/kpl/api/datasets?name=${dataset}&format=imagefolder&filename=shapes.zip`,
    {
      data: readFileSync(path.join(ARCHIVES, 'shapes.zip')),
      headers: { 'Content-Type': 'application/zip' }
    }
  );
  expect(upload.status(), await upload.text()).toBe(201);
  const file = `${unique('two')}.kpl-pipeline.yaml`;
  const created = await page.request.put(`/api/contents/${file}`, {
    data: {
      type: 'file',
      format: 'text',
      content: 'version: 1\nname: two\nnodes: {}\n'
    }
  });
  expect(created.status(), await created.text()).toBe(201);

  // The sidebar lists the file; clicking it opens the editor.
  const panel = await openPipelines(page);
  await panel
    .locator(`.kpl-PipelinesPanel-files [data-path="${file}"]`)
    .click();
  const editor = page.locator('.kpl-PipelineEditor');
  // Collapse the sidebar: the canvas gets the room.
  await page.locator('.jp-SideBar [data-id="kpl-lab-pipelines"]').click();
  await expect(
    editor.locator('.kpl-PipelineEditor-paletteItem[data-type="select"]')
  ).toBeVisible();

  const source = await dropNode(editor, 'dataset', 60, 80);
  await source.click();
  await editor
    .locator('.kpl-PipelineEditor-properties #root_dataset')
    .fill(dataset);
  // The optional part is a text field that may stay empty, not a choice of "options".
  await expect(
    editor.locator('.kpl-PipelineEditor-properties input#root_part')
  ).toBeVisible();
  await expect(
    editor.locator('.kpl-PipelineEditor-properties')
  ).not.toContainText('option');
  const sink = await dropNode(editor, 'save_dataset', 360, 240);
  await sink.click();
  await editor
    .locator('.kpl-PipelineEditor-properties #root_name')
    .fill(`${dataset}-copy`);
  // Not connected yet: the sink's badge names the missing input.
  await expect(sink.locator('.kpl-PipelineNode-problems')).toBeVisible();

  // Drag from the dataset's output handle to the sink's input handle.
  const from = (await source
    .locator('.react-flow__handle.source')
    .boundingBox())!;
  const to = (await sink
    .locator('.react-flow__handle.target')
    .first()
    .boundingBox())!;
  await page.mouse.move(from.x + from.width / 2, from.y + from.height / 2);
  await page.mouse.down();
  for (let step = 1; step <= 10; step++) {
    await page.mouse.move(
      from.x + ((to.x - from.x) * step) / 10 + to.width / 2,
      from.y + ((to.y - from.y) * step) / 10 + to.height / 2
    );
    await page.waitForTimeout(30);
  }
  await page.mouse.up();
  await expect(editor.locator('.react-flow__edge')).toHaveCount(1);
  await expect(editor.locator('.kpl-PipelineEditor-status')).toHaveText(
    'valid'
  );
  await expect(sink.locator('.kpl-PipelineNode-problems')).toHaveCount(0);

  await editor.locator('.kpl-PipelineEditor-run').click();
  await expect(sink.locator('.kpl-PipelineNode-state')).toContainText(
    'succeeded',
    { timeout: 60000 }
  );
  await expect(source.locator('.kpl-PipelineNode-state')).toContainText(
    '6 rows'
  );
  // Any finished node shows its first records in the properties.
  await source.click();
  await editor.locator('.kpl-PipelineEditor-preview').click();
  const shown = editor.locator('.kpl-PipelineEditor-records');
  await expect(shown).toContainText('5 of 6 records');
  await expect(shown.locator('tbody tr')).toHaveCount(5);
  await shot(page, testInfo, 'pipeline-editor');

  // The file on disk is what the CLI runs: the nodes, their input and their positions.
  const saved = await page.request.get(
    `/api/contents/${file}?content=1&type=file&format=text`
  );
  const text = (await saved.json()).content as string;
  expect(text).toContain(`dataset: ${dataset}`);
  expect(text).toMatch(
    /save_dataset: \{type: save_dataset, ui: \{x: -?\d+, 'y': -?\d+\}, name: \S+, input: dataset\}/
  );

  await sink.locator('.kpl-PipelineNode-open').click();
  const viewer = page.locator('.kpl-DatasetViewer', {
    has: page.locator('h2', { hasText: `${dataset}-copy:` })
  });
  await expect(viewer).toBeVisible();
  await expect(viewer.locator('.kpl-record').first()).toBeVisible();

  // The run shows in the sidebar with its state.
  await openPipelines(page);
  await expect(
    panel.locator('.kpl-PipelinesPanel-runs [data-state="succeeded"]').first()
  ).toBeVisible({
    timeout: 30000
  });

  // A new pipeline from a template asks for one of the project's datasets in place of the
  // template's own (which the project lacks), then opens in the editor.
  await panel.locator('[data-template="segmentation"]').click();
  const dialog = page.locator('.jp-Dialog');
  await dialog
    .locator('select.kpl-TemplateDialog-dataset')
    .selectOption(dataset);
  await dialog.getByRole('button', { name: 'Create' }).click();
  const masks = page.locator('.react-flow__node[data-id="masks"]');
  await expect(masks).toBeVisible();
  await expect(masks.locator('.kpl-PipelineNode-problems')).toHaveCount(0);
  // A relational node offers keep: true in its properties.
  await masks.click();
  await expect(
    page.locator('.kpl-PipelineEditor-properties #root_keep:visible')
  ).toBeVisible();
});
