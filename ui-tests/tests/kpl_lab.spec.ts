import { expect, test } from '@jupyterlab/galata';
import { readFileSync } from 'fs';
import * as path from 'path';

/**
 * The version of the Python package, read from its single source.
 */
function pythonVersion(): string {
  const source = readFileSync(
    path.join(__dirname, '..', '..', 'kpl_lab', '_version.py'),
    'utf-8'
  );
  const match = source.match(/^__version__ = "([^"]+)"$/m);
  if (!match) {
    throw new Error('kpl_lab/_version.py: no __version__ line');
  }
  return match[1];
}

test('the About KPL Lab command shows the server version', async ({
  page
}, testInfo) => {
  const version = pythonVersion();

  await page.keyboard.press('Control+Shift+C');
  const palette = page.locator('#modal-command-palette');
  await expect(palette).toBeVisible();
  await palette.locator('.lm-CommandPalette-input').fill('About KPL Lab');
  const item = palette.locator('.lm-CommandPalette-item', {
    hasText: 'About KPL Lab'
  });
  await expect(item).toHaveCount(1);
  await expect(
    item.locator(
      'xpath=preceding-sibling::li[contains(@class, "lm-CommandPalette-header")][1]'
    )
  ).toHaveText('KPL Lab');

  const answer = page.waitForResponse(response =>
    new URL(response.url()).pathname.endsWith('/kpl/api/version')
  );
  await item.click();
  expect((await answer).status()).toBe(200);

  const dialog = page.locator('.jp-Dialog');
  await expect(dialog.locator('.kpl-About-serverVersion')).toHaveText(version);
  await expect(dialog.locator('.kpl-About-frontendVersion')).toHaveText(
    version
  );
  await expect(dialog.locator('.kpl-About-serverError')).toHaveCount(0);
  await page.screenshot({ path: testInfo.outputPath('about-dialog.png') });

  await dialog.getByRole('button', { name: 'Ok' }).click();
  await expect(dialog).toHaveCount(0);
});

test('the launcher has a KPL Lab section with the About card', async ({
  page
}, testInfo) => {
  // The default layout opens one launcher.
  const section = page
    .locator('.jp-Launcher')
    .first()
    .locator('.jp-Launcher-section', {
      has: page.locator('.jp-Launcher-sectionTitle', { hasText: 'KPL Lab' })
    });
  await expect(section).toBeVisible();
  const card = section.locator('.jp-LauncherCard', {
    hasText: 'About KPL Lab'
  });
  await card.scrollIntoViewIfNeeded();
  await expect(card).toBeVisible();
  await page.screenshot({ path: testInfo.outputPath('launcher.png') });
});
