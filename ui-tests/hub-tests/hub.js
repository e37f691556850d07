// What the hub tests share: the hub's API with the tester service's token, and logging in.

const api = path => `/hub/api/${path}`;
const auth = { Authorization: `token ${process.env.KPL_HUB_TOKEN}` };

async function logIn(page, user, origin = '') {
  await page.goto(`${origin}/hub/login`);
  await page.fill('#username_input', user);
  await page.fill('#password_input', 'any password');
  await page.click('#login_submit');
  await page.waitForURL(url => !url.pathname.endsWith('/hub/login'));
}

module.exports = { api, auth, logIn };
