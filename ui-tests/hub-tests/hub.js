// What the hub tests share: the hub's API with the tester service's token, logging in, screenshots.
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

// A screenshot in the test's output, and into docs/images when KPL_SCREENSHOTS=1
// (as tests/screenshots.ts does for the single-user tests).
async function shot(page, testInfo, name) {
  const target = process.env.KPL_SCREENSHOTS
    ? path.join(__dirname, '..', '..', 'docs', 'images', `${name}.png`)
    : testInfo.outputPath(`${name}.png`);
  await page.screenshot({ path: target, fullPage: true });
}

module.exports = { api, auth, logIn, shot };
