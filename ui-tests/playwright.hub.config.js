/**
 * Playwright configuration of the multi-user hub tests: a real JupyterHub (ui-tests/hub/start_hub.py)
 * on a port and with an admin API token chosen here at run time, Debian's Chromium.
 */
const { execFileSync } = require('child_process');
const crypto = require('crypto');

// Workers load this file again: they inherit the port and token chosen by the main process.
if (!process.env.KPL_HUB_PORT) {
  process.env.KPL_HUB_PORT = execFileSync('python3', [
    '-c',
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  ])
    .toString()
    .trim();
  process.env.KPL_HUB_TOKEN = crypto.randomBytes(16).toString('hex');
}
const baseURL = `http://127.0.0.1:${process.env.KPL_HUB_PORT}`;

module.exports = {
  testDir: './hub-tests',
  // not *.spec.js: the JupyterLab tests' config (playwright.config.js) looks in every folder here
  testMatch: '*.e2e.js',
  outputDir: './test-results/hub',
  reporter: [[process.env.CI ? 'line' : 'list']],
  workers: 1,
  timeout: 60 * 1000,
  use: {
    baseURL,
    video: 'off',
    trace: 'retain-on-failure',
    viewport: { width: 1280, height: 800 },
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium'
    }
  },
  webServer: {
    command: 'python3 hub/start_hub.py',
    // the platform service answers (403 without a user), not the proxy's 503
    url: `${baseURL}/services/kpl/api/version`,
    timeout: 180 * 1000, // the demo's sample data are written first, as `kpl-lab up` does
    reuseExistingServer: false,
    gracefulShutdown: { signal: 'SIGTERM', timeout: 30000 },
    stdout: 'ignore',
    stderr: 'pipe'
  }
};
