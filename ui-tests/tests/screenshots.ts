/**
 * Screenshots of the browser tests: in each test's output, and into docs/images when KPL_SCREENSHOTS=1.
 */
import type { IJupyterLabPageFixture } from '@jupyterlab/galata';
import type { TestInfo } from '@playwright/test';
import * as path from 'path';

/**
 * Save a screenshot named `name`.png.
 */
export async function shot(
  page: IJupyterLabPageFixture,
  testInfo: TestInfo,
  name: string
): Promise<void> {
  const target = process.env.KPL_SCREENSHOTS
    ? path.join(__dirname, '..', '..', 'docs', 'images', `${name}.png`)
    : testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path: target });
}
