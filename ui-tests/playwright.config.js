/**
 * Playwright configuration: Galata's defaults, Debian's Chromium, a free port.
 */
const { execFileSync } = require('child_process');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

// Workers load this file again: they inherit the port chosen by the main process.
if (!process.env.KPL_UI_PORT) {
  process.env.KPL_UI_PORT = execFileSync('python3', [
    '-c',
    'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  ])
    .toString()
    .trim();
}
const baseURL = `http://127.0.0.1:${process.env.KPL_UI_PORT}`;

module.exports = {
  ...baseConfig,
  // beside the hub tests' ./test-results/hub: each run empties its own folder only
  outputDir: './test-results/lab',
  reporter: [[process.env.CI ? 'line' : 'list'], ['html', { open: 'never' }]],
  workers: 1,
  use: {
    ...baseConfig.use,
    baseURL,
    video: 'off',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium'
    }
  },
  webServer: {
    command: 'python3 -m jupyter lab --config jupyter_server_test_config.py',
    url: `${baseURL}/lab`,
    timeout: 120 * 1000,
    reuseExistingServer: false,
    gracefulShutdown: { signal: 'SIGTERM', timeout: 10000 },
    stdout: 'ignore',
    stderr: 'pipe'
  }
};
