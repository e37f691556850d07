// What the hub tests share: the hub's API with the tester service's token, logging in, a user's Lab,
// its side panels, screenshots.
const { expect } = require('@playwright/test');
const path = require('path');

const api = path => `/hub/api/${path}`;
const auth = { Authorization: `token ${process.env.KPL_HUB_TOKEN}` };

async function logIn(page, user, origin = '') {
  await page.goto(`${origin}/hub/login`);
  await page.fill('#username_input', user);
  await page.fill('#password_input', 'any password');
  await page.click('#login_submit');
  await page.waitForURL(url => !url.pathname.endsWith('/hub/login'));
}

// The user's Lab: the server already running, or started from the spawn form with its defaults.
async function openLab(page, user) {
  const answer = await page.request.get(api(`users/${user}`), {
    headers: auth
  });
  expect(answer.status(), await answer.text()).toBe(200);
  if ((await answer.json()).servers?.['']?.ready) {
    await page.goto(`/user/${user}/lab`);
    return;
  }
  await page.goto('/hub/spawn');
  await page.getByRole('button', { name: /start/i }).click();
  await page.waitForURL(new RegExp(`/user/${user}/lab`), {
    timeout: 150 * 1000
  });
}

// A side panel of the Lab, opened unless it is open (its tab's click would close it).
async function openPanel(page, id) {
  const panel = page.locator(`#${id}`);
  if (!(await panel.isVisible())) {
    // the first click waits for the Lab to load on a busy machine
    await page
      .locator(`.jp-SideBar [data-id="${id}"]`)
      .click({ timeout: 90 * 1000 });
  }
  await expect(panel).toBeVisible();
  return panel;
}

// A screenshot in the test's output, and into docs/images when KPL_SCREENSHOTS=1
// (as tests/screenshots.ts does for the single-user tests).
async function shot(page, testInfo, name) {
  const target = process.env.KPL_SCREENSHOTS
    ? path.join(__dirname, '..', '..', 'docs', 'images', `${name}.png`)
    : testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path: target, fullPage: true });
}

module.exports = { api, auth, logIn, openLab, openPanel, shot };
