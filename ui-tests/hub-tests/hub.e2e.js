// The multi-user hub in a browser: the spawn form, a refusal over quota, the KPL admin page, the Lab.
const { test, expect } = require('@playwright/test');
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { api, auth, logIn, shot } = require('./hub');

// the archives the Lab tests upload (fixtures/make_archives.py)
const ARCHIVES = fs.mkdtempSync(path.join(os.tmpdir(), 'kpl-hub-archives-'));
execFileSync('python3', [
  path.join(__dirname, '..', 'fixtures', 'make_archives.py'),
  ARCHIVES
]);

test('the spawn form offers only the profiles of the user project and shows a refusal over quota', async ({
  page
}, testInfo) => {
  await logIn(page, 'alice');
  await page.goto('/hub/spawn');
  const form = page.locator('.kpl-spawn-form');
  await expect(form).toBeVisible();
  await expect(page.locator('#kpl-project option')).toHaveText(['nlp']);
  await expect(page.locator('fieldset.kpl-profile')).toHaveCount(1);
  await expect(page.locator('fieldset.kpl-profile')).toHaveAttribute(
    'data-profile',
    'small'
  );
  await expect(page.locator('fieldset[data-profile="gpu"]')).toHaveCount(0);
  await expect(page.locator('.kpl-quotas')).toContainText(
    'notebooks 0 of 0 in use'
  );
  await expect(page.locator('input[name="small-cpu"]')).toHaveAttribute(
    'max',
    '2'
  );
  await shot(page, testInfo, 'hub-spawn-form');

  await page.getByRole('button', { name: /start/i }).click();
  await expect(
    page.getByText('asks 1 notebook; project nlp allows 0, 0 in use')
  ).toBeVisible();
  const user = await (
    await page.request.get(api('users/alice'), { headers: auth })
  ).json();
  expect(user.servers).toEqual({});
});

test('a member of another project sees its own profiles', async ({ page }) => {
  await logIn(page, 'bob');
  await page.goto('/hub/spawn');
  await expect(page.locator('#kpl-project option')).toHaveText(['vision']);
  await expect(page.locator('fieldset.kpl-profile')).toHaveCount(2);
  // the least of the profile's 1, the project's quota of 1 and this machine's GPUs (none here: 0)
  const machine = await page.locator('.kpl-quotas').textContent();
  await expect(page.locator('input[name="gpu-accelerators"]')).toHaveAttribute(
    'max',
    /\bGPUs?\b/.test(machine.split('this machine:')[1] ?? '') ? '1' : '0'
  );
});

test('the admin page lists users, projects and quotas, saves a quota and shows the use', async ({
  page
}, testInfo) => {
  await logIn(page, 'admin');
  await page.goto('/services/kpl/admin');
  await expect(page.locator('#live')).toContainText('No GPUs');
  const users = page.locator('#users');
  for (const name of ['admin', 'alice', 'bob']) {
    await expect(users.getByRole('cell', { name, exact: true })).toBeVisible();
  }
  const vision = page.locator('#projects tr', {
    has: page.getByRole('cell', { name: 'vision', exact: true })
  });
  await expect(vision).toContainText('bob');
  await expect(vision.locator('input[name="cpu"]')).toHaveValue('4');
  await expect(vision.locator('input[name="gpu"]')).toHaveValue('1');
  const nlp = page.locator('#projects tr', {
    has: page.getByRole('cell', { name: 'nlp', exact: true })
  });
  await expect(nlp.locator('input[name="notebooks"]')).toHaveValue('0');

  await vision.locator('input[name="cpu"]').fill('6');
  await vision.locator('input[name="notebooks"]').fill('2');
  await vision.getByRole('button', { name: 'Save' }).click();
  await expect(page.locator('#status')).toContainText(
    'Saved the quota of vision.'
  );
  const group = await (
    await page.request.get(api('groups/vision'), { headers: auth })
  ).json();
  expect(group.properties.kpl_quota).toEqual({
    cpu: 6,
    memory: 4096,
    gpu: 1,
    notebooks: 2
  });

  await vision.locator('input[name="memory"]').fill('-1');
  await vision.getByRole('button', { name: 'Save' }).click();
  await expect(page.locator('#status')).toContainText('Not saved:');
  await expect(page.locator('#status')).toContainText('memory');
  await page.reload();
  await expect(page.locator('#live')).toContainText('No GPUs');
  await expect(vision.locator('input[name="cpu"]')).toHaveValue('6');
  await shot(page, testInfo, 'hub-admin');
});

test('under the hub, the dataset viewer loads its images through the user server, with no token in a URL', async ({
  page,
  browser
}) => {
  test.setTimeout(240 * 1000);
  await logIn(page, 'bob');
  await page.goto('/hub/spawn');
  await expect(page.locator('input[name="small-cpu"]')).toHaveValue('1.0');
  await page.getByRole('button', { name: /start/i }).click();
  await page.waitForURL(/\/user\/bob\/lab/, { timeout: 150 * 1000 });
  const tab = page.locator('.jp-SideBar [data-id="kpl-lab-datasets"]');
  await tab.click({ timeout: 90 * 1000 });
  const panel = page.locator('#kpl-lab-datasets');
  await expect(panel).toBeVisible();
  await panel.locator('.kpl-upload-name').fill('shapes');
  await panel.locator('.kpl-upload-format select').selectOption('imagefolder');
  await panel
    .locator('.kpl-upload-input')
    .setInputFiles(path.join(ARCHIVES, 'shapes.zip'));

  const viewer = page.locator('.kpl-DatasetViewer');
  await expect(viewer.locator('.kpl-dataset-info h2')).toContainText(
    'shapes:',
    { timeout: 60 * 1000 }
  );
  const thumbnails = viewer.locator('.kpl-record img.kpl-thumbnail');
  await expect(thumbnails).toHaveCount(6);
  await expect
    .poll(() =>
      thumbnails.evaluateAll(images => {
        images.forEach(image => image.scrollIntoView());
        return images.filter(image => image.naturalWidth > 0).length;
      })
    )
    .toBe(6);
  const sources = await thumbnails.evaluateAll(images =>
    images.map(image => image.src)
  );
  for (const source of sources) {
    const url = new URL(source);
    expect(url.pathname).toMatch(/^\/user\/bob\/kpl\/api\/datasets\/shapes\//);
    expect(url.searchParams.has('token')).toBe(false);
  }
  // the admin page names bob's running notebook readably
  const admin = await browser.newPage();
  await logIn(admin, 'admin', new URL(page.url()).origin);
  await admin.goto(new URL('/services/kpl/admin', page.url()).toString());
  const notebook = admin.locator('#reservations tr', {
    hasText: 'bob (default server)'
  });
  await expect(notebook).toContainText('vision');
  await expect(notebook).toContainText('none');
  await admin.close();
  const stopped = await page.request.delete(api('users/bob/server'), {
    headers: auth
  });
  expect([202, 204]).toContain(stopped.status());
});

test('the admin page creates a user and a project and adds the member, in the hub look', async ({
  page
}, testInfo) => {
  await logIn(page, 'admin');
  await page.goto('/services/kpl/admin');
  await expect(
    page.locator('nav.navbar a[href="/hub/home"]').first()
  ).toBeVisible();
  // the hub's stylesheet (Bootstrap) styles the page's buttons
  const background = await page
    .locator('#new-user button')
    .evaluate(b => getComputedStyle(b).backgroundColor);
  expect(background).not.toBe('rgba(0, 0, 0, 0)');
  await page.fill('#new-user-name', 'carol');
  await page.click('#new-user button');
  await expect(page.locator('#status')).toContainText('Created user carol.');
  await page.fill('#new-project-name', 'audio');
  await page.click('#new-project button');
  await expect(page.locator('#status')).toContainText('Created project audio.');
  await page.selectOption('#new-member-user', 'carol');
  await page.selectOption('#new-member-project', 'audio');
  await page.click('#new-member button');
  await expect(page.locator('#status')).toContainText('Added carol to audio.');
  const audio = page.locator('#projects tr', {
    has: page.getByRole('cell', { name: 'audio', exact: true })
  });
  await expect(audio).toContainText('carol');
  const group = await (
    await page.request.get(api('groups/audio'), { headers: auth })
  ).json();
  expect(group.users).toEqual(['carol']);
  // the 24-hour chart's legend names each line with its unit
  await expect(page.locator('#history .u-legend')).toContainText('CPU (%)');
  await expect(page.locator('#history .u-legend')).toContainText('memory (%)');
  await shot(page, testInfo, 'hub-admin-create');
});
