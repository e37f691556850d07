import { expect, IJupyterLabPageFixture, test } from '@jupyterlab/galata';
import { readFileSync } from 'fs';
import { file, trainDetector, unique } from './detection';
import { shot } from './screenshots';

/**
 * Train the detection example through the REST API and deploy its first model version, as a user's CLI would.
 */
async function deployDetector(
  page: IJupyterLabPageFixture
): Promise<{ name: string; canary: string }> {
  const { ref, canary } = await trainDetector(page);
  const name = unique('detector');
  const created = await page.request.post('/kpl/api/deployments', {
    data: { name, model: ref }
  });
  expect(created.status(), await created.text()).toBe(201);
  return { name, canary };
}

test('the deployment view draws the boxes the detection example answers for a dropped image', async ({
  page
}, testInfo) => {
  test.setTimeout(420_000);
  const { name, canary } = await deployDetector(page);
  try {
    const panel = page.locator('#kpl-lab-services');
    if (!(await panel.isVisible())) {
      await page.locator('.jp-SideBar [data-id="kpl-lab-services"]').click();
    }
    await expect(panel.locator('.kpl-Panel-header h2')).toHaveText('Services');
    const item = panel.locator(`.kpl-deployment[data-name="${name}"]`);
    await expect(item).toHaveAttribute('data-state', 'ready', {
      timeout: 120_000
    });
    await item.click();

    const view = page.locator('.kpl-DeploymentView');
    await expect(view.locator('.kpl-deployment-header h2')).toContainText(name);
    await expect(
      view.locator('.kpl-versions tr[data-role="production"] td').first()
    ).toContainText(':');
    await expect(
      view.locator('.kpl-replicas tr[data-state="ready"]')
    ).toHaveCount(1);

    // Drop the probe image on the drop zone, as a user drags a file from the desktop.
    const answer = page.waitForResponse(response =>
      new URL(response.url()).pathname.endsWith(`/deployments/${name}/predict`)
    );
    const png = readFileSync(file('probe.png')).toString('base64');
    const dataTransfer = await page.evaluateHandle(async data => {
      const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
      const transfer = new DataTransfer();
      transfer.items.add(new File([bytes], 'probe.png', { type: 'image/png' }));
      return transfer;
    }, png);
    await view.locator('.kpl-dropzone').dispatchEvent('drop', { dataTransfer });
    const response = await answer;
    expect(response.status(), await response.text()).toBe(200);
    expect(response.headers()['x-kpl-model-version']).toContain(':');
    const body = await response.json();
    expect(body.type).toBe('rectangle_box_detection');
    expect(body.objects.length).toBeGreaterThan(0);

    // At first the boxes scored 25 % or more; the slider down to 0 % shows every returned object.
    const prediction = view.locator('.kpl-prediction[data-kind="detection"]');
    await expect(prediction.locator('img')).toBeVisible();
    const rects = prediction.locator('svg.kpl-boxes rect.kpl-outline');
    const faint = body.objects.filter((o: any) => o.score < 0.25).length;
    await expect(rects).toHaveCount(body.objects.length - faint);
    const hiddenNote = prediction.locator('.kpl-hidden-boxes');
    await expect(hiddenNote).toHaveCount(faint ? 1 : 0);
    if (faint) {
      await expect(hiddenNote).toHaveText(`${faint} more under 25% hidden`);
    }
    await prediction.locator('.kpl-min-score input').fill('0');
    await expect(prediction.locator('.kpl-min-score')).toContainText('0%');
    // One rectangle per returned object, at the returned coordinates, over the image.
    await expect(rects).toHaveCount(body.objects.length);
    const drawn = await rects.evaluateAll(nodes =>
      nodes.map(node =>
        ['x', 'y', 'width', 'height'].map(key => Number(node.getAttribute(key)))
      )
    );
    // Corners are put in order (a barely trained model can answer xmax < xmin) and clipped to the image.
    const clip = (value: number, max: number) =>
      Math.max(0, Math.min(max, value));
    const span = (a: number, b: number, max: number) => [
      clip(Math.min(a, b), max),
      clip(Math.max(a, b), max)
    ];
    // Drawn surest last (on top where boxes overlap): compared in one order.
    const inOrder = (boxes: number[][]) =>
      boxes.map(box => JSON.stringify(box)).sort();
    expect(inOrder(drawn)).toEqual(
      inOrder(
        body.objects.map((o: any) => {
          const [x0, x1] = span(o.xmin, o.xmax, body.width);
          const [y0, y1] = span(o.ymin, o.ymax, body.height);
          return [x0, y0, x1 - x0, y1 - y0];
        })
      )
    );
    await expect(prediction.locator('svg.kpl-boxes')).toHaveAttribute(
      'viewBox',
      `0 0 ${body.width} ${body.height}`
    );
    // The threshold chosen holds for the next image dropped.
    const again = page.waitForResponse(response =>
      new URL(response.url()).pathname.endsWith(`/deployments/${name}/predict`)
    );
    await view.locator('.kpl-dropzone').dispatchEvent('drop', { dataTransfer });
    expect((await again).status()).toBe(200);
    await expect(prediction.locator('.kpl-min-score')).toContainText('0%');
    await expect(rects).toHaveCount(body.objects.length);
    await prediction.locator('.kpl-min-score input').fill('25');
    await expect(rects).toHaveCount(body.objects.length - faint);
    const scores = await prediction
      .locator('svg.kpl-boxes text')
      .evaluateAll(nodes =>
        nodes.map(node => parseFloat(node.textContent!.split(' ').pop()!))
      );
    expect(scores).toEqual([...scores].sort((a, b) => a - b));
    await expect(prediction.locator('.kpl-served-by')).toContainText(
      response.headers()['x-kpl-model-version']
    );
    // The request shows in the curves once the metrics are polled.
    await expect(
      view.locator('.kpl-chart[data-figure="requests"]')
    ).toBeVisible({ timeout: 30_000 });
    await expect(view.locator('.kpl-deployment-log')).not.toBeEmpty();
    await shot(page, testInfo, 'deployment-view');

    // A canary shows with its weight; Promote makes it production.
    const promote = page.locator('.kpl-DeploymentView .kpl-promote');
    await expect(promote).toBeDisabled();
    const canaryAnswer = await page.request.post(
      `/kpl/api/deployments/${name}/canary`,
      {
        data: { model: canary, weight: 30 }
      }
    );
    expect(canaryAnswer.status(), await canaryAnswer.text()).toBe(200);
    const canaryRow = view.locator('.kpl-versions tr[data-role="canary"]');
    await expect(canaryRow).toContainText(canary);
    await expect(canaryRow).toContainText('30%');
    await expect(
      view.locator('.kpl-versions tr[data-role="production"]')
    ).toContainText('70%');
    await expect(promote).toBeEnabled();
    await promote.click();
    await expect(canaryRow).toHaveCount(0, { timeout: 120_000 });
    await expect(
      view.locator('.kpl-versions tr[data-role="production"]')
    ).toContainText(canary);
    await expect(promote).toBeDisabled();

    // Delete asks first, then closes the view and the deployment is gone.
    await page.locator('.kpl-DeploymentView .kpl-delete').click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText(`Delete deployment ${name}?`);
    await dialog.getByRole('button', { name: 'Delete' }).click();
    // the view closes once the server has stopped the replicas: seconds on a loaded machine
    await expect(view).toHaveCount(0, { timeout: 30_000 });
    await expect(item).toHaveCount(0, { timeout: 30_000 });
    expect(
      (await page.request.get(`/kpl/api/deployments/${name}`)).status()
    ).toBe(404);
  } finally {
    // Replicas outlive the test server: a failed run must not leave its replica serving (404 once deleted).
    await page.request.delete(`/kpl/api/deployments/${name}`);
  }
});
