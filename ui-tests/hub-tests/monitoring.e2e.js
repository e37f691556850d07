// The KPL admin page's monitoring against a real hub: totals, the use history over a chosen period and
// refresh, an alert rule added on the page that fires, the audit log (the hub's logins, the rule's
// creation) and the log search.
const { test, expect } = require('@playwright/test');
const { api, auth, logIn, shot } = require('./hub');

test('the admin page monitors the platform: use, alerts, audit log and logs', async ({
  page
}, testInfo) => {
  test.setTimeout(180 * 1000);
  await logIn(page, 'admin');
  await page.goto('/services/kpl/admin');

  // totals, from the platform's snapshot: the datasets of every project (the demo's digits and
  // what the tests before this one added), as the service lists them
  const groups = await (
    await page.request.get(api('groups'), { headers: auth })
  ).json();
  let datasets = 0;
  for (const group of groups) {
    const answer = await page.request.get(
      `/services/kpl/api/datasets?project=${group.name}`
    );
    expect(answer.status(), await answer.text()).toBe(200);
    datasets += (await answer.json()).datasets.length;
  }
  expect(datasets).toBeGreaterThanOrEqual(1);
  await expect(page.locator('[data-total="datasets"] .total')).toHaveText(
    String(datasets),
    { timeout: 60 * 1000 }
  );
  await expect(page.locator('#totals')).toContainText('jobs running');

  // the machine's use over the chosen period, redrawn when the period changes
  await expect(page.locator('#usage-name option').first()).not.toHaveText('');
  await expect(page.locator('#history .u-legend')).toContainText('CPU (%)');
  await page.selectOption('#usage-period', '3600');
  await expect(page.locator('#history .u-legend')).toContainText('memory (%)');
  await page.selectOption('#refresh', '5');

  // the shipped rules, and one added here that holds at once: it fires within a snapshot or two
  await expect(page.locator('#alert-rules')).toContainText('machine memory');
  const form = page.locator('#new-alert-rule');
  await form.locator('input[name="name"]').fill('e2e disk');
  await form
    .locator('select[name="metric"]')
    .selectOption('machine_disk_percent');
  await form.locator('input[name="threshold"]').fill('0');
  await form.getByRole('button', { name: 'Add rule' }).click();
  await expect(page.locator('#status')).toHaveText('Added the rule e2e disk.');
  await expect(
    page.locator('#alert-rules tr[data-rule="e2e disk"]')
  ).toBeVisible();
  await expect(
    page.locator('#alerts tr.firing', { hasText: 'e2e disk' }).first()
  ).toBeVisible({
    timeout: 90 * 1000
  });
  await shot(page, testInfo, 'hub-admin-monitoring');

  // switched off on the page: its alert resolves at the next evaluation
  await page
    .locator('#alert-rules tr[data-rule="e2e disk"] input[type="checkbox"]')
    .uncheck();
  await expect(page.locator('#status')).toHaveText('Disabled e2e disk.');
  await expect(
    page.locator('#alerts tr.resolved', { hasText: 'e2e disk' }).first()
  ).toBeVisible({
    timeout: 90 * 1000
  });

  // the audit log: the hub's login of the admin and the rule's creation, from the admin's address
  const audit = page.locator('#audit-filter');
  await audit.locator('input[name="action"]').fill('alert.rule.');
  await audit.getByRole('button', { name: 'Show' }).click();
  await expect(page.locator('#audit')).toContainText('alert.rule.create');
  await expect(page.locator('#audit')).toContainText('e2e disk');
  await audit.locator('input[name="action"]').fill('login');
  await audit.getByRole('button', { name: 'Show' }).click();
  await expect(
    page.locator('#audit tr', { hasText: 'login' }).first()
  ).toContainText('admin');
  await expect(page.locator('#audit-export')).toHaveAttribute('href', /.*/);
  await page.locator('#audit-export').dispatchEvent('click');
  await expect(page.locator('#audit-export')).toHaveAttribute(
    'href',
    /format=jsonl.*action=login/
  );

  // the platform's own log, searched by text
  const logs = page.locator('#log-search');
  await logs.locator('input[name="q"]').fill('kpl service: ready');
  await logs.getByRole('button', { name: 'Search' }).click();
  await expect(page.locator('#logs')).toContainText('kpl service: ready in');
  await shot(page, testInfo, 'hub-admin-audit-logs');
});
