const jestJupyterLab = require('@jupyterlab/testing/lib/jest-config');

// ES modules that Jest must transform before running them.
const esModules = [
  '@codemirror',
  '@jupyter/ydoc',
  '@jupyter/react-components',
  '@jupyter/web-components',
  '@microsoft',
  '@jupyterlab/',
  'exenv-es6',
  'lib0',
  'nanoid',
  'uplot',
  'y-protocols',
  'yjs'
].join('|');

const baseConfig = jestJupyterLab(__dirname);

module.exports = {
  ...baseConfig,
  automock: false,
  collectCoverageFrom: [
    'src/**/*.{ts,tsx}',
    '!src/**/*.d.ts',
    '!src/**/.ipynb_checkpoints/*'
  ],
  coverageReporters: ['lcov', 'text'],
  testRegex: 'src/.*/.*.spec.ts[x]?$',
  transformIgnorePatterns: [`/node_modules/(?!${esModules}).+`]
};
